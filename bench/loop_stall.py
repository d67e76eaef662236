"""Does a big trace stall the event loop? A small call's latency while 10,000-span traces go through ``/tempo``,
against the same call when the bridge is idle, in one interleaved run.

    .venv/bin/python bench/loop_stall.py [--spans 10000] [--rounds 6] [--calls 300] [--concurrent 2]

The bridge (``serve --proxy --workers 1``: one event loop, the thing measured) sits in front of an upstream child
process that answers as Tempo and Pyroscope would: the trace by ID (``bench/enrich.py``'s 10,000-span trace of real
spans, protobuf, gzipped as Tempo sends it) and ``ProfileTypes`` (small). The small call is ``ProfileTypes`` through
``/pyroscope``, one at a time. Each round has an idle window (small calls only) and a loaded window (the same number
of small calls while ``--concurrent`` clients fetch the big trace through ``/tempo`` back to back, as Grafana would:
``Accept: application/protobuf``, ``Accept-Encoding: gzip`` — each answer is enriched, re-encoded and gzipped by the
bridge, and its spans remembered).

Target: the small call's p99 while big traces are served ≤ 2 × its p99 when idle. Prints p50/p99 of both and the
ratio, and the load average before and after (absolute figures on a shared machine are noise). Everything runs on
127.0.0.1; every loop is bounded by ``--rounds`` × ``--calls``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import free_port, loadavg, pct, stop_children, wait_up  # noqa: E402
from enrich import build_trace  # noqa: E402

from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge._proto import tempo_pb2  # noqa: E402

TARGET = 2.0
SMALL = "/pyroscope/querier.v1.QuerierService/ProfileTypes"
UPSTREAM = """
import sys
from aiohttp import web
trace = open(sys.argv[2], "rb").read()
small = open(sys.argv[3], "rb").read()
async def trace_by_id(request):
    return web.Response(body=trace, headers={"Content-Type": "application/protobuf", "Content-Encoding": "gzip"})
async def rpc(request):
    await request.read()
    return web.Response(body=small, content_type="application/proto")
app = web.Application()
app.router.add_get("/api/v2/traces/{id}", trace_by_id)
app.router.add_post("/querier.v1.QuerierService/{m}", rpc)
app.router.add_get("/ready", lambda r: web.Response(text="ready"))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


async def small_calls(session: aiohttp.ClientSession, base: str, n: int) -> list[float]:
    body = qpb.ProfileTypesRequest().SerializeToString()
    headers = {"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}
    out = []
    for _ in range(n):
        started = time.perf_counter()
        async with session.post(base + SMALL, data=body, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise SystemExit(f"small call: HTTP {resp.status}")
        out.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.002)  # a steady trickle, not a flood: the loop's latency is what is measured
    return out


async def big_traces(session: aiohttp.ClientSession, url: str, stop: asyncio.Event, served: list[float]) -> None:
    headers = {"Accept": "application/protobuf", "Accept-Encoding": "gzip"}
    while not stop.is_set():
        started = time.perf_counter()
        async with session.get(url, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise SystemExit(f"big trace: HTTP {resp.status}")
        served.append((time.perf_counter() - started) * 1000)


async def measure(base: str, trace_url: str, rounds: int, calls: int, concurrent: int) -> list[str]:
    timeout = aiohttp.ClientTimeout(total=120, connect=5)
    idle: list[float] = []
    loaded: list[float] = []
    served: list[float] = []
    async with (
        aiohttp.ClientSession(timeout=timeout) as small,
        aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as big,
    ):
        await small_calls(small, base, 50)  # warm-up
        async with big.get(trace_url, headers={"Accept": "application/protobuf", "Accept-Encoding": "gzip"}) as r:
            await r.read()
        for _ in range(rounds):
            idle += await small_calls(small, base, calls)
            stop = asyncio.Event()
            loaders = [asyncio.create_task(big_traces(big, trace_url, stop, served)) for _ in range(concurrent)]
            await asyncio.sleep(0.2)  # the traces are in flight
            loaded += await small_calls(small, base, calls)
            stop.set()
            await asyncio.gather(*loaders)
    ratio = pct(loaded, 0.99) / pct(idle, 0.99)
    return [
        f"small call (ProfileTypes through /pyroscope), {len(idle)} calls idle and {len(loaded)} while "
        f"{concurrent} clients fetched 10,000-span traces through /tempo ({len(served)} served, median "
        f"{statistics.median(served):.0f} ms each), {rounds} interleaved rounds:",
        f"  idle:   p50 {pct(idle, 0.5):.2f} ms, p99 {pct(idle, 0.99):.2f} ms",
        f"  loaded: p50 {pct(loaded, 0.5):.2f} ms, p99 {pct(loaded, 0.99):.2f} ms",
        f"RATIO small call p99 loaded/idle: {ratio:.2f} (target <= {TARGET}) {'OK' if ratio <= TARGET else 'MISSED'}",
    ]


async def wait_all(urls_procs: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    async with aiohttp.ClientSession() as session:
        for url, proc in urls_procs:
            await wait_up(session, url, proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=300, help="small calls per window")
    parser.add_argument("--concurrent", type=int, default=2, help="clients fetching the big trace in a loaded window")
    args = parser.parse_args()
    print(f"load average before: {loadavg()}", flush=True)
    resource_spans = build_trace(max(100, min(args.spans, 100_000)))
    trace_id = resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    body = tempo_pb2.TraceByIDResponse(
        trace=tempo_pb2.Trace(resource_spans=[rs.SerializeToString() for rs in resource_spans])
    ).SerializeToString()
    small = qpb.ProfileTypesResponse(profile_types=[{"ID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds"}])
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench-loop-stall-") as tmp:
        (Path(tmp) / "trace.gz").write_bytes(gzip.compress(body, 6))
        (Path(tmp) / "small.bin").write_bytes(small.SerializeToString())
        up, port = free_port(), free_port()
        try:
            procs.append(
                subprocess.Popen([sys.executable, "-c", UPSTREAM, str(up), f"{tmp}/trace.gz", f"{tmp}/small.bin"])
            )
            env = {**os.environ, "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false", "PROFILE_BRIDGE_LOG_LEVEL": "warning"}
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bridge",
                        "serve",
                        "--proxy",
                        "--workers",
                        "1",
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--tempo-url",
                        f"http://127.0.0.1:{up}",
                        "--pyroscope-url",
                        f"http://127.0.0.1:{up}",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                )
            )
            base = f"http://127.0.0.1:{port}"
            asyncio.run(wait_all([(f"http://127.0.0.1:{up}/ready", procs[0]), (base + "/healthz", procs[1])]))
            print(f"trace: {args.spans} spans, {len(body) / 1e6:.1f} MB protobuf", flush=True)
            lines = asyncio.run(
                measure(
                    base,
                    f"{base}/tempo/api/v2/traces/{trace_id}",
                    max(1, min(args.rounds, 50)),
                    max(20, min(args.calls, 5000)),
                    max(1, min(args.concurrent, 16)),
                )
            )
        finally:
            stop_children(procs)
    for line in lines:
        print(line)
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
