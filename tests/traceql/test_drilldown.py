"""Grafana Traces Drilldown's requests, replayed against the standalone store holding the shop capture (plus a few
failing checkouts): each test builds the query as the app's source does (``grafana/traces-drilldown`` at
``2edd9c9``, the file named in the test) with its variables filled in as the app fills them
(``${primarySignal}`` from ``src/pages/Explore/primary-signals.ts``, ``${filters}`` rendered by
``src/utils/filters-renderer.ts`` — ``true`` when there are none), sends it as Grafana's Tempo data source does
(search: ``q``, ``limit``, ``spss``, ``start``, ``end``; metrics: ``q``, ``start``, ``end``, ``step``) and checks
the answer against the spans themselves."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.store import Store, tempo_api
from tests.store.test_store import CAPTURE_END_S, ctx, ingest_capture
from tests.store.test_store_tempo import original_spans

START_S, END_S = int(CAPTURE_END_S) - 120, int(CAPTURE_END_S)  # the capture: 1795945281 … 1795945307
STEP = "2s"  # src/utils/dates.ts getStepForTimeRange: floor(120 s / 50 data points) seconds
ROOTS = "nestedSetParent<0"  # src/pages/Explore/primary-signals.ts "Root spans"
FILTERS = f"{ROOTS} && true"  # src/utils/shared.ts VAR_FILTERS_EXPR with no ad-hoc filters
ERROR_TRACES = 3


def failing_checkouts() -> otlp_trace_svc.ExportTraceServiceRequest:
    """Three failing ``GET /checkout`` traces: the root and its ``renderCart`` child in error, the child with an
    ``exception`` event (the capture itself has no errors)."""
    req = otlp_trace_svc.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "shop-frontend"
    ss = rs.scope_spans.add()
    for k in range(ERROR_TRACES):
        start = (START_S + 100 + k) * 1_000_000_000
        trace_id = bytes([0xE0 + k]) * 16
        root = ss.spans.add(
            trace_id=trace_id, span_id=bytes([0xA0 + k]) * 8, name="GET /checkout", kind=2,
            start_time_unix_nano=start, end_time_unix_nano=start + 80_000_000,
        )  # fmt: skip
        root.status.code = otlp_trace.Status.STATUS_CODE_ERROR
        child = ss.spans.add(
            trace_id=trace_id, span_id=bytes([0xB0 + k]) * 8, parent_span_id=root.span_id, name="renderCart", kind=1,
            start_time_unix_nano=start + 1_000_000, end_time_unix_nano=start + 70_000_000,
        )  # fmt: skip
        child.status.code = otlp_trace.Status.STATUS_CODE_ERROR
        event = child.events.add(name="exception", time_unix_nano=start + 60_000_000)
        for key, value in (
            ("exception.type", "ValueError"),
            ("exception.message", f"cart {k} is empty"),
            ("exception.stacktrace", 'Traceback (most recent call last):\n  File "shop.py"'),
        ):
            event.attributes.add(key=key).value.string_value = value
    return req


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S + 3600)  # the end cutoff far behind
    await ingest_capture(s)
    await s.ingest_otlp_traces(failing_checkouts(), None)
    yield s
    await s.close()


async def get(store: Store, path: str, query: dict[str, str], headers: dict[str, str] | None = None) -> Any:
    handler = functools.partial(tempo_api.answer, store)
    status, _, body = await handler("GET", path, query, headers or {}, ctx())
    assert status == 200, body
    return body if headers else json.loads(body)


async def metrics(store: Store, q: str, step: str = STEP) -> list[dict[str, Any]]:
    doc = await get(store, "api/metrics/query_range", {"q": q, "start": str(START_S), "end": str(END_S), "step": step})
    series: list[dict[str, Any]] = doc.get("series", [])
    return series


def label(series: dict[str, Any], key: str) -> Any:
    return next(next(iter(kv["value"].values())) for kv in series["labels"] if kv["key"] == key)


def total(series: dict[str, Any], step_s: float) -> float:
    """A rate series back into its span count."""
    return round(sum(s.get("value", 0) for s in series["samples"]) * step_s, 6)


def capture_roots() -> Counter[str]:
    return Counter(s.name for _, s in original_spans() if not s.parent_span_id)


async def test_red_rate_of_root_spans(store: Store) -> None:
    """``generateMetricsQuery.ts`` (metric ``rate``, no group-by): one series, the roots per second."""
    (series,) = await metrics(store, f"{{{FILTERS}}} | rate() ")
    assert series["labels"] == [{"key": "__name__", "value": {"stringValue": "rate"}}]
    assert total(series, 2) == sum(capture_roots().values()) + ERROR_TRACES
    assert len(series["samples"]) == 61  # 120 s at 2 s, aligned one step back


async def test_red_rate_by_service_guards_nil(store: Store) -> None:
    """``generateMetricsQuery.ts`` with ``groupByKey``: ``&& key != nil`` and ``by(key)``; only the frontend has
    roots."""
    key = "resource.service.name"
    series = await metrics(store, f"{{{FILTERS} && {key} != nil}} | rate() by({key})")
    assert [label(s, key) for s in series] == ["shop-frontend"]
    assert total(series[0], 2) == sum(capture_roots().values()) + ERROR_TRACES


async def test_red_errors(store: Store) -> None:
    """``generateMetricsQuery.ts`` metric ``errors``: ``&& status=error``."""
    (series,) = await metrics(store, f"{{{FILTERS} && status=error}} | rate() ")
    assert total(series, 2) == ERROR_TRACES


async def test_red_duration_percentiles_and_sampling(store: Store) -> None:
    """``generateMetricsQuery.ts`` metric ``duration`` (``${durationPercentiles:csv}`` = 0.9), and the same with
    ``sample: true`` (`` with(sample=true)``): the store answers exactly either way."""
    q = f"{{{FILTERS}}} | quantile_over_time(duration, 0.9) "
    plain = await metrics(store, q)
    assert [label(s, "p") for s in plain] == [0.9]
    assert max(s.get("value", 0) for s in plain[0]["samples"]) > 0.05  # GET /slow-io sleeps 300 ms
    assert await metrics(store, q + " with(sample=true)") == plain


async def test_breakdown_tile_pins_the_value(store: Store) -> None:
    """``generateMetricsQueryForBreakdownTile`` (``generateMetricsQuery.ts``): ``key=value`` and ``by(key)``, no
    nil guard."""
    series = await metrics(store, f'{{{FILTERS} && name="GET /checkout"}} | rate() by(name)')
    assert [label(s, "name") for s in series] == ["GET /checkout"]
    assert total(series[0], 2) == capture_roots()["GET /checkout"] + ERROR_TRACES


async def test_duration_histogram(store: Store) -> None:
    """``src/components/Explore/queries/histogram.ts``: ``histogram_over_time(duration) with(sample=true)``, a
    series per log2 bucket (``__bucket``, seconds) whose counts add up to the roots."""
    series = await metrics(store, f"{{{FILTERS}}} | histogram_over_time(duration) with(sample=true)")
    buckets = {label(s, "__bucket"): sum(x.get("value", 0) for x in s["samples"]) for s in series}
    assert sum(buckets.values()) == sum(capture_roots().values()) + ERROR_TRACES
    durations = [s.end_time_unix_nano - s.start_time_unix_nano for _, s in original_spans() if not s.parent_span_id]
    assert max(buckets) >= max(durations) / 1e9  # the slowest root's bucket bounds it from above


async def test_comparison_against_errors(store: Store) -> None:
    """``comparisonQuery.ts`` inside ``AttributesComparisonScene.tsx`` ``buildQuery``: ``compare({selection}, 10,
    from ns, to ns)`` with ``step`` the whole range (``formatUnixRangeDurationSeconds``)."""
    compare = f"{{status = error}}, 10, {START_S * 1_000_000_000}, {END_S * 1_000_000_000}"
    series = await metrics(store, f"{{{FILTERS}}} | compare({compare})", step=f"{END_S - START_S}s")
    kinds = Counter(label(s, "__meta_type") for s in series)
    assert set(kinds) == {"baseline", "selection", "baseline_total", "selection_total"}
    names = {
        label(s, "name"): s
        for s in series
        if label(s, "__meta_type") == "selection" and s["labels"][1]["key"] == "name"
    }
    assert list(names) == ["GET /checkout"]
    assert sum(x.get("value", 0) for x in names["GET /checkout"]["samples"]) == ERROR_TRACES


async def test_issue_detector_probe(store: Store) -> None:
    """``TraceQLIssueDetector.tsx``: ``{} | rate()`` over the last minute with one data point — it only needs an
    answer that is not an error (Tempo without local blocks says ``localblocks processor not found``)."""
    now = int(CAPTURE_END_S + 3600)
    doc = await get(store, "api/metrics/query_range", {"q": "{} | rate()", "start": str(now - 60), "end": str(now)})
    assert "status" not in doc and doc["metrics"]["completedJobs"] == 1


async def search(store: Store, q: str, limit: int, spss: int) -> list[dict[str, Any]]:
    query = {"q": q, "limit": str(limit), "spss": str(spss), "start": str(START_S), "end": str(END_S)}
    traces: list[dict[str, Any]] = (await get(store, "api/search", query)).get("traces", [])
    return traces


async def test_exceptions_tab(store: Store) -> None:
    """``src/components/Explore/queries/exceptions.ts``: error spans with their exception events selected, newest
    first (``most_recent``). With "All spans" (``true``) the failing ``renderCart`` spans answer, their event's
    attributes shown; with "Root spans" the roots answer, which have no event."""
    select = (
        " && status = error} | select(resource.service.name, event.exception.message,"
        "event.exception.stacktrace,event.exception.type) with(most_recent=true)"
    )
    traces = await search(store, "{true && true" + select, 400, 10)
    assert [t["traceID"] for t in traces] == [(bytes([0xE0 + k]) * 16).hex() for k in reversed(range(ERROR_TRACES))]
    for k, t in zip(reversed(range(ERROR_TRACES)), traces, strict=True):
        (child,) = [s for s in t["spanSets"][0]["spans"] if s["spanID"] == (bytes([0xB0 + k]) * 8).hex()]
        attrs = {a["key"]: a["value"]["stringValue"] for a in child["attributes"]}
        assert attrs["exception.message"] == f"cart {k} is empty" and attrs["exception.type"] == "ValueError"
        assert attrs["service.name"] == "shop-frontend" and attrs["exception.stacktrace"].startswith("Traceback")
    roots = await search(store, "{" + FILTERS + select, 400, 10)
    assert len(roots) == ERROR_TRACES
    assert all("exception.message" not in str(t["spanSets"]) for t in roots)


async def test_structure_tab(store: Store) -> None:
    """``StructureScene.tsx`` ``buildQuery`` (metric ``errors``): error roots ``&>>`` error descendants, or the
    roots alone, with the nested-set numbers selected (``tableType: raw``, 200 traces, 20 spans each)."""
    roots = f"{FILTERS} && status = error"
    q = (
        f"({{{roots}}} &>> {{ status = error }}) || ({{{roots}}}) | "
        "select(status, resource.service.name, name, nestedSetParent, nestedSetLeft, nestedSetRight)"
    )
    traces = await search(store, q, 200, 20)
    assert len(traces) == ERROR_TRACES
    for t in traces:
        spans = t["spanSets"][0]["spans"]
        assert sorted(s["name"] for s in spans) == ["GET /checkout", "renderCart"]
        attrs = {s["name"]: {a["key"]: a["value"] for a in s["attributes"]} for s in spans}
        assert attrs["GET /checkout"]["nestedSetParent"] == {"intValue": "-1"}
        assert attrs["renderCart"]["nestedSetParent"] == attrs["GET /checkout"]["nestedSetLeft"]
        assert attrs["renderCart"]["status"] == {"stringValue": "error"}


async def test_span_list_with_duration_selection(store: Store) -> None:
    """``TracesByServiceScene.tsx`` ``buildQuery`` (metric ``duration`` with a selection: ``typeQuery`` is glued on
    as ``true&& duration >= …``) — the slow-io roots, up to 10 spans each."""
    q = f"{{{FILTERS}&& duration >= 250ms && duration <= 2s}} | select(name, resource.service.name)"
    traces = await search(store, q, 200, 10)
    assert len(traces) == capture_roots()["GET /slow-io"]
    assert {s["name"] for t in traces for s in t["spanSets"][0]["spans"]} == {"GET /slow-io"}


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        ("kind=server", lambda rs, s: s.kind == 2),
        ("kind=consumer", lambda rs, s: s.kind == 5),
        ('span.db.system.name!=""', lambda rs, s: False),
        ("true", lambda rs, s: True),
    ],
)
async def test_primary_signals(store: Store, signal: str, expected: Any) -> None:
    """``primary-signals.ts``: each signal as ``${primarySignal}`` in a RED rate."""
    series = await metrics(store, f"{{{signal} && true}} | rate() ")
    want = sum(1 for rs, s in original_spans() if expected(rs, s))
    want += 2 * ERROR_TRACES if signal == "true" else ERROR_TRACES if signal == "kind=server" else 0
    assert (total(series[0], 2) if series else 0) == want


async def test_span_list_over_protobuf(store: Store) -> None:
    """A search asked for ``tempopb.SearchResponse`` (``Accept: application/protobuf``) carries what its JSON does."""
    query = {"q": "{" + FILTERS + ' && name="GET /checkout"}', "limit": "50", "spss": "10"}
    query |= {"start": str(START_S), "end": str(END_S)}
    doc = await get(store, "api/search", query)
    raw = await get(store, "api/search", query, {"Accept": "application/protobuf"})
    proto = tempo_pb2.SearchResponse.FromString(raw)
    assert [t.traceID for t in proto.traces] == [t["traceID"] for t in doc["traces"]]
    assert [t.durationMs for t in proto.traces] == [t.get("durationMs", 0) for t in doc["traces"]]
