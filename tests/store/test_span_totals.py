"""Per-span rollups (``span_totals``, ``bridge/store/span_totals.py``) and the function → spans answer read from them:
for a function in every stack, the rollup path must give exactly what the sample pass gives, and both what this
test adds up itself from the data it stored — on random data with spans that cross minutes and series, arrive out
of order, ranges with part minutes at both ends, ties at the limit, and retention cutting a minute in two."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bridge.functions import FunctionHits, FunctionMatch, FunctionQuery
from bridge.store import Store, decode, functions
from bridge.store.database import DB_FILE
from bridge.store.functions import read_function_spans
from bridge.store.span_totals import MINUTE_NS

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
T0_S = 1_700_000_020  # 20 s into a minute: windows straddle minutes
SELECTOR = '{service_name="svc"}'


def record(samples: list[tuple[tuple[str, ...], int, int | None]], at_s: int, thread: str) -> decode.ProfileRecord:
    labels = {
        **decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds").labels(),
        "service_name": "svc",
        "thread": thread,  # a second series per service: one span's samples may be split between them
    }
    trace = bytes(16)
    return decode.ProfileRecord(
        labels=tuple(sorted(labels.items())),
        profile_type=CPU,
        service="svc",
        time_ns=at_s * 1_000_000_000,
        duration_ns=10_000_000_000,
        samples=[(frames, value, span, trace.replace(b"\0", bytes([span % 250 + 1])) if span else None)
                 for frames, value, span in samples],
    )  # fmt: skip


def dataset(seed: int) -> list[tuple[int, str, list[tuple[tuple[str, ...], int, int | None]]]]:
    """(capture second, thread, samples) per profile: 15 minutes of 10 s windows; spans live 1–20 windows, some in
    both threads; every stack starts main → handle; a few samples unlinked."""
    rng = random.Random(seed)
    stacks = [("main", "handle", *(f"f{rng.randint(0, 9)}" for _ in range(rng.randint(0, 4)))) for _ in range(25)]
    live: list[tuple[int, int]] = []  # (span, windows left)
    profiles = []
    next_span = 1
    for w in range(90):
        while len(live) < 6:
            live.append((next_span, rng.randint(1, 20)))
            next_span += 1
        for thread in ("a", "b"):
            samples: list[tuple[tuple[str, ...], int, int | None]] = []
            for span, _ in live:
                if rng.random() < (0.9 if thread == "a" else 0.2):
                    for _ in range(rng.randint(1, 4)):
                        samples.append((rng.choice(stacks), rng.choice([10, 20, 30]), span))
            samples.append((rng.choice(stacks), 10, None))
            profiles.append((T0_S + 10 * w, thread, samples))
        live = [(s, left - 1) for s, left in live if left > 1]
    return profiles


def expected(profiles: list[tuple[int, str, list[tuple[tuple[str, ...], int, int | None]]]], lo_ms: int, hi_ms: int):  # type: ignore[no-untyped-def]
    """This test's own sums over the stored data: per span its value in the range, and the range's total."""
    per_span: Counter[int] = Counter()
    total = 0
    for at_s, _, samples in profiles:
        if lo_ms <= at_s * 1000 <= hi_ms:
            for _, value, span in samples:
                total += value
                if span is not None:
                    per_span[span] += value
    return per_span, total


async def answers(store: Store, q: FunctionQuery) -> tuple[FunctionHits, FunctionHits]:
    def both(conn: sqlite3.Connection) -> tuple[FunctionHits, FunctionHits]:
        return (
            read_function_spans(conn, "anonymous", q, SELECTOR),
            read_function_spans(conn, "anonymous", q, SELECTOR, rollups=False),
        )

    return await store.db.read(both)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_rollup_path_equals_the_sample_pass_and_the_data(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: Counter[bool] = Counter()
    through = functions._through_every_stack

    def counted(*args: Any, **kwargs: Any) -> FunctionHits | None:
        answer = through(*args, **kwargs)
        taken[answer is not None] += 1
        return answer

    monkeypatch.setattr(functions, "_through_every_stack", counted)
    profiles = dataset(seed)
    shuffled = profiles[:]
    random.Random(seed).shuffle(shuffled)  # late uploads: neighbours arrive in either order
    store = await Store.open(tmp_path, clock=lambda: T0_S + 2000.0)
    try:
        for at_s, thread, samples in shuffled:
            await store.ingest_profiles([record(samples, at_s, thread)], None)
        rng = random.Random(seed)
        for _ in range(6):
            lo = (T0_S + rng.randint(0, 300)) * 1000 + rng.randint(0, 999)
            hi = lo + rng.randint(180, 600) * 1000
            limit = rng.choice([1, 3, 10, 100])
            q = FunctionQuery("svc", FunctionMatch.parse("handle"), CPU, lo, hi, limit=limit)
            fast, slow = await answers(store, q)
            assert fast == slow
            per_span, total = expected(profiles, lo, hi)
            assert (fast.total, fast.linked) == (total, sum(per_span.values()))
            assert fast.more + len(fast.spans) == sum(1 for v in per_span.values() if v > 0)
            values = sorted(per_span.values(), reverse=True)
            assert [s.total for s in fast.spans] == values[: len(fast.spans)]
            assert all(s.total == s.span_total for s in fast.spans)  # in every stack: through = whole
            prefix = FunctionQuery("svc", FunctionMatch.parse("ma", "prefix"), CPU, lo, hi, limit=limit)
            fast, slow = await answers(store, prefix)
            assert fast == slow and fast.functions == ("main",)
            partial = FunctionQuery("svc", FunctionMatch.parse("f3"), CPU, lo, hi, limit=limit)
            fast, slow = await answers(store, partial)
            assert fast == slow  # not in every stack: the sample pass answers both
    finally:
        await store.close()
    assert taken[True] == 12 and taken[False] == 6  # handle and ma* from the rollups; f3 from the samples


async def test_rollups_follow_retention_and_crossings(tmp_path: Path) -> None:
    profiles = dataset(4)
    store = await Store.open(tmp_path, clock=lambda: T0_S + 2000.0)
    try:
        for at_s, thread, samples in profiles:
            await store.ingest_profiles([record(samples, at_s, thread)], None)
        cut_s = T0_S + 245  # mid-minute
        await store.enforce_retention(max_age_s=T0_S + 2000.0 - cut_s, max_bytes=1 << 40)
        kept = [p for p in profiles if p[0] >= cut_s]
        q = FunctionQuery("svc", FunctionMatch.parse("main"), CPU, T0_S * 1000, (T0_S + 900) * 1000, limit=5)
        fast, slow = await answers(store, q)
        per_span, total = expected(kept, q.start_ms, q.end_ms)
        assert fast == slow and fast.total == total and fast.linked == sum(per_span.values())
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    try:
        first = conn.execute("SELECT min(bucket) FROM span_totals").fetchone()[0]
        assert first * MINUTE_NS >= cut_s * 1_000_000_000  # the cut minute went whole
        rows = conn.execute("SELECT bucket, span_id, series_id, crossing FROM span_totals").fetchall()
        by_span: dict[int, list[tuple[int, int]]] = {}
        for bucket, span, series, _ in rows:
            by_span.setdefault(span, []).append((bucket, series))
        for bucket, span, series, crossing in rows:
            near = [r for r in by_span[span] if r != (bucket, series) and abs(r[0] - bucket) <= 1]
            assert crossing or not near  # solo: no neighbour (a crossing row may have lost its own to retention)
        solo = conn.execute("SELECT sum(solo), sum(solo_value) FROM span_minutes").fetchone()
        assert solo == conn.execute("SELECT count(*), sum(value) FROM span_totals WHERE crossing = 0").fetchone()
    finally:
        conn.close()


async def test_a_span_idle_for_minutes_is_ranked_by_its_parts(tmp_path: Path) -> None:
    """The documented limit (``span_totals``' notes): a span with CPU a minute apart and nothing between is two solo
    rows — it makes the list by the sum of the parts the query reads, is measured whole, and counts twice in
    ``more``; the sample pass counts it once."""
    t0 = T0_S - T0_S % 60  # minute-aligned
    filler = [(("main", "handle", "f"), 10, 1000 + m) for m in range(10)]  # one small span a minute
    profiles = [(t0 + 60 * m, "a", [filler[m]]) for m in range(10)]
    profiles[1][2].append((("main", "handle", "g"), 60, 7))  # span 7: 60 in minute 1 …
    profiles[6][2].append((("main", "handle", "g"), 60, 7))  # … and 60 in minute 6: 120 in all
    profiles[3][2].append((("main", "handle", "b"), 100, 8))  # span 8: 100
    store = await Store.open(tmp_path, clock=lambda: t0 + 2000.0)
    try:
        for at_s, thread, samples in profiles:
            await store.ingest_profiles([record(samples, at_s, thread)], None)
        q = FunctionQuery("svc", FunctionMatch.parse("handle"), CPU, t0 * 1000, (t0 + 600) * 1000 - 1, limit=2)
        fast, slow = await answers(store, q)
    finally:
        await store.close()
    assert [(s.total, s.span_total) for s in fast.spans] == [(120, 120), (100, 100)]
    assert fast.spans == slow.spans and (fast.total, fast.linked) == (slow.total, slow.linked)
    assert (fast.more, slow.more) == (11, 10)  # the idle span's second row is counted as one more span


async def test_migration_11_fills_what_ingest_fills(tmp_path: Path) -> None:
    """A store at version 10 (its span rows only in ``samples``) migrated to 11 holds the per-span rollups that
    ingest builds as the profiles arrive, out of order included."""
    profiles = dataset(5)
    random.Random(5).shuffle(profiles)
    store = await Store.open(tmp_path, clock=lambda: T0_S + 2000.0)
    try:
        for at_s, thread, samples in profiles:
            await store.ingest_profiles([record(samples, at_s, thread)], None)
    finally:
        await store.close()
    tables = (  # ingest leaves a minute whose solo rows all turned crossing at zero; the migration has no row for it
        "SELECT * FROM span_totals ORDER BY 1, 2, 3",
        "SELECT * FROM span_minutes WHERE solo != 0 OR solo_value != 0 ORDER BY 1, 2",
    )
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    built = [conn.execute(sql).fetchall() for sql in tables]
    conn.executescript(
        "DROP TABLE span_totals; DROP TABLE span_minutes; DROP INDEX profiles_series_time_total; "
        "CREATE INDEX profiles_series_time ON profiles (series_id, time_ns); UPDATE schema_version SET version = 10;"
    )
    conn.close()
    store = await Store.open(tmp_path, clock=lambda: T0_S + 2000.0)
    await store.close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    try:
        assert built[0] and [conn.execute(sql).fetchall() for sql in tables] == built
    finally:
        conn.close()
