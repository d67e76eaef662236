"""JFR ingest (issue 21 §4): what a Java SDK upload costs the standalone bridge, against the pprof ingest of the same
samples, in one interleaved run.

1. Ingest: a bridge runs as ``profile-bridge serve`` in a child process (fresh data directory, gRPC off). The
   recording (``--recording``, default the committed async-profiler capture ``tests/fixtures/jfr/example.jfr.gz``:
   CPU, allocation in/outside TLAB, locks) is converted ONCE, here, to the pprofs Pyroscope would make of it
   (``bridge.jfr.convert``, then a pprof per profile, written by this script), and both are sent alternately,
   ``--rounds`` times each, every request under its own tenant: the JFR as the Java SDK sends it (``/ingest``,
   multipart, gzipped ``jfr`` part) and the pprofs as one ``push.v1.PushRequest`` (gzipped, one series per profile,
   the same labels). Both store the same samples, so the ratio of the medians is the ratio per sample (target ≤ 2).
2. Reader throughput: the JFR reader and converter over the plain recording (MB/s) beside protobuf's (upb) parse of a
   pprof of equal size (the converted pprofs' samples repeated until the bytes match), in this process, interleaved,
   in CPU time (``time.process_time``: on a shared machine wall time measures the queue for a core, not the work).

Run: ``.venv/bin/python bench/jfr_ingest.py [--rounds 20] [--recording PATH.jfr[.gz]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchkit import free_port, loadavg, pct, stop_children, wait_up  # noqa: E402

from bridge._proto import profile_pb2, push_pb2  # noqa: E402
from bridge._proto import types_pb2 as tpb  # noqa: E402
from bridge.compression import Budget  # noqa: E402
from bridge.jfr.convert import JfrProfile, convert  # noqa: E402

DEFAULT = ROOT / "tests" / "fixtures" / "jfr" / "example.jfr.gz"
TIMEOUT = aiohttp.ClientTimeout(total=120, connect=5)
FROM_S = int(time.time()) - 60


def to_pprof(profile: JfrProfile) -> profile_pb2.Profile:
    """One converted profile as the pprof jfr-parser would build (functions by name, one location each)."""
    out = profile_pb2.Profile()
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings)
            out.string_table.append(text)
        return strings[text]

    s("")
    for s_type, s_unit in profile.sample_types:
        out.sample_type.add(type=s(s_type), unit=s(s_unit))
    out.period_type.type, out.period_type.unit = s(profile.period_type[0]), s(profile.period_type[1])
    out.time_nanos = FROM_S * 1_000_000_000
    out.duration_nanos = 10 * 1_000_000_000
    locations: dict[str, int] = {}
    for frames, values, labels in profile.samples:
        ids = []
        for name in reversed(frames):
            if name not in locations:
                locations[name] = len(locations) + 1
                out.function.add(id=locations[name], name=s(name))
                loc = out.location.add(id=locations[name])
                loc.line.add(function_id=locations[name])
            ids.append(locations[name])
        sample = out.sample.add(location_id=ids, value=values)
        for key, value in labels.items():
            sample.label.add(key=s(key), str=s(value))
    return out


def push_of(profiles: list[JfrProfile]) -> bytes:
    req = push_pb2.PushRequest()
    for profile in profiles:
        series = req.series.add()
        for name, value in (("__name__", profile.metric), ("service_name", "bench-java"), ("env", "bench")):
            series.labels.append(tpb.LabelPair(name=name, value=value))
        series.samples.add(raw_profile=gzip.compress(to_pprof(profile).SerializeToString(), 1))
    return gzip.compress(req.SerializeToString(), 1)


def jfr_form(recording_gz: bytes) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("jfr", recording_gz, filename="jfr", content_type="application/octet-stream")
    return form


async def ingest(args: argparse.Namespace, plain: bytes, profiles: list[JfrProfile], samples: int) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    query = urlencode(
        {"name": "bench-java{env=bench}", "from": FROM_S, "until": FROM_S + 10, "spyName": "javaspy"}
        | {"sampleRate": 100, "format": "jfr"}
    )
    recording_gz = gzip.compress(plain, 1)
    push = push_of(profiles)
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
                await wait_up(http, f"{base}/healthz", proc)
                times: dict[str, list[float]] = {"jfr": [], "pprof": []}
                for n in range(args.rounds):
                    for kind in ("jfr", "pprof") if n % 2 else ("pprof", "jfr"):
                        headers = {"X-Scope-OrgID": f"{kind}-{n}"}
                        t0 = time.perf_counter()
                        if kind == "jfr":
                            resp = await http.post(
                                f"{base}/ingest?{query}", data=jfr_form(recording_gz), headers=headers
                            )
                        else:
                            headers |= {"Content-Type": "application/proto", "Content-Encoding": "gzip"}
                            resp = await http.post(f"{base}/push.v1.PusherService/Push", data=push, headers=headers)
                        body = await resp.read()
                        times[kind].append(time.perf_counter() - t0)
                        if resp.status != 200:
                            raise SystemExit(f"{kind} upload answered {resp.status}: {body[:200]!r}")
        finally:
            stop_children([proc])
    jfr, pp = times["jfr"], times["pprof"]
    print(f"ingest per upload ({samples} samples, {len(plain)} B recording, {len(push)} B push): load {loadavg()}")
    print(
        f"  jfr   median {statistics.median(jfr) * 1e3:8.1f} ms  p99 {pct(jfr, 0.99) * 1e3:8.1f} ms  "
        f"{samples / statistics.median(jfr):10.0f} samples/s"
    )
    print(
        f"  pprof median {statistics.median(pp) * 1e3:8.1f} ms  p99 {pct(pp, 0.99) * 1e3:8.1f} ms  "
        f"{samples / statistics.median(pp):10.0f} samples/s"
    )
    print(
        f"ratio jfr/pprof ingest per sample: median {statistics.median(jfr) / statistics.median(pp):.2f}x  "
        f"p99 {pct(jfr, 0.99) / pct(pp, 0.99):.2f}x  (target <= 2)"
    )


def throughput(args: argparse.Namespace, plain: bytes, profiles: list[JfrProfile]) -> None:
    one = to_pprof(profiles[0])
    base_samples = list(one.sample)
    while one.ByteSize() < len(plain):
        one.sample.extend(base_samples)
    pprof_bytes = one.SerializeToString()
    reader: list[float] = []
    upb: list[float] = []
    for n in range(args.rounds):
        for kind in ("jfr", "pprof") if n % 2 else ("pprof", "jfr"):
            t0 = time.process_time()
            if kind == "jfr":
                convert(plain, sample_rate=100, budget=Budget(1 << 34))
                reader.append(time.process_time() - t0)
            else:
                for _ in range(20):  # one parse is below the CPU clock's resolution
                    profile_pb2.Profile.FromString(pprof_bytes)
                upb.append((time.process_time() - t0) / 20)
    mb_jfr = len(plain) / statistics.median(reader) / 1e6
    mb_pprof = len(pprof_bytes) / statistics.median(upb) / 1e6
    print(f"reader throughput, CPU time ({len(plain)} B JFR, {len(pprof_bytes)} B pprof): load {loadavg()}")
    print(f"  JFR reader + conversion {mb_jfr:9.1f} MB/s   protobuf (upb) pprof parse {mb_pprof:9.1f} MB/s")
    print(f"ratio pprof parse / JFR reader throughput: {mb_pprof / mb_jfr:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--recording", type=Path, default=DEFAULT)
    args = parser.parse_args()
    raw = args.recording.read_bytes()
    plain = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    profiles = convert(plain, sample_rate=100, budget=Budget(1 << 34)).profiles
    samples = sum(len(p.samples) for p in profiles)
    asyncio.run(ingest(args, plain, profiles, samples))
    throughput(args, plain, profiles)


if __name__ == "__main__":
    main()
