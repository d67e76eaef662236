"""Standalone mode's side of the ``/tempo`` mount: Tempo's query API answered from the store, in Tempo's own
encodings (``bridge.wire.tempo``). The mount hands it the path after ``/tempo/``.

Served: trace by ID (v2 ``api/v2/traces/<id>``, v1 ``api/traces/<id>``; protobuf when ``Accept`` names
``application/protobuf``, JSON otherwise; v1 404 / v2 200 with an empty trace when unknown), ``api/search`` (TraceQL,
``bridge.traceql``), ``api/metrics/query_range`` and ``api/metrics/query`` (TraceQL metrics), ``api/search/tags``,
``api/v2/search/tags``, ``api/search/tag/<tag>/values``, ``api/v2/search/tag/<tag>/values``, ``api/status/buildinfo``,
``ready``, ``api/echo``. Search answers JSON, or ``tempopb.SearchResponse`` when ``Accept`` names protobuf; metrics
answer JSON whatever ``Accept`` says — both as Tempo's frontend answers over HTTP (protobuf metrics travel only on its
gRPC stream). Anything else: 501.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from multidict import CIMultiDict
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.body import HOP_BY_HOP, end_to_end
from bridge.call import CallContext
from bridge.connect import headers_get
from bridge.errors import BridgeError, InvalidArgument
from bridge.store import tempo_tags
from bridge.store.backend import Store
from bridge.traceql import params, wire
from bridge.traceql.errors import InvalidQuery, ParseError, QueryError, Unsupported
from bridge.traceql.search import response_json
from bridge.wire.tempo import PROTOBUF, TempoAnswer, wants_protobuf

Answer = tuple[int, dict[str, str], bytes]

_V2_TRACE = re.compile(r"^api/v2/traces/([^/]+)$")
_V1_TRACE = re.compile(r"^api/traces/([^/]+)$")
_V2_VALUES = re.compile(r"^api/v2/search/tag/(.+)/values$")  # a tag may hold a "/" (sent as %2F)
_V1_VALUES = re.compile(r"^api/search/tag/(.+)/values$")
METRICS_RANGE: Final = "api/metrics/query_range"
METRICS_INSTANT: Final = "api/metrics/query"


def _json(doc: Any, status: int = 200) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(doc, separators=(",", ":")).encode()


def _text(text: str, status: int) -> Answer:
    return status, {"Content-Type": "text/plain; charset=utf-8"}, (text + "\n").encode()


def _resource_spans_json(rs: otlp_trace.ResourceSpans) -> dict[str, Any]:
    doc: dict[str, Any] = json_format.MessageToDict(rs)
    return doc


class StoreTempo:
    """The ``/tempo`` mount's backend in standalone mode."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def trace_by_id(self, request: web.Request, path: str, ctx: CallContext) -> TempoAnswer:
        return await self._answer(request, path, ctx)

    async def pass_on(self, request: web.Request, path: str, ctx: CallContext) -> web.StreamResponse:
        answer = await self._answer(request, path, ctx)
        headers = end_to_end(answer.headers, HOP_BY_HOP | {"content-length"})
        return web.Response(status=answer.status, body=answer.body, headers=headers)

    async def _answer(self, request: web.Request, path: str, ctx: CallContext) -> TempoAnswer:
        status, headers, body = await answer(self.store, request.method, path, request.query, request.headers, ctx)
        return TempoAnswer(status, CIMultiDict(headers), body)


async def answer(
    store: Store, method: str, subpath: str, query: Mapping[str, str], headers: Mapping[str, str], ctx: CallContext
) -> Answer:
    """Tempo's answer to ``method /tempo/<subpath>`` from the store."""
    path = subpath.strip("/")
    if method not in ("GET", "HEAD"):
        return _text(f"standalone mode does not serve {method} /tempo/{path}", 501)
    try:
        return await _route(store, path, query, headers, ctx)
    except QueryError as exc:
        return _query_error(exc, path)
    except InvalidArgument as exc:
        return _text(exc.message, 400)
    except BridgeError as exc:
        return _text(exc.message, exc.http_status)


def _query_error(exc: QueryError, path: str) -> Answer:
    """A query's error framed as Tempo's HTTP API frames it, and as it writes it (``pipeline.NewBadRequest``: the text
    alone, no newline). Search: ``invalid TraceQL query: …`` for whatever parsing or validation refuses
    (``modules/frontend/pipeline/async_query_validator_middleware.go``). ``query_range``: a parse error bare (the
    sharder parses first, ``metrics_query_range_sharder.go``), a validation error as the engine's ``compiling query:
    …`` (``pkg/traceql/engine_metrics.go``); the instant query compiles first (``combiner.NewTypedQueryRange``), so
    both read ``compiling query: …``. The engine's own refusals (``not a metrics query``) and the bridge's stand
    alone."""
    text = exc.message
    if isinstance(exc, ParseError | InvalidQuery | Unsupported):
        if path == "api/search":
            text = f"invalid TraceQL query: {text}"
        elif path == METRICS_INSTANT or not isinstance(exc, ParseError):
            text = f"compiling query: {text}"
    return 400, {"Content-Type": "text/plain; charset=utf-8"}, text.encode()


async def _route(
    store: Store, path: str, query: Mapping[str, str], headers: Mapping[str, str], ctx: CallContext
) -> Answer:
    if path == "ready":
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, b"ready"
    if path == "api/echo":
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, b"echo"
    if path == "api/status/buildinfo":
        return _json(
            {
                "version": "profile-bridge-standalone",
                "revision": "",
                "branch": "",
                "buildUser": "",
                "buildDate": "",
                "goVersion": "",
            }
        )
    protobuf = wants_protobuf(headers_get(headers, "Accept") or "")
    if match := _V2_TRACE.match(path):
        return await _trace_by_id(store, match.group(1), ctx, v2=True, protobuf=protobuf)
    if match := _V1_TRACE.match(path):
        return await _trace_by_id(store, match.group(1), ctx, v2=False, protobuf=protobuf)
    if path == "api/search":
        return await _search(store, query, headers, ctx)
    if path in (METRICS_RANGE, METRICS_INSTANT):
        return await _metrics(store, path, query, ctx)
    try:
        if path in ("api/search/tags", "api/v2/search/tags"):
            return await tempo_tags.tags(store, ctx.tenant, query, v2=path.startswith("api/v2"))
        if match := _V2_VALUES.match(path):
            return await tempo_tags.tag_values(store, ctx.tenant, match.group(1), query, v2=True)
        if match := _V1_VALUES.match(path):
            return await tempo_tags.tag_values(store, ctx.tenant, match.group(1), query, v2=False)
    except tempo_tags.TagError as exc:
        return _text(str(exc), 400)
    return _text(
        f"standalone mode does not serve /tempo/{path}: the embedded store answers trace by ID, TraceQL search and "
        "metrics, tags, tag values, /ready and /api/echo; run Tempo (proxy mode) for the rest",
        501,
    )


async def _trace_by_id(store: Store, trace_id: str, ctx: CallContext, *, v2: bool, protobuf: bool) -> Answer:
    try:
        resource_spans = await store.trace_resource_spans(trace_id, ctx.tenant)
    except InvalidArgument:
        return _text(f"failed to parse trace id {trace_id!r}: not up to 32 hex characters", 400)
    if not resource_spans and not v2:
        return 404, {}, b""  # as Tempo's frontend answers a trace it has not: no body (combiner/trace_by_id.go)
    inspected = sum(rs.ByteSize() for rs in resource_spans)
    if protobuf:
        trace = tempo_pb2.Trace(resource_spans=[rs.SerializeToString() for rs in resource_spans])
        if v2:
            body = tempo_pb2.TraceByIDResponse(
                trace=trace, metrics=tempo_pb2.TraceByIDMetrics(inspectedBytes=inspected)
            ).SerializeToString()
        else:
            body = trace.SerializeToString()
        return 200, {"Content-Type": PROTOBUF}, body
    batches = [_resource_spans_json(rs) for rs in resource_spans]
    if v2:
        trace_doc: dict[str, Any] = {"resourceSpans": batches} if batches else {}
        metrics = {"inspectedBytes": str(inspected)} if inspected else {}
        return _json({"trace": trace_doc, "metrics": metrics})
    return _json({"batches": batches})


async def _search(store: Store, query: Mapping[str, str], headers: Mapping[str, str], ctx: CallContext) -> Answer:
    """``/api/search``: Tempo's parameters and answer; a partial answer says so (``status``, ``message``)."""
    req = params.search(query)
    outcome = await store.search_traces(req.query, req.start_s, req.end_s, req.limit, req.spss, ctx.tenant)
    doc = response_json(outcome.traces, outcome.inspected_spans)
    if outcome.partial is not None:  # as Tempo marks a partial trace by ID: the answer is not all there is
        doc["status"] = "PARTIAL"
        doc["message"] = outcome.partial
    if wants_protobuf(headers_get(headers, "Accept") or ""):
        return 200, {"Content-Type": PROTOBUF}, wire.search_protobuf(doc)
    return _json(doc)


async def _metrics(store: Store, path: str, query: Mapping[str, str], ctx: CallContext) -> Answer:
    """``/api/metrics/query_range`` and ``/api/metrics/query`` (instant): TraceQL metrics in Tempo's answer shape."""
    now = store.now_ns()
    instant = path == METRICS_INSTANT
    q = params.query_instant(query, now) if instant else params.query_range(query, now)
    outcome = await store.query_range(q, ctx.tenant)
    doc: dict[str, Any] = {}
    series = outcome.run.answer()
    if q.max_series and len(series) > q.max_series:
        series = series[: q.max_series]
        doc["status"] = "PARTIAL"
        doc["message"] = (
            f"Response exceeds maximum series limit of {q.max_series}, a partial response is returned. "
            "Warning: the accuracy of each individual value is not guaranteed."
        )
    if series:
        doc["series"] = series
    doc["metrics"] = {"completedJobs": 1, "totalJobs": 1}
    if outcome.inspected_spans:  # gogo jsonpb: a uint64 as a string, a zero left out
        doc["metrics"]["inspectedSpans"] = str(outcome.inspected_spans)
    if outcome.partial is not None:
        doc["status"] = "PARTIAL"
        doc["message"] = outcome.partial
    doc = {k: doc[k] for k in ("series", "metrics", "status", "message") if k in doc}
    # JSON even when ``Accept`` asks for protobuf, as Tempo's frontend answers over HTTP (its query range combiner is
    # built JSON-only: modules/frontend/combiner/metrics_query_range.go, initHTTPCombiner(c, api.HeaderAcceptJSON));
    # protobuf is how its gRPC stream carries the same messages
    return _json(wire.instant_json(doc) if instant else doc)
