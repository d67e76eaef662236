"""Synthetic standalone-store data for ``store_query.py`` and ``store_ingest.py``: services profiled at 100 Hz, each
uploading a 10 s CPU profile every 10 s (pyroscope-io's cadence) and sending the spans those samples belong to.

Per service and 10 s window: 1,000 samples of 10 ms drawn from a skewed set of 300 stacks 8–25 frames deep, spread
over 40 root spans (identical (stack, span) pairs aggregated as the SDK does); each root span is an OTLP server span
with a child client span, ``http.status_code`` 500 on one trace in 50 and 503 on one in 5,000. Every window is
generated from its own seed, so any stretch of time (say, the last hour of six) is the same wherever it is built.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge.store import decode

CPU: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
WINDOW_S: Final = 10
HZ: Final = 100
STACKS_PER_SERVICE: Final = 300
SPANS_PER_WINDOW: Final = 40
T0_S: Final = 1_700_000_000  # 2023-11-14T22:13:20Z: on no rollup boundary
NS: Final = 1_000_000_000


def vocabulary(rng: random.Random, service: int) -> list[tuple[str, ...]]:
    modules = [f"svc{service}/mod{m}" for m in range(12)]
    out = []
    for _ in range(STACKS_PER_SERVICE):
        depth = rng.randint(8, 25)
        base = ["main", "serve", "handle_request"]
        frames = base + [f"{rng.choice(modules)}.fn{rng.randint(0, 60)}" for _ in range(depth - len(base))]
        out.append(tuple(frames))
    return out


@dataclass(slots=True)
class Window:
    index: int
    time_s: int
    records: list[decode.ProfileRecord]
    spans: otlp_trace_svc.ExportTraceServiceRequest
    span_ids: list[int]  # the root spans of service 0 (for span-selector queries)

    @property
    def sample_rows(self) -> int:
        return sum(len(r.samples) for r in self.records)


class Generator:
    def __init__(self, services: int, seed: int = 7, spans: bool = True) -> None:
        self.services = services
        self.seed = seed
        self.spans = spans
        rng = random.Random(seed)
        self.stacks = [vocabulary(rng, s) for s in range(services)]
        self.weights = [1.0 / (i + 1) for i in range(STACKS_PER_SERVICE)]
        ptype = decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds")
        self.labels = [
            tuple(sorted({**ptype.labels(), "service_name": f"svc-{s}", "env": "bench"}.items()))
            for s in range(services)
        ]

    def window(self, index: int) -> Window:
        time_s = T0_S + index * WINDOW_S
        records: list[decode.ProfileRecord] = []
        req = otlp_trace_svc.ExportTraceServiceRequest()
        first_spans: list[int] = []
        for svc in range(self.services):
            rng = random.Random(hash((self.seed, svc, index)))
            spans = [rng.getrandbits(63) + 1 for _ in range(SPANS_PER_WINDOW)]
            traces = [rng.getrandbits(127).to_bytes(16, "big") for _ in range(SPANS_PER_WINDOW)]
            if svc == 0:
                first_spans = spans
            counts: dict[tuple[int, int], int] = {}
            picks = rng.choices(range(STACKS_PER_SERVICE), self.weights, k=WINDOW_S * HZ)
            owners = rng.choices(range(SPANS_PER_WINDOW), k=WINDOW_S * HZ)
            for stack_i, span_i in zip(picks, owners, strict=True):
                counts[(stack_i, span_i)] = counts.get((stack_i, span_i), 0) + 1
            samples = [(self.stacks[svc][s], n * 10_000_000, spans[p], traces[p]) for (s, p), n in counts.items()]
            records.append(
                decode.ProfileRecord(
                    labels=self.labels[svc],
                    profile_type=CPU,
                    service=f"svc-{svc}",
                    time_ns=time_s * NS,
                    duration_ns=WINDOW_S * NS,
                    samples=samples,
                )
            )
            if self.spans:
                rs = req.resource_spans.add()
                rs.resource.attributes.add(key="service.name").value.string_value = f"svc-{svc}"
                ss = rs.scope_spans.add()
                for k, (span_id, trace_id) in enumerate(zip(spans, traces, strict=True)):
                    start = time_s * NS + k * (WINDOW_S * NS // SPANS_PER_WINDOW)
                    duration = rng.randint(5, 200) * 1_000_000
                    draw = rng.randrange(5000)
                    status = 503 if draw == 0 else 500 if draw < 100 else 200
                    root = ss.spans.add(
                        trace_id=trace_id,
                        span_id=span_id.to_bytes(8, "big"),
                        name="GET /work",
                        start_time_unix_nano=start,
                        end_time_unix_nano=start + duration,
                        kind=2,
                    )
                    root.attributes.add(key="http.status_code").value.int_value = status
                    child = ss.spans.add(
                        trace_id=trace_id,
                        span_id=rng.getrandbits(63).to_bytes(8, "big") or b"\1",
                        parent_span_id=root.span_id,
                        name="SELECT",
                        kind=3,
                        start_time_unix_nano=start + 1_000_000,
                        end_time_unix_nano=start + duration - 1_000_000,
                    )
                    child.attributes.add(key="db.system").value.string_value = "postgresql"
        return Window(index, time_s, records, req, first_spans)

    def windows(self, first: int, count: int) -> Iterator[Window]:
        for index in range(first, first + count):
            yield self.window(index)


def windows_per_hour() -> int:
    return 3600 // WINDOW_S
