"""Standalone function → spans query (issue 14 §1): ``Store.function_spans`` (the ``stack_functions`` index + one
``GROUP BY span_id`` over the service's sample rows in the range) on a store that grows from 10 minutes to 6 hours
of data, against the flame graph of the same service and range (``SelectMergeStacktraces``: the query that shows the
user the function in the first place), interleaved in the same run.

Data: ``--services`` services, each uploading a 10 s CPU profile every 10 s (pyroscope-io's cadence) holding 1,000
samples of 10 ms (100 Hz), drawn from a skewed set of 300 stacks 8–25 frames deep over 40 root spans per window;
identical (stack, span) pairs aggregated as the SDK does (bench/store_query.py's shape). Written through
``Store.ingest_profiles`` window by window; measured when the store holds 10 min, 1 h and 6 h.

Queries on ``svc-1``, each ``--reps`` times, the function → spans query and the flame graph alternating:
  hot    ``handle_request``: in every stack (every sample row of the range is read)
  warm   the service's function with the most self time (a leaf in a few stacks)
  range  ``last-hour``: the API's default (the last hour of the store, or all of it when shorter), and ``all``

Lines: medians and p99 of both, their ratio; for ``hot`` the sample pass the per-span rollups replace
(``read_function_spans(rollups=False)``), timed in the same loop; and the growth of each query's median from the
10 min store to the 6 h store (``growth`` > 1: slower on the bigger store).

Run: ``.venv/bin/python bench/function_spans.py [--services 5] [--hours 6] [--reps 9]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import loadavg, pct  # noqa: E402
from store_data import CPU, HZ, SPANS_PER_WINDOW, STACKS_PER_SERVICE, T0_S, WINDOW_S, vocabulary  # noqa: E402

from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge.call import CallContext, Deadline  # noqa: E402
from bridge.functions import FunctionMatch, FunctionQuery  # noqa: E402
from bridge.store import Store, decode  # noqa: E402
from bridge.store.functions import read_function_spans  # noqa: E402

CHECKPOINTS_MIN = (10, 60, 360)
SERVICE = "svc-1"


class Generator:
    """Profiles window by window, every service, reproducibly."""

    def __init__(self, services: int, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.weights = [1.0 / (i + 1) for i in range(STACKS_PER_SERVICE)]
        self.stacks = [vocabulary(self.rng, s) for s in range(services)]
        self.labels = [
            tuple(
                sorted(
                    {
                        **decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds").labels(),
                        "service_name": f"svc-{s}",
                        "env": "bench",
                    }.items()
                )
            )
            for s in range(services)
        ]

    def window(self, w: int) -> list[decode.ProfileRecord]:
        rng = self.rng
        records = []
        for svc, stacks in enumerate(self.stacks):
            spans = [rng.getrandbits(63) + 1 for _ in range(SPANS_PER_WINDOW)]
            trace = rng.getrandbits(128).to_bytes(16, "big")
            counts: dict[tuple[int, int], int] = {}
            picks = rng.choices(range(STACKS_PER_SERVICE), self.weights, k=WINDOW_S * HZ)
            owners = rng.choices(range(SPANS_PER_WINDOW), k=WINDOW_S * HZ)
            for stack_i, span_i in zip(picks, owners, strict=True):
                counts[(stack_i, span_i)] = counts.get((stack_i, span_i), 0) + 1
            records.append(
                decode.ProfileRecord(
                    labels=self.labels[svc],
                    profile_type=CPU,
                    service=f"svc-{svc}",
                    time_ns=(T0_S + w * WINDOW_S) * 1_000_000_000,
                    duration_ns=WINDOW_S * 1_000_000_000,
                    samples=[(stacks[s], n * 10_000_000, spans[p], trace) for (s, p), n in counts.items()],
                )
            )
        return records

    def warm_function(self) -> str:
        """The function with the most expected self time in svc-1 (the heaviest stack's leaf)."""
        return self.stacks[1][0][-1]


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=5)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    checkpoints = [m for m in CHECKPOINTS_MIN if m <= args.hours * 60] or [int(args.hours * 60)]
    gen = Generator(args.services)
    ctx = CallContext(deadline=Deadline.start(None, 600.0))
    selector = f'{{service_name="{SERVICE}"}}'
    medians: dict[str, list[tuple[int, float, float]]] = {}
    before: dict[str, float] = {}  # the last store's sample-pass medians (hot queries)
    with tempfile.TemporaryDirectory(prefix="function-spans-") as tmp:
        clock = {"now": float(T0_S)}  # follows the data, so rollups are compacted as they would be live
        store = await Store.open(tmp, synchronous="NORMAL", clock=lambda: clock["now"])
        try:
            written = 0
            rows = 0
            for minutes in checkpoints:
                started = time.perf_counter()
                while written < minutes * 60 // WINDOW_S:
                    batch = gen.window(written)
                    rows += sum(len(r.samples) for r in batch)
                    await store.ingest_profiles(batch, None)
                    written += 1
                    clock["now"] = T0_S + written * WINDOW_S + 60.0
                    if written % 6 == 0:
                        await store.compact()
                size = await store.used_bytes() / 1024**2
                print(
                    f"store at {minutes} min: {written * args.services} profiles, {rows:,} sample rows, "
                    f"{size:.0f} MiB (ingest {time.perf_counter() - started:.0f} s)"
                )
                end_ms = (T0_S + written * WINDOW_S) * 1000
                ranges = {"last-hour": (max(T0_S * 1000, end_ms - 3_600_000), end_ms), "all": (T0_S * 1000, end_ms)}
                for fn_label, function in (("hot", "handle_request"), ("warm", gen.warm_function())):
                    for range_label, (start, end) in ranges.items():
                        query = FunctionQuery(SERVICE, FunctionMatch.parse(function), CPU, start, end, limit=20)
                        req = qpb.SelectMergeStacktracesRequest(
                            profile_typeID=CPU, label_selector=selector, start=start, end=end
                        )

                        async def spans(query: FunctionQuery = query) -> object:
                            return await store.function_spans(query, selector, ctx)

                        async def flame(req: qpb.SelectMergeStacktracesRequest = req) -> object:
                            return await store.select_merge_stacktraces(req, ctx)

                        async def sample_pass(query: FunctionQuery = query) -> object:
                            """The query as it was before the per-span rollups: one pass over the samples."""
                            return await store.db.read(
                                partial(read_function_spans, rollups=False), "anonymous", query, selector
                            )

                        hits = await store.function_spans(query, selector, ctx)  # each warmed up once
                        assert hits.spans, f"{function}: no spans"
                        await flame()
                        t_spans: list[float] = []
                        t_flame: list[float] = []
                        t_before: list[float] = []
                        for _ in range(args.reps):
                            t_spans.append(await timed(spans))
                            t_flame.append(await timed(flame))
                            if fn_label == "hot":
                                t_before.append(await timed(sample_pass))
                        med_s, med_f = statistics.median(t_spans), statistics.median(t_flame)
                        p99_s, p99_f = pct(t_spans, 0.99), pct(t_flame, 0.99)
                        key = f"{fn_label} {range_label}"
                        medians.setdefault(key, []).append((minutes, med_s, med_f))
                        if t_before:
                            before[key] = statistics.median(t_before)
                        print(
                            f"  {minutes:>3} min store  {key:<15} function->spans: median {med_s * 1000:7.1f} ms "
                            f"p99 {p99_s * 1000:7.1f} ms | flame graph: median {med_f * 1000:7.1f} ms "
                            f"p99 {p99_f * 1000:7.1f} ms | ratio spans/flame median {med_s / med_f:.2f} "
                            f"p99 {p99_s / p99_f:.2f}"
                        )
        finally:
            await store.close()
    report(medians, before)


def report(medians: dict[str, list[tuple[int, float, float]]], before: dict[str, float]) -> None:
    """The ratio lines (whole store / last hour; the hot queries against the sample pass) and the growth lines."""
    for fn_label in ("hot", "warm"):
        whole, hour = medians.get(f"{fn_label} all"), medians.get(f"{fn_label} last-hour")
        if whole and hour:
            (minutes, s_all, _), (_, s_hour, _) = whole[-1], hour[-1]
            target = "  (target ≤ 2: a function in every stack)" if fn_label == "hot" else ""
            print(
                f"ratio {fn_label} function->spans, whole {minutes} min store / its last hour: median "
                f"{s_all * 1000:.1f} / {s_hour * 1000:.1f} ms = {s_all / s_hour:.2f}{target} (load {loadavg()})"
            )
    for key, s_before in before.items():
        _, s_now, f_now = medians[key][-1]
        print(
            f"ratio {key} function->spans / the sample pass it replaces: median {s_now * 1000:.1f} / "
            f"{s_before * 1000:.1f} ms = {s_now / s_before:.2f} (the sample pass was {s_before / f_now:.0f}x the flame "
            f"graph, now {s_now / f_now:.2f}x; load {loadavg()})"
        )
    for key, points in medians.items():
        steps = " -> ".join(f"{m} min {s * 1000:.1f} ms" for m, s, _ in points)
        base = " -> ".join(f"{f * 1000:.1f}" for _, _, f in points)
        (_, s0, f0), (_, s1, f1) = points[0], points[-1]
        print(
            f"growth {key:<15} function->spans median {steps} (x{s1 / s0:.2f}) | flame graph {base} ms (x{f1 / f0:.2f})"
        )


if __name__ == "__main__":
    asyncio.run(main())
