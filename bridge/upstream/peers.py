"""One bridge, many workers, one trace-by-ID per trace: requests about a trace go to the worker that owns it.

``serve --workers N`` runs N processes on one port (``bridge.workers``), and the kernel spreads connections over them
by a hash of the connection. Each worker has its own span cache, so without more, a trace Grafana opened through one
worker and a click on its span that lands on another cost two trace-by-ID calls to Tempo, and N workers up to N
(measured: two bridges of two workers, 60 traces viewed on one, every span clicked on both: 172 calls, where the
promise — one per trace per bridge — allows 120).

So every worker also listens on a Unix socket of its own (``<run dir>/peers/worker-<slot>.sock``, in the master's
private run directory), and a request about a trace — a trace by ID through ``/tempo``, a span query that carries
its trace (``<span id>:<trace id>``, ``bridge.ids``) through ``/pyroscope`` — is served by the trace's owner,
``crc32(trace id) mod N``: the worker that gets it and does not own it relays it there, as it came, and relays the
answer back (``forward``). The owner fetches the trace once, keeps it in its span cache, and answers every later
request about it from there. A request that arrived over a peer socket is never sent on again; when the owner does
not answer (being restarted by SIGHUP, gone), the worker serves the request itself, as before.

Only the worker that took the request from its client counts it in the metrics (``middleware.from_peer``); it
logs the relay at DEBUG, the owner logs the request.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

import aiohttp
from aiohttp import web

from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import UpstreamError
from bridge.middleware import from_peer
from bridge.upstream.guard import relay_timeout
from bridge.upstream.proxy import stream_through

log = logging.getLogger("bridge.peers")

PEER: Final = "worker"  # the upstream name a relay to a peer carries in metrics and messages


@dataclass(slots=True)
class Peers:
    """The workers of one bridge as this worker sees them: its slot and every slot's socket path."""

    slot: int
    paths: tuple[str, ...]
    _sessions: dict[int, aiohttp.ClientSession] = field(default_factory=dict)

    def owner(self, trace_id: str) -> int:
        """Pure: the slot that owns ``trace_id`` (32 lower-case hex)."""
        return zlib.crc32(trace_id.encode()) % len(self.paths)

    def session(self, slot: int) -> aiohttp.ClientSession:
        session = self._sessions.get(slot)
        if session is None or session.closed:
            connector = aiohttp.UnixConnector(path=self.paths[slot], limit=0)
            session = self._sessions[slot] = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
            )
        return session

    async def close(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            await session.close()


PEERS: Final = web.AppKey("peers", Peers)


def setup(app: web.Application, peers: Peers) -> None:
    app[PEERS] = peers

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await peers.close()

    app.cleanup_ctx.append(lifetime)


async def forward(
    request: web.Request, trace_id: str, ctx: CallContext, settings: Settings, body: bytes | None = None
) -> web.StreamResponse | None:
    """Serve ``request`` at the owner of ``trace_id`` and relay its answer; None when this worker serves it itself
    (it owns the trace, it has no peers, the request came from a peer, or the owner did not answer). ``body``: the
    request body, still in its Content-Encoding, when it has been read."""
    peers = request.app.get(PEERS)
    if peers is None or len(peers.paths) < 2 or from_peer(request):
        return None
    owner = peers.owner(trace_id)
    if owner == peers.slot:
        return None
    url = f"http://worker-{owner}{request.raw_path}"
    try:
        return await stream_through(
            request,
            peers.session(owner),
            url,
            upstream=PEER,
            timeout=relay_timeout(settings, ctx),
            body=body,
            body_encoding=request.headers.get("Content-Encoding") if body is not None else None,
            peer=True,
        )
    except UpstreamError as exc:  # the owner is being replaced, or gone: serve it here
        log.info("worker %d did not take %s %s (%s); served here", owner, request.method, request.path, exc.message)
        return None
