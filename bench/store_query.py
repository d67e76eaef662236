"""Standalone store query latency (issue 5 §5): ``SelectMergeStacktraces`` over one hour of data from 10 services
profiled at 100 Hz, and the store's merge (SQL ``GROUP BY stack`` + one tree build) against a plain Python
dict-of-stacks merge over the same sample rows, interleaved in the same run.

Data: every service uploads a 10 s CPU profile every 10 s (pyroscope-io's cadence) holding 1,000 samples of 10 ms
(100 Hz), drawn from a skewed set of 300 stacks 8–25 frames deep and spread over 40 root spans per window; identical
(stack, span) pairs are aggregated as the SDK does. Written through ``Store.ingest_profiles``.

Queries, each measured ``--reps`` times, the store and the baseline alternating:
  one-service   ``{service_name="svc-3"}`` over the whole hour
  all-services  ``{}`` over the whole hour
  span          one root span id (``span_selector``), ±60 s around its window — Grafana's span-profile question
Baseline ("dict"): ``SELECT stack_id, value`` for every matching sample row, merged in a Python dict keyed by stack id,
then the same frame lookup, a call tree (``flamegraph.build_tree``) and its encoding (``flamegraph.encode``). Both
answers are checked equal. (The store merges without a span selector read its per-profile stack totals,
``profile_stacks``; with one, the span index; it encodes straight from the sorted stacks,
``flamegraph.encode_stacks``.)

Lines: ``merge`` is the merge alone (rows → (frames, value) per distinct stack); ``flamegraph`` the whole answer.

Run: ``.venv/bin/python bench/store_query.py [--services 10] [--minutes 60] [--reps 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge import flamegraph  # noqa: E402
from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge.connect import Deadline  # noqa: E402
from bridge.store import Store, decode  # noqa: E402
from bridge.store.database import DB_FILE  # noqa: E402
from bridge.store.query import DEFAULT_MAX_NODES  # noqa: E402
from bridge.upstream.base import CallContext  # noqa: E402

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
WINDOW_S = 10
HZ = 100
STACKS_PER_SERVICE = 300
SPANS_PER_WINDOW = 40
T0_S = 1_700_000_000


def vocabulary(rng: random.Random, service: int) -> list[tuple[str, ...]]:
    modules = [f"svc{service}/mod{m}" for m in range(12)]
    out = []
    for _ in range(STACKS_PER_SERVICE):
        depth = rng.randint(8, 25)
        base = ["main", "serve", "handle_request"]
        frames = base + [f"{rng.choice(modules)}.fn{rng.randint(0, 60)}" for _ in range(depth - len(base))]
        out.append(tuple(frames))
    return out


def generate(services: int, minutes: int, seed: int = 7) -> tuple[list[decode.ProfileRecord], int]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(STACKS_PER_SERVICE)]
    records: list[decode.ProfileRecord] = []
    a_span = 0
    for svc in range(services):
        stacks = vocabulary(rng, svc)
        name = f"svc-{svc}"
        labels = tuple(sorted({
            **decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds").labels(),
            "service_name": name, "env": "bench",
        }.items()))
        for w in range(minutes * 60 // WINDOW_S):
            spans = [rng.getrandbits(63) + 1 for _ in range(SPANS_PER_WINDOW)]
            if svc == 3 and w == 17:
                a_span = spans[0]
            trace = rng.getrandbits(128).to_bytes(16, "big")
            counts: dict[tuple[int, int], int] = {}
            picks = rng.choices(range(STACKS_PER_SERVICE), weights, k=WINDOW_S * HZ)
            owners = rng.choices(range(SPANS_PER_WINDOW), k=WINDOW_S * HZ)
            for stack_i, span_i in zip(picks, owners, strict=True):
                counts[(stack_i, span_i)] = counts.get((stack_i, span_i), 0) + 1
            samples = [(stacks[s], n * 10_000_000, spans[p], trace) for (s, p), n in counts.items()]
            records.append(decode.ProfileRecord(
                labels=labels, profile_type=CPU, service=name,
                time_ns=(T0_S + w * WINDOW_S) * 1_000_000_000, duration_ns=WINDOW_S * 1_000_000_000,
                samples=samples,
            ))
    return records, a_span


def dict_merge(db: Path, selector_service: str | None, start_ms: int, end_ms: int,
               span_id: int | None) -> list[tuple[tuple[str, ...], int]]:
    """The baseline: every sample row into Python, merged in a dict keyed by stack id."""
    conn = sqlite3.connect(db)
    try:
        sql = ("SELECT stack_id, value FROM samples WHERE profile_id IN (SELECT p.id FROM profiles p JOIN series s ON "
               "s.id = p.series_id WHERE p.time_ns >= ? AND p.time_ns < ?")
        params: list[object] = [start_ms * 1_000_000, (end_ms + 1) * 1_000_000]
        if selector_service:
            sql += " AND s.service = ?"
            params.append(selector_service)
        sql += ")"
        if span_id is not None:
            sql += " AND span_id = ?"
            params.append(span_id)
        merged: dict[int, int] = {}
        for stack_id, value in conn.execute(sql, params):
            merged[stack_id] = merged.get(stack_id, 0) + value
        frames = dict(conn.execute(
            "SELECT id, frames FROM stacks WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(list(merged)),)
        ).fetchall())
        names = dict(conn.execute("SELECT id, name FROM functions").fetchall())
        stacks = []
        for stack_id, value in merged.items():
            ids = array("i")
            ids.frombytes(frames[stack_id])
            stacks.append((tuple(names[i] for i in ids), value))
        return stacks
    finally:
        conn.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def timed(fn: Callable[[], Awaitable[object]]) -> tuple[float, object]:
    started = time.perf_counter()
    fg = await fn()
    return time.perf_counter() - started, fg


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=10)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()

    started = time.perf_counter()
    records, a_span = generate(args.services, args.minutes)
    n_samples = sum(len(r.samples) for r in records)
    print(f"generated {len(records)} profiles, {n_samples} sample rows "
          f"({args.services} services x {args.minutes} min at {HZ} Hz) in {time.perf_counter() - started:.1f}s")
    with tempfile.TemporaryDirectory(prefix="store-query-") as tmp:
        store = await Store.open(tmp)
        try:
            started = time.perf_counter()
            for i in range(0, len(records), 10):
                await store.ingest_profiles(records[i:i + 10], None)
            elapsed = time.perf_counter() - started
            print(f"ingest (store API, 10 profiles per transaction): {n_samples / elapsed:,.0f} sample rows/s")
            print(f"store size: {await store.used_bytes() / 1024**2:.1f} MiB")
            ctx = CallContext(deadline=Deadline.start(None, 600.0))
            hour = (T0_S * 1000, (T0_S + args.minutes * 60) * 1000)
            span_window = ((T0_S + 17 * WINDOW_S - 60) * 1000, (T0_S + 18 * WINDOW_S + 60) * 1000)
            db = Path(tmp) / DB_FILE
            cases = [
                ("one-service", '{service_name="svc-3"}', "svc-3", hour, None),
                ("all-services", "{}", None, hour, None),
                ("span", '{service_name="svc-3"}', "svc-3", span_window, a_span),
            ]
            for label, selector, service, (start, end), span in cases:
                req = qpb.SelectMergeStacktracesRequest(profile_typeID=CPU, label_selector=selector,
                                                        start=start, end=end)
                span_ids = None
                if span is not None:
                    req.span_selector.append(decode.int_to_span_id(span))
                    span_ids = [span]

                async def ours_merge(selector: str = selector, start: int = start, end: int = end,
                                     span_ids: list[int] | None = span_ids) -> list[tuple[tuple[str, ...], int]]:
                    return await store.merged_stacks(None, CPU, selector, start, end, span_ids=span_ids)

                async def base_merge(service: str | None = service, start: int = start, end: int = end,
                                     span: int | None = span) -> list[tuple[tuple[str, ...], int]]:
                    return await asyncio.to_thread(dict_merge, db, service, start, end, span)

                async def ours_full(req: qpb.SelectMergeStacktracesRequest = req) -> qpb.FlameGraph:
                    return (await store.select_merge_stacktraces(req, ctx)).flamegraph

                async def base_full(merge: Callable[[], Awaitable[list[tuple[tuple[str, ...], int]]]] = base_merge
                                    ) -> qpb.FlameGraph:
                    stacks = await merge()
                    return flamegraph.encode(flamegraph.build_tree(stacks), DEFAULT_MAX_NODES)

                for what, ours, base in (("merge", ours_merge, base_merge), ("flamegraph", ours_full, base_full)):
                    t_ours: list[float] = []
                    t_base: list[float] = []
                    for _ in range(args.reps):
                        a, got_a = await timed(ours)  # type: ignore[arg-type]
                        b, got_b = await timed(base)  # type: ignore[arg-type]
                        t_ours.append(a)
                        t_base.append(b)
                    same = sorted(got_a) == sorted(got_b) if what == "merge" else got_a == got_b  # type: ignore[arg-type]
                    assert same, f"{label} {what}: answers differ"
                    med_a, med_b = statistics.median(t_ours), statistics.median(t_base)
                    p99_a, p99_b = pct(t_ours, 0.99), pct(t_base, 0.99)
                    print(f"{label:<12} {what:<10} store (SQL GROUP BY): median {med_a * 1000:7.1f} ms "
                          f"p99 {p99_a * 1000:7.1f} ms | dict-of-stacks: median {med_b * 1000:7.1f} ms "
                          f"p99 {p99_b * 1000:7.1f} ms | ratio store/dict median {med_a / med_b:.2f} "
                          f"p99 {p99_a / p99_b:.2f}")
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
