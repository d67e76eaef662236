"""The HTTP side of ``bridge.auth``: one middleware that refuses what a caller may not do and hands the handler the
request as the upstreams should see it (the tenant bound to the token, the bridge's own credential gone)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware
from multidict import CIMultiDict

from bridge.auth import FRONT_AUTH_PATH, REALM, TENANT_HEADER, TOKEN_HEADER, Auth, credential
from bridge.errors import BridgeError, Unauthenticated
from bridge.middleware import PASSED_THROUGH, ROUTE_LABEL, bridge_error_response
from bridge.parsing import PERMISSIONS
from bridge.routes.otlp import error_status
from bridge.state import GRANT, TOKENLESS

OTLP_PATHS: Final = frozenset({"/v1/traces", "/v1development/profiles"})
TEXT_PATHS: Final = ("/ingest",)
PAGE_PATHS: Final = ("/spans/", "/functions/")  # the pages (besides "/"): a refusal is text, not JSON

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_gate(auth: Auth) -> Middleware:
    """Refuse what the caller may not do; hand the handler the request as the upstreams should see it: the tenant
    bound to the token, the bridge's own credential gone. Runs inside the main middleware, so refusals are logged
    and counted like any answer."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == FRONT_AUTH_PATH:  # nginx asking for its caller: the need is the question
            need: str | None = request.query.get("need", "")
            need = need if need in PERMISSIONS else "read"  # the handler answers 400 for another
        else:
            need = auth.required(request.path, request.method, request.raw_path)
        token, from_authorization = credential(request.headers)
        if need is None:
            if not auth.accepts(token):
                request[TOKENLESS] = True
            return await handler(request)
        try:
            grant = auth.grant(need, token, from_authorization, request.headers.get(TENANT_HEADER) or None)
        except BridgeError as exc:
            return refusal(request, exc)
        headers = CIMultiDict(request.headers)
        headers.popall(TOKEN_HEADER, None)
        if grant.drop_authorization:
            headers.popall("Authorization", None)
        headers.popall(TENANT_HEADER, None)
        if grant.tenant is not None:
            headers[TENANT_HEADER] = grant.tenant
        inner = request.clone(headers=headers)
        inner[GRANT] = grant
        try:
            return await handler(inner)
        finally:
            label = inner.get(ROUTE_LABEL)
            if label is not None:
                request[ROUTE_LABEL] = label
            if inner.get(PASSED_THROUGH):
                request[PASSED_THROUGH] = True

    return middleware


def refusal(request: web.Request, exc: BridgeError) -> web.Response:
    """401/403 in the shape the caller at this path speaks; a 401 says which credentials would do."""
    path = request.path
    if path in OTLP_PATHS:
        as_json = (request.content_type or "").lower() == "application/json"
        response = error_status(exc, as_json)
    elif path.startswith(TEXT_PATHS) or path == "/" or path.startswith(PAGE_PATHS):
        response = web.Response(status=exc.http_status, text=exc.message + "\n")
    else:
        response = bridge_error_response(path, exc)
    if isinstance(exc, Unauthenticated):
        response.headers["WWW-Authenticate"] = REALM
    return response
