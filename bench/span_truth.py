"""Ground truth for per-span numbers: what the bridge says a span cost, against what the span really burnt.

    .venv/bin/python bench/span_truth.py [--spans 400] [--burners 0] [--runs 1]

A small app of its own (not the demo), instrumented with the stock SDKs — ``pyroscope-io`` (py-spy, 100 Hz) and
``pyroscope-otel``'s ``PyroscopeSpanProcessor`` linking samples to root spans, OpenTelemetry traces over OTLP/HTTP —
sends to a standalone bridge started for the run. Each root span does pure-Python work (a random amount, 2–150 ms
of CPU) between short sleeps and records the truth itself: its thread CPU time (``time.thread_time_ns``) and the
wall time it spent in that work (holding the GIL, waiting for a core included). ``--burners N`` runs N busy
processes beside it (CPU contention). Afterwards the bridge's API answers every span (``scope=span``) and the store's
own rows are read, and this script prints, per run and for all runs:

- ``ratio`` lines: linked / true CPU and linked / GIL-held time per span (median, p10, p90) and summed; the API's
  linked totals / the store's samples labelled with those spans (1.00: the bridge adds no error of its own);
- ``figure`` lines: how often the linked total is more than the span's wall time (the bare number), how often the
  bridge flags it (beyond sampling noise), how often the 95 % interval covers the true CPU and the GIL-held time,
  and the count's dispersion (Var(n − held/period) against the mean count: 1 for a Poisson count).

Absolute numbers depend on the host's load (printed beside them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.benchkit import free_port, loadavg, pct, stop_children, wait_up  # noqa: E402
from bridge.store.database import DB_FILE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVICE = "truth-app"
TRUTH_ATTR = "truth.thread_cpu_ns"
PERIOD_NS = 10_000_000


# --------------------------------------------------------------------------------------------- the app (a child)


def burn(ns: int) -> int:
    """Pure-Python work (holds the GIL) until this thread has used ``ns`` of CPU; returns the wall time it took (the
    time the thread held the GIL, waiting for a core included)."""
    start = time.perf_counter_ns()
    end = time.thread_time_ns() + ns
    x = 0
    while time.thread_time_ns() < end:
        for i in range(200):
            x += i * i
    return time.perf_counter_ns() - start


def run_app(bridge: str, spans: int, seed: int, out: Path) -> None:
    import pyroscope
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind
    from pyroscope.otel import PyroscopeSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(PyroscopeSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{bridge}/v1/traces")))
    trace.set_tracer_provider(provider)
    pyroscope.configure(application_name=SERVICE, server_address=bridge, sample_rate=100)
    tracer = trace.get_tracer("span-truth")
    rng = random.Random(seed)
    rows = []
    for i in range(spans):
        cpu_ns = int(rng.uniform(2, 150) * 1e6)
        with tracer.start_as_current_span(f"job {i % 4}", kind=SpanKind.SERVER) as span:
            t0 = time.thread_time_ns()
            time.sleep(rng.uniform(0, 0.02))
            held = burn(cpu_ns // 2)
            time.sleep(rng.uniform(0, 0.02))
            held += burn(cpu_ns - cpu_ns // 2)
            used = time.thread_time_ns() - t0
            span.set_attribute(TRUTH_ATTR, used)
            ctx = span.get_span_context()
        rows.append({"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}", "cpu": used, "gil": held})
        time.sleep(rng.uniform(0, 0.01))
    time.sleep(11)  # one more upload window: every sample of the last spans is sent
    provider.shutdown()
    pyroscope.shutdown()
    out.write_text(json.dumps(rows))


# --------------------------------------------------------------------------------------------- the run


async def answers(base: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(8)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(row: dict[str, Any]) -> dict[str, Any]:
            async with limit, session.get(f"{base}/api/v1/spans/{row['traceId']}/{row['spanId']}/profile") as resp:
                return dict(await resp.json()) if resp.status == 200 else {"error": resp.status}

        return list(await asyncio.gather(*(one(r) for r in rows)))


def store_totals(data: str) -> dict[str, int]:
    """Per span id (16 hex), the values of the samples the store holds labelled with it: read from its own rows."""
    db = sqlite3.connect(f"file:{Path(data) / DB_FILE}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT span_id, SUM(value) FROM samples WHERE span_id IS NOT NULL GROUP BY span_id")
        return {(sid & (2**64 - 1)).to_bytes(8, "big").hex(): int(total) for sid, total in rows}
    finally:
        db.close()


Pair = tuple[dict[str, Any], dict[str, Any], int | None]  # (the truth, the API's answer, the store's total)


def one_run(spans: int, burners: int, seed: int) -> list[Pair]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    data = tempfile.mkdtemp(prefix="span-truth-")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PROFILE_BRIDGE_")},
        "PROFILE_BRIDGE_LISTEN": f"127.0.0.1:{port}",
        "PROFILE_BRIDGE_DATA_DIR": data,
        "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false",
        "PROFILE_BRIDGE_LOG_LEVEL": "warning",
    }
    bridge = subprocess.Popen([sys.executable, "-m", "bridge", "serve"], cwd=ROOT, env=env)
    hogs: list[subprocess.Popen[bytes]] = []
    try:

        async def up() -> None:
            async with aiohttp.ClientSession() as session:
                await wait_up(session, f"{base}/healthz", bridge)

        asyncio.run(up())
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], cwd=ROOT, env=env) for _ in range(burners)]
        out = Path(data) / "truth.json"
        app = [sys.executable, __file__, "--app", base, "--spans", str(spans), "--seed", str(seed), "--out", str(out)]
        subprocess.run(app, cwd=ROOT, check=True, timeout=3600)
        stop_children(hogs)
        hogs = []
        rows = json.loads(out.read_text())
        docs = asyncio.run(answers(base, rows))
    finally:
        stop_children([bridge, *hogs])
    stored = store_totals(data)
    shutil.rmtree(data, ignore_errors=True)
    return [(row, doc, stored.get(row["spanId"])) for row, doc in zip(rows, docs, strict=True)]


def ratio_line(label: str, ratios: list[float], summed: float, what: str) -> str:
    return (
        f"ratio {label:<32} per span: median {statistics.median(ratios):5.2f} p10 {pct(ratios, 0.1):5.2f} p90 "
        f"{pct(ratios, 0.9):5.2f} | summed {summed:5.2f}  ({what})"
    )


def report(pairs: list[Pair], label: str, burners: int) -> None:
    linked = [(r, d, st) for r, d, st in pairs if d.get("mode") == "linked" and d.get("sampling")]
    if not linked:
        print(f"figure {label}: no linked answers ({len(pairs)} spans)")
        return
    n = len(linked)
    totals = [int(d["total"]) for _, d, _ in linked]
    truth = [int(r["cpu"]) for r, _, _ in linked]
    held = [int(r["gil"]) for r, _, _ in linked]
    walls = [int(d["span"]["durationNanos"]) for _, d, _ in linked]
    samplings = [d["sampling"] for _, d, _ in linked]
    same = sum(st == t for (_, _, st), t in zip(linked, totals, strict=True))
    stored = sum(st or 0 for _, _, st in linked)

    def covers(values: list[int]) -> int:
        return sum(
            s["interval95"]["low"] <= v <= s["interval95"]["high"] for s, v in zip(samplings, values, strict=True)
        )

    over = sum(t > w for t, w in zip(totals, walls, strict=True))
    flagged = sum(bool(s.get("exceedsWall")) for s in samplings)
    residuals = [int(s["samples"] or 0) - h / PERIOD_NS for s, h in zip(samplings, held, strict=True)]
    diffs = [(t - c) / 1e6 for t, c in zip(totals, truth, strict=True)]
    where = f"{n} linked spans of {len(pairs)}, {burners} burners, load {loadavg()}"
    print(f"--- {label}: {where}")
    print(ratio_line("linked / true thread CPU", ratio_list(totals, truth), sum(totals) / sum(truth), "pyroscope-io"))
    print(ratio_line("linked / GIL-held time", ratio_list(totals, held), sum(totals) / sum(held), "what it samples"))
    print(f"ratio {'API linked / store labelled':<32} {same}/{n} spans equal | summed {sum(totals) / stored:5.3f}")
    print(
        f"figure {label}: before — linked > wall time: {over}/{n} = {over / n:.1%}; after — flagged beyond "
        f"sampling noise: {flagged}/{n} = {flagged / n:.1%}\n"
        f"figure {label}: 95 % interval covers the true CPU {covers(truth) / n:.1%}, the GIL-held time "
        f"{covers(held) / n:.1%}\n"
        f"figure {label}: linked − true CPU: median {statistics.median(diffs):+.1f} ms, p10 {pct(diffs, 0.1):+.1f} ms, "
        f"p90 {pct(diffs, 0.9):+.1f} ms\n"
        f"figure {label}: dispersion: Var(n − held/period) {statistics.pvariance(residuals):.2f} against a mean count "
        f"of {statistics.fmean(h / PERIOD_NS for h in held):.2f} (Poisson: equal)"
    )


def ratio_list(values: list[int], truth: list[int]) -> list[float]:
    return [v / t for v, t in zip(values, truth, strict=True) if t > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=400)
    parser.add_argument("--burners", type=int, default=0, help="busy processes beside the app (CPU contention)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--app", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.app:
        run_app(args.app, args.spans, args.seed, Path(args.out))
        return 0
    everything = []
    for run in range(args.runs):
        pairs = one_run(args.spans, args.burners, args.seed + run)
        report(pairs, f"run {run + 1}", args.burners)
        everything += pairs
    if args.runs > 1:
        report(everything, "all runs", args.burners)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
