"""bridge.pprof on real profiles: Pyroscope's Go CPU test profile and pyroscope-io uploads from the shop capture."""

from __future__ import annotations

import gzip

import pytest

from bridge._proto import push_pb2
from bridge.errors import InvalidArgument
from bridge.pprof import decode_pprof, iter_samples, period_type, sample_types
from tests.paths import GO_CPU_PPROF, SHOP_CAPTURE


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
        (gzip.compress(b"\x0a\x05\x08\x01\x10\x02")[:-6], "truncated"),
    ],
)
def test_bad_pprof_is_invalid_argument(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        decode_pprof(raw)


def test_value_index_out_of_range() -> None:
    profile = decode_pprof(GO_CPU_PPROF.read_bytes())
    with pytest.raises(InvalidArgument, match="no sample type #5"):
        list(iter_samples(profile, 5))
