"""TraceQL on the standalone store against history (issue 20 §6): does a search or a metrics query over the last
hour cost what that hour holds, or what the store holds? Two span stores are built from the same synthetic spans
(``store_data``: ``--services`` services, 80 spans per service every 10 s — a server span and its client child, one
trace in 50 with ``http.status_code`` 500, one in 5,000 with 503): one holding ``--hours`` hours (6), one holding
only the last of them. Each pair below is measured ``--reps`` times, alternating, in the same run; lines give
medians, p99 and ratios. Every call goes through ``tempo_api.answer`` (parameters, plan, store, Tempo's JSON).

1. Search ``{ span.http.status_code = 500 }`` (limit 20: stops early) and ``= 503`` (rare: walks the whole hour)
   over the last hour, on the 6 h store vs the 1 h store. Target: ≤ 1.2.
2. Metrics ``{} | rate() by(resource.service.name)`` over the last hour (Tempo's default step, 15 s), on the 6 h
   store vs the 1 h store (target ≤ 1.2), and on the 6 h store vs its anchor — the plain SQL that reads exactly the
   rows the answer needs (each service's spans of the hour on the ``(tenant, service, start)`` index, counted per
   step by ``GROUP BY``) turned into the same rates (target ≤ 2). The answers are checked equal.
3. For context (no target): a metrics query that decides span by span on a decoded attribute,
   ``{ span.http.status_code = 500 } | count_over_time() by(resource.service.name)``, 6 h vs 1 h.

Run: ``.venv/bin/python bench/store_traceql.py [--services 10] [--hours 6] [--reps 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import loadavg, pair  # noqa: E402
from store_data import WINDOW_S, Generator, windows_per_hour  # noqa: E402

from bridge.call import CallContext, Deadline, tenant_key  # noqa: E402
from bridge.store import Store, tempo_api  # noqa: E402
from bridge.store.database import DB_FILE  # noqa: E402
from bridge.traceql import params  # noqa: E402
from bridge.traceql.timeseries import Intervals  # noqa: E402

RATE = "{} | rate() by(resource.service.name)"
SPAN_BY_SPAN = "{ span.http.status_code = 500 } | count_over_time() by(resource.service.name)"


async def build(tmp: str, gen: Generator, first: int, count: int, end_s: int) -> tuple[Store, float, int]:
    """A span store holding windows [first, first + count), its clock 10 minutes after ``end_s``."""
    store = await Store.open(tmp, clock=lambda: end_s + 600.0)
    started = time.perf_counter()
    for window in gen.windows(first, count):
        await store.ingest_otlp_traces(window.spans, None)
    elapsed = time.perf_counter() - started
    await store.analyze()
    return store, elapsed, (await store.counts()).spans


def anchor_rates(db: Path, services: list[str], start_s: int, end_s: int, now_s: int) -> dict[str, list[float]]:
    """The anchor: the hour's spans of each service, counted per step by plain SQL on the covering index, as rates
    per interval of the same aligned window Tempo's frontend uses."""
    q = params.query_range({"start": str(start_s), "end": str(end_s)}, now_s * 1_000_000_000)
    iv = Intervals.of(q)
    conn = sqlite3.connect(db)
    try:
        out = {s: [0.0] * iv.count for s in services}
        seconds = iv.step / 1e9
        for svc in services:
            for interval, count in conn.execute(
                "SELECT (start_ns - ? - 1) / ?, count(*) FROM spans INDEXED BY spans_service_time "
                "WHERE tenant = ? AND service = ? AND start_ns > ? AND start_ns <= ? GROUP BY 1",
                (iv.start, iv.step, tenant_key(None), svc, q.start, q.end),
            ):
                out[svc][interval] = count / seconds
        return out
    finally:
        conn.close()


def rates_of(doc: dict[str, Any]) -> dict[str, list[float]]:
    return {
        s["labels"][0]["value"]["stringValue"]: [sample.get("value", 0.0) for sample in s["samples"]]
        for s in doc.get("series", [])
    }


CTX = CallContext(deadline=Deadline.start(None, 3600.0))


def call(store: Store, path: str, query: dict[str, str]) -> Callable[[], Awaitable[dict[str, Any]]]:
    """One request as the ``/tempo`` mount hands it to the store, answered as JSON."""

    async def run() -> dict[str, Any]:
        status, _, body = await tempo_api.answer(store, "GET", path, query, {}, CTX)
        assert status == 200, body
        doc: dict[str, Any] = json.loads(body)
        return doc

    return run


async def searches(big: Store, small: Store, hour: dict[str, str], long_name: str, reps: int) -> None:
    """1: search over the last hour."""
    for text in ("{ span.http.status_code = 500 }", "{ span.http.status_code = 503 }"):
        query = {"q": text, **hour, "limit": "20", "spss": "3"}
        r_big, r_small = await pair(
            f"search status {text.split()[-2]}, {long_name} vs 1h store",
            long_name,
            call(big, "api/search", query),
            "1h",
            call(small, "api/search", query),
            reps,
            "≤ 1.2",
        )
        assert [t["traceID"] for t in r_big.get("traces", [])] == [t["traceID"] for t in r_small.get("traces", [])]
        print(
            f"{'':<34} {len(r_big.get('traces', []))} traces, {r_big['metrics'].get('inspectedSpans', 0)} "
            f"spans decoded in the {long_name} store, {r_small['metrics'].get('inspectedSpans', 0)} in the "
            f"1h store; partial: {'status' in r_big or 'status' in r_small}"
        )


async def rates(big: Store, small: Store, db: Path, services: list[str], end_s: int, long_name: str, reps: int) -> None:
    """2: rate by service over the last hour, 6 h vs 1 h and against the anchor; 3: span by span, for context."""
    hour = {"start": str(end_s - 3600), "end": str(end_s)}
    rate = {"q": RATE, **hour}
    m_big, m_small = await pair(
        f"metrics rate by service, {long_name} vs 1h",
        long_name,
        call(big, "api/metrics/query_range", rate),
        "1h",
        call(small, "api/metrics/query_range", rate),
        reps,
        "≤ 1.2",
    )
    # equal but for the first two steps: Tempo's alignment starts the window on a step boundary one step before
    # the hour, and only the 6 h store holds spans from before it
    assert {k: v[2:] for k, v in rates_of(m_big).items()} == {k: v[2:] for k, v in rates_of(m_small).items()}

    def anchor() -> Awaitable[dict[str, list[float]]]:
        return asyncio.to_thread(anchor_rates, db, services, end_s - 3600, end_s, end_s + 600)

    ours, theirs = await pair(
        f"metrics rate {long_name} store vs anchor", "store", call(big, "api/metrics/query_range", rate), "anchor",
        anchor, reps, "≤ 2",
    )  # fmt: skip
    assert rates_of(ours) == theirs, "the store's rates and the anchor's differ"
    steps = len(next(iter(theirs.values())))
    print(f"{'':<34} {len(theirs)} series of {steps} steps, {ours['metrics'].get('inspectedSpans', 0)} spans counted")
    span_by_span = {"q": SPAN_BY_SPAN, **hour}
    await pair(
        f"metrics span by span, {long_name} vs 1h", long_name, call(big, "api/metrics/query_range", span_by_span),
        "1h", call(small, "api/metrics/query_range", span_by_span), reps,
    )  # fmt: skip


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
    long_name = f"{args.hours}h"
    with (
        tempfile.TemporaryDirectory(prefix="store-traceql-") as big_dir,
        tempfile.TemporaryDirectory(prefix="store-traceql-") as small_dir,
    ):
        big, t_big, n_big = await build(big_dir, gen, 0, total, end_s)
        small, t_small, n_small = await build(small_dir, gen, total - per_hour, per_hour, end_s)
        try:
            for name, store, elapsed, spans in (("big", big, t_big, n_big), ("small", small, t_small, n_small)):
                print(
                    f"{name} store: {args.hours if name == 'big' else 1} h, {args.services} services: {spans:,} spans, "
                    f"{await store.used_bytes() / 1024**2:,.0f} MiB; built at {spans / elapsed:,.0f} spans/s"
                )
            hour = {"start": str(end_s - 3600), "end": str(end_s)}  # the hour both stores hold whole
            await searches(big, small, hour, long_name, args.reps)
            services = [f"svc-{s}" for s in range(args.services)]
            await rates(big, small, Path(big_dir) / DB_FILE, services, end_s, long_name, args.reps)
        finally:
            await big.close()
            await small.close()
    print(f"load average at end: {loadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
