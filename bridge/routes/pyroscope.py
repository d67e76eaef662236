"""The ``/pyroscope`` mount: what Grafana's Pyroscope data source talks to (``http://<bridge>:4041/pyroscope``).

Proxy mode: everything under the mount is streamed to ``settings.pyroscope_url`` untouched, except span-profile
queries — ``SelectMergeSpanProfile``, and ``SelectMergeStacktraces`` carrying a ``span_selector`` — which the
resolver answers (linked → local-root → time-window → none) in the request's codec, gzipped when accepted, with
``X-Profile-Bridge-Resolution``, ``X-Profile-Bridge-Reason``, ``X-Profile-Bridge-Attribution`` and
``X-Profile-Bridge-Measure`` headers.

Standalone mode: the querier RPCs are answered from the embedded store (``extras["pyroscope_local"]``), span
queries through the same resolver; anything else is ``unimplemented``.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import aiohttp
from aiohttp import web
from google.protobuf.message import Message

from bridge import app as appmod
from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.connect import (
    Codec,
    codec_for,
    decode_message,
    decompress,
    encode_message,
    encode_response,
    parse_timeout_ms,
)
from bridge.errors import InvalidArgument, Unimplemented
from bridge.middleware import ROUTE_LABEL
from bridge.resolve import Mode, Resolution, SpanQuery, answer_headers, clean_span_ids, measure_of, resolver_of
from bridge.upstream.base import CallContext
from bridge.upstream.proxy import read_body, stream_through, target_url
from bridge.wire.pyroscope import FLAMEGRAPH_FORMATS, SPAN_RPCS, method_label, rpc_method

MOUNT: Final = "/pyroscope"

LocalRpc = tuple[type[Message], Callable[[Message, CallContext], Awaitable[Message]]]


def span_query_of(msg: Message) -> SpanQuery | None:
    """The span query a decoded span RPC carries; None when it has no span selector or asks for a format other
    than a flame graph (those are not resolved)."""
    if not isinstance(msg, qpb.SelectMergeSpanProfileRequest | qpb.SelectMergeStacktracesRequest):
        return None
    if not msg.span_selector or msg.format not in FLAMEGRAPH_FORMATS:
        return None
    return SpanQuery(
        span_ids=tuple(msg.span_selector),
        profile_type=msg.profile_typeID,
        label_selector=msg.label_selector,
        start_ms=msg.start,
        end_ms=msg.end,
        max_nodes=msg.max_nodes if msg.HasField("max_nodes") and msg.max_nodes > 0 else None,
    )


def clean_selector_of(msg: Message) -> Message | None:
    """For a span RPC that is not resolved: a copy with its span selector cleaned when that changes it; None when
    it is fine as sent. ``SelectMergeSpanProfile`` with no valid id (or none at all) → ``InvalidArgument``."""
    if not isinstance(msg, qpb.SelectMergeSpanProfileRequest | qpb.SelectMergeStacktracesRequest):
        return None
    if isinstance(msg, qpb.SelectMergeStacktracesRequest) and not msg.span_selector:
        return None  # a plain profile query
    ids = clean_span_ids(msg.span_selector)
    if list(ids) == list(msg.span_selector):
        return None
    out = copy.deepcopy(msg)
    del out.span_selector[:]
    out.span_selector.extend(ids)
    return out


def grafana_flamegraph(resolution: Resolution, profile_type: str) -> qpb.FlameGraph:
    """The flame graph Grafana gets; its root bar is all Grafana shows of how it was found.

    - A fallback (``local-root``, ``time-window``) says first what its total is — e.g. "shop-frontend CPU during the
      19 s window around this span, not this span's own" — then why.
    - A ``none`` answer would be one row, which span details do not draw at all: it becomes a one-unit placeholder of
      two rows whose bars say why there is nothing (the ``X-Profile-Bridge-Resolution: none`` header and the root's
      label say it is not data)."""
    if resolution.mode is Mode.NONE:
        return flamegraph.placeholder(flamegraph.root_label(f"none: {resolution.reason}"),
                                      f"no samples — {resolution.reason}")
    if resolution.mode is Mode.LINKED:
        return resolution.flamegraph
    measure = measure_of(resolution, profile_type)
    return flamegraph.relabel_root(resolution.flamegraph,
                                   flamegraph.root_label(f"{measure.text} — {resolution.reason}"))


def answer_of(method: str, resolution: Resolution, profile_type: str) -> Message:
    fg = grafana_flamegraph(resolution, profile_type)
    if method == "SelectMergeSpanProfile":
        return qpb.SelectMergeSpanProfileResponse(flamegraph=fg)
    return qpb.SelectMergeStacktracesResponse(flamegraph=fg)


async def handle(request: web.Request) -> web.StreamResponse:
    settings = request.app[appmod.SETTINGS]
    ctx = appmod.call_context(
        request, requested_timeout=parse_timeout_ms(request.headers.get("Connect-Timeout-Ms"))
    )
    method = rpc_method(request.match_info["tail"]) if request.method == "POST" else None
    request[ROUTE_LABEL] = f"{MOUNT}/{method_label(method)}" if method else f"{MOUNT}/*"
    local: Mapping[str, LocalRpc] | None = None
    if settings.is_standalone:
        local = request.app[appmod.BACKENDS].extras.get("pyroscope_local", {})
        if method is None or (method not in SPAN_RPCS and method not in local):
            raise Unimplemented(
                f"{request.method} {request.path} is not served in standalone mode (the embedded store answers "
                "querier.v1.QuerierService RPCs only)"
            )
    if method is None or (method not in SPAN_RPCS and local is None) or (local is None and not _is_connect(request)):
        return await _forward(request, ctx, None, None)  # streamed, never decoded (gRPC-Web included)

    codec = codec_for(request.headers.get("Content-Type"))
    body, encoding = await read_body(request, settings.max_body_bytes)
    data = decompress(body, encoding, settings.max_body_bytes)
    if method in SPAN_RPCS:
        msg = decode_message(data, codec, SPAN_RPCS[method][0])
        query = span_query_of(msg)
        if query is not None:
            return await _resolve(request, method, query, codec, ctx)
        cleaned = clean_selector_of(msg)
        if cleaned is not None:  # another format: forwarded, but never with junk or an empty selector
            data, encoding = encode_message(cleaned, codec), None
            body = data
    if local is not None:
        return await _local(request, local, method, data, codec, ctx)
    return await _forward(request, ctx, body, encoding)


def _is_connect(request: web.Request) -> bool:
    """A Connect unary request the bridge can decode (``application/proto`` or ``application/json``)."""
    try:
        codec_for(request.headers.get("Content-Type"))
    except InvalidArgument:
        return False
    return True


async def _resolve(request: web.Request, method: str, query: SpanQuery, codec: Codec,
                   ctx: CallContext) -> web.Response:
    resolution = await resolver_of(request.app).resolve(query, ctx)
    answer = answer_of(method, resolution, query.profile_type)
    body, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
    headers.update(answer_headers(resolution, measure_of(resolution, query.profile_type)))
    return web.Response(body=body, headers=headers)


async def _local(request: web.Request, local: Mapping[str, LocalRpc], method: str, data: bytes, codec: Codec,
                 ctx: CallContext) -> web.Response:
    entry = local.get(method)
    if entry is None:
        raise Unimplemented(f"{method} with this request is not served in standalone mode")
    cls, call = entry
    answer = await call(decode_message(data, codec, cls), ctx)
    body, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
    return web.Response(body=body, headers=headers)


async def _forward(request: web.Request, ctx: CallContext, body: bytes | None,
                   encoding: str | None) -> web.StreamResponse:
    settings = request.app[appmod.SETTINGS]
    profiles = appmod.profiles_of(request.app)
    session: aiohttp.ClientSession = profiles.session  # type: ignore[attr-defined]
    base_url: str = getattr(profiles, "base_url", settings.pyroscope_url)
    left = ctx.deadline.remaining()
    timeout = aiohttp.ClientTimeout(
        total=left, connect=min(settings.connect_timeout, left), sock_read=min(settings.upstream_timeout, left)
    )
    url = target_url(base_url, request, MOUNT)
    return await stream_through(request, session, url, upstream="pyroscope", timeout=timeout, body=body,
                                body_encoding=encoding)


def setup(app: web.Application) -> None:
    app.router.add_route("*", MOUNT + "/{tail:.*}", handle)
