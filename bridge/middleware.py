"""The one middleware: errors become answers in the shape the caller speaks, and every request is logged once and
counted.

- ``BridgeError`` under ``/api/`` → ``{"error": {"code", "message"}}``; under ``/tempo/`` → plain text, as Tempo
  answers; anywhere else → Connect error JSON.
- Anything else → logged with its stack, answered with a generic ``internal`` error (no stack trace leaks).

``nosniff`` (``on_response_prepare``) gives every answer ``X-Content-Type-Options: nosniff`` — the bridge's own, the
router's 404 text, its error JSON and what it relays — so no browser ever reads one as something else (frame names
and label values are anyone's text).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from bridge.connect import encode_error
from bridge.errors import CODE_TO_HTTP, BridgeError, Code
from bridge.metrics import Metrics

log = logging.getLogger("bridge.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# handlers may set request[ROUTE_LABEL] to a finer label (e.g. the RPC name); a RequestKey, as aiohttp 3.14 wants
ROUTE_LABEL = web.RequestKey("route_label", str)
# set by the streaming pass-through (``bridge.upstream.proxy``): a request the bridge only relayed is logged at DEBUG
# when it succeeded — its line cost a tenth of a relayed call, and the upstream (or a proxy in front) keeps the
# access log; failures, and everything the bridge answers itself, stay at INFO. (421 is a request handed back to
# nginx in front to send on itself: bridge.upstream.proxy.PASS_BACK_STATUS.)
PASSED_THROUGH = web.RequestKey("passed_through", bool)


def error_response(
    path: str, code: Code, message: str, *, status: int | None = None, retry_after: int | None = None
) -> web.Response:
    """The error in the shape the caller at ``path`` speaks; ``status`` overrides the code's own HTTP status (413 for
    a body too large), ``retry_after`` adds a ``Retry-After`` header (a temporary failure)."""
    status = status or CODE_TO_HTTP[code]
    extra = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if path.startswith("/api/"):
        body = json.dumps({"error": {"code": code.value, "message": message}})
        return web.Response(status=status, body=body.encode(), content_type="application/json", headers=extra)
    if path.startswith("/tempo/"):
        return web.Response(status=status, text=message + "\n", content_type="text/plain", headers=extra)
    _, data, headers = encode_error(code, message)
    return web.Response(status=status, body=data, headers={**headers, **extra})


def bridge_error_response(path: str, exc: BridgeError) -> web.Response:
    return error_response(path, exc.code, exc.message, status=exc.http_status, retry_after=exc.retry_after)


NOSNIFF: Final = ("X-Content-Type-Options", "nosniff")


async def nosniff(request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` signal: every answer, whoever made it, says ``nosniff``."""
    response.headers.setdefault(*NOSNIFF)


def make_middleware(metrics: Metrics) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except BridgeError as exc:
            response = bridge_error_response(request.path, exc)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except Exception:
            log.exception("unhandled error serving %s %s", request.method, request.path)
            response = error_response(request.path, Code.INTERNAL, "internal error in profile-bridge (see its log)")
            status = response.status
            return response
        finally:
            elapsed = time.perf_counter() - started
            label = request.get(ROUTE_LABEL) or _route_of(request)
            peer = from_peer(request)
            if not peer:  # the worker that took it from the client counts it (bridge.upstream.peers)
                metrics.requests.labels(label, str(status)).inc()
                metrics.request_seconds.labels(label).observe(elapsed)
            level = logging.DEBUG if (status < 400 or status == 421) and request.get(PASSED_THROUGH) else logging.INFO
            if log.isEnabledFor(level):
                log.log(
                    level,
                    "%s %s %d %.1fms",
                    request.method,
                    request.path,
                    status,
                    elapsed * 1000,
                    extra={"fields": {"route": label, "tenant": request.headers.get("X-Scope-OrgID", "")}},
                )

    return middleware


def from_peer(request: web.Request) -> bool:
    """Whether ``request`` came from another worker of this bridge, over its Unix socket (``bridge.upstream.peers``;
    the bridge's own port is TCP)."""
    transport = request.transport
    return transport is not None and isinstance(transport.get_extra_info("sockname"), str)


def _route_of(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"
