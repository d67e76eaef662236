"""Standalone store queries against history (issue 15 §4, §5): does a query cost what its answer needs, or what the
store holds? Two stores are built from the same synthetic data (``store_data``: ``--services`` services at 100 Hz,
a profile and 80 spans per service every 10 s): one holding ``--hours`` hours (6), one holding only the last of
them. Each pair below is measured ``--reps`` times, alternating, in the same run; lines give medians, p99 and ratios.

1. Service flame graph (``SelectMergeStacktraces``, one service and all of them) over the last 6 h vs the last 1 h of
   the big store (windows end 437 s before the data does: on no rollup boundary). Target: 6 h ≤ 2 × 1 h.
2. The same merges against their anchor: a plain SQL read of exactly the pre-aggregated rows the store reads
   (``rollup.plan`` over the same watermarks: rollup buckets, per-profile totals at the edges) summed in a Python
   dict, then the same frame lookup (``merge``) and a call tree encoded as a flame graph (``flamegraph``). Answers
   are checked equal, and equal to a plain sum of every profile in the window.
3. Span flame graph (one root span of the last hour, ``span_selector``, over the whole stored range as a Grafana
   panel asks) on the 6 h store vs the 1 h store. Target: flat (≈ 1).
(TraceQL on the same spans: ``bench/store_traceql.py``.)

Run: ``.venv/bin/python bench/store_query.py [--services 10] [--hours 6] [--reps 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import loadavg, pair  # noqa: E402
from store_data import CPU, WINDOW_S, Generator, windows_per_hour  # noqa: E402

from bridge import flamegraph  # noqa: E402
from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge.call import CallContext, Deadline  # noqa: E402
from bridge.store import Store, rollup  # noqa: E402
from bridge.store.database import DB_FILE  # noqa: E402
from bridge.store.query import DEFAULT_MAX_NODES, window_ns  # noqa: E402

Stacks = list[tuple[tuple[str, ...], int]]


async def build(tmp: str, gen: Generator, first: int, count: int, end_s: int) -> tuple[Store, float, int]:
    """A store holding windows [first, first + count), its clock 10 minutes after ``end_s``, compacted."""
    store = await Store.open(tmp, clock=lambda: end_s + 600.0)
    rows = 0
    started = time.perf_counter()
    for window in gen.windows(first, count):
        await store.ingest_profiles(window.records, None)
        await store.ingest_otlp_traces(window.spans, None)
        rows += window.sample_rows
    elapsed = time.perf_counter() - started
    await store.compact()
    await store.analyze()
    return store, elapsed, rows


def anchor_merge(db: Path, services: list[str] | None, start_ms: int, end_ms: int) -> Stacks:
    """The anchor: exactly the rows the store's plan reads (rollup buckets, per-profile totals at the edges), by
    plain SQL, summed in a Python dict keyed by stack id."""
    conn = sqlite3.connect(db)
    try:
        sql = "SELECT id FROM series" + (f" WHERE service IN ({','.join('?' * len(services))})" if services else "")
        series = json.dumps([r[0] for r in conn.execute(sql, services or [])])
        state = dict(conn.execute("SELECT key, value FROM store_state").fetchall())
        lo, hi = window_ns(start_ms, end_ms)
        merged: dict[int, int] = {}
        for seg in rollup.plan(lo, hi, rollup.watermarks(state), state.get(rollup.RETAINED_FROM, 0)):
            if seg.level:
                rows = conn.execute(
                    "SELECT stack_id, value FROM rollups WHERE level = ? AND series_id IN (SELECT value FROM "
                    "json_each(?)) AND bucket >= ? AND bucket < ?",
                    (seg.level, series, seg.start, seg.end),
                )
            else:
                rows = conn.execute(
                    "SELECT ps.stack_id, ps.value FROM profiles AS p JOIN profile_stacks AS ps ON ps.profile_id = "
                    "p.id WHERE p.series_id IN (SELECT value FROM json_each(?)) AND p.time_ns >= ? AND p.time_ns < ?",
                    (series, seg.start, seg.end),
                )
            for stack_id, value in rows:
                merged[stack_id] = merged.get(stack_id, 0) + value
        frames = dict(
            conn.execute(
                "SELECT id, frames FROM stacks WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(merged)),),
            ).fetchall()
        )
        names = dict(conn.execute("SELECT id, name FROM functions").fetchall())
        out: Stacks = []
        for stack_id, value in merged.items():
            ids = array("i")
            ids.frombytes(frames[stack_id])
            out.append((tuple(names[i] for i in ids), value))
        return out
    finally:
        conn.close()


def plain_sum(db: Path, services: list[str] | None, start_ms: int, end_ms: int) -> int:
    """Every profile's total in the window, straight from the profiles: what every merge must add up to."""
    conn = sqlite3.connect(db)
    try:
        lo, hi = window_ns(start_ms, end_ms)
        sql = (
            "SELECT coalesce(sum(p.total), 0) FROM profiles AS p JOIN series AS s ON s.id = p.series_id "
            "WHERE p.time_ns >= ? AND p.time_ns < ?"
        )
        params: list[Any] = [lo, hi]
        if services:
            sql += f" AND s.service IN ({','.join('?' * len(services))})"
            params.extend(services)
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=10)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()

    print(f"load average at start: {loadavg()}")
    gen = Generator(args.services)
    per_hour = windows_per_hour()
    total = args.hours * per_hour
    end_s = gen.window(total - 1).time_s + WINDOW_S
    ctx = CallContext(deadline=Deadline.start(None, 600.0))
    with (
        tempfile.TemporaryDirectory(prefix="store-query-") as big_dir,
        tempfile.TemporaryDirectory(prefix="store-query-") as small_dir,
    ):
        big, t_big, rows_big = await build(big_dir, gen, 0, total, end_s)
        small, t_small, rows_small = await build(small_dir, gen, total - per_hour, per_hour, end_s)
        try:
            for name, store, elapsed, rows in (("big", big, t_big, rows_big), ("small", small, t_small, rows_small)):
                counts = await store.counts()
                print(
                    f"{name} store: {args.hours if name == 'big' else 1} h, {args.services} services: "
                    f"{rows:,} sample rows, {counts.spans:,} spans, {await store.used_bytes() / 1024**2:,.0f} MiB; "
                    f"built at {rows / elapsed:,.0f} sample rows/s (with its spans)"
                )
            db = Path(big_dir) / DB_FILE
            last_ms = (end_s - 437) * 1000
            windows = {
                "1h": (last_ms - 3_600_000, last_ms),
                f"{args.hours}h": (last_ms - args.hours * 3_600_000, last_ms),
            }
            long_name = f"{args.hours}h"

            # 1 and 2: service flame graphs, long window vs short, and against the anchor
            one = f"svc-{min(3, args.services - 1)}"
            for label, selector, services in (
                ("one-service", f'{{service_name="{one}"}}', [one]),
                ("all-services", "{}", None),
            ):

                def merge_of(w: str, selector: str = selector) -> Callable[[], Awaitable[Stacks]]:
                    return lambda: big.merged_stacks(None, CPU, selector, *windows[w])

                def full_of(w: str, selector: str = selector) -> Callable[[], Awaitable[qpb.FlameGraph]]:
                    req = qpb.SelectMergeStacktracesRequest(
                        profile_typeID=CPU, label_selector=selector, start=windows[w][0], end=windows[w][1]
                    )

                    async def run() -> qpb.FlameGraph:
                        return (await big.select_merge_stacktraces(req, ctx)).flamegraph

                    return run

                await pair(
                    f"{label} flame graph {long_name} vs 1h",
                    long_name,
                    full_of(long_name),
                    "1h",
                    full_of("1h"),
                    args.reps,
                    "≤ 2",
                )
                for w in (long_name, "1h"):

                    def anchor(w: str = w, services: list[str] | None = services) -> Awaitable[Stacks]:
                        return asyncio.to_thread(anchor_merge, db, services, *windows[w])

                    async def anchor_full(w: str = w, services: list[str] | None = services) -> qpb.FlameGraph:
                        stacks = await asyncio.to_thread(anchor_merge, db, services, *windows[w])
                        return flamegraph.encode(flamegraph.build_tree(stacks), DEFAULT_MAX_NODES)

                    ours, theirs = await pair(
                        f"{label} {w} merge vs anchor", "store", merge_of(w), "anchor", anchor, args.reps
                    )
                    assert sorted(ours) == sorted(theirs), f"{label} {w}: the store and the anchor differ"
                    assert sum(v for _, v in ours) == plain_sum(db, services, *windows[w]), f"{label} {w}: not exact"
                    ours, theirs = await pair(
                        f"{label} {w} flamegraph vs anchor", "store", full_of(w), "anchor", anchor_full, args.reps
                    )
                    assert ours == theirs, f"{label} {w}: flame graphs differ"

            # 3: a span's flame graph, whole stored range, big store vs small store
            window = gen.window(total - per_hour // 2)
            span = window.span_ids[0]
            whole = (windows[long_name][0] - 3_600_000, end_s * 1000)

            def span_merge(store: Store) -> Callable[[], Awaitable[Stacks]]:
                return lambda: store.merged_stacks(None, CPU, '{service_name="svc-0"}', *whole, span_ids=[span])

            got_big, got_small = await pair(
                f"span flame graph, {long_name} vs 1h store",
                long_name,
                span_merge(big),
                "1h",
                span_merge(small),
                args.reps,
                "≈ 1",
            )
            want = sum(v for r in window.records for _, v, s, _ in r.samples if s == span)
            assert sorted(got_big) == sorted(got_small) and sum(v for _, v in got_big) == want > 0

        finally:
            await big.close()
            await small.close()
    print(f"load average at end: {loadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
