from __future__ import annotations

import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bridge import spans as sp
from bridge.wire import tempo as tempo_wire
from tests.paths import SHOP_CAPTURE, VULTURE_TRACE


def _shop_spans() -> list[sp.Span]:
    out: list[sp.Span] = []
    for path in sorted(SHOP_CAPTURE.glob("*_v1_traces.bin")):
        req = ExportTraceServiceRequest()
        req.ParseFromString(path.read_bytes())
        out.extend(sp.spans_from_otlp(req.resource_spans))
    return out


def _roles() -> dict[str, dict[str, str]]:
    rows = [json.loads(line) for line in (SHOP_CAPTURE / "spans.jsonl").read_text().splitlines() if line]
    return {r["span_id"]: r for r in rows}


def test_shop_capture_counts_match_the_fixture_readme() -> None:
    spans = _shop_spans()
    assert len(spans) == 434
    assert len({s.trace_id for s in spans}) == 186


def test_local_roots_follow_the_sdk_rule_on_real_data() -> None:
    spans = _shop_spans()
    roles = _roles()
    traces: dict[str, list[sp.Span]] = {}
    for s in spans:
        traces.setdefault(s.trace_id, []).append(s)
    checked = set()
    for trace_spans in traces.values():
        trace = sp.Trace.from_spans(trace_spans)
        for s in trace_spans:
            role = roles[s.span_id]["kind"]
            root = trace.local_root(s.span_id)
            assert root is not None
            if role in ("frontend-root", "backend-root", "frontend-short", "frontend-io"):
                assert root.span_id == s.span_id, role
                assert trace.is_local_root(s)
            else:
                assert root.span_id != s.span_id, role
                assert root.service == s.service
                assert not trace.is_local_root(s)
            if role == "frontend-client":
                # what the backend did on behalf of the client span
                below = trace.descendant_local_roots(s.span_id)
                assert [roles[b.span_id]["kind"] for b in below] == ["backend-root"]
            checked.add(role)
    assert checked == {
        "frontend-root",
        "frontend-child",
        "frontend-client",
        "frontend-short",
        "frontend-io",
        "backend-root",
        "backend-child",
    }


def test_sdk_tags_only_local_roots_with_pyroscope_profile_id() -> None:
    roles = _roles()
    for s in _shop_spans():
        role = roles[s.span_id]["kind"]
        if s.profile_id:
            assert s.profile_id == s.span_id
            assert role in ("frontend-root", "backend-root", "frontend-short", "frontend-io")
        if role in ("frontend-child", "frontend-client", "backend-child"):
            assert s.profile_id == ""


def test_tempo_json_with_base64_ids_string_ints_and_omitted_defaults() -> None:
    doc = json.loads(VULTURE_TRACE.read_text())
    spans = sp.spans_from_json(tempo_wire.json_resource_spans(doc))
    assert spans
    for s in spans:
        assert len(s.trace_id) == 32 and len(s.span_id) == 16
        assert s.end_ns >= s.start_ns > 0
    trace = sp.Trace.from_spans(spans)
    assert any(not s.parent_span_id for s in spans)
    assert sum(1 for _ in trace.walk()) == len(trace)


def test_tempo_docs_example() -> None:
    doc = {
        "trace": {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
                    "scopeSpans": [
                        {
                            "scope": {"name": "my.library", "version": "1.0.0"},
                            "spans": [
                                {
                                    "traceId": "W47/95gDgQPSabYzgT/HAA==",
                                    "spanId": "7uGbfsPBsQA=",
                                    "name": "I am a span!",
                                    "kind": "SPAN_KIND_SERVER",
                                    "startTimeUnixNano": "1689969302000000000",
                                    "endTimeUnixNano": "1689970000000000000",
                                    "attributes": [{"key": "my.span.attr", "value": {"stringValue": "some value"}}],
                                    "status": {},
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    }
    (span,) = sp.spans_from_json(tempo_wire.json_resource_spans(doc))
    assert span.trace_id == "5b8efff798038103d269b633813fc700"
    assert span.span_id == "eee19b7ec3c1b100"
    assert span.kind == sp.SPAN_KIND_SERVER
    assert span.service == "my.service"
    assert span.duration_ns == 698_000_000_000


def test_v1_batches_and_otlp_json_hex_ids() -> None:
    batch = {
        "resource": {"attributes": []},
        "scopeSpans": [
            {"spans": [{"traceId": "5B8EFFF798038103D269B633813FC700", "spanId": "EEE19B7EC3C1B100", "name": "x"}]}
        ],
    }
    (span,) = sp.spans_from_json(tempo_wire.json_resource_spans({"batches": [batch]}), ids="hex")
    assert span.span_id == "eee19b7ec3c1b100"
    assert tempo_wire.json_resource_spans({"trace": {}}) == []
    bad = {"scopeSpans": [{"spans": [{"traceId": "W47/95gDgQPSabYzgT/HAA==", "spanId": "not base64!"}]}]}
    with pytest.raises(ValueError, match="not base64"):
        sp.spans_from_json([bad], ids="base64")


def test_search_response_from_tempo_docs() -> None:
    doc = {
        "traces": [
            {
                "traceID": "5b8efff798038103d269b633813fc7",
                "rootServiceName": "my.service",
                "rootTraceName": "I am a span!",
                "startTimeUnixNano": "1694718625557000000",
                "durationMs": 10000,
                "spanSets": [
                    {
                        "spans": [
                            {
                                "spanID": "eee19b7ec3c1b100",
                                "startTimeUnixNano": "1694718625557000000",
                                "durationNanos": "10000000000",
                                "attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}],
                            }
                        ],
                        "matched": 1,
                    }
                ],
            }
        ],
        "metrics": {"inspectedBytes": "292781"},
    }
    (hit,) = tempo_wire.parse_search_response(doc)
    assert hit.trace_id == "005b8efff798038103d269b633813fc7"
    assert hit.service == "my.service"
    assert hit.duration_ns == 10_000_000_000
    assert tempo_wire.parse_search_response({"metrics": {}}) == []


def test_remote_parent_flag_decides_when_present() -> None:
    parent = sp.Span("t" * 32, "a" * 16, "", "p", sp.SPAN_KIND_INTERNAL, "svc", 0, 10)
    child = sp.Span("t" * 32, "b" * 16, "a" * 16, "c", sp.SPAN_KIND_SERVER, "svc", 1, 5, flags=sp.FLAG_HAS_IS_REMOTE)
    assert not sp.starts_local_root(child, parent)
    remote = sp.Span(
        "t" * 32,
        "b" * 16,
        "a" * 16,
        "c",
        sp.SPAN_KIND_INTERNAL,
        "svc",
        1,
        5,
        flags=sp.FLAG_HAS_IS_REMOTE | sp.FLAG_IS_REMOTE,
    )
    assert sp.starts_local_root(remote, parent)


def test_local_roots_in_one_pass_agree_with_the_walk_up() -> None:
    spans = _shop_spans()
    traces: dict[str, list[sp.Span]] = {}
    for s in spans:
        traces.setdefault(s.trace_id, []).append(s)
    for trace_spans in traces.values():
        trace = sp.Trace.from_spans(trace_spans)
        fast = trace.local_roots()
        for s in trace_spans:
            slow = trace.local_root(s.span_id)
            assert slow is not None and fast[s.span_id] == slow.span_id


def test_local_roots_survive_a_parent_cycle() -> None:
    a = sp.Span("t" * 32, "a" * 16, "b" * 16, "a", sp.SPAN_KIND_INTERNAL, "svc", 0, 1)
    b = sp.Span("t" * 32, "b" * 16, "a" * 16, "b", sp.SPAN_KIND_INTERNAL, "svc", 0, 1)
    trace = sp.Trace.from_spans([a, b])
    assert set(trace.local_roots()) == {"a" * 16, "b" * 16}
