"""Link gateway throughput: samples/s through linking vs a plain parse + serialise of the same request.

One ExportProfilesServiceRequest with 100,000 samples over 5,000 distinct spans (each sample: a thread-name
attribute, ``trace_id`` and ``span_id`` string attributes as the Collector's pprof receiver writes them from
Pyroscope SDK labels), built with opentelemetry-proto. Both paths start from the wire bytes and end with wire bytes:

- baseline: ``ParseFromString`` + ``SerializeToString``
- linking:  ``ParseFromString`` + ``link_request`` + ``SerializeToString``

Runs are interleaved (baseline, linking, floor, baseline, …) in one process; medians and p99 are printed with the
ratio and the target (linking ≤ 1.3 × baseline). The "floor" line times only parse + reading every sample's
``attribute_indices`` from Python + serialise: the least any per-sample Python pass can cost.

    .venv/bin/python bench/link.py [--samples 100000] [--spans 5000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402

from bridge.config import Settings  # noqa: E402
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
    profile = req.resource_profiles.add().scope_profiles.add().profiles.add(time_unix_nano=1_700_000_000 * 10**9,
                                                                            duration_nano=10**10)
    profile.sample_type.type_strindex, profile.sample_type.unit_strindex = 4, 5
    for _ in range(n_samples):
        trace_attr, span_attr = pairs[rnd.randrange(n_spans)]
        profile.samples.add(stack_index=rnd.randrange(1, 2001), attribute_indices=[rnd.randrange(1, 3), trace_attr,
                            span_attr], values=[rnd.randrange(1, 50) * 10_000_000])
    return req.SerializeToString()


def baseline(data: bytes) -> bytes:
    req = svc.ExportProfilesServiceRequest.FromString(data)
    return req.SerializeToString()


def linking(data: bytes, keys: tuple[tuple[str, str], ...]) -> bytes:
    req = svc.ExportProfilesServiceRequest.FromString(data)
    link_request(req, keys)
    return req.SerializeToString()


def touch_only(data: bytes) -> bytes:
    """The floor for any per-sample work in Python: parse, read every sample's attribute_indices, serialise."""
    req = svc.ExportProfilesServiceRequest.FromString(data)
    for resource in req.resource_profiles:
        for scope in resource.scope_profiles:
            for profile in scope.profiles:
                for sample in profile.samples:
                    tuple(sample.attribute_indices)
    return req.SerializeToString()


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
    out = svc.ExportProfilesServiceRequest.FromString(linking(data, keys))
    links = len(out.dictionary.link_table) - 1
    linked = sum(1 for s in out.resource_profiles[0].scope_profiles[0].profiles[0].samples if s.link_index)
    print(f"request: {len(data):,} bytes, {args.samples:,} samples, {args.spans:,} spans; "
          f"linked {linked:,} samples into {links:,} links")
    base_t: list[float] = []
    link_t: list[float] = []
    touch_t: list[float] = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        baseline(data)
        base_t.append(time.perf_counter() - started)
        started = time.perf_counter()
        linking(data, keys)
        link_t.append(time.perf_counter() - started)
        started = time.perf_counter()
        touch_only(data)
        touch_t.append(time.perf_counter() - started)
    bm, lm = statistics.median(base_t), statistics.median(link_t)
    for label, med, times in (("parse+serialise", bm, base_t), ("linking        ", lm, link_t)):
        print(f"{label}: median {med * 1000:.1f} ms ({args.samples / med:,.0f} samples/s), "
              f"p99 {p99(times) * 1000:.1f} ms")
    ratio = lm / bm
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"ratio linking / parse+serialise: median {ratio:.2f}x, p99 {p99(link_t) / p99(base_t):.2f}x "
          f"(target <= {TARGET}x: {verdict})")
    tm = statistics.median(touch_t)
    print(f"floor for per-sample Python work (parse + read each sample's attribute_indices + serialise): "
          f"median {tm / bm:.2f}x parse+serialise")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
