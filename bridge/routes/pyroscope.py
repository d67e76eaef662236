"""The ``/pyroscope`` mount: what Grafana's Pyroscope data source talks to (``http://<bridge>:4041/pyroscope``).

Proxy mode: everything under the mount is streamed to ``settings.pyroscope_url`` untouched, except span-profile
queries — ``SelectMergeSpanProfile``, ``SelectMergeStacktraces`` carrying a ``span_selector``, ``Diff`` with a span
side — which the resolver answers (linked → local-root → time-window → none) in the request's codec, gzipped when
accepted, with ``X-Profile-Bridge-Resolution``, ``X-Profile-Bridge-Reason``, ``X-Profile-Bridge-Attribution`` and
``X-Profile-Bridge-Measure`` headers. A span-capable request the resolver does not answer goes on as it came, or
with its span selector cut back to what Pyroscope accepts and nothing else changed (``bridge.span_rpc``).

Both modes relay only what Grafana, its apps and Perses call (``bridge.wire.allowlist``): anything else is refused
(403, naming the setting that opens it) before a backend is asked.

Standalone mode: the querier RPCs are answered from the embedded store, span queries through the same resolver;
anything else is ``unimplemented``. Which of the two answers is the backend's business (``Backends.pyroscope``):
this module holds the handler only; what is resolved and how the answer is shaped is ``bridge.span_rpc``.
"""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import web

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.body import read_body
from bridge.call import CallContext
from bridge.connect import Codec, codec_for, decompress, encode_response, parse_timeout_ms
from bridge.middleware import ROUTE_LABEL
from bridge.resolution import answer_headers, measure_of
from bridge.resolve import Resolver
from bridge.span_rpc import (
    SpanCall,
    answer_of,
    carried_trace,
    diff_answer,
    diff_headers,
    diff_max_nodes,
    plain_side,
    read_span_call,
    side_tree,
)
from bridge.state import METRICS, SETTINGS, backends_of, call_context
from bridge.upstream import peers
from bridge.wire.allowlist import mount_call
from bridge.wire.pyroscope import QUERIER_METHODS, SPAN_RPCS, TOP, method_label, rpc_method

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
        span_call = read_span_call(method, data, codec)
        if span_call.queries:
            trace_id = carried_trace(span_call)
            owner = await peers.forward(request, trace_id, ctx, settings, body) if trace_id else None
            if owner is not None:  # the worker that keeps this trace resolves it
                return owner
            return await _resolve(request, backends.resolver, span_call, codec, ctx)
        if span_call.body is not None:  # passed on with its selector cut back, nothing else changed
            data = body = span_call.body
            encoding = None
    answer = await backends.pyroscope.call(method, data, codec, ctx)
    if answer is None:
        return await backends.pyroscope.pass_on(request, ctx, body, encoding)
    out, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
    return web.Response(body=out, headers=headers)


async def _resolve(
    request: web.Request, resolver: Resolver, call: SpanCall, codec: Codec, ctx: CallContext
) -> web.Response:
    if call.method == "Diff":
        return await _diff(request, resolver, call, codec, ctx)
    query = call.queries[TOP]
    resolution = await resolver.resolve(query, ctx)
    answer = answer_of(call.method, resolution, query.profile_type)
    body, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
    headers.update(answer_headers(resolution, measure_of(resolution, query.profile_type)))
    return web.Response(body=body, headers=headers)


async def _diff(
    request: web.Request, resolver: Resolver, call: SpanCall, codec: Codec, ctx: CallContext
) -> web.Response:
    """A Diff with span sides: each span side resolved, each plain side asked of the profile backend, both at the
    Diff's node limit, then diffed as Pyroscope diffs."""
    msg = call.message
    assert isinstance(msg, qpb.DiffRequest)
    max_nodes = diff_max_nodes(msg)
    headers: dict[str, dict[str, str]] = {}

    async def tree(place: str, side: qpb.SelectMergeStacktracesRequest) -> flamegraph.Node:
        query = call.queries.get(place)
        if query is None:
            merged = await resolver.profiles.select_merge_stacktraces(plain_side(side, max_nodes), ctx)
            return flamegraph.decode(merged.flamegraph if merged.HasField("flamegraph") else None)
        resolution = await resolver.resolve(query, ctx)
        headers[place] = answer_headers(resolution, measure_of(resolution, query.profile_type))
        return side_tree(resolution)

    sides = await asyncio.gather(tree("left", msg.left), tree("right", msg.right), return_exceptions=True)
    for side in sides:  # both ran to the end; the first failure is the answer
        if isinstance(side, BaseException):
            raise side
    left, right = sides
    assert isinstance(left, flamegraph.Node) and isinstance(right, flamegraph.Node)
    body, out = encode_response(diff_answer(left, right, max_nodes), codec, request.headers.get("Accept-Encoding"))
    out.update(diff_headers({place: headers[place] for place in ("left", "right") if place in headers}))
    return web.Response(body=body, headers=out)


def setup(app: web.Application) -> None:
    app.router.add_route("*", MOUNT + "/{tail:.*}", handle)
    app[METRICS].allow("route", f"{MOUNT}/*", *(f"{MOUNT}/{method_label(m)}" for m in (*QUERIER_METHODS, None)))
