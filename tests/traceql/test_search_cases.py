"""Tempo's search conformance, ported as data: ``tests/fixtures/tempo/traceql/search_cases.json`` holds the fully
populated trace of ``tempodb/tempodb_search_test.go`` (``makeExpectedTrace``: four services, a span with an event
and a link, a broken span) and the queries its runners assert must and must not find it, with the spansets some of
them must answer exactly. Here each case runs on the pure engine (``bridge.traceql``); ``test_conformance.py`` runs
them all again through the standalone store's ``/api/search`` (ingest, SQL pushdown, evaluation, Tempo's JSON)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2

from bridge.store.decode_spans import otlp_json_ids_to_base64
from bridge.traceql import model, search

CASES = json.loads((Path(__file__).resolve().parents[1] / "fixtures/tempo/traceql/search_cases.json").read_text())
WANT = CASES["want"]
MATCH = ["suite_match", "runner_match", "advanced_match", "nil_match", "duration_match"]
MATCH += ["event_link_instrumentation_match"]
NO_MATCH = ["suite_nomatch", "runner_nomatch", "advanced_nomatch", "structural_nomatch", "nil_nomatch"]
NO_MATCH += ["duration_nomatch", "existence_nomatch"]
ROOT_SPAN = "0000000000040506"


def case(item: str | dict[str, Any]) -> tuple[str, int, int]:
    return (item, 0, 0) if isinstance(item, str) else (item["q"], item.get("start", 0), item.get("end", 0))


def engine_search(q: str, start: int = 0, end: int = 0) -> list[dict[str, Any]]:
    """The pure engine on the trace: Tempo's ``ExecuteSearch`` with a fetcher that holds this one trace."""
    td = trace_pb2.TracesData()
    json_format.ParseDict(otlp_json_ids_to_base64(copy.deepcopy(CASES["trace"])), td)
    info = model.TraceInfo(bytes.fromhex(WANT["traceID"].rjust(32, "0")))
    spans: list[model.Span] = []
    for rs in td.resource_spans:
        resource = model.Scope(model.attrs_of(rs.resource.attributes))
        service = next((kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"), "")
        for ss in rs.scope_spans:
            scope = model.Scope(model.attrs_of(ss.scope.attributes), ss.scope.name, ss.scope.version)
            spans += [model.span_from_otlp(s, info, resource, scope, service, len(spans)) for s in ss.spans]
    model.finish_trace(spans)
    plan = search.compile_search(q)
    combiner = search.Combiner(20, plan.most_recent)
    if search.in_window(info, start, end) and (found := search.run(plan, info, spans, 3)):
        combiner.add(plan, info, spans, found)
    return combiner.answer()


def metadata(trace: dict[str, Any]) -> dict[str, Any]:
    return {k: trace.get(k) for k in WANT}


def all_cases(keys: list[str]) -> list[tuple[str, int, int]]:
    return [case(item) for key in keys for item in CASES[key]]


def test_the_port_is_whole() -> None:
    counts = {key: len(CASES[key]) for key in [*MATCH, *NO_MATCH, "spansets", "existence", "existence_root"]}
    assert sum(counts.values()) == 328, counts


def test_engine_finds_the_trace_where_tempo_does() -> None:
    missed = [q for q, start, end in all_cases(MATCH) if [metadata(t) for t in engine_search(q, start, end)] != [WANT]]
    assert missed == []


def test_engine_does_not_find_it_where_tempo_does_not() -> None:
    found = [q for q, start, end in all_cases(NO_MATCH) if engine_search(q, start, end)]
    assert found == []


def test_engine_answers_tempos_spansets() -> None:
    wrong = []
    for item in CASES["spansets"]:
        got = engine_search(item["q"])
        if not got or got[0]["spanSets"] != item["spanSets"]:
            wrong.append((item["q"], got[0]["spanSets"] if got else None))
    assert wrong == []


def test_existence_answers_carry_what_was_asked() -> None:
    """``traceQLExistence``: every span of ``{ x != nil }`` shows x."""
    for item in CASES["existence"]:
        (trace,) = engine_search(item["q"])
        for span in trace["spanSets"][0]["spans"]:
            if item["key"] not in ("name", "duration"):  # Go's NotNil on a string or a number always holds
                assert item["key"] in {a["key"] for a in span["attributes"]}, (item, span)


def test_nil_comparisons_agree_between_fetch_and_engine() -> None:
    """``traceQLExistence``'s last table: ``{ c }`` (answered by the fetch layer in Tempo, pushed to SQL here) and
    ``{ .child } < { c }`` (the engine) contain the root span alike."""

    def has_root(answer: list[dict[str, Any]]) -> bool:
        return any(s["spanID"] == ROOT_SPAN for t in answer for ss in t["spanSets"] for s in ss["spans"])

    for item in CASES["existence_root"]:
        c = item["condition"]
        assert has_root(engine_search(f"{{ .child }} < {{ {c} }}")) is item["containsRootSpan"], c
        assert has_root(engine_search(f"{{ {c} }}")) is item["containsRootSpan"], c


# ------------------------------------------------------------------------------------------------ through the store


BROKEN_ID, BROKEN_PARENT = "00000000000000ff", "00000000000000fe"


def store_trace() -> otlp_trace_svc.ExportTraceServiceRequest:
    """The same trace as OTLP carries it: span ids of 8 bytes (Tempo's test writes 3; its answers pad them to 16 hex
    digits, so the answers read the same). OTLP forbids an all-zero span id, and the store refuses one, so the broken
    span (id 000000, parent 000000: a parent that is not in the trace) gets ``BROKEN_ID`` and a parent that is not in
    the trace either; answers name it back as Tempo does."""
    doc = copy.deepcopy(CASES["trace"])
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("spanId", "parentSpanId"):
                    if key in span:
                        span[key] = span[key].rjust(16, "0")
                if span["spanId"] == "0" * 16:
                    span["spanId"], span["parentSpanId"] = BROKEN_ID, BROKEN_PARENT
                for link in span.get("links", []):
                    link["spanId"] = link["spanId"].rjust(16, "0")
    req = otlp_trace_svc.ExportTraceServiceRequest()
    json_format.ParseDict(otlp_json_ids_to_base64(doc), req)
    return req
