"""The ``/pyroscope`` mount: what Grafana's Pyroscope data source talks to (``http://<bridge>:4041/pyroscope``).

Proxy mode: everything under the mount is streamed to ``settings.pyroscope_url`` untouched, except span-profile
queries — ``SelectMergeSpanProfile``, and ``SelectMergeStacktraces`` carrying a ``span_selector`` — which the
resolver answers (linked → local-root → time-window → none) in the request's codec, gzipped when accepted, with
``X-Profile-Bridge-Resolution``, ``X-Profile-Bridge-Reason``, ``X-Profile-Bridge-Attribution`` and
``X-Profile-Bridge-Measure`` headers.

Both modes relay only what Grafana, its apps and Perses call (``bridge.wire.allowlist``): anything else is refused
(403, naming the setting that opens it) before a backend is asked.

Standalone mode: the querier RPCs are answered from the embedded store, span queries through the same resolver;
anything else is ``unimplemented``. Which of the two answers is the backend's business (``Backends.pyroscope``):
this module holds the handler only; what is resolved and how the answer is shaped is ``bridge.span_rpc``.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from bridge.body import read_body
from bridge.call import CallContext
from bridge.connect import (
    Codec,
    codec_for,
    decode_message,
    decompress,
    encode_message,
    encode_response,
    parse_timeout_ms,
)
from bridge.middleware import ROUTE_LABEL
from bridge.resolve import Resolver, SpanQuery, answer_headers, measure_of
from bridge.span_rpc import answer_of, clean_selector_of, span_query_of
from bridge.state import METRICS, SETTINGS, backends_of, call_context
from bridge.wire.allowlist import mount_call
from bridge.wire.pyroscope import QUERIER_METHODS, SPAN_RPCS, method_label, rpc_method

MOUNT: Final = "/pyroscope"


async def handle(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    request[ROUTE_LABEL] = f"{MOUNT}/*"
    call = mount_call("pyroscope", request.method, request.raw_path, settings.upstream_allow)  # or 400/403
    backends = backends_of(request.app)
    ctx = call_context(request, requested_timeout=parse_timeout_ms(request.headers.get("Connect-Timeout-Ms")))
    method = rpc_method(call.decoded[1:]) if request.method == "POST" else None
    if method:
        request[ROUTE_LABEL] = f"{MOUNT}/{method_label(method)}"
    content_type = request.headers.get("Content-Type")
    if method is None or not backends.pyroscope.must_decode(method, content_type):
        return await backends.pyroscope.pass_on(request, ctx)  # streamed, never decoded (gRPC-Web included)

    codec = codec_for(content_type)
    body, encoding = await read_body(request, settings.max_body_bytes)
    data = decompress(body, encoding, settings.max_body_bytes)
    if method in SPAN_RPCS:
        msg = decode_message(data, codec, SPAN_RPCS[method][0])
        query = span_query_of(msg)
        if query is not None:
            return await _resolve(request, backends.resolver, method, query, codec, ctx)
        cleaned = clean_selector_of(msg)
        if cleaned is not None:  # another format: passed on, but never with junk or an empty selector
            data, encoding = encode_message(cleaned, codec), None
            body = data
    answer = await backends.pyroscope.call(method, data, codec, ctx)
    if answer is None:
        return await backends.pyroscope.pass_on(request, ctx, body, encoding)
    out, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
    return web.Response(body=out, headers=headers)


async def _resolve(
    request: web.Request, resolver: Resolver, method: str, query: SpanQuery, codec: Codec, ctx: CallContext
) -> web.Response:
    resolution = await resolver.resolve(query, ctx)
    answer = answer_of(method, resolution, query.profile_type)
    body, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
    headers.update(answer_headers(resolution, measure_of(resolution, query.profile_type)))
    return web.Response(body=body, headers=headers)


def setup(app: web.Application) -> None:
    app.router.add_route("*", MOUNT + "/{tail:.*}", handle)
    app[METRICS].allow("route", f"{MOUNT}/*", *(f"{MOUNT}/{method_label(m)}" for m in (*QUERIER_METHODS, None)))
