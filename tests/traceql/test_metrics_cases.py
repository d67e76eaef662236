"""Tempo's metrics conformance, ported as data: ``tests/fixtures/tempo/traceql/metrics_cases.json`` holds the
interval tables of ``pkg/traceql/engine_metrics_test.go`` and every case those tests (and
``engine_metrics_average_test.go``, ``engine_metrics_compare_test.go``) run through ``runTraceQLMetric``: the request,
the spans, and the series Tempo answered. Here the same spans go through ``bridge.traceql.metrics``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bridge.traceql import compare, metrics, model, timeseries
from bridge.traceql.aggregate import log2_bucket
from bridge.traceql.values import Static, T

DATA = json.loads((Path(__file__).resolve().parents[1] / "fixtures/tempo/traceql/metrics_cases.json").read_text())
TABLES = DATA["tables"]
TYPES = {"string": T.STRING, "int": T.INT, "float": T.FLOAT, "bool": T.BOOLEAN, "duration": T.DURATION, "nil": T.NIL}
INTRINSICS = {"name", "status", "statusMessage", "kind", "span:childCount", "rootName", "rootServiceName"}
INTRINSICS |= {"instrumentation:name", "instrumentation:version"}
DEDICATED = {f"span.{k}" for k in compare.DEDICATED_SPAN} | {f"resource.{k}" for k in compare.DEDICATED_RESOURCE}


@pytest.mark.parametrize(("window", "step"), TABLES["default_step"])
def test_default_step(window: int, step: int) -> None:
    assert timeseries.default_step(0, window) == step


def intervals(start: int, end: int, step: int, instant: bool) -> timeseries.Intervals:
    return timeseries.Intervals.of(timeseries.QueryRange("", start, end, step, instant))


@pytest.mark.parametrize(("start", "end", "step", "instant", "count"), TABLES["interval_count"])
def test_interval_count(start: int, end: int, step: int, instant: bool, count: int) -> None:
    assert intervals(start, end, step, instant).count == count


@pytest.mark.parametrize(("i", "start", "end", "step", "instant", "ts"), TABLES["timestamp_of"])
def test_timestamp_of(i: int, start: int, end: int, step: int, instant: bool, ts: int) -> None:
    assert intervals(start, end, step, instant).timestamp(i) == ts


@pytest.mark.parametrize(("ts", "start", "end", "step", "instant", "i"), TABLES["interval_of"])
def test_interval_of(ts: int, start: int, end: int, step: int, instant: bool, i: int) -> None:
    assert intervals(start, end, step, instant).index(ts) == i


@pytest.mark.parametrize(("value", "bucket"), TABLES["log2_bucketize"])
def test_log2_bucketize(value: int, bucket: float) -> None:
    assert log2_bucket(value) == bucket


def spans(name: str) -> list[model.Span]:
    """Tempo's mock spans: a start, a duration, attributes (``span.x`` or unscoped ``.x``), maybe an id."""
    trace = model.TraceInfo(b"\x01" * 16)
    out = []
    for spanset in DATA["inputs"][name]:
        for row in spanset:
            start, duration, attrs = row[:3]
            values = {key.split(".", 1)[1]: static(*typed) for key, typed in attrs.items()}
            span_id = bytes.fromhex(row[3]) if len(row) > 3 else b""
            out.append(
                model.Span(trace, span_id, b"", start, duration, "", 0, 0, "", values, model.Scope({}), model.Scope({}))
            )
    return out


def static(kind: str, value: Any) -> Static:
    return Static(TYPES[kind], float(value) if kind == "float" else value)


def label_key(labels: list[tuple[str, Static]]) -> str:
    """Labels as the wire carries them (``AsAnyValue``): Tempo's nil label reads back as the string ``nil``."""
    return json.dumps(timeseries.labels_json(labels))


def on_the_wire(values: list[float]) -> bool:
    """``SeriesSet.ToProto`` leaves out a series whose every value is NaN: Tempo never answers one."""
    return not all(math.isnan(v) for v in values)


def run(c: dict[str, Any]) -> dict[str, list[float]]:
    plan = metrics.compile_metrics(c["query"])
    r = metrics.Run(plan, timeseries.QueryRange(c["query"], c["start"], c["end"], c["step"], c.get("instant", False)))
    for s in spans(c["spans"]):
        for sub in plan.subqueries:
            r.observe(sub, s)
    out = {}
    for s in r.series().values():
        if c["test"] == "TestCompare" and (s.labels[-1][0] in INTRINSICS or s.labels[-1][0] in DEDICATED):
            continue  # Tempo's mock spans have no intrinsics nor dedicated columns; a stored span has them all
        if on_the_wire(s.values):
            out[label_key(s.labels)] = s.values
    return out


def same(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(
        (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("c", DATA["cases"], ids=[f"{c['test']}:{c['query']}" for c in DATA["cases"]])
def test_tempo_metrics_case(c: dict[str, Any]) -> None:
    got = run(c)
    want = {
        label_key([(k, static(kind, v)) for k, kind, v in s["labels"]]): values
        for s in c["series"]
        if on_the_wire(values := [float(v) for v in s["values"]])
    }
    assert sorted(got) == sorted(want)
    wrong = {k: (got[k], v) for k, v in want.items() if not same(got[k], v)}
    assert wrong == {}


def test_the_port_is_whole() -> None:
    assert len(DATA["cases"]) == 120
    assert len({c["test"] for c in DATA["cases"]}) == 29
