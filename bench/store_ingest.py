"""Standalone ingest (issue 5 §5, issue 15 §4): throughput replaying the shop capture many times over HTTP, the
bridge's peak RSS under continuous ingest, and whether ingest slows down as history grows.

The bridge runs as ``profile-bridge serve --standalone`` in a child process (fresh data directory, gRPC off); this
script is the client. The capture's requests are sent exactly as the SDKs sent them (OTLP/HTTP protobuf traces,
gzip-compressed Connect pushes).

1. Throughput: ``--rounds`` replays, each under its own tenant (``X-Scope-OrgID``) so every span is new to the
   store. Interleaved with each replay, the same bodies are decoded in this process without storing anything
   (``decode_spans.rows_from_export`` / ``decode.records_from_push``): the ratio says what HTTP + SQLite cost on top of
   decoding. Then ``--senders`` clients replay concurrently.
2. RSS: ``--senders`` clients ingest continuously for ``--duration`` seconds (traces get fresh random trace and
   span ids every replay, like a live service); the child's VmRSS is sampled every second, and VmHWM (peak) is
   read at the end, with retention by size set to ``--retention-bytes``.

3. Growth (``--growth-hours``, 6; 0 skips it): in this process, through the store's API, a store is filled with
   that many hours of ``store_data`` (``--growth-services`` services at 100 Hz, a profile and 80 spans per service
   every 10 s), then the next ``--growth-windows`` windows go alternately into it and into a store that starts
   empty, each store's clock following the data so that rollup compaction runs as it would live; compaction is
   timed as part of the ingest it follows. Lines: sample rows/s and spans/s, full store vs empty store (target ≥ 0.8).

Run: ``.venv/bin/python bench/store_ingest.py [--rounds 20] [--duration 60] [--senders 4] [--growth-hours 6]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import free_port, loadavg, pct, stop_children  # noqa: E402
from store_data import WINDOW_S, Generator, windows_per_hour  # noqa: E402

from bridge._proto import push_pb2  # noqa: E402
from bridge.store import Store, decode, decode_spans  # noqa: E402

CAPTURE = ROOT / "tests" / "fixtures" / "shop-capture"
TIMEOUT = aiohttp.ClientTimeout(total=60, connect=5)


def load_capture() -> list[tuple[str, dict[str, str], bytes, bytes]]:
    """(path, headers, wire body, decoded body) per request, in arrival order."""
    out = []
    for line in (CAPTURE / "index.jsonl").read_text().splitlines():
        entry = json.loads(line)
        raw = (CAPTURE / entry["file"]).read_bytes()
        headers = {"Content-Type": entry["content_type"]}
        wire = raw
        if entry["content_encoding"] == "gzip":
            wire = gzip.compress(raw)
            headers["Content-Encoding"] = "gzip"
        out.append((entry["path"], headers, wire, raw))
    return out


def start_bridge(data_dir: str, retention_bytes: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROFILE_BRIDGE_")}
    env.update(
        {
            "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false",
            "PROFILE_BRIDGE_LOG_LEVEL": "warning",
            "PROFILE_BRIDGE_RETENTION_BYTES": retention_bytes,
        }
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge",
            "serve",
            "--standalone",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            data_dir,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bridge exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("bridge did not start listening within 30 s")


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


async def replay(
    session: aiohttp.ClientSession,
    url: str,
    capture: list[tuple[str, dict[str, str], bytes, bytes]],
    tenant: str,
    fresh_ids: random.Random | None = None,
) -> tuple[float, float]:
    """One replay; returns (seconds spent on trace requests, seconds spent on pushes)."""
    t_traces = t_push = 0.0
    for path, headers, wire, raw in capture:
        body = wire
        if fresh_ids is not None and path == "/v1/traces":
            body = with_fresh_ids(raw, fresh_ids)
        started = time.perf_counter()
        async with session.post(url + path, data=body, headers={**headers, "X-Scope-OrgID": tenant}) as resp:
            await resp.read()
            if resp.status != 200:
                raise SystemExit(f"{path}: HTTP {resp.status}")
        elapsed = time.perf_counter() - started
        if path == "/v1/traces":
            t_traces += elapsed
        else:
            t_push += elapsed
    return t_traces, t_push


def with_fresh_ids(raw: bytes, rng: random.Random) -> bytes:
    req = otlp_trace_svc.ExportTraceServiceRequest.FromString(raw)
    trace_mask = rng.getrandbits(128).to_bytes(16, "big")
    span_mask = rng.getrandbits(64).to_bytes(8, "big")
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.trace_id = bytes(a ^ b for a, b in zip(span.trace_id, trace_mask, strict=True))
                span.span_id = bytes(a ^ b for a, b in zip(span.span_id, span_mask, strict=True))
                if span.parent_span_id:
                    span.parent_span_id = bytes(a ^ b for a, b in zip(span.parent_span_id, span_mask, strict=True))
    return req.SerializeToString()


def decode_only(capture: list[tuple[str, dict[str, str], bytes, bytes]]) -> tuple[float, float]:
    t_traces = t_push = 0.0
    for path, _, wire, raw in capture:
        started = time.perf_counter()
        if path == "/v1/traces":
            decode_spans.rows_from_export(otlp_trace_svc.ExportTraceServiceRequest.FromString(wire))
            t_traces += time.perf_counter() - started
        else:
            body = gzip.decompress(wire) if wire[:2] == b"\x1f\x8b" else raw
            decode.records_from_push(push_pb2.PushRequest.FromString(body), now_ns=0)
            t_push += time.perf_counter() - started
    return t_traces, t_push


async def growth(hours: int, services: int, windows: int) -> None:
    """Ingest into a store holding ``hours`` of data vs into one that starts empty, interleaved."""
    gen = Generator(services)
    per_hour = windows_per_hour()
    now = {"full": 0.0, "empty": 0.0}
    with (
        tempfile.TemporaryDirectory(prefix="store-growth-") as full_dir,
        tempfile.TemporaryDirectory(prefix="store-growth-") as empty_dir,
    ):
        full = await Store.open(full_dir, clock=lambda: now["full"])
        empty = await Store.open(empty_dir, clock=lambda: now["empty"])
        try:
            started = time.perf_counter()
            slice_rows = 0
            slice_started = started
            for window in gen.windows(0, hours * per_hour):
                now["full"] = window.time_s + WINDOW_S + 5.0
                await full.ingest_profiles(window.records, None)
                await full.ingest_otlp_traces(window.spans, None)
                slice_rows += window.sample_rows
                if window.index % 60 == 59:  # compaction every 10 minutes of data while filling
                    await full.compact()
                if window.index % per_hour == per_hour - 1:
                    hour = window.index // per_hour + 1
                    print(
                        f"growth: filling, hour {hour}: {slice_rows / (time.perf_counter() - slice_started):,.0f} "
                        f"sample rows/s with its spans and compaction (context, not interleaved)",
                        flush=True,
                    )
                    slice_rows, slice_started = 0, time.perf_counter()
            await full.compact()
            print(
                f"growth: {hours} h of {services} services stored in {time.perf_counter() - started:.0f}s, "
                f"{await full.used_bytes() / 1024**2:,.0f} MiB; load average {loadavg()}",
                flush=True,
            )
            rates: dict[str, dict[str, list[float]]] = {
                name: {"samples": [], "spans": []} for name in ("full", "empty")
            }
            for window in gen.windows(hours * per_hour, windows):
                n_spans = sum(len(ss.spans) for rs in window.spans.resource_spans for ss in rs.scope_spans)
                for name, store in (("full", full), ("empty", empty)):
                    now[name] = window.time_s + WINDOW_S + 5.0
                    t0 = time.perf_counter()
                    await store.ingest_profiles(window.records, None)
                    t1 = time.perf_counter()
                    await store.ingest_otlp_traces(window.spans, None)
                    t2 = time.perf_counter()
                    await store.compact()
                    t3 = time.perf_counter()
                    share = (t3 - t2) / 2  # compaction serves both: half of it charged to each
                    rates[name]["samples"].append(window.sample_rows / (t1 - t0 + share))
                    rates[name]["spans"].append(n_spans / (t2 - t1 + share))
            for kind in ("samples", "spans"):
                f, e = rates["full"][kind], rates["empty"][kind]
                unit = "sample rows/s" if kind == "samples" else "spans/s"
                print(
                    f"growth: {kind:<7} into a {hours} h store: median {statistics.median(f):9,.0f} slowest 1 % "
                    f"{pct(f, 0.01):9,.0f} | into an empty store: median {statistics.median(e):9,.0f} slowest 1 % "
                    f"{pct(e, 0.01):9,.0f} {unit} | ratio full/empty median "
                    f"{statistics.median(f) / statistics.median(e):.2f} slowest 1 % "
                    f"{pct(f, 0.01) / pct(e, 0.01):.2f} (target ≥ 0.8)",
                    flush=True,
                )
        finally:
            await full.close()
            await empty.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of continuous ingest for RSS")
    parser.add_argument("--retention-bytes", default="256MiB")
    parser.add_argument("--growth-hours", type=int, default=6, help="hours of history for the growth phase (0: skip)")
    parser.add_argument("--growth-services", type=int, default=10)
    parser.add_argument("--growth-windows", type=int, default=120, help="10 s windows measured in the growth phase")
    args = parser.parse_args()
    print(f"load average at start: {loadavg()}", flush=True)
    if args.growth_hours > 0:
        await growth(args.growth_hours, args.growth_services, args.growth_windows)

    capture = load_capture()
    n_spans = 434
    n_samples = 201
    with tempfile.TemporaryDirectory(prefix="store-ingest-") as tmp:
        proc, url = start_bridge(tmp, args.retention_bytes)
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
                await replay(session, url, capture, "warmup")
                http_t: list[float] = []
                http_p: list[float] = []
                dec_t: list[float] = []
                dec_p: list[float] = []
                for i in range(args.rounds):
                    a_t, a_p = await replay(session, url, capture, f"bench-{i}")
                    b_t, b_p = decode_only(capture)
                    http_t.append(a_t)
                    http_p.append(a_p)
                    dec_t.append(b_t)
                    dec_p.append(b_p)
                mt, mp, dt, dp = (statistics.median(x) for x in (http_t, http_p, dec_t, dec_p))
                print(
                    f"sequential replay x{args.rounds} (one SDK-like client): "
                    f"{n_spans / mt:,.0f} spans/s, {n_samples / mp:,.0f} samples/s "
                    f"({len([c for c in capture if c[0] != '/v1/traces'])} pushes of ~34 samples each)"
                )
                print(f"ratio HTTP+store / decode-only, median per replay: traces {mt / dt:.1f}, pushes {mp / dp:.1f}")

                started = time.perf_counter()
                await asyncio.gather(*(replay(session, url, capture, f"conc-{i}") for i in range(args.senders * 4)))
                elapsed = time.perf_counter() - started
                print(
                    f"concurrent replay ({args.senders * 4} replays, all at once): "
                    f"{args.senders * 4 * n_spans / elapsed:,.0f} spans/s and "
                    f"{args.senders * 4 * n_samples / elapsed:,.0f} samples/s together"
                )

                rss: list[tuple[float, int]] = []
                stop = time.monotonic() + args.duration
                done = [0]

                async def sender(k: int) -> None:
                    rng = random.Random(k)
                    while time.monotonic() < stop:
                        await replay(session, url, capture, "live", fresh_ids=rng)
                        done[0] += 1

                async def sampler() -> None:
                    begin = time.monotonic()
                    while time.monotonic() < stop:
                        rss.append((time.monotonic() - begin, status_kib(proc.pid, "VmRSS")))
                        await asyncio.sleep(1.0)

                await asyncio.gather(sampler(), *(sender(k) for k in range(args.senders)))
                peak = status_kib(proc.pid, "VmHWM")
                quarters = [rss[min(len(rss) - 1, int(len(rss) * q))] for q in (0.25, 0.5, 0.75)] + [rss[-1]]
                print(
                    f"continuous ingest {args.duration:.0f}s, {args.senders} senders: {done[0]} replays "
                    f"({done[0] * n_spans:,} spans, {done[0] * n_samples:,} samples); RSS "
                    + ", ".join(f"{t:.0f}s {kib / 1024:.0f} MiB" for t, kib in quarters)
                    + f"; peak (VmHWM) {peak / 1024:.0f} MiB; store file "
                    f"{(Path(tmp) / 'store.sqlite3').stat().st_size / 1024**2:.0f} MiB"
                )
        finally:
            stop_children([proc], timeout=30)
    print(f"load average at end: {loadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
