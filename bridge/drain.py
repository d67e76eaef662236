"""A worker that stops without losing a request: ``serve --workers`` replaces its workers on SIGHUP, and a client
with a keep-alive connection to the old one must not see that connection close under a request it is sending.

HTTP/1.1 has no way for a server to announce that an idle connection is about to close; the one safe moment is a
response, which can say ``Connection: close`` (RFC 9112 §9.6). So a stopping worker (``drain``):

1. stops accepting — new connections wait in the listening socket it shares with the worker replacing it
   (``bridge.workers``: the master holds that socket), and that worker serves them;
2. stops what runs once per bridge (the OTLP gRPC receiver and the pprof puller, in slot 0), so its successor can
   take the gRPC port at once;
3. answers every request still arriving on its open connections, each response with ``Connection: close``
   (``close_when_draining``, an ``on_response_prepare`` hook), and waits until its clients have closed them all —
   under load within one request each;
4. after ``DRAIN_SECONDS`` closes what is left: connections idle all that time (a client that sends on one at that
   very moment can still see it close — the race HTTP/1.1 leaves every server; clients retry such a request on a
   fresh connection, and a pool that went quiet for that long seldom sends on it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from aiohttp import web

from bridge.state import RUNTIME

log = logging.getLogger("bridge.drain")

DRAIN_SECONDS: Final = 10.0  # the longest a stopping worker waits for its clients to close their connections
POLL_SECONDS: Final = 0.02


async def close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: while the worker drains, every response ends its connection, and says so."""
    if request.app[RUNTIME].draining:
        response.force_close()
        response.headers["Connection"] = "close"  # aiohttp wrote the header before this hook ran


async def drain(runner: web.AppRunner, site: web.BaseSite, timeout: float = DRAIN_SECONDS) -> int:
    """Stop ``site`` and let the app's connections end by themselves (see the module's notes); how many were still
    open at the deadline (then closed by the runner's cleanup)."""
    app = runner.app
    app[RUNTIME].draining = True
    await site.stop()
    backends = app[RUNTIME].backends
    if backends is not None:
        if backends.grpc is not None:
            await backends.grpc.stop()
        if backends.puller is not None:
            await backends.puller.stop()
    server = runner.server
    deadline = time.monotonic() + timeout
    while server is not None and server.connections and time.monotonic() < deadline:
        await asyncio.sleep(POLL_SECONDS)
    left = len(server.connections) if server is not None else 0
    if left:
        log.debug("%d idle connections still open after %.0f s: closed", left, timeout)
    return left
