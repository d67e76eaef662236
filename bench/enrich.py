"""Enrichment cost of a 10,000-span Tempo trace-by-ID answer, against a plain decode + encode of the same body.

    .venv/bin/python bench/enrich.py [--spans 10000] [--rounds 20]

The trace is made of real spans: Tempo's own vulture trace (``tests/fixtures/tempo/vulture-trace.json``: many
attributes, events) and the shop capture's OpenTelemetry SDK spans, cloned with fresh ids into 20 services until
there are ``--spans`` spans; one span in ten is a local root already carrying ``pyroscope.profile.id`` (as
``pyroscope-otel`` tags them).

Compared, interleaved in one run (each round times every variant once, in rotating order):

- protobuf: plain = ``TraceByIDResponse`` decoded, every ``ResourceSpans`` decoded with OTLP's message, all
  re-encoded; enrich = ``bridge.enrich.enrich_trace_body`` on the same body (what the Tempo mount does before it
  answers). Target: enrich ≤ 1.3 × plain.
- JSON: plain = ``json.loads`` + ``json.dumps``; enrich = the same call for the JSON body. Target: ≤ 1.5 × plain.
- For information: enrich followed by ``Enriched.spans()`` (the span cache's parse, which the mount runs after the
  answer has been sent).

Prints medians and p99 in ms and the ratio lines. Absolute times on shared machines are noise; ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.common.v1 import common_pb2  # noqa: E402
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace  # noqa: E402

from bridge._proto import tempo_pb2  # noqa: E402
from bridge.enrich import EnrichPolicy, enrich_trace_body  # noqa: E402
from bridge.spans import PROFILE_ID_ATTR  # noqa: E402
from tests.doubles.shop import load_shop  # noqa: E402
from tests.paths import VULTURE_TRACE  # noqa: E402

TARGETS = {"protobuf": 1.3, "json": 1.5}
SERVICES = 20


def template_spans() -> list[tuple[otlp_trace.Resource, otlp_trace.Span]]:
    """Real spans to clone: Tempo's vulture trace and one shop trace, each with its resource."""
    out: list[tuple[otlp_trace.Resource, otlp_trace.Span]] = []
    data = otlp_trace.TracesData()
    json_format.ParseDict(json.loads(VULTURE_TRACE.read_text()), data)
    shop = load_shop()
    sources = list(data.resource_spans) + shop.resource_spans(shop.pick("frontend-child").trace_id)
    for rs in sources:
        for ss in rs.scope_spans:
            for span in ss.spans:
                clean = otlp_trace.Span()
                clean.CopyFrom(span)
                kept = [kv for kv in clean.attributes if kv.key != PROFILE_ID_ATTR]
                del clean.attributes[:]
                clean.attributes.extend(kept)
                out.append((rs.resource, clean))
    return out


def build_trace(n_spans: int, seed: int = 7) -> list[otlp_trace.ResourceSpans]:
    rnd = random.Random(seed)
    templates = template_spans()
    trace_id = rnd.randbytes(16)
    per_service = -(-n_spans // SERVICES)
    out: list[otlp_trace.ResourceSpans] = []
    made = 0
    for s in range(SERVICES):
        resource, _ = templates[s % len(templates)]
        rs = otlp_trace.ResourceSpans(schema_url="https://opentelemetry.io/schemas/1.21.0")
        rs.resource.CopyFrom(resource)
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                kv.value.string_value = f"service-{s:02d}"
        ss = rs.scope_spans.add()
        ss.scope.name = "opentelemetry.instrumentation"
        root_id = b""
        for i in range(min(per_service, n_spans - made)):
            _, template = templates[rnd.randrange(len(templates))]
            span = ss.spans.add()
            span.CopyFrom(template)
            span.trace_id = trace_id
            span.span_id = rnd.randbytes(8)
            if i % 10 == 0:  # a local root, tagged by the SDK
                span.kind = otlp_trace.Span.SPAN_KIND_SERVER
                span.parent_span_id = rnd.randbytes(8) if s else b""
                span.attributes.add(key=PROFILE_ID_ATTR, value=common_pb2.AnyValue(string_value=span.span_id.hex()))
                root_id = span.span_id
            else:
                span.parent_span_id = root_id
            made += 1
        out.append(rs)
    return out


def plain_protobuf(body: bytes) -> bytes:
    msg = tempo_pb2.TraceByIDResponse.FromString(body)
    decoded = [otlp_trace.ResourceSpans.FromString(raw) for raw in msg.trace.resource_spans]
    del msg.trace.resource_spans[:]
    msg.trace.resource_spans.extend(rs.SerializeToString() for rs in decoded)
    return msg.SerializeToString()


def plain_json(body: bytes) -> bytes:
    return json.dumps(json.loads(body), separators=(",", ":")).encode()


def measure(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for name in names:  # warm up
        variants[name]()
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            started = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - started)
    return times


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)

    resource_spans = build_trace(args.spans)
    metrics = tempo_pb2.TraceByIDMetrics(inspectedBytes=123456)
    pb_body = tempo_pb2.TraceByIDResponse(
        trace=tempo_pb2.Trace(resource_spans=[rs.SerializeToString() for rs in resource_spans]), metrics=metrics
    ).SerializeToString()
    json_body = json.dumps(
        {
            "trace": {"resourceSpans": [json_format.MessageToDict(rs) for rs in resource_spans]},
            "metrics": json_format.MessageToDict(metrics),
        },
        separators=(",", ":"),
    ).encode()
    policy = EnrichPolicy()
    tid = resource_spans[0].scope_spans[0].spans[0].trace_id.hex()  # carried in every value, as the mount writes it
    n = sum(len(ss.spans) for rs in resource_spans for ss in rs.scope_spans)
    tagged = sum(
        1
        for rs in resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
        if any(kv.key == PROFILE_ID_ATTR for kv in span.attributes)
    )
    for body, protobuf in ((pb_body, True), (json_body, False)):
        check = enrich_trace_body(body, version=2, protobuf=protobuf, policy=policy, trace_id=tid)
        assert (check.span_count, check.added, check.extended, len(check.spans())) == (n, n - tagged, tagged, n), (
            "enrichment is wrong"
        )

    variants: dict[str, Callable[[], object]] = {
        "protobuf plain": lambda: plain_protobuf(pb_body),
        "protobuf enrich": lambda: enrich_trace_body(pb_body, version=2, protobuf=True, policy=policy, trace_id=tid),
        "protobuf enrich+cache parse": lambda: enrich_trace_body(
            pb_body, version=2, protobuf=True, policy=policy, trace_id=tid
        ).spans(),
        "json plain": lambda: plain_json(json_body),
        "json enrich": lambda: enrich_trace_body(json_body, version=2, protobuf=False, policy=policy, trace_id=tid),
        "json enrich+cache parse": lambda: enrich_trace_body(
            json_body, version=2, protobuf=False, policy=policy, trace_id=tid
        ).spans(),
    }
    times = measure(variants, args.rounds)
    print(
        f"trace: {n} spans in {SERVICES} services; protobuf body {len(pb_body):,} bytes, "
        f"JSON body {len(json_body):,} bytes; {args.rounds} interleaved rounds"
    )
    for name, values in times.items():
        print(f"  {name:30s} median {statistics.median(values) * 1000:8.2f} ms   p99 {p99(values) * 1000:8.2f} ms")
    failed = False
    for kind in ("protobuf", "json"):
        base = statistics.median(times[f"{kind} plain"])
        ratio = statistics.median(times[f"{kind} enrich"]) / base
        ratio99 = p99(times[f"{kind} enrich"]) / p99(times[f"{kind} plain"])
        with_cache = statistics.median(times[f"{kind} enrich+cache parse"]) / base
        ok = ratio <= TARGETS[kind]
        failed |= not ok
        print(
            f"RATIO {kind} enrich / plain decode+encode: median {ratio:.2f}x (target <= {TARGETS[kind]}x: "
            f"{'met' if ok else 'MISSED'}), p99 {ratio99:.2f}x; with the span cache parse after the answer: "
            f"{with_cache:.2f}x"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
