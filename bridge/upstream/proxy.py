"""Streaming pass-through: one incoming request → the same request upstream, the answer streamed back.

Bodies are never decoded or buffered whole: the request body streams up as it arrives, the response body streams
down chunk by chunk, ``Content-Encoding`` untouched both ways (the session must not decompress). End-to-end headers
survive (tenant, auth, ``Connect-*``, content type and encoding); hop-by-hop headers (RFC 9110 §7.6.1, plus any
named in ``Connection``) are dropped in both directions, and a browser's ``Cookie`` never goes up.

Failures before the answer's headers are sent become ``UpstreamError``s (the middleware turns them into the
caller's error shape). A failure after the headers went out cannot be reported any more: the client connection is
aborted, so the client sees a truncated answer rather than a silently shortened one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict
from yarl import URL

from bridge.body import HOP_BY_HOP, end_to_end, raw_body, read_body
from bridge.errors import InvalidArgument, UpstreamTimeout
from bridge.metrics import Metrics
from bridge.middleware import PASSED_THROUGH
from bridge.upstream import relay
from bridge.upstream.faults import map_client_error
from bridge.upstream.guard import upstream_call
from bridge.wire.allowlist import normalise

log = logging.getLogger("bridge.proxy")

# the bridge's own headers: its token (tokens on or off: it never leaves the bridge, docs/security.md) and the
# front's pass-back mark
OWN_HEADERS: Final = frozenset({"x-profile-bridge-token", "x-profile-bridge-pass-back"})
# set by aiohttp from the target URL / the body it sends; and the browser's cookies, which are the bridge's page
# session at most, never the upstream's business
_REQUEST_DROP: Final = HOP_BY_HOP | OWN_HEADERS | {"host", "expect", "cookie"}
# aiohttp would otherwise add these itself when the client did not send them
_SKIP_AUTO: Final = ("Accept-Encoding", "User-Agent", "Content-Type")
MIN_TIMEOUT: Final = 0.001  # seconds; less is a spent budget
CHUNK: Final = 256 * 1024  # read size for callers that stream in fixed chunks (the /tempo mount uses it)
# How much of an answer may wait in the bridge, per direction, before it stops reading: the upstream's answer is
# read while the client is still taking the part before it (aiohttp's 64 KiB defaults made every 1 MB answer a
# dozen stop-and-go turns of the event loop).
RELAY_BUFFER: Final = 4 * 1024 * 1024
# nginx in front (deploy/nginx-front.conf) sends the RPCs the bridge may resolve with this header, keeps their bodies,
# and sends the request to Pyroscope itself when the bridge answers PASS_BACK_STATUS: an answer the bridge would only
# relay (a 1 MB flame graph) then never goes through Python. Only a body the bridge leaves as it came is passed back.
PASS_BACK_HEADER: Final = "X-Profile-Bridge-Pass-Back"
PASS_BACK_STATUS: Final = 421


def target_url(base_url: str, request: web.Request, mount: str) -> URL:
    """The upstream URL for ``request`` under ``mount`` (e.g. ``/pyroscope``): ``base_url`` + the rest of the raw
    (still percent-encoded) path, normalised as the mounts' allowlist checked it (``bridge.wire.allowlist.normalise``:
    runs of ``/`` collapsed; ``..`` segments and encoded dots refused, so nothing escapes the configured URL's own
    path) + the raw query."""
    raw_path, _, raw_query = request.raw_path.partition("?")
    if not raw_path.startswith(mount + "/") and raw_path != mount:
        raise InvalidArgument(f"path {raw_path!r} is not under {mount}/")
    text = base_url.rstrip("/") + normalise(raw_path[len(mount) :])
    if raw_query:
        text += "?" + raw_query
    return URL(text, encoded=True)


async def stream_through(
    request: web.Request,
    session: aiohttp.ClientSession,
    target_url: str | URL,
    *,
    upstream: str,
    timeout: aiohttp.ClientTimeout,
    body: bytes | None = None,
    body_encoding: str | None = None,
    metrics: Metrics | None = None,
    peer: bool = False,
) -> web.StreamResponse:
    """Forward ``request`` to ``target_url`` (query included; a ``str`` is taken as already percent-encoded) and
    stream the answer back. Raises ``UpstreamError`` when the upstream fails before answering.

    ``body``: the request body when the caller has already read it, sent instead of the request's stream, with
    ``body_encoding`` as its ``Content-Encoding`` (None: identity). ``read_body`` returns both. ``peer``: the target
    is another worker of this bridge (``bridge.upstream.peers``), reached through ``session``'s own connector: never
    handed back to nginx in front, never over the lean relay."""
    if any(t is not None and t <= MIN_TIMEOUT for t in (timeout.total, timeout.connect, timeout.sock_read)):
        # aiohttp reads a zero timeout as "no timeout": a spent budget must fail here, not wait forever
        raise UpstreamTimeout(upstream, f"no time left in the request's budget to ask {upstream}")
    url = target_url if isinstance(target_url, URL) else URL(target_url, encoded=True)
    request[PASSED_THROUGH] = True
    if not peer and PASS_BACK_HEADER in request.headers and (body is None or body is raw_body(request)):
        return web.Response(status=PASS_BACK_STATUS, headers={PASS_BACK_HEADER: "1"})
    headers = end_to_end(request.headers, _REQUEST_DROP)
    data: bytes | aiohttp.StreamReader | None = body
    if body is not None:
        headers["Content-Length"] = str(len(body))
        headers.popall("Content-Encoding", None)
        if body_encoding and body_encoding.strip().lower() != "identity":
            headers["Content-Encoding"] = body_encoding
    elif not request.body_exists:
        headers.popall("Content-Length", None)
    else:
        data = request.content
    pool = None if peer else _lean_pool(request, url)
    if pool is not None and (body is not None or not request.body_exists or _small_body(request)):
        if body is None and request.body_exists:
            body = (await read_body(request, relay.MAX_BODY))[0]  # still in its Content-Encoding, sent as is
            headers["Content-Length"] = str(len(body))
        return await _lean(request, pool, url, headers, body or b"", upstream, timeout, metrics)
    async with upstream_call(metrics, upstream, "passthrough", timeout, map_errors=False) as outcome:
        try:
            upstream_resp = await session.request(
                request.method,
                url,
                headers=headers,
                data=data,
                timeout=timeout,
                allow_redirects=False,
                auto_decompress=False,
                skip_auto_headers=_SKIP_AUTO,
                read_bufsize=RELAY_BUFFER,
            )
        except Exception as exc:  # noqa: BLE001 - mapped at this boundary, re-raised typed
            raise outcome.fail(exc) from exc
        async with upstream_resp:
            return await _relay(request, upstream_resp, upstream)


def _lean_pool(request: web.Request, url: URL) -> relay.Pool | None:
    """The lean relay's pool for ``url`` when the app has one and the request suits it (``bridge.upstream.relay``)."""
    lean = request.app.get(relay.RELAY)
    if lean is None or "Expect" in request.headers or "Upgrade" in request.headers:
        return None
    return lean.pool(url)


def _small_body(request: web.Request) -> bool:
    length = request.content_length
    return length is not None and length <= relay.MAX_BODY and "Transfer-Encoding" not in request.headers


async def _lean(
    request: web.Request,
    pool: relay.Pool,
    url: URL,
    headers: CIMultiDict[str],
    body: bytes,
    upstream: str,
    timeout: aiohttp.ClientTimeout,
    metrics: Metrics | None,
) -> web.StreamResponse:
    """``stream_through`` over the lean relay: the request in one write, the answer relayed as it arrives."""
    if not body and request.method in ("POST", "PUT", "PATCH"):
        headers["Content-Length"] = "0"
    host = url.raw_host or ""
    if url.explicit_port is not None:
        host = f"{host}:{url.port}"
    head = relay.request_head(request.method, url.raw_path_qs, host, list(headers.items()))
    exchange = relay.Exchange(pool, upstream)
    try:
        async with upstream_call(metrics, upstream, "passthrough", timeout, map_errors=False):
            conn = await exchange.start(
                head,
                body,
                head_only=request.method == "HEAD",
                connect_timeout=timeout.sock_connect or timeout.connect,
                total=timeout.total,
                sock_read=timeout.sock_read,
            )
            response = _RelayedResponse(status=conn.status, reason=conn.reason or None)
            fields: CIMultiDict[str] = CIMultiDict(conn.fields)
            response.headers.extend(end_to_end(fields, HOP_BY_HOP | {"content-length"}))
            length = fields.get("Content-Length")
            framed = length is not None and length.isdigit() and "Transfer-Encoding" not in fields
            if framed:
                response.content_length = int(length)  # type: ignore[arg-type]
            writer = await response.prepare(request)
            read_timeout = min(t for t in (timeout.sock_read, timeout.total, 3600.0) if t is not None)

            async def read() -> bytes:
                async with asyncio.timeout(read_timeout):
                    return await conn.read()

            async def handed_over() -> bool:
                """After the first write (it carries the answer's head): the rest of a framed body is spliced."""
                if framed and not conn.done and request.transport is not None and writer is not None:
                    await _spliced(request, conn, writer, upstream, read_timeout)
                    return True
                return False

            await _pump(request, response, read, upstream, handed_over)
            return response
    finally:
        exchange.finish()


async def _spliced(
    request: web.Request, conn: relay.Connection, writer: AbstractStreamWriter, upstream: str, read_timeout: float
) -> None:
    """The rest of a body of known length, spliced from the upstream's connection into the client's as it arrives
    (``relay.Connection.splice``); the client's backlog drained through aiohttp's writer."""
    assert request.transport is not None
    conn.splice(request.transport)
    while True:
        try:
            async with asyncio.timeout(read_timeout):
                await conn.wait_spliced()
            if conn.done:
                return
            await writer.drain()
            conn.resume_spliced()
        except Exception as exc:  # noqa: BLE001 - headers are out: no error answer is possible any more
            _abort(request, upstream, exc)
            return


class _RelayedResponse(web.StreamResponse):
    """A streamed answer whose headers leave with its first body bytes: one write (one packet, one wake-up of the
    client) for a small answer instead of two. (``web.Response`` does the same for whole bodies.)"""

    _send_headers_immediately = False


async def _relay(request: web.Request, upstream_resp: aiohttp.ClientResponse, upstream: str) -> web.StreamResponse:
    response = _RelayedResponse(status=upstream_resp.status, reason=upstream_resp.reason)
    response.headers.extend(end_to_end(upstream_resp.headers, HOP_BY_HOP | {"content-length"}))
    length = upstream_resp.content_length
    chunked = "chunked" in upstream_resp.headers.get("Transfer-Encoding", "").lower()
    if length is not None and not chunked:
        response.content_length = length
    await response.prepare(request)
    if request.method == "HEAD":
        return response
    if (transport := request.transport) is not None:
        transport.set_write_buffer_limits(high=RELAY_BUFFER)
    await _pump(request, response, upstream_resp.content.readany, upstream)
    return response


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    read: Callable[[], Awaitable[bytes]],
    upstream: str,
    handed_over: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """The answer's body, from ``read`` (b"" at its end) to the client as it comes, until the end, a failure on
    either side, or ``handed_over`` (asked after each write) says it took the rest."""
    while True:
        try:
            chunk = await read()
        except Exception as exc:  # noqa: BLE001 - headers are out: no error answer is possible any more
            _abort(request, upstream, exc)
            return
        if not chunk:
            return
        try:
            await response.write(chunk)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            log.debug("client went away during %s %s", request.method, request.path)
            return
        if handed_over is not None and await handed_over():
            return


def _abort(request: web.Request, upstream: str, exc: BaseException) -> None:
    err = map_client_error(upstream, exc)
    log.warning("%s: answer to %s %s cut short: %s", upstream, request.method, request.path, err.message)
    response_transport = request.transport
    if response_transport is not None:
        response_transport.abort()
