"""Pyroscope's naming and stamping of SDK uploads (docs/contracts/pyroscope-ingest.md) and the time-window step's
decisions built on them, as tables: ``pprof_profile_name``, ``folded_profile_type``, ``otlp_profile_type``,
``upload_window``, ``epoch_to_ns`` (ingest); ``stamp_of``, ``cpu_equivalents``, ``stamp_window`` (resolver). Then
the same rules on real bytes: the recorded ``@pyroscope/nodejs`` uploads, read by the bridge and by the Pyroscope
double's independent reading."""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qs

import pytest

from bridge.pprof import decode_pprof
from bridge.profiletype import ProfileType
from bridge.store import decode
from bridge.timewindow import Stamp, cpu_equivalents, stamp_of, stamp_window, typical_window_ms
from tests.doubles.pyroscope import ingest_metric_name, ingested_profiles
from tests.node_sdk import load_capture

S: Final = 1_000_000_000
T0: Final = 1_796_000_000 * S  # a time in 2026, in ns
CPU: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
# @pyroscope/nodejs's CPU: a "wall" profile's "cpu" sample type, renamed process_cpu by Pyroscope's default
# ingestion relabeling (pkg/validation/relabeling.go) — the period stays wall
NODE_CPU: Final = "process_cpu:cpu:nanoseconds:wall:nanoseconds"


@pytest.mark.parametrize(
    ("types", "display", "name"),
    [
        (["samples", "wall", "cpu"], None, "wall"),  # @pyroscope/nodejs with collectCpuTime
        (["samples", "wall"], None, "wall"),
        (["samples", "cpu"], None, "process_cpu"),  # Go CPU: "samples" reads as "cpu"
        (["cpu"], None, "process_cpu"),
        (["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"], None, "memory"),
        (["objects", "space"], None, "memory"),  # @pyroscope/nodejs heap
        (["goroutine"], None, "goroutines"),
        (["contentions", "delay"], None, "mutex"),  # Go block profiles too, unless the upload names them
        (["contentions", "delay"], {"contentions": "block_count", "delay": "block_duration"}, "block"),
        (["samples", "cpu"], {"samples": "", "cpu": ""}, "process_cpu"),  # an upload's config replaces the defaults
        (["samples"], {"samples": ""}, "samples"),  # … and then nothing says cpu: the last display name
        (["exceptions"], None, "exceptions"),
    ],
)
def test_pprof_profile_name(types: list[str], display: dict[str, str] | None, name: str) -> None:
    assert decode.pprof_profile_name(types, display) == name
    if display is None:
        assert ingest_metric_name(types) == name  # the Pyroscope double's own reading agrees


@pytest.mark.parametrize(
    ("suffix", "rate", "type_id", "factor"),
    [
        ("", 100, CPU, 10_000_000),
        ("cpu", 100, CPU, 10_000_000),
        ("itimer", 50, CPU, 20_000_000),
        ("wall", 100, "wall:wall:nanoseconds:cpu:nanoseconds", 10_000_000),
        ("cpu", 0, "process_cpu:samples:count::", 1),
        ("alloc_space", 100, "memory:alloc_space:bytes::", 1),
        ("inuse_objects", 100, "memory:inuse_objects:count::", 1),
        ("goroutines", 100, "goroutine:goroutines:count::", 1),
        ("mutex_duration", 100, "mutex:delay:nanoseconds::", 1),
        ("block_count", 100, "block:contentions:count::", 1),
        ("lock_duration", 100, "block:delay:nanoseconds::", 1),
        ("milliseconds", 100, "wall:wall:nanoseconds:cpu:nanoseconds", 10_000_000),
    ],
)
def test_folded_profile_type(suffix: str, rate: int, type_id: str, factor: int) -> None:
    ptype, got = decode.folded_profile_type(suffix, rate)
    assert (ptype.id, got) == (type_id, factor)


@pytest.mark.parametrize(
    ("kind", "period", "type_id", "factor"),
    [
        (("samples", "count", "cpu", "nanoseconds"), 10_000_000, CPU, 10_000_000),  # the eBPF profiler
        (("cpu", "nanoseconds", "cpu", "nanoseconds"), 10_000_000, CPU, 1),
        (("cpu", "nanoseconds", "cpu", "nanoseconds"), 0, CPU, 1),
        (("off_cpu", "nanoseconds", "", ""), 0, "off_cpu:off_cpu:nanoseconds::", 1),
        (("alloc_space", "bytes", "space", "bytes"), 524_288, "process_cpu:alloc_space:bytes:space:bytes", 1),
    ],
)
def test_otlp_profile_type(kind: tuple[str, str, str, str], period: int, type_id: str, factor: int) -> None:
    ptype, got = decode.otlp_profile_type(*kind, period)
    assert (ptype.id, got) == (type_id, factor)


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (1_796_000_000, T0),
        (1_796_000_000_123, T0 + 123_000_000),
        (1_796_000_000_123_456, T0 + 123_456_000),
        (1_796_000_000_123_456_789, T0 + 123_456_789),
    ],
)
def test_from_and_until_in_any_unit(value: int, ns: int) -> None:
    assert decode.epoch_to_ns(value) == ns


NOW: Final = T0 + 3600 * S


@pytest.mark.parametrize(
    ("time_ns", "duration", "from_s", "until_s", "window"),
    [
        # @pyroscope/nodejs: stamped when serialised (end), from/until are whole seconds of start and stop
        (T0 + 2_540_000_000, 2_025_000_000, 1_796_000_000, 1_796_000_002, (T0 + 515_000_000, 2_025_000_000)),
        # the Go SDK: stamped at the start
        (T0 + 300_000_000, 10 * S, 1_796_000_000, 1_796_000_010, (T0 + 300_000_000, 10 * S)),
        # no duration: start stamp, the window from from/until
        (T0 + 300_000_000, 0, 1_796_000_000, 1_796_000_010, (T0 + 300_000_000, 10 * S)),
        # a stamp far from the upload's window: from/until win
        (T0 - 600 * S, 10 * S, 1_796_000_000, 1_796_000_010, (T0, 10 * S)),
        # zero or 1970: from/until (Pyroscope replaces it by from)
        (0, 0, 1_796_000_000, 1_796_000_015, (T0, 15 * S)),
        (1_000, 0, 1_796_000_000, None, (T0, 0)),
        # no from: the pprof stamp as it is; nothing at all: the arrival
        (T0, 10 * S, None, None, (T0, 10 * S)),
        (0, 10 * S, None, None, (NOW, 10 * S)),
    ],
)
def test_upload_window(
    time_ns: int, duration: int, from_s: int | None, until_s: int | None, window: tuple[int, int]
) -> None:
    from_ns = decode.epoch_to_ns(from_s) if from_s else None
    until_ns = decode.epoch_to_ns(until_s) if until_s else None
    assert decode.upload_window(time_ns, duration, from_ns, until_ns, NOW) == window


# --------------------------------------------------------------------------------------------- resolver decisions


@pytest.mark.parametrize(
    ("spies", "stamp"),
    [
        ([], Stamp.START),  # Push and OTLP carry no spy: start
        ([""], Stamp.START),
        (["nodespy"], Stamp.END),
        (["gospy"], Stamp.START),
        (["pyspy", "gospy"], Stamp.START),
        (["nodespy", "gospy"], Stamp.EITHER),  # one service, two SDKs: both sides
        (["unknown"], Stamp.EITHER),  # /ingest without spyName
        (["some-new-spy"], Stamp.EITHER),
    ],
)
def test_stamp_of(spies: list[str], stamp: Stamp) -> None:
    assert stamp_of(spies) is stamp


@pytest.mark.parametrize(
    ("available", "answer"),
    [
        ([], (CPU,)),  # nothing known: ask what was asked
        ([CPU, NODE_CPU], (CPU, NODE_CPU)),
        ([NODE_CPU, "wall:wall:nanoseconds:wall:nanoseconds", "wall:samples:count:wall:nanoseconds"], (NODE_CPU,)),
        (["memory:alloc_space:bytes:space:bytes"], (CPU,)),  # no CPU at all: still the asked type
        (
            ["wall:cpu:nanoseconds:wall:nanoseconds", NODE_CPU, "other:cpu:nanoseconds:cpu:nanoseconds"],
            (NODE_CPU, "other:cpu:nanoseconds:cpu:nanoseconds", "wall:cpu:nanoseconds:wall:nanoseconds"),
        ),  # same name, then period
        (["process_cpu:samples:count:cpu:nanoseconds"], (CPU,)),  # same name, other unit: not equivalent
    ],
)
def test_cpu_equivalents(available: list[str], answer: tuple[str, ...]) -> None:
    assert cpu_equivalents(CPU, available) == answer
    for type_id in answer[1:]:
        other = ProfileType.parse(type_id)
        assert (other.sample_type, other.sample_unit) == ("cpu", "nanoseconds")


# stamps every 10 s (ms), a span at 23.5–24.5 s; step 100 ms, skew 0.5 s
STAMPS: Final = [0, 10_000, 20_000, 30_000, 40_000]
SPAN: Final = (23_500, 24_500)


# the answer is a range of STAMPS (Pyroscope selects profiles by their one timestamp): each overlapping window's
# stamp ± (skew + step), never reaching a neighbour's stamp
@pytest.mark.parametrize(
    ("stamp", "span", "window"),
    [
        (Stamp.START, SPAN, (19_400, 20_700)),  # the window starting at 20 s only
        (Stamp.END, SPAN, (29_400, 30_700)),  # the window ending at 30 s only
        (Stamp.EITHER, SPAN, (19_400, 30_700)),  # both readings, nothing further
        (Stamp.START, (29_800, 30_200), (19_400, 30_700)),  # across a boundary: both windows it touches
        (Stamp.END, (29_800, 30_200), (29_400, 40_700)),
        (Stamp.START, (45_000, 46_000), (39_400, 40_700)),  # the last window, still open
        (Stamp.END, (45_000, 46_000), None),  # its end stamp has not arrived: nothing overlaps yet
    ],
)
def test_stamp_window_takes_the_overlapping_windows_and_no_neighbour(
    stamp: Stamp, span: tuple[int, int], window: tuple[int, int] | None
) -> None:
    assert typical_window_ms(STAMPS, 15_000) == 10_000
    got = stamp_window(span, STAMPS, stamp, 10_000, 500)
    assert got == window
    if got is not None:  # never a stamp whose window lies wholly outside the span (± skew)
        for t in STAMPS:
            covers = (t, t + 10_000) if stamp is Stamp.START else (t - 10_000, t)
            outside = covers[1] < span[0] - 500 or covers[0] > span[1] + 500
            if stamp is not Stamp.EITHER and outside:
                assert not got[0] <= t <= got[1], t


def test_typical_window_falls_back_to_the_setting() -> None:
    assert typical_window_ms([], 15_000) == 15_000
    assert typical_window_ms([5_000], 15_000) == 15_000
    assert typical_window_ms([0, 60_000, 120_000, 130_000], 15_000) == 60_000  # the median gap


# --------------------------------------------------------------------------------------------- on real bytes


def test_recorded_node_uploads_are_named_wall_and_stored_at_their_window_start() -> None:
    capture = load_capture()
    assert len(capture.ingests()) == 2
    for upload in capture.ingests():
        query = {k: v[0] for k, v in parse_qs(upload.query).items()}
        assert (query["format"], query["spyName"]) == ("pprof", "nodespy")
        profile = decode_pprof(upload.body)
        from_ns, until_ns = int(query["from"]) * S, int(query["until"]) * S
        assert until_ns <= profile.time_nanos < until_ns + S  # @datadog/pprof stamps the end
        records = decode.records_from_legacy_pprof(
            upload.body,
            decode.parse_legacy_name(query["name"]),
            from_s=int(query["from"]),
            until_s=int(query["until"]),
            now_ns=NOW,
            spy=query["spyName"],
        )
        assert {r.profile_type for r in records} <= {
            NODE_CPU,
            "wall:wall:nanoseconds:wall:nanoseconds",
            "wall:samples:count:wall:nanoseconds",
        }
        assert NODE_CPU in {r.profile_type for r in records}
        for r in records:  # Pyroscope keeps the replaced name as a label of the renamed series only
            assert dict(r.labels).get("__name_replaced__") == ("wall" if r.profile_type == NODE_CPU else None)
        for r in records:
            assert r.time_ns == profile.time_nanos - profile.duration_nanos  # the true start
            assert from_ns <= r.time_ns < from_ns + S and r.duration_ns == profile.duration_nanos
            labels = dict(r.labels)
            assert (labels["service_name"], labels["pyroscope_spy"], labels["env"]) == (
                "shop-node",
                "nodespy",
                "node-e2e",
            )
        # the Pyroscope double, by its own reading: same names, Pyroscope's (end) stamp
        stored = ingested_profiles(query, upload.body)
        assert {p.type_id for p in stored if p.samples} == {r.profile_type for r in records}
        assert {p.time_ms for p in stored} == {profile.time_nanos // 1_000_000}


@pytest.mark.parametrize(
    ("name", "sample_type", "renamed", "labels"),
    [
        ("wall", "cpu", "process_cpu", {"__name_replaced__": "wall"}),  # Node's wall profiler's CPU time
        ("wall", "wall", "wall", {}),
        ("wall", "samples", "wall", {}),
        ("process_cpu", "cpu", "process_cpu", {}),
        ("memory", "alloc_space", "memory", {}),
    ],
)
def test_default_relabel_as_pyroscope_distributors_apply_it(
    name: str, sample_type: str, renamed: str, labels: dict[str, str]
) -> None:
    """grafana/pyroscope pkg/validation/relabeling_test.go Test_defaultRelabelRules: "replace wall name with cpu
    type"; the store and the Pyroscope double (its own code) agree."""
    from tests.doubles.pyroscope import relabeled

    assert decode.default_relabel(name, sample_type) == (renamed, labels)
    assert relabeled(name, sample_type) == renamed
