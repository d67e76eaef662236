"""``GET /pyroscope/render`` in standalone mode (issue 20 §6): one service's Flamebearer over the whole 6 h store and
over its last hour, against ``SelectMergeStacktraces`` of the same service and range (the rollup flame graph the
render's flame graph is), both asked over HTTP of one bridge, interleaved.

The render adds the timeline (the same query's totals per step, read beside the flame graph as Pyroscope's
handler reads ``SelectSeries`` beside ``SelectMergeStacktraces``) and the Flamebearer JSON. Target: ≤ 1.2× the flame
graph.

Data: ``bench/function_spans.py``'s generator — ``--services`` services, a 10 s CPU profile every 10 s each, 1,000
samples of 10 ms over 300 stacks and 40 root spans — written window by window with rollups compacted as live.

Run: ``.venv/bin/python bench/render.py [--services 5] [--hours 6] [--reps 21]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import free_port, loadavg, pct  # noqa: E402
from function_spans import SERVICE, Generator  # noqa: E402
from store_data import CPU, T0_S, WINDOW_S  # noqa: E402

from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge.app import create_app  # noqa: E402
from bridge.config import Settings  # noqa: E402
from bridge.store import Store  # noqa: E402


async def fill(data_dir: Path, services: int, hours: float) -> int:
    """The store under ``data_dir`` with ``hours`` of data, rollups compacted; returns the data's end (s)."""
    gen = Generator(services)
    clock = {"now": float(T0_S)}
    store = await Store.open(data_dir, synchronous="NORMAL", clock=lambda: clock["now"])
    try:
        windows = int(hours * 3600) // WINDOW_S
        for w in range(windows):
            await store.ingest_profiles(gen.window(w), None)
            clock["now"] = T0_S + (w + 1) * WINDOW_S + 60.0
            if (w + 1) % 6 == 0:
                await store.compact()
        await store.compact()
        await store.analyze()
    finally:
        await store.close()
    return T0_S + windows * WINDOW_S


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=5)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--keep", help="fill this directory once and reuse it on later runs (same --services/--hours)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="render-") as scratch:
        tmp = args.keep or scratch
        started = time.perf_counter()
        if args.keep and (Path(tmp) / "store.sqlite3").exists():
            end_s = T0_S + int(args.hours * 3600) // WINDOW_S * WINDOW_S
        else:
            end_s = await fill(Path(tmp), args.services, args.hours)
        print(f"store: {args.services} services, {args.hours:g} h (ready in {time.perf_counter() - started:.0f} s)")
        settings = Settings.for_tests(mode="standalone", data_dir=tmp)
        app = create_app(settings, wall_clock=lambda: end_s + 60.0)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        base = f"http://127.0.0.1:{port}/pyroscope"
        selector = f'{{service_name="{SERVICE}"}}'
        try:
            async with aiohttp.ClientSession() as session:
                for label, start_s in (("6h", T0_S), ("last hour", end_s - 3600)):
                    params = {"query": CPU + selector, "from": str(start_s), "until": str(end_s)}
                    req = qpb.SelectMergeStacktracesRequest(
                        profile_typeID=CPU, label_selector=selector, start=start_s * 1000, end=end_s * 1000
                    ).SerializeToString()

                    async def render(params: dict[str, str] = params) -> float:
                        t0 = time.perf_counter()
                        async with session.get(base + "/pyroscope/render", params=params) as resp:
                            body = await resp.read()
                            assert resp.status == 200, body[:300]
                        return time.perf_counter() - t0

                    async def flame(req: bytes = req) -> float:
                        t0 = time.perf_counter()
                        async with session.post(
                            base + "/querier.v1.QuerierService/SelectMergeStacktraces",
                            data=req,
                            headers={"Content-Type": "application/proto"},
                        ) as resp:
                            body = await resp.read()
                            assert resp.status == 200, body[:300]
                        return time.perf_counter() - t0

                    await render()
                    await flame()
                    t_render: list[float] = []
                    t_flame: list[float] = []
                    for _ in range(args.reps):
                        t_render.append(await render())
                        t_flame.append(await flame())
                    med_r, med_f = statistics.median(t_render), statistics.median(t_flame)
                    p99_r, p99_f = pct(t_render, 0.99), pct(t_flame, 0.99)
                    print(
                        f"render {label:<9} one service: median {med_r * 1000:7.1f} ms p99 {p99_r * 1000:7.1f} ms | "
                        f"flame graph: median {med_f * 1000:7.1f} ms p99 {p99_f * 1000:7.1f} ms | ratio median "
                        f"{med_r / med_f:.2f} p99 {p99_r / p99_f:.2f}  (target ≤ 1.2; load {loadavg()})"
                    )
        finally:
            await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
