"""Standalone Tempo's TraceQL endpoints over HTTP semantics (every case of Tempo's corpus: ``test_conformance.py``):
a query's error framed per endpoint as Tempo frames it (never 500 or 501), a metrics query searched as Tempo searches
it, ``/api/metrics/query_range`` and ``/api/metrics/query`` in Tempo's JSON (even to a protobuf ``Accept``, as Tempo's
frontend answers), their parameters read as Tempo reads them, and a real server routing them through the ``/tempo``
mount."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bridge._proto import tempo_pb2
from bridge.app import create_app
from bridge.config import Settings
from bridge.store import Store, tempo_api
from tests.store.test_store import ctx
from tests.traceql.test_search_cases import store_trace

NOW_S = 1_000_000.0  # the store's clock: far after the trace (at 1,000 s), so the end cutoff never bites
WINDOW = {"start": "900", "end": "1100", "step": "10s"}
PROTO = {"Accept": "application/protobuf"}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: NOW_S)
    await s.ingest_otlp_traces(store_trace(), None)
    yield s
    await s.close()


async def call(
    store: Store, path: str, query: dict[str, str], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    handler = functools.partial(tempo_api.answer, store)
    result: tuple[int, dict[str, str], bytes] = await handler("GET", path, query, headers or {}, ctx())
    return result


async def test_each_endpoint_frames_a_query_error_as_tempo_does(store: Store) -> None:
    """Search: ``invalid TraceQL query: …`` (the frontend's validator); ``query_range``: a parse error bare (its
    sharder parses first), a validation error as the engine's ``compiling query: …``; the instant query compiles first,
    so both read ``compiling query: …``. The text alone, no newline, as Tempo writes a 400."""
    cases = [
        ("{ . }", "parse error at line 1, col 3: syntax error: unexpected END_ATTRIBUTE, expecting IDENTIFIER"),
        ("{ parent.a != 3 }", "parent not yet supported"),
        ('{ 1 + "foo" = 1 }', "binary operations must operate on the same type: 1 + `foo`"),
    ]
    for text, error in cases:
        _, _, searched = await call(store, "api/search", {"q": text})
        _, _, ranged = await call(store, "api/metrics/query_range", {"q": text, **WINDOW})
        _, _, instant = await call(store, "api/metrics/query", {"q": text, "start": "900", "end": "1100"})
        assert searched.decode() == f"invalid TraceQL query: {error}"
        assert ranged.decode() == (error if error.startswith("parse error") else f"compiling query: {error}")
        assert instant.decode() == f"compiling query: {error}"


async def test_a_metrics_query_searches_as_tempo_searches_it(store: Store) -> None:
    """Tempo searches a metrics query's spanset pipeline (``SinglePipeline``); its ``by()`` shows on each span. A
    search query is not a metrics query, and math between metrics queries is not a search (Tempo: a 500)."""
    status, _, body = await call(store, "api/search", {"q": "{ } | count_over_time() by (name)"})
    (trace,) = json.loads(body)["traces"]
    assert status == 200 and trace["spanSet"]["matched"] == 4
    assert {s.get("name") for s in trace["spanSet"]["spans"]} == {"MySpan", "RootSpan", None}  # the third has none
    status, _, body = await call(store, "api/metrics/query_range", {"q": "{ .foo }", **WINDOW})
    assert (status, body) == (400, b"not a metrics query")
    status, _, body = await call(store, "api/search", {"q": "({} | rate()) + ({} | rate())"})
    assert (status, body) == (400, b"math expressions not supported")


def intervals() -> list[str]:
    """The window 900..1100 s at 10 s: aligned one step further back (890), so 21 samples, 900 s … 1,100 s."""
    return [str(ms) for ms in range(900_000, 1_100_001, 10_000)]


def samples_at_1000(value: float) -> list[dict[str, Any]]:
    return [{"timestampMs": t, **({"value": value} if t == "1000000" else {})} for t in intervals()]


async def test_query_range_json_is_tempos(store: Store) -> None:
    q = "{} | count_over_time() by (resource.service.name)"
    status, headers, body = await call(store, "api/metrics/query_range", {"q": q, **WINDOW})
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert list(doc) == ["series", "metrics"]
    services = ["BrokenService", "MyService", "RootService", "Service3"]  # Tempo's sort: label text
    assert [s["labels"] for s in doc["series"]] == [
        [{"key": "resource.service.name", "value": {"stringValue": svc}}] for svc in services
    ]
    assert all(s["samples"] == samples_at_1000(1.0) for s in doc["series"])
    exemplars = [e for s in doc["series"] for e in s.get("exemplars", [])]
    assert len(exemplars) == 1  # one per trace
    (e,) = exemplars
    assert e["timestampMs"] == "1000000" and e["value"] == 1.0
    assert e["labels"][0] == {"key": "trace:id", "value": {"stringValue": "3a0f6cbd0be8f1e2a43c5d9e7b618f02"}}
    assert doc["metrics"] == {"inspectedSpans": "4", "completedJobs": 1, "totalJobs": 1}


async def test_metrics_answer_json_even_to_a_protobuf_accept(store: Store) -> None:
    """Tempo's frontend answers query_range and query in JSON over HTTP whatever ``Accept`` says (its combiner is
    JSON-only; measured on a real Tempo); search answers protobuf when asked."""
    q = "{ span.foo = `Bar` } | rate() by (span.foo)"
    _, _, body = await call(store, "api/metrics/query_range", {"q": q, **WINDOW})
    status, headers, again = await call(store, "api/metrics/query_range", {"q": q, **WINDOW}, PROTO)
    assert status == 200 and headers["Content-Type"] == "application/json" and again == body
    (series,) = json.loads(body)["series"]
    assert series["samples"] == samples_at_1000(0.2)  # two spans in 10 s
    assert len(series["exemplars"]) == 1
    assert json.loads(body)["metrics"]["inspectedSpans"] == "2"  # only spans holding foo, Bar
    _, headers, _ = await call(store, "api/metrics/query", {"q": q, "start": "900", "end": "1100"}, PROTO)
    assert headers["Content-Type"] == "application/json"
    status, headers, raw = await call(store, "api/search", {"q": "{ span.foo = `Bar` }"}, PROTO)
    assert headers["Content-Type"] == "application/protobuf"
    (trace,) = tempo_pb2.SearchResponse.FromString(raw).traces
    assert trace.traceID == "3a0f6cbd0be8f1e2a43c5d9e7b618f02" and trace.spanSet.matched == 2


async def test_an_ungrouped_count_answers_zeros_when_nothing_matches(store: Store) -> None:
    """``UngroupedAggregator``: ``rate()`` without ``by()`` has its series even when no span matches (Tempo answers
    it, all zero: Drilldown draws a flat line, not "no data"); grouped, or a min/max of nothing, has none."""
    _, _, body = await call(store, "api/metrics/query_range", {"q": "{ kind = consumer } | rate()", **WINDOW})
    (series,) = json.loads(body)["series"]
    assert series["labels"] == [{"key": "__name__", "value": {"stringValue": "rate"}}]
    assert all("value" not in s for s in series["samples"])  # zeros, which gogo's JSON leaves out
    for q in ("{ kind = consumer } | rate() by (name)", "{ kind = consumer } | max_over_time(duration)"):
        _, _, body = await call(store, "api/metrics/query_range", {"q": q, **WINDOW})
        assert "series" not in json.loads(body)


async def test_instant_query_is_one_value_per_series(store: Store) -> None:
    q = "{} | quantile_over_time(duration, .5, 1) by (resource.service.name)"
    query = {"q": q, "start": "900", "end": "1100"}
    status, _, body = await call(store, "api/metrics/query", query)
    assert status == 200
    doc = json.loads(body)
    root = [s for s in doc["series"] if s["labels"][0]["value"] == {"stringValue": "RootService"}]
    assert [(s["labels"][1], s["value"]) for s in root] == [
        ({"key": "p", "value": {"doubleValue": 0.5}}, 2.147483648),  # Tempo's log2 buckets of nanoseconds: 2^31
        ({"key": "p", "value": {"doubleValue": 1}}, 2.147483648),
    ]


async def test_instant_count_from_sql(store: Store) -> None:
    """``rate()`` and ``count_over_time()`` by service are counted in SQL; an instant query has one interval."""
    query = {"start": "900", "end": "1100"}
    _, _, body = await call(store, "api/metrics/query", {"q": "{} | rate()", **query})
    (series,) = json.loads(body)["series"]
    assert series["value"] == pytest.approx(4 / 200)
    q = "{} | count_over_time() by (resource.service.name)"
    _, _, body = await call(store, "api/metrics/query", {"q": q, **query})
    assert [s["value"] for s in json.loads(body)["series"]] == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"start": "1100", "end": "900"}, "end must be greater than start"),
        ({"start": "0", "end": "100000"}, "exceeds the maximum allowed duration of 24h0m0s"),
        ({"start": "900", "end": "1100", "step": "1ms"}, "step of 1ms is too small, minimum step for given range"),
        ({"start": "900", "end": "1100", "step": "often"}, 'cannot parse "often" to a valid duration'),
        ({"start": "yesterday", "end": "1100"}, "could not parse 'start' parameter"),
        ({"start": "999990", "end": "1000000"}, "query window falls entirely within query_end_cutoff"),
    ],
)
async def test_bad_parameters_are_400s_in_tempos_words(store: Store, query: dict[str, str], message: str) -> None:
    status, _, body = await call(store, "api/metrics/query_range", {"q": "{} | rate()", **query})
    assert status == 400 and message in body.decode()


async def test_step_defaults_as_tempos(store: Store) -> None:
    """No ``step``: ``DefaultQueryRangeStep`` — 200 s / 240 is under a second, so 1 s: 201 samples."""
    _, _, body = await call(store, "api/metrics/query_range", {"q": "{} | rate()", "start": "900", "end": "1100"})
    (series,) = json.loads(body)["series"]
    assert len(series["samples"]) == 201
    assert [s["value"] for s in series["samples"] if "value" in s] == [4.0]


async def test_partial_when_series_exceed_max_series(store: Store) -> None:
    q = "{} | count_over_time() by (name)"
    _, _, body = await call(store, "api/metrics/query_range", {"q": q, "maxSeries": "2", **WINDOW})
    doc = json.loads(body)
    assert len(doc["series"]) == 2 and doc["status"] == "PARTIAL"
    assert doc["message"].startswith("Response exceeds maximum series limit of 2")


async def test_a_real_server_routes_the_metrics_paths(tmp_path: Path) -> None:
    """Through ``bridge.app`` as served: OTLP in, ``/tempo/api/metrics/query_range`` and ``query`` out. The server
    keeps its real clock (and its retention), so the trace is moved to ten minutes ago."""
    now_s = int(time.time())
    base = now_s - 600 - (now_s - 600) % 100
    shift_ns = (base + 50 - 1000) * 1_000_000_000  # the trace's spans (at 1,000 s) start at base + 50 s
    trace = store_trace()
    for rs in trace.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.start_time_unix_nano += shift_ns
                span.end_time_unix_nano += shift_ns
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"))
    runner = web.AppRunner(create_app(settings), auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        timeout = aiohttp.ClientTimeout(total=15, connect=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            body = trace.SerializeToString()
            headers = {"Content-Type": "application/x-protobuf"}
            async with session.post(f"{url}/v1/traces", data=body, headers=headers) as resp:
                assert resp.status == 200
            window = {"start": str(base - 100), "end": str(base + 200)}  # aligned: 4 steps, from base - 200
            q = {"q": "{ status = error } | rate()", **window, "step": "100s"}
            async with session.get(f"{url}/tempo/api/metrics/query_range", params=q) as resp:
                assert resp.status == 200
                doc = await resp.json()
            assert [s.get("value") for s in doc["series"][0]["samples"]] == [None, None, 0.01, None]
            async with session.get(f"{url}/tempo/api/metrics/query", params=q) as resp:
                assert resp.status == 200
                (series,) = (await resp.json())["series"]
            assert series["value"] == pytest.approx(1 / 300)  # one error span in the 300 s window
    finally:
        await runner.cleanup()
