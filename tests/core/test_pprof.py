"""bridge.pprof: decoding real profiles (Pyroscope's Go CPU test profile, pyroscope-io uploads from the shop capture)
and the one pprof encoder (read back the way pprof reads it, and by ``go tool pprof``)."""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from bridge import flamegraph
from bridge._proto import profile_pb2, push_pb2
from bridge.errors import InvalidArgument
from bridge.pprof import decode_pprof, encode_pprof, iter_samples, period_type, sample_types
from tests.core.test_flamegraph_render import CPU, go_cpu_tree, small_tree, stacks_of_pprof
from tests.paths import GO_CPU_PPROF, SHOP_CAPTURE
from tests.tools import go_pprof_top


def _push_profiles() -> list[bytes]:
    raws = []
    for path in sorted(SHOP_CAPTURE.glob("*_push.v1.PusherService_Push.bin")):
        req = push_pb2.PushRequest.FromString(path.read_bytes())
        raws.extend(s.raw_profile for series in req.series for s in series.samples)
    return raws


def test_go_cpu_profile_gzip_and_plain_decode_the_same() -> None:
    raw = GO_CPU_PPROF.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    gz = decode_pprof(raw)
    plain = decode_pprof(gzip.decompress(raw))
    assert gz == plain
    assert sample_types(gz) == [("samples", "count"), ("cpu", "nanoseconds")]
    assert period_type(gz) == ("cpu", "nanoseconds")
    total = sum(v for _, v, _ in iter_samples(gz, 1))
    assert total == sum(s.value[1] for s in gz.sample)
    frames = [f for f, _, _ in iter_samples(gz, 1)]
    # root first: Go stacks start at the runtime's entry points, never at a leaf like a syscall
    assert all(f for f in frames)
    assert any(f[0].startswith("runtime.") for f in frames)


def test_shop_capture_samples_total_and_labels() -> None:
    total = 0
    with_span = 0
    span_ids: set[str] = set()
    n = 0
    for raw in _push_profiles():
        profile = decode_pprof(raw)
        for frames, value, labels in iter_samples(profile, 0):
            n += 1
            total += value
            assert frames
            if "span_id" in labels:
                with_span += 1
                span_ids.add(labels["span_id"])
                assert len(labels["trace_id"]) == 32
    assert (n, total, with_span, len(span_ids)) == (201, 3_590_000_000, 185, 114)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"\xff\xff\xff", "not a pprof profile"),
        (gzip.compress(b"\x0a\x05\x08\x01\x10\x02", mtime=0)[:-6], "truncated"),
    ],
)
def test_bad_pprof_is_invalid_argument(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        decode_pprof(raw)


def test_value_index_out_of_range() -> None:
    profile = decode_pprof(GO_CPU_PPROF.read_bytes())
    with pytest.raises(InvalidArgument, match="no sample type #5"):
        list(iter_samples(profile, 5))


# --------------------------------------------------------------------------------------------- encode


def test_pprof_layout_is_what_go_tool_pprof_expects() -> None:
    prof = profile_pb2.Profile.FromString(
        encode_pprof(flamegraph.iter_stacks(small_tree()), CPU, period=10_000_000).SerializeToString()
    )
    strings = list(prof.string_table)
    assert strings[0] == ""
    assert len(set(strings)) == len(strings)
    assert [(strings[t.type], strings[t.unit]) for t in prof.sample_type] == [("cpu", "nanoseconds")]
    assert (strings[prof.period_type.type], strings[prof.period_type.unit]) == ("cpu", "nanoseconds")
    assert prof.period == 10_000_000
    assert [m.id for m in prof.mapping] == [1] and prof.mapping[0].has_functions
    function_ids = {f.id for f in prof.function}
    assert all(f.id > 0 and strings[f.name] for f in prof.function)
    for loc in prof.location:
        assert loc.id > 0 and loc.mapping_id == 1
        assert [line.function_id for line in loc.line] and all(line.function_id in function_ids for line in loc.line)
    # one sample per stack, leaf first
    assert len(prof.sample) == 4
    assert all(len(s.value) == 1 for s in prof.sample)
    leafs = {strings[next(f.name for f in prof.function if f.id == s.location_id[0])] for s in prof.sample}
    assert leafs == {"gc", "handle", "count_primes", "render_json"}
    assert stacks_of_pprof(prof) == Counter(
        {
            ("main", "gc"): 5,
            ("main", "handle"): 5,
            ("main", "handle", "count_primes"): 70,
            ("main", "handle", "render_json"): 20,
        }
    )


@pytest.mark.parametrize(
    ("type_id", "sample", "period"),
    [
        ("process_cpu:cpu:nanoseconds:cpu:nanoseconds", ("cpu", "nanoseconds"), ("cpu", "nanoseconds")),
        ("memory:alloc_space:bytes:space:bytes", ("alloc_space", "bytes"), ("space", "bytes")),
        ("goroutine:goroutine:count:goroutine:count", ("goroutine", "count"), ("goroutine", "count")),
    ],
)
def test_pprof_sample_and_period_types_come_from_the_profile_type_id(
    type_id: str, sample: tuple[str, str], period: tuple[str, str]
) -> None:
    prof = encode_pprof(flamegraph.iter_stacks(small_tree()), type_id)
    strings = list(prof.string_table)
    assert (strings[prof.sample_type[0].type], strings[prof.sample_type[0].unit]) == sample
    assert (strings[prof.period_type.type], strings[prof.period_type.unit]) == period


@pytest.mark.parametrize("bad", ["", "cpu", "a:b:c:d", "a:b::d:e", "a:b:c:d:e:f"])
def test_pprof_rejects_a_malformed_profile_type(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="name:sample_type:sample_unit:period_type:period_unit"):
        encode_pprof(flamegraph.iter_stacks(small_tree()), bad)


def test_pprof_round_trips_a_real_go_profile() -> None:
    tree = go_cpu_tree()
    prof = encode_pprof(flamegraph.iter_stacks(tree), CPU)
    again = profile_pb2.Profile.FromString(gzip.decompress(gzip.compress(prof.SerializeToString())))
    assert stacks_of_pprof(again) == Counter(dict(flamegraph.iter_stacks(tree)))
    assert sum(s.value[0] for s in again.sample) == tree.total


def test_pprof_of_no_stacks_is_still_a_valid_profile() -> None:
    prof = encode_pprof([], CPU)
    assert list(prof.string_table)[0] == "" and len(prof.sample_type) == 1 and not prof.sample


def test_go_tool_pprof_reads_the_export(tmp_path: object) -> None:
    from pathlib import Path

    out = Path(str(tmp_path)) / "span.pb.gz"
    prof = encode_pprof(flamegraph.iter_stacks(small_tree()), CPU, period=10_000_000)
    out.write_bytes(gzip.compress(prof.SerializeToString()))
    top = go_pprof_top(out, Path(str(tmp_path)), "-nodecount=10")
    assert "count_primes" in top and "render_json" in top
    assert "Type: cpu" in top


def test_pprof_keeps_the_stacks_order_times_and_leaves_out_zero_values() -> None:
    """The store's SelectMergeProfile: merged rows in the store's order, stamped with the query window."""
    stacks = [(("main", "b"), 3), (("main",), 0), (("main", "a"), 2), (("main", "b"), 1)]
    prof = encode_pprof(stacks, CPU, time_nanos=1_700_000_000_000_000_000, duration_nanos=60_000_000_000)
    assert (prof.time_nanos, prof.duration_nanos, prof.period) == (1_700_000_000_000_000_000, 60_000_000_000, 0)
    strings = list(prof.string_table)
    names = {f.id: strings[f.name] for f in prof.function}
    assert [([names[i] for i in s.location_id], list(s.value)) for s in prof.sample] == [
        (["b", "main"], [3]),
        (["a", "main"], [2]),
        (["b", "main"], [1]),
    ]
    assert stacks_of_pprof(prof) == Counter({("main", "b"): 4, ("main", "a"): 2})
