"""What reading a span-capable request costs the /pyroscope mount, against what it cost before it kept unknown fields.

    .venv/bin/python bench/span_rpc_read.py [--rounds 2000]

Before, every span-capable request in a Connect codec was decoded into our message (``connect.decode_message``:
upb for protobuf, ``json_format.Parse`` for JSON) — which for JSON dropped every field and enum name our .proto
lacks. Now (``span_rpc.read_span_call``) a JSON request is read as its document: one ``json.loads``, and a strict
parse only when it names a span selector; protobuf is decoded by upb as before, unknown fields kept.

Compared, interleaved in one run (each round times both variants once, in rotating order), on what Grafana and
Profiles Drilldown send (``SelectMergeStacktraces`` with the request fields they set):

- JSON, no span selector (Drilldown's flame graph and function table: passed on as it came);
- JSON, a span selector (Grafana's span query: resolved);
- JSON, a carried ``<span id>:<trace id>`` in a format the bridge does not resolve (cleaned in the document);
- protobuf, a span selector.

Target for JSON (what Drilldown sends, and where the bridge now does different work): every ratio ≤ 1.2. Protobuf is
for information: checking a span query for unknown fields before resolving it adds a few µs to a request that then
costs milliseconds of upstream calls. Prints medians and p99 in µs and the ratio lines. Absolute times on shared
machines are noise; ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchkit import loadavg, pct  # noqa: E402
from google.protobuf.message import Message  # noqa: E402

from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge.connect import Codec, decode_message, encode_message  # noqa: E402
from bridge.limits import time_range_problem  # noqa: E402
from bridge.resolution import SpanQuery, clean_span_ids
from bridge.span_rpc import read_span_call  # noqa: E402
from bridge.wire.pyroscope import FLAMEGRAPH_FORMATS  # noqa: E402

TARGET = 1.2
SPAN = "7f80395fd15dcdc9"
TRACE = "0af7651916cd43dd8448eb211c80319c"


def requests() -> dict[str, tuple[bytes, Codec]]:
    base = {
        "profileTypeID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        "labelSelector": '{service_name="shop-backend", namespace="prod", pod=~"shop-backend-.*"}',
        "start": "1717000000000",
        "end": "1717003600000",
        "maxNodes": "16384",
    }
    proto = qpb.SelectMergeStacktracesRequest(
        profile_typeID=base["profileTypeID"],
        label_selector=base["labelSelector"],
        start=1717000000000,
        end=1717003600000,
        max_nodes=16384,
        span_selector=[SPAN],
    )
    return {
        "json plain": (json.dumps({**base, "format": "PROFILE_FORMAT_FLAMEGRAPH"}).encode(), Codec.JSON),
        "json span": (json.dumps({**base, "spanSelector": [SPAN]}).encode(), Codec.JSON),
        "json cleaned": (
            json.dumps({**base, "format": "PROFILE_FORMAT_TREE", "spanSelector": [f"{SPAN}:{TRACE}"]}).encode(),
            Codec.JSON,
        ),
        "protobuf span": (proto.SerializeToString(), Codec.PROTO),
    }


def before(data: bytes, codec: Codec) -> SpanQuery | bytes | None:
    """The mount's reading before (bridge/span_rpc.py at 2484604): decode into our message, then resolve it or clean
    its selector through a copy of the message, re-encoded."""
    msg: Message = decode_message(data, codec, qpb.SelectMergeStacktracesRequest)
    assert isinstance(msg, qpb.SelectMergeStacktracesRequest)
    if msg.span_selector and msg.format in FLAMEGRAPH_FORMATS:
        problem = time_range_problem(msg.start, msg.end)
        assert problem is None
        return SpanQuery(tuple(msg.span_selector), msg.profile_typeID, msg.label_selector, msg.start, msg.end)
    if not msg.span_selector:
        return None
    ids = clean_span_ids(msg.span_selector)
    if list(ids) == list(msg.span_selector):
        return None
    out = qpb.SelectMergeStacktracesRequest()
    out.CopyFrom(msg)
    del out.span_selector[:]
    out.span_selector.extend(ids)
    return encode_message(out, codec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    print(f"load average before: {loadavg()}")
    for name, (data, codec) in requests().items():
        variants = {
            "before": lambda data=data, codec=codec: before(data, codec),
            "now": lambda data=data, codec=codec: read_span_call("SelectMergeStacktraces", data, codec),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(args.rounds):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for key in order:
                started = time.perf_counter()
                variants[key]()
                times[key].append((time.perf_counter() - started) * 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = med["now"] / med["before"]
        print(
            f"{name}: before {med['before']:.1f} µs (p99 {pct(times['before'], 0.99):.1f}), now {med['now']:.1f} µs "
            f"(p99 {pct(times['now'], 0.99):.1f})"
        )
        verdict = (
            f"(target ≤ {TARGET}) {'OK' if ratio <= TARGET else 'OVER'}" if codec is Codec.JSON else "(information)"
        )
        print(f"ratio {name}: now/before {ratio:.2f} {verdict}")
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
