"""The ``tempo_local`` handler on the shop capture: trace by ID in Tempo's four shapes (every field of the original
OTLP spans kept), TraceQL search answering Tempo's JSON, tags, and 501 for the rest (the TraceQL language itself:
``tests/traceql/``)."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.selector import parse_selector
from bridge.spans import spans_from_json, spans_from_otlp
from bridge.store import Store, tempo_api
from bridge.traceql.ast import BinaryOp, I, SelectOp, SpansetFilter
from bridge.traceql.parser import parse
from bridge.wire.tempo import json_resource_spans, parse_search_response
from tests.store.test_store import CAPTURE_END_S, capture_requests, ctx, ingest_capture

PROTO = {"Accept": "application/protobuf"}


def original_spans() -> list[tuple[otlp_trace.ResourceSpans, otlp_trace.Span]]:
    out = []
    for path, body in capture_requests():
        if path != "/v1/traces":
            continue
        for rs in otlp_trace_svc.ExportTraceServiceRequest.FromString(body).resource_spans:
            for ss in rs.scope_spans:
                out.extend((rs, span) for span in ss.spans)
    return out


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    await ingest_capture(s)
    yield s
    await s.close()


async def call(
    store: Store,
    subpath: str,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
) -> tuple[int, dict[str, str], bytes]:
    handler = functools.partial(tempo_api.answer, store)
    result: tuple[int, dict[str, str], bytes] = await handler(method, subpath, query or {}, headers or {}, ctx())
    return result


def a_trace() -> tuple[str, list[bytes]]:
    spans = original_spans()
    trace_id = spans[0][1].trace_id
    return trace_id.hex(), sorted(s.SerializeToString() for _, s in spans if s.trace_id == trace_id)


async def test_v2_protobuf_keeps_every_field(store: Store) -> None:
    trace_id, expected = a_trace()
    status, headers, body = await call(store, f"api/v2/traces/{trace_id}", headers=PROTO)
    assert status == 200 and headers["Content-Type"] == "application/protobuf"
    resp = tempo_pb2.TraceByIDResponse.FromString(body)
    got = []
    for raw in resp.trace.resource_spans:
        rs = otlp_trace.ResourceSpans.FromString(raw)
        assert any(kv.key == "host.name" for kv in rs.resource.attributes)
        for ss in rs.scope_spans:
            assert ss.scope.name
            got.extend(s.SerializeToString() for s in ss.spans)
    assert sorted(got) == expected


async def test_v1_protobuf_and_both_json_shapes(store: Store) -> None:
    trace_id, expected = a_trace()
    status, _, body = await call(store, f"api/traces/{trace_id}", headers=PROTO)
    assert status == 200
    v1 = tempo_pb2.Trace.FromString(body)
    proto_spans = spans_from_otlp(otlp_trace.ResourceSpans.FromString(r) for r in v1.resource_spans)
    assert len(proto_spans) == len(expected)
    for subpath, key in ((f"api/v2/traces/{trace_id}", "trace"), (f"api/traces/{trace_id}", "batches")):
        status, headers, body = await call(store, subpath, headers={"Accept": "*/*"})
        assert status == 200 and headers["Content-Type"] == "application/json"
        doc = json.loads(body)
        assert key in doc
        raw_span = (doc["trace"]["resourceSpans"] if key == "trace" else doc["batches"])[0]["scopeSpans"][0]["spans"][0]
        assert raw_span["startTimeUnixNano"].isdigit()  # int64 as strings
        assert raw_span["kind"].startswith("SPAN_KIND_")
        assert "=" in raw_span["traceId"] or len(raw_span["traceId"]) == 24  # standard base64, not hex
        json_spans = spans_from_json(json_resource_spans(doc), ids="base64")
        assert sorted(json_spans, key=lambda s: s.span_id) == sorted(proto_spans, key=lambda s: s.span_id)


async def test_unknown_trace_v1_404_v2_empty(store: Store) -> None:
    missing = "0" * 31 + "1"
    status, _, _ = await call(store, f"api/traces/{missing}")
    assert status == 404
    status, _, body = await call(store, f"api/v2/traces/{missing}")
    assert status == 200 and json_resource_spans(json.loads(body)) == []
    status, _, body = await call(store, f"api/v2/traces/{missing}", headers=PROTO)
    assert status == 200 and not tempo_pb2.TraceByIDResponse.FromString(body).trace.resource_spans
    status, _, body = await call(store, "api/v2/traces/not-hex")
    assert status == 400 and b"trace id" in body


async def test_search_span_by_id_as_the_resolver_asks(store: Store) -> None:
    _, span = next((rs, s) for rs, s in original_spans() if s.name == "renderCart")
    q = f'{{ span:id = "{span.span_id.hex()}" }} | select(span:name, resource.service.name)'
    window = {"start": str(int(CAPTURE_END_S) - 3600), "end": str(int(CAPTURE_END_S) + 60)}
    status, _, body = await call(store, "api/search", {"q": q, "limit": "20", **window})
    assert status == 200
    doc = json.loads(body)
    trace = doc["traces"][0]
    assert trace["traceID"] == span.trace_id.hex().lstrip("0")
    assert trace["rootServiceName"] == "shop-frontend" and trace["rootTraceName"] == "GET /checkout"
    assert isinstance(trace["durationMs"], int) and trace["startTimeUnixNano"].isdigit()
    hits = parse_search_response(doc)
    assert len(hits) == 1
    hit = hits[0]
    assert (hit.span_id, hit.name, hit.service) == (span.span_id.hex(), "renderCart", "shop-frontend")
    assert hit.start_ns == span.start_time_unix_nano
    assert hit.duration_ns == span.end_time_unix_nano - span.start_time_unix_nano
    attrs = trace["spanSets"][0]["spans"][0]["attributes"]
    assert attrs == [{"key": "service.name", "value": {"stringValue": "shop-frontend"}}]


@pytest.mark.parametrize(
    ("query", "predicate"),
    [
        ('{ resource.service.name = "shop-backend" }', lambda rs, s: _svc(rs) == "shop-backend"),
        ('{ name = "GET /health" }', lambda rs, s: s.name == "GET /health"),
        ('{ span:name =~ "GET /(price|slow-io)" }', lambda rs, s: s.name in ("GET /price", "GET /slow-io")),
        ("{ duration > 100ms }", lambda rs, s: s.end_time_unix_nano - s.start_time_unix_nano > 100_000_000),
        (
            '{ .service.name = "shop-frontend" && kind = server && duration < 5ms }',
            lambda rs, s: (
                _svc(rs) == "shop-frontend"
                and s.kind == 2
                and s.end_time_unix_nano - s.start_time_unix_nano < 5_000_000
            ),
        ),
        (
            '{ span.pyroscope.profile.id =~ "[0-9a-f]{16}" }',
            lambda rs, s: any(kv.key == "pyroscope.profile.id" for kv in s.attributes),
        ),
        (
            '{ resource.host.name = "capture-host" && span.pyroscope.profile.id != "x" }',
            lambda rs, s: any(kv.key == "pyroscope.profile.id" for kv in s.attributes),
        ),
        ("{}", lambda rs, s: True),
    ],
)
async def test_search_subset_matches_a_direct_filter(store: Store, query: str, predicate: Any) -> None:
    expected = {s.span_id.hex() for rs, s in original_spans() if predicate(rs, s)}
    hits = await store.search(query, 0, 0, 10_000, ctx(), spss=10_000)
    assert {h.span_id for h in hits} == expected
    assert expected


def _svc(rs: otlp_trace.ResourceSpans) -> str:
    return next(kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name")


async def test_search_limits_and_time_window(store: Store) -> None:
    status, _, body = await call(store, "api/search", {"q": "{}", "limit": "3", "spss": "2"})
    doc = json.loads(body)
    assert len(doc["traces"]) == 3
    assert all(len(t["spanSets"][0]["spans"]) <= 2 for t in doc["traces"])
    assert all(t["spanSets"][0]["matched"] >= len(t["spanSets"][0]["spans"]) for t in doc["traces"])
    status, _, body = await call(store, "api/search", {"q": "{}", "start": "100", "end": "200"})
    assert status == 200 and json.loads(body)["traces"] == []


@pytest.mark.parametrize("query", ['{ a = "b" || c = "d" }', "{ span.x = }", "not traceql", "{ .a < 3"])
async def test_text_that_is_not_traceql_is_a_400_saying_where(store: Store, query: str) -> None:
    status, _, body = await call(store, "api/search", {"q": query})
    assert status == 400
    assert body.startswith(b"invalid TraceQL query: parse error")  # as Tempo's search frames it


@pytest.mark.parametrize(
    ("query", "found"),
    [('{ name = "GET /checkout" } | count() > 2', False), ('{ name = "GET /checkout" } | count() = 1', True)],
)
async def test_aggregates_are_answered_per_trace(store: Store, query: str, found: bool) -> None:
    status, _, body = await call(store, "api/search", {"q": query})
    assert status == 200
    assert bool(json.loads(body)["traces"]) is found


async def test_tags_and_values(store: Store) -> None:
    _, _, body = await call(store, "api/search/tags")
    names = json.loads(body)["tagNames"]
    assert {"service.name", "host.name", "service.namespace"} <= set(names)
    _, _, body = await call(store, "api/v2/search/tags")
    scopes = {s["name"]: s["tags"] for s in json.loads(body)["scopes"]}
    assert "service.name" in scopes["resource"] and "span:id" in scopes["intrinsic"]
    _, _, body = await call(store, "api/v2/search/tag/resource.service.name/values")
    assert json.loads(body)["tagValues"] == [
        {"type": "string", "value": "shop-backend"},
        {"type": "string", "value": "shop-frontend"},
    ]
    _, _, body = await call(store, "api/v2/search/tag/name/values")
    assert {"GET /checkout", "renderCart", "countPrimes"} <= {v["value"] for v in json.loads(body)["tagValues"]}
    _, _, body = await call(store, "api/search/tag/service.name/values")
    assert json.loads(body)["tagValues"] == ["shop-backend", "shop-frontend"]


async def test_ready_echo_and_the_rest(store: Store) -> None:
    assert (await call(store, "ready"))[::2] == (200, b"ready")
    assert (await call(store, "api/echo"))[::2] == (200, b"echo")
    status, _, body = await call(store, "api/overrides")
    assert status == 501 and b"standalone mode does not serve" in body
    status, _, body = await call(store, "api/v2/traces/abc", method="POST")
    assert status == 501


def test_traceql_parse() -> None:
    root = parse('{ span:id = "00f067aa0ba902b7" && duration >= 1.5s } | select(span:name, resource.service.name)')
    pipeline = root.single_pipeline()
    assert pipeline is not None
    first, select = pipeline.elements
    assert isinstance(first, SpansetFilter) and isinstance(first.expr, BinaryOp)
    assert str(first) == "{ (span:id = `00f067aa0ba902b7`) && (duration >= 1.5s) }"
    assert isinstance(select, SelectOp) and [str(a) for a in select.attrs] == ["name", "resource.service.name"]
    assert select.attrs[0].intrinsic is I.NAME


def test_selector_parse_and_match() -> None:
    matchers = parse_selector('{service_name="a\\"b", env=~"prod|stage", zone!="", k!~`x.*`}')
    assert [(m.name, m.op, m.value) for m in matchers] == [
        ("service_name", "=", 'a"b'),
        ("env", "=~", "prod|stage"),
        ("zone", "!=", ""),
        ("k", "!~", "x.*"),
    ]
    labels = {"service_name": 'a"b', "env": "stage", "zone": "z1", "k": "y"}
    assert all(m.matches(labels) for m in matchers)
    assert not parse_selector('{env=~"prod|stage"}')[0].matches({"env": "production"})
    with pytest.raises(Exception, match="cannot parse"):
        parse_selector("{service_name=unquoted}")


def test_json_of_trace_is_what_protobuf_json_format_writes() -> None:
    rs = original_spans()[0][0]
    doc = json_format.MessageToDict(rs)
    assert "resource" in doc and "scopeSpans" in doc


def test_traceql_string_escapes_keep_unicode() -> None:
    pipeline = parse(r'{ name = "café \"x\" \\ y" }').single_pipeline()
    assert pipeline is not None
    first = pipeline.elements[0]
    assert isinstance(first, SpansetFilter) and isinstance(first.expr, BinaryOp)
    assert first.expr.rhs.value == 'café "x" \\ y'
