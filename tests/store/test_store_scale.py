"""Standalone queries cost what the answer needs, not what history holds (issue 15, goal 4) — and stay exact.

- Merges without a span selector read rollups (per minute … 6 hours) where whole buckets fit the window, raw
  per-profile totals at its edges: checked equal to a plain sum of every sample, for random windows, after late
  arrivals, and across retention cuts that fall inside buckets.
- Span and trace selectors find their profiles 10 minutes by 10 minutes: equal to a plain sum, whatever the window.
- TraceQL search walks only its window (long spans included), stops at ``limit`` traces with every match counted,
  and says when it stopped early. Costs are checked as counts (spans examined, rollup segments read), never as time.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.store import Store, decode, rollup
from bridge.store.query import window_ns
from bridge.store.traces import span_buckets
from tests.store.test_store import CPU, ctx

NS = 1_000_000_000
# slow: seconds of store building per test; every store here runs on an injected clock (T0_S onwards) and no test
# reads the real one, so none can depend on the date (the faketime runs of .ci/run skip them)
pytestmark = pytest.mark.slow
T0_S = 1_795_000_000  # 2026-11-18, on no rollup boundary: 1_795_000_000 % 21_600 == 16_000
HOURS = 7
PTYPE = decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds")
FRAMES = [("main", "serve", f"handler{i}", f"leaf{i % 7}") for i in range(40)]

Sample = tuple[str, int, tuple[str, ...], int, int | None, bytes | None]  # service, time_ns, frames, value, span, trace


def generate(rng: random.Random, hours: int = HOURS) -> tuple[list[decode.ProfileRecord], list[Sample]]:
    """Three services uploading a profile every 10 s (one skips a stretch), samples linked to a few spans each."""
    records: list[decode.ProfileRecord] = []
    truth: list[Sample] = []
    for window in range(hours * 360):
        for svc in ("api", "db", "cache"):
            if svc == "cache" and 100 <= window < 700:
                continue  # a gap: rollup buckets with nothing in them
            time_ns = (T0_S + window * 10) * NS + rng.randrange(0, 3) * NS
            spans = [rng.getrandbits(62) + 1 for _ in range(3)]
            trace = rng.getrandbits(127).to_bytes(16, "big") or b"\1" * 16
            samples = []
            for _ in range(rng.randint(1, 6)):
                frames = rng.choice(FRAMES)
                value = rng.randint(1, 50) * 10_000_000
                span = rng.choice(spans + [None])
                samples.append(
                    (
                        frames,
                        value,
                        {} if span is None else {"span_id": decode.int_to_span_id(span), "trace_id": trace.hex()},
                    )
                )
                truth.append((svc, time_ns, frames, value, span, None if span is None else trace))
            records.extend(decode.records_from_samples({"service_name": svc}, PTYPE, time_ns, 10 * NS, samples))
    return records, truth


def expected(
    truth: list[Sample],
    services: set[str],
    lo_ns: int,
    hi_ns: int,
    span_ids: set[int] | None = None,
    traces: set[bytes] | None = None,
    retained_from: int = 0,
) -> dict[tuple[str, ...], int]:
    out: Counter[tuple[str, ...]] = Counter()
    for svc, t, frames, value, span, trace in truth:
        if svc not in services or not lo_ns <= t < hi_ns or t < retained_from:
            continue
        if span_ids is not None and span not in span_ids:
            continue
        if traces is not None and trace not in traces:
            continue
        out[frames] += value
    return dict(out)


async def merged(store: Store, selector: str, start_ms: int, end_ms: int, **kw: object) -> dict[tuple[str, ...], int]:
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=CPU, label_selector=selector, start=start_ms, end=end_ms, max_nodes=100_000, **kw
    )
    fg = (await store.select_merge_stacktraces(req, ctx())).flamegraph
    return dict(flamegraph.iter_stacks(flamegraph.decode(fg)))


@pytest.fixture(scope="module")
def data() -> tuple[list[decode.ProfileRecord], list[Sample]]:
    return generate(random.Random(15))


@pytest.fixture
async def store(tmp_path: Path, data: tuple[list[decode.ProfileRecord], list[Sample]]) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: T0_S + HOURS * 3600 + 600)
    records, _ = data
    for i in range(0, len(records), 50):
        await s.ingest_profiles(records[i : i + 50], None)
    yield s
    await s.close()


def random_windows(rng: random.Random, n: int) -> list[tuple[int, int]]:
    out = [(T0_S * 1000, (T0_S + HOURS * 3600) * 1000), (0, 4_000_000_000_000)]
    for _ in range(n):
        a = T0_S * 1000 + rng.randrange(0, HOURS * 3600 * 1000)
        out.append(
            (
                a,
                min(
                    a + rng.choice([1, 60, 3600, 5 * 3600, 9 * 3600]) * 1000 + rng.randrange(0, 99_999),
                    (T0_S + HOURS * 3600) * 1000,
                ),
            )
        )
    return out


async def test_rollup_merges_equal_a_plain_sum_for_any_window(
    store: Store, data: tuple[list[decode.ProfileRecord], list[Sample]]
) -> None:
    _, truth = data
    assert await store.compact() > 0
    marks = await store.db.read(lambda c: rollup.watermarks(rollup.read_state(c)))
    assert marks[60] > T0_S * NS and marks[21600] > T0_S * NS  # every level compacted something
    rng = random.Random(1)
    for start_ms, end_ms in random_windows(rng, 40):
        lo, hi = window_ns(start_ms, end_ms)
        for selector, services in (
            ('{service_name="api"}', {"api"}),
            ("{}", {"api", "db", "cache"}),
            ('{service_name=~"api|cache"}', {"api", "cache"}),
        ):
            assert await merged(store, selector, start_ms, end_ms) == expected(truth, services, lo, hi), (
                selector,
                start_ms,
                end_ms,
            )


async def test_late_arrivals_land_in_compacted_buckets(
    store: Store, data: tuple[list[decode.ProfileRecord], list[Sample]]
) -> None:
    _, truth = data
    await store.compact()
    late_ns = (T0_S + 3 * 3600 + 125) * NS  # long compacted at every level
    late = decode.records_from_samples(
        {"service_name": "api"}, PTYPE, late_ns, 10 * NS, [(("main", "late"), 123, {}), (FRAMES[0], 7, {})]
    )
    await store.ingest_profiles(late, None)
    truth = truth + [("api", late_ns, ("main", "late"), 123, None, None), ("api", late_ns, FRAMES[0], 7, None, None)]
    whole = (T0_S * 1000, (T0_S + HOURS * 3600) * 1000)
    assert await merged(store, '{service_name="api"}', *whole) == expected(truth, {"api"}, *window_ns(*whole))
    level = await store.db.read(
        lambda c: c.execute(
            "SELECT value FROM rollups WHERE level = 21600 AND stack_id = (SELECT st.id FROM stacks st "
            "JOIN profile_stacks ps ON ps.stack_id = st.id WHERE ps.value = 123)"
        ).fetchall()
    )
    assert level == [(123,)]  # added to the 6-hour bucket as well


async def test_retention_inside_a_bucket_keeps_merges_exact(
    store: Store, data: tuple[list[decode.ProfileRecord], list[Sample]]
) -> None:
    _, truth = data
    await store.compact()
    cutoff_ns = (T0_S + 2 * 3600 + 1234) * NS  # inside a minute, an hour and a 6-hour bucket
    now_s = T0_S + HOURS * 3600 + 600
    dropped = await store.enforce_retention(max_age_s=now_s - cutoff_ns / NS, max_bytes=2**40)
    assert dropped.profiles > 0
    rng = random.Random(2)
    for start_ms, end_ms in random_windows(rng, 15):
        lo, hi = window_ns(start_ms, end_ms)
        assert await merged(store, "{}", start_ms, end_ms) == expected(
            truth, {"api", "db", "cache"}, lo, hi, retained_from=cutoff_ns
        ), (start_ms, end_ms)
    pages = await store.db.read(lambda c: c.execute("PRAGMA freelist_count").fetchone()[0])
    assert pages == 0  # freed pages went back to the file system (the PRAGMA used to free one page a pass)
    buckets = await store.db.read(lambda c: c.execute("SELECT min(bucket) FROM rollups").fetchone()[0])
    assert buckets >= cutoff_ns  # the buckets the cut went through are gone whole
    await store.compact()  # compaction picks up where it was, retention's cut notwithstanding
    whole = (T0_S * 1000, (T0_S + HOURS * 3600) * 1000)
    assert await merged(store, "{}", *whole) == expected(
        truth, {"api", "db", "cache"}, *window_ns(*whole), retained_from=cutoff_ns
    )


async def test_span_and_trace_selectors_find_every_sample_whatever_the_window(
    store: Store, data: tuple[list[decode.ProfileRecord], list[Sample]]
) -> None:
    _, truth = data
    rng = random.Random(3)
    linked = [s for s in truth if s[4] is not None]
    for _ in range(25):
        picks = rng.sample(linked, 3)
        spans = {p[4] for p in picks if p[4] is not None}
        traces = {p[5] for p in picks if p[5] is not None}
        for start_ms, end_ms in random_windows(rng, 3):
            lo, hi = window_ns(start_ms, end_ms)
            got = await merged(store, "{}", start_ms, end_ms, span_selector=[decode.int_to_span_id(s) for s in spans])
            assert got == expected(truth, {"api", "db", "cache"}, lo, hi, span_ids=spans)
            got = await merged(
                store, '{service_name="api"}', start_ms, end_ms, trace_id_selector=[t.hex() for t in traces]
            )
            assert got == expected(truth, {"api"}, lo, hi, traces=traces)


def test_plan_covers_the_window_exactly_with_few_segments() -> None:
    rng = random.Random(4)
    hour = 3600 * NS
    marks = {60: 1000 * hour, 600: 1000 * hour, 3600: 999 * hour, 21600: 996 * hour}
    for _ in range(2000):
        lo = rng.randrange(0, 1010 * hour)
        hi = lo + rng.randrange(0, 200 * hour)
        retained = rng.choice([0, lo - rng.randrange(0, hour + 1), lo + rng.randrange(0, 3 * hour)])
        segments = rollup.plan(lo, hi, marks, retained)
        pos = lo
        for seg in segments:  # contiguous, in order, covering [lo, hi)
            assert seg.start == pos and seg.end > seg.start
            pos = seg.end
            if seg.level:
                size = seg.level * NS
                assert seg.start % size == 0 and seg.end % size == 0
                assert seg.end <= marks[seg.level] and seg.start >= retained
        assert pos == hi or (not segments and lo >= hi)
        # never more than: two edges per level below the top, the top's run, two raw edges
        assert len(segments) <= 2 * len(rollup.LEVELS) + 1
    # the segments a 6-hour window reads are as few as a 1-hour window's, give or take the edges
    six = rollup.plan(900 * hour + 17 * NS, 906 * hour + 17 * NS, marks)
    one = rollup.plan(905 * hour + 17 * NS, 906 * hour + 17 * NS, marks)
    assert len(six) <= len(one) + 2


async def test_compaction_waits_for_grace_and_jumps_over_gaps(tmp_path: Path) -> None:
    now = [float(T0_S)]
    store = await Store.open(tmp_path, clock=lambda: now[0])
    try:
        records = decode.records_from_samples({"service_name": "api"}, PTYPE, T0_S * NS, 10 * NS, [(("main",), 5, {})])
        await store.ingest_profiles(records, None)
        await store.compact()
        rows = await store.db.read(lambda c: c.execute("SELECT count(*) FROM rollups").fetchone()[0])
        assert rows == 0  # its minute has not ended GRACE ago
        now[0] = T0_S + 60 * 86_400.0  # two months later, nothing else stored: a handful of slices, not thousands
        slices = await store.compact()
        assert 0 < slices <= 3 * len(rollup.LEVELS)
        rows = await store.db.read(lambda c: c.execute("SELECT level, value FROM rollups ORDER BY level").fetchall())
        assert rows == [(60, 5), (600, 5), (3600, 5), (21600, 5)]
    finally:
        await store.close()


# --------------------------------------------------------------------------------------------- TraceQL search


def span_request(spans: list[tuple[bytes, bytes, str, int, int, int]]) -> otlp_trace_svc.ExportTraceServiceRequest:
    """(trace id, span id, service, start s, duration s, http status) per span."""
    req = otlp_trace_svc.ExportTraceServiceRequest()
    by_service: dict[str, list[tuple[bytes, bytes, str, int, int, int]]] = {}
    for s in spans:
        by_service.setdefault(s[2], []).append(s)
    for service, rows in by_service.items():
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = service
        ss = rs.scope_spans.add()
        for trace_id, span_id, _, start_s, duration_s, status in rows:
            span = ss.spans.add(trace_id=trace_id, span_id=span_id, name="GET /x")
            span.start_time_unix_nano = start_s * NS
            span.end_time_unix_nano = (start_s + duration_s) * NS
            span.attributes.add(key="http.status_code").value.int_value = status
    return req


@pytest.fixture
async def span_store(tmp_path: Path) -> AsyncIterator[tuple[Store, list[tuple[bytes, bytes, str, int, int, int]]]]:
    """Six hours of spans, one trace of two spans every 10 s; one in five traces has a 500; a few long spans."""
    rng = random.Random(9)
    spans = []
    for i in range(6 * 360):
        trace = rng.getrandbits(127).to_bytes(16, "big")
        status = 500 if i % 5 == 0 else 200
        start = T0_S + i * 10
        spans.append((trace, rng.getrandbits(62).to_bytes(8, "big"), "api", start, 2, status))
        spans.append((trace, rng.getrandbits(62).to_bytes(8, "big"), "db", start + 1, 1, status))
    for k, (start, duration) in enumerate(((T0_S + 3600, 4 * 3600), (T0_S + 100, 1800), (T0_S + 7000, 700))):
        spans.append((bytes([k + 1]) * 16, bytes([k + 1]) * 8, "batch", start, duration, 500))
    s = await Store.open(tmp_path, clock=lambda: T0_S + 7 * 3600)
    await s.ingest_otlp_traces(span_request(spans), None)
    yield s, spans
    await s.close()


def matching(spans: list[tuple[bytes, bytes, str, int, int, int]], lo: int, hi: int) -> dict[bytes, int]:
    """Traces overlapping [lo, hi] (seconds, as Tempo's start/end) through a span, with a 500 span, and how many 500
    spans each has (Tempo counts the whole trace's)."""
    overlapping = {trace for trace, _, _, start, duration, _ in spans if start < hi + 1 and start + duration >= lo}
    out: Counter[bytes] = Counter()
    for trace, _, _, _, _, status in spans:
        if status == 500 and trace in overlapping:
            out[trace] += 1
    return dict(out)


def tid(doc: dict[str, Any]) -> bytes:
    """A search answer's trace id (Tempo leaves out leading zeros) as the stored bytes."""
    return bytes.fromhex(doc["traceID"].rjust(32, "0"))


async def test_search_in_a_window_examines_the_window_and_counts_every_match(
    span_store: tuple[Store, list[tuple[bytes, bytes, str, int, int, int]]],
) -> None:
    store, spans = span_store
    query = "{ span.http.status_code = 500 }"
    lo, hi = T0_S + 5 * 3600, T0_S + 6 * 3600  # the last hour of six
    want = matching(spans, lo, hi)
    result = await store.search_traces(query, lo, hi, 10_000, 100, None)
    assert result.partial is None
    assert {tid(t): t["spanSets"][0]["matched"] for t in result.traces} == want
    assert any(tid(t) == b"\x01" * 16 for t in result.traces)  # a long span begun 4 hours before
    in_window = sum(1 for _, _, _, start, d, st in spans if start < hi + 1 and start + d >= lo and st == 500)
    assert result.inspected_spans == in_window  # the window, not 6 hours; only spans whose bytes hold 500 are read

    few = await store.search_traces(query, lo, hi, 5, 1, None)
    assert few.partial is None and len(few.traces) == 5
    assert all(t["spanSets"][0]["matched"] == want[tid(t)] and len(t["spanSets"][0]["spans"]) == 1 for t in few.traces)
    assert few.inspected_spans < 100  # stopped as soon as it had five traces
    newest = sorted(want, key=lambda t: max(s[3] for s in spans if s[0] == t and s[5] == 500), reverse=True)
    assert {tid(t) for t in few.traces} == set(newest[:5])


async def test_search_that_runs_out_of_budget_says_it_is_partial(
    span_store: tuple[Store, list[tuple[bytes, bytes, str, int, int, int]]],
) -> None:
    store, _ = span_store
    # matches nothing, and SQL cannot tell (only that the attribute is there): the whole window is read
    query = "{ span.http.status_code > 404 && span.http.status_code < 500 }"
    result = await store.search_traces(query, T0_S, T0_S + 6 * 3600, 20, 3, None, budget=1000)
    assert result.traces == [] and result.inspected_spans == 1000
    assert result.partial is not None and "1,000 spans" in result.partial and "narrow the time range" in result.partial
    complete = await store.search_traces(query, T0_S, T0_S + 6 * 3600, 20, 3, None)
    assert complete.partial is None and complete.traces == [] and complete.inspected_spans > 1000


async def test_search_by_service_uses_the_window_too(
    span_store: tuple[Store, list[tuple[bytes, bytes, str, int, int, int]]],
) -> None:
    store, spans = span_store
    query = '{ resource.service.name = "db" && span.http.status_code = 500 }'
    lo, hi = T0_S + 3600, T0_S + 3600 + 600
    result = await store.search_traces(query, lo, hi, 10_000, 3, None)
    want = {t for t, _, svc, start, d, st in spans if svc == "db" and st == 500 and start < hi + 1 and start + d >= lo}
    assert {tid(t) for t in result.traces} == want
    assert result.inspected_spans <= 2 * 60 + 10  # db spans of 20 minutes, no more


async def test_tempo_search_answer_says_partial(
    span_store: tuple[Store, list[tuple[bytes, bytes, str, int, int, int]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from bridge.call import CallContext
    from bridge.store import tempo_api, traces

    store, _ = span_store
    monkeypatch.setattr(traces, "SEARCH_SCAN_BUDGET", 50)
    query = {"q": "{ span.http.status_code > 500 }", "start": str(T0_S), "end": str(T0_S + 3600)}
    ctx_: CallContext = ctx()
    status, _, body = await tempo_api.answer(store, "GET", "api/search", query, {}, ctx_)
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "PARTIAL" and "50 spans" in doc["message"]
    assert doc["metrics"]["inspectedSpans"] == "50"


async def test_analyze_gives_the_planner_statistics(
    span_store: tuple[Store, list[tuple[bytes, bytes, str, int, int, int]]],
) -> None:
    store, _ = span_store
    await store.analyze()
    stats = await store.db.read(lambda c: c.execute("SELECT count(*) FROM sqlite_stat1").fetchone()[0])
    assert stats > 0


async def test_two_processes_writing_one_store_stay_exact(
    tmp_path: Path, data: tuple[list[decode.ProfileRecord], list[Sample]]
) -> None:
    """Two writers on one database (as several bridge processes would be): each notices the other's commits
    (``PRAGMA data_version``) and forgets what it cached — row ids, the rollups' watermarks — so a late upload lands
    in buckets the other compacted, and ids freed by the other's retention are not reused from a stale cache."""
    records, truth = data
    clock = lambda: T0_S + HOURS * 3600 + 600.0  # noqa: E731
    a = await Store.open(tmp_path, clock=clock)
    b = await Store.open(tmp_path, clock=clock)
    try:
        half = len(records) // 2
        await b.ingest_profiles(records[:10], None)  # b caches ids and watermarks now
        for i in range(10, half, 50):
            await a.ingest_profiles(records[i : min(i + 50, half)], None)
        for i in range(half, len(records), 50):
            await b.ingest_profiles(records[i : i + 50], None)
        assert await a.compact() > 0  # a compacts everything; b's watermarks are stale
        late_ns = (T0_S + 3600 + 7) * NS
        late = decode.records_from_samples({"service_name": "db"}, PTYPE, late_ns, 10 * NS, [(("main", "late"), 9, {})])
        await b.ingest_profiles(late, None)
        truth = truth + [("db", late_ns, ("main", "late"), 9, None, None)]
        whole = (T0_S * 1000, (T0_S + HOURS * 3600) * 1000)
        for store in (a, b):
            assert await merged(store, "{}", *whole) == expected(truth, {"api", "db", "cache"}, *window_ns(*whole))
        # a drops everything (its retention frees every id); b, with ids cached, stores anew
        assert (await a.enforce_retention(max_age_s=1, max_bytes=2**40)).profiles > 0
        fresh = decode.records_from_samples(
            {"service_name": "api"},
            PTYPE,
            (T0_S + HOURS * 3600) * NS,
            10 * NS,
            [(FRAMES[3], 11, {}), (("brand", "new"), 4, {})],
        )
        await b.ingest_profiles(fresh, None)
        start = (T0_S + HOURS * 3600) * 1000
        for store in (a, b):
            assert await merged(store, '{service_name="api"}', start, start) == {FRAMES[3]: 11, ("brand", "new"): 4}
    finally:
        await a.close()
        await b.close()


async def test_search_summary_finds_a_root_far_outside_the_window(tmp_path: Path) -> None:
    """A trace's spans are looked up near the window first; when its root is not there, everywhere."""
    trace = bytes.fromhex("ab" * 16)
    req = span_request([(trace, bytes.fromhex("01" * 8), "batch", T0_S, 3 * 3600, 200)])
    child = (
        req.resource_spans[0]
        .scope_spans[0]
        .spans.add(trace_id=trace, span_id=bytes.fromhex("02" * 8), parent_span_id=bytes.fromhex("01" * 8), name="step")
    )
    child.start_time_unix_nano, child.end_time_unix_nano = (T0_S + 2 * 3600) * NS, (T0_S + 2 * 3600 + 5) * NS
    child.attributes.add(key="http.status_code").value.int_value = 500
    req.resource_spans[0].scope_spans[0].spans[0].name = "nightly job"
    store = await Store.open(tmp_path, clock=lambda: T0_S + 4 * 3600)
    try:
        await store.ingest_otlp_traces(req, None)
        result = await store.search_traces(
            "{ span.http.status_code = 500 }", T0_S + 2 * 3600 - 60, T0_S + 2 * 3600 + 60, 20, 3, None
        )
        [match] = result.traces
        assert (match["rootServiceName"], match["rootTraceName"], match["spanSets"][0]["matched"]) == (
            "batch",
            "nightly job",
            1,
        )
        assert (int(match["startTimeUnixNano"]), match["durationMs"]) == (T0_S * NS, 3 * 3600 * 1000)
    finally:
        await store.close()


async def test_lookups_probe_only_buckets_that_hold_data_whatever_the_gaps(tmp_path: Path) -> None:
    """One span and one linked profile stamped in 2199 beside today's: a trace lookup, a search without a window and
    a span flame graph probe the few 10-minute buckets that hold data, not the ~9 million between them (each lookup
    used to list them all: seconds and hundreds of MiB per call, from one hostile upload)."""
    far_s = 7_258_000_000  # 2199-12-30, inside what the store accepts
    today = (b"\x0a" * 16, b"\x0b" * 8, "api", T0_S, 1, 500)
    future = (b"\x0c" * 16, b"\x0d" * 8, "api", far_s, 1, 500)
    now = [T0_S + 60.0]
    store = await Store.open(tmp_path, clock=lambda: now[0])
    try:
        await store.ingest_otlp_traces(span_request([today, future]), None)
        samples = [(("main", "work"), 10_000_000, {"span_id": (b"\x0b" * 8).hex(), "trace_id": (b"\x0a" * 16).hex()})]
        far = [(("main", "far"), 10_000_000, {"span_id": (b"\x0d" * 8).hex(), "trace_id": (b"\x0c" * 16).hex()})]
        await store.ingest_profiles(
            decode.records_from_samples({"service_name": "api"}, PTYPE, T0_S * NS, 10 * NS, samples)
            + decode.records_from_samples({"service_name": "api"}, PTYPE, far_s * NS, 10 * NS, far),
            None,
        )

        def probes(conn: sqlite3.Connection) -> tuple[int, int]:
            return len(json.loads(span_buckets(conn))), len(json.loads(rollup.link_buckets(conn, 0, 2**63 - 1)))

        assert await store.db.read(probes) == (2, 2)
        trace = await store.trace_by_id((b"\x0a" * 16).hex(), ctx())
        assert trace is not None and list(trace.spans) == [(b"\x0b" * 8).hex()]
        found = await store.search_traces("{ span.http.status_code = 500 }", 0, 0, 10, 3, None)
        assert {tid(t) for t in found.traces} == {b"\x0a" * 16, b"\x0c" * 16}
        span_ids = [decode.span_id_to_int((b"\x0b" * 8).hex())]
        stacks = await store.merged_stacks(None, CPU, '{service_name="api"}', 0, 2**42, span_ids=span_ids)
        assert stacks == [(("main", "work"), 10_000_000)]

        now[0] = T0_S + 3600.0
        await store.enforce_retention(60.0, 2**40)  # today's data ages out: so do its buckets
        assert await store.db.read(probes) == (1, 1)
    finally:
        await store.close()


async def test_the_size_cap_drops_tenths_of_the_stored_time_up_to_now_not_up_to_a_future_stamp(tmp_path: Path) -> None:
    """Over its size cap the store drops the oldest tenth of its stored time, again until it fits. One span stamped
    in 2199 made that tenth decades long: the first step dropped every span of today. Now a tenth ends at the
    store's clock: the oldest minutes go, the rest of today stays."""
    rng = random.Random(3)
    spans = [
        (rng.getrandbits(127).to_bytes(16, "big"), rng.getrandbits(62).to_bytes(8, "big"), "api", T0_S + i * 3, 1, 200)
        for i in range(1200)
    ]  # an hour
    spans.append((b"\x0c" * 16, b"\x0d" * 8, "api", 7_258_000_000, 1, 200))
    store = await Store.open(tmp_path, clock=lambda: T0_S + 3600.0)
    try:
        await store.ingest_otlp_traces(span_request(spans), None)
        used = await store.used_bytes()
        result = await store.enforce_retention(365 * 86400.0, used - 1)  # just over the cap: a step or two
        assert 0 < result.spans < 1200 // 2, result
        assert (await store.counts()).spans == 1201 - result.spans
    finally:
        await store.close()
