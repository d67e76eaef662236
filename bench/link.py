"""Link gateway throughput: samples/s through linking vs a plain parse + serialise of the same request.

One ExportProfilesServiceRequest with 100,000 samples over 5,000 distinct spans (each sample: a thread-name
attribute, ``trace_id`` and ``span_id`` string attributes as the Collector's pprof receiver writes them from
Pyroscope SDK labels), built with opentelemetry-proto. Every path starts from the wire bytes and ends with wire
bytes, as the gateway does (receive a protobuf body, forward a protobuf body):

- baseline: ``ParseFromString`` + ``SerializeToString``
- native:   ``ParseFromString`` (the receiver's validation) + ``fastlink.link_wire_native`` (the C extension)
- python:   ``ParseFromString`` + ``link_request`` + ``SerializeToString`` (the pure path, without the extension)

Runs are interleaved (baseline, native, python, baseline, …) in one process; medians and p99 are printed with the
ratio of each path to the baseline and the target (linking ≤ 1.3 × baseline). Without the extension built the
native line is skipped.

    .venv/bin/python bench/link.py [--samples 100000] [--spans 5000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402

from bridge.config import Settings  # noqa: E402
from bridge.otlp import fastlink  # noqa: E402
from bridge.otlp.link import link_request  # noqa: E402

TARGET = 1.3


def build_request(n_samples: int, n_spans: int, seed: int = 7) -> bytes:
    rnd = random.Random(seed)
    req = svc.ExportProfilesServiceRequest()
    d = req.dictionary
    d.string_table.extend(["", "trace_id", "span_id", "thread.name", "cpu", "nanoseconds", "main", "worker"])
    d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
    d.attribute_table.add()
    for name in ("main", "worker"):
        d.attribute_table.add(key_strindex=3).value.string_value = name
    d.mapping_table.add()
    d.function_table.add()
    d.location_table.add()
    d.stack_table.add()
    for i in range(1, 501):
        d.string_table.append(f"pkg.function_{i}")
        d.function_table.add(name_strindex=len(d.string_table) - 1)
        d.location_table.add(address=0x1000 + i).lines.add(function_index=i, line=i)
    for _ in range(2000):
        depth = rnd.randrange(5, 30)
        d.stack_table.add(location_indices=[rnd.randrange(1, 501) for _ in range(depth)])
    pairs = []
    for _ in range(n_spans):
        t = d.attribute_table.add(key_strindex=1)
        t.value.string_value = rnd.randbytes(16).hex()
        s = d.attribute_table.add(key_strindex=2)
        s.value.string_value = rnd.randbytes(8).hex()
        pairs.append((len(d.attribute_table) - 2, len(d.attribute_table) - 1))
    profile = (
        req.resource_profiles.add()
        .scope_profiles.add()
        .profiles.add(time_unix_nano=1_700_000_000 * 10**9, duration_nano=10**10)
    )
    profile.sample_type.type_strindex, profile.sample_type.unit_strindex = 4, 5
    for _ in range(n_samples):
        trace_attr, span_attr = pairs[rnd.randrange(n_spans)]
        profile.samples.add(
            stack_index=rnd.randrange(1, 2001),
            attribute_indices=[rnd.randrange(1, 3), trace_attr, span_attr],
            values=[rnd.randrange(1, 50) * 10_000_000],
        )
    return req.SerializeToString()


def baseline(data: bytes) -> bytes:
    req = svc.ExportProfilesServiceRequest.FromString(data)
    return req.SerializeToString()


def linking_python(data: bytes, keys: tuple[tuple[str, str], ...]) -> bytes:
    req = svc.ExportProfilesServiceRequest.FromString(data)
    link_request(req, keys)
    return req.SerializeToString()


def linking_native(data: bytes, keys: tuple[tuple[str, str], ...]) -> bytes:
    req = svc.ExportProfilesServiceRequest.FromString(data)
    return fastlink.link_wire_native(data, req.dictionary, keys)[0]


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--spans", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    keys = Settings().link_keys
    data = build_request(args.samples, args.spans)
    out = svc.ExportProfilesServiceRequest.FromString(linking_python(data, keys))
    links = len(out.dictionary.link_table) - 1
    linked = sum(1 for s in out.resource_profiles[0].scope_profiles[0].profiles[0].samples if s.link_index)
    print(
        f"request: {len(data):,} bytes, {args.samples:,} samples, {args.spans:,} spans; "
        f"linked {linked:,} samples into {links:,} links; native extension: "
        f"{'built' if fastlink.NATIVE else 'NOT BUILT (pip install -e . with a C compiler)'}"
    )
    paths: dict[str, Callable[[bytes], bytes]] = {"parse+serialise": baseline}
    if fastlink.NATIVE:
        if svc.ExportProfilesServiceRequest.FromString(linking_native(data, keys)) != out:
            print("native and python paths disagree on the benchmark request", file=sys.stderr)
            return 1
        paths["native linking"] = lambda d: linking_native(d, keys)
    paths["python linking"] = lambda d: linking_python(d, keys)
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, run in paths.items():
            started = time.perf_counter()
            run(data)
            times[name].append(time.perf_counter() - started)
    base = times["parse+serialise"]
    bm = statistics.median(base)
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:<16}: median {med * 1000:.1f} ms ({args.samples / med:,.0f} samples/s), p99 {p99(ts) * 1000:.1f} ms"
        )
    for name, ts in times.items():
        if name == "parse+serialise":
            continue
        ratio = statistics.median(ts) / bm
        verdict = "meets" if ratio <= TARGET else "MISSES"
        print(
            f"ratio {name} / parse+serialise: median {ratio:.2f}x, p99 {p99(ts) / p99(base):.2f}x "
            f"(target <= {TARGET}x: {verdict})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
