"""The standalone store against the real Tempo and Pyroscope, on the same data, in one interleaved run (issue 23 §6).

Every line times the same work on both sides, alternating, and prints medians, p99 and the ratio bridge / peer
(below 1: the bridge is faster), with the load average beside it:

- OTLP ingest: exports of ``--batch`` requests (5 spans each) over OTLP/HTTP protobuf — spans/s;
- profile ingest: Go-SDK-shaped pprof uploads (``/ingest``, multipart) — samples/s;
- a 1 h service flame graph (``SelectMergeStacktraces`` for ``shop-web`` over the last hour);
- the span click's own question (``SelectMergeSpanProfile`` for one root span over the last hour);
- a TraceQL search (``{resource.service.name="shop-web" && status=error}``) and a metrics query
  (``{} | rate() by (resource.service.name)``, range, 60 s steps) over the last hour;
- trace by ID.

Point it at running peers exactly as ``bench/differential.py`` (docs/development.md); it starts its own standalone
bridge. Not run in CI: it needs the peers.

    .venv/bin/python bench/peers.py --tempo http://127.0.0.1:3200 --tempo-otlp http://127.0.0.1:4318 \\
        --pyroscope http://127.0.0.1:4040 [--rounds 15] [--requests 600]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import peerdata  # noqa: E402
from benchkit import free_port, loadavg, pct, stop_children, wait_up  # noqa: E402
from differential import bridge_process, settle  # noqa: E402

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
Call = Callable[[], Awaitable[Any]]


async def post(session: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str] | None = None) -> bytes:
    kwargs: dict[str, Any] = {"data": body, "headers": headers} if isinstance(body, bytes) else {"json": body}
    async with session.post(url, **kwargs) as resp:
        raw = await resp.read()
        if resp.status >= 300:
            raise SystemExit(f"{url.split('?')[0]}: {resp.status} {raw[:300]!r}")
        return raw


async def get(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> bytes:
    async with session.get(url, params=params) as resp:
        raw = await resp.read()
        if resp.status >= 300:
            raise SystemExit(f"{url}: {resp.status} {raw[:300]!r}")
        return raw


def line(label: str, ours: list[float], theirs: list[float], peer: str, unit: str = "ms", per: float = 0) -> None:
    if per:  # throughput: items per second from the times
        o, t = per / statistics.median(ours), per / statistics.median(theirs)
        print(
            f"{label:<30} bridge {o:10,.0f} {unit} | {peer} {t:10,.0f} {unit} | ratio bridge/{peer} {o / t:5.2f} "
            f"(higher is better) | load {loadavg()}",
            flush=True,
        )
        return
    mo, mt = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
    po, pt = pct(ours, 0.99) * 1000, pct(theirs, 0.99) * 1000
    print(
        f"{label:<30} bridge median {mo:8.1f} ms p99 {po:8.1f} | {peer} median {mt:8.1f} ms p99 {pt:8.1f} | "
        f"ratio bridge/{peer} median {mo / mt:5.2f} p99 {po / pt:5.2f} | load {loadavg()}",
        flush=True,
    )


async def timed(a: Call, b: Call, rounds: int) -> tuple[list[float], list[float]]:
    ta, tb = [], []
    for n in range(rounds):
        for call, times in ((a, ta), (b, tb)) if n % 2 == 0 else ((b, tb), (a, ta)):
            started = time.perf_counter()
            await call()
            times.append(time.perf_counter() - started)
    return ta, tb


async def ingest_lines(s: aiohttp.ClientSession, data: peerdata.DataSet, args: argparse.Namespace, bridge: str) -> None:
    exports = [e.SerializeToString() for e in peerdata.chunks(data, args.batch)]
    spans_per = data.spans / len(exports)
    h = {"Content-Type": "application/x-protobuf"}
    it_a, it_b = iter(exports), iter(exports)
    n = len(exports)
    ours, theirs = await timed(
        lambda: post(s, f"{bridge}/v1/traces", next(it_a), h),
        lambda: post(s, f"{args.tempo_otlp}/v1/traces", next(it_b), h),
        n,
    )
    line(f"OTLP ingest ({args.batch} req/export)", ours, theirs, "tempo", "spans/s", spans_per)
    uploads = []
    for query, pprof in data.profiles:
        body, ctype = peerdata.multipart(pprof)
        qs = "&".join(f"{k}={aiohttp.helpers.quote(v, safe='')}" for k, v in query.items())
        uploads.append((qs, body, ctype))
    samples_per = data.samples / len(uploads)
    up_a, up_b = iter(uploads), iter(uploads)

    async def send(base: str, it: Any) -> None:
        qs, body, ctype = next(it)
        await post(s, f"{base}/ingest?{qs}", body, {"Content-Type": ctype})

    ours, theirs = await timed(lambda: send(bridge, up_a), lambda: send(args.pyroscope_ingest, up_b), len(uploads))
    line("pprof ingest (10 s windows)", ours, theirs, "pyroscope", "samples/s", samples_per)


async def query_lines(s: aiohttp.ClientSession, data: peerdata.DataSet, args: argparse.Namespace, bridge: str) -> None:
    end_ms = data.end_ns // 10**6 + 60_000
    hour = {"start": end_ms - 3_600_000, "end": end_ms}
    flame = {"profileTypeID": CPU, "labelSelector": '{service_name="shop-web"}', **hour}
    rpc = "/querier.v1.QuerierService/"
    ours, theirs = await timed(
        lambda: post(s, f"{bridge}/pyroscope{rpc}SelectMergeStacktraces", flame),
        lambda: post(s, f"{args.pyroscope}{rpc}SelectMergeStacktraces", flame),
        args.rounds,
    )
    line("1 h service flame graph", ours, theirs, "pyroscope")
    span = {**flame, "spanSelector": [data.requests[-1].spans["root"]]}
    ours, theirs = await timed(
        lambda: post(s, f"{bridge}/pyroscope{rpc}SelectMergeSpanProfile", span),
        lambda: post(s, f"{args.pyroscope}{rpc}SelectMergeSpanProfile", span),
        args.rounds,
    )
    line("span flame graph (the click)", ours, theirs, "pyroscope")
    win = {"start": str(hour["start"] // 1000), "end": str(hour["end"] // 1000)}
    for label, path, params in (
        ("TraceQL search", "/api/search", {"q": '{resource.service.name="shop-web" && status=error}', "limit": "20"}),
        ("TraceQL metrics (rate by svc)", "/api/metrics/query_range", {"q": "{} | rate() by (resource.service.name)"}),
    ):
        q = {**params, **win, "step": "60s"} if "metrics" in path else {**params, **win}
        try:
            ours, theirs = await timed(
                lambda p=path, q=q: get(s, f"{bridge}/tempo{p}", q),  # type: ignore[misc]
                lambda p=path, q=q: get(s, f"{args.tempo}{p}", q),  # type: ignore[misc]
                args.rounds,
            )
        except SystemExit as exc:  # one side does not serve it: say so, time the rest
            print(f"{label:<30} not compared: {str(exc)[:200]}", flush=True)
            continue
        line(label, ours, theirs, "tempo")
    ids = [r.trace_id for r in data.requests]
    ia, ib = iter(ids * 2), iter(ids * 2)
    ours, theirs = await timed(
        lambda: get(s, f"{bridge}/tempo/api/v2/traces/{next(ia)}", {}),
        lambda: get(s, f"{args.tempo}/api/v2/traces/{next(ib)}", {}),
        min(args.rounds * 2, len(ids)),
    )
    line("trace by ID", ours, theirs, "tempo")


async def run(args: argparse.Namespace) -> None:
    print(f"load average at start: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        port = free_port()
        proc = bridge_process("standalone", f"{tmp}/data", port, free_port(), {})
        bridge = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession(timeout=peerdata.TIMEOUT) as s:
                await wait_up(s, f"{bridge}/healthz", proc)
                data = peerdata.build(time.time_ns(), requests=args.requests, seed=args.seed)
                print(f"data: {len(data.requests)} requests, {data.spans} spans, {data.samples} samples", flush=True)
                await ingest_lines(s, data, args, bridge)
                args.only, args.settle = None, 180.0
                await settle(s, data, args)
                await query_lines(s, data, args, bridge)
        finally:
            stop_children([proc])
    print(f"load average at end: {loadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tempo", default="http://127.0.0.1:3200")
    parser.add_argument("--tempo-otlp", default="http://127.0.0.1:4318")
    parser.add_argument("--pyroscope", default="http://127.0.0.1:4040")
    parser.add_argument("--pyroscope-ingest", help="where Pyroscope takes /ingest (default: --pyroscope)")
    parser.add_argument("--requests", type=int, default=600, help="requests (5 spans each) over the last 90 s")
    parser.add_argument("--batch", type=int, default=20, help="requests per OTLP export")
    parser.add_argument("--rounds", type=int, default=15, help="repetitions of each query per side")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 1000, help="data seed (fresh ids each run)")
    args = parser.parse_args()
    args.pyroscope_ingest = args.pyroscope_ingest or args.pyroscope
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
