"""``bridge.flamebearer``: Pyroscope's render parameters and Flamebearer answer, held to Pyroscope's own test cases
ported as data (grafana/pyroscope at 3fe6a457: ``pkg/og/util/attime/attime_test.go``,
``pkg/querier/timeline/calculator_test.go`` and ``timeline_test.go``) and to what ``pkg/model/flamegraph.go`` and
``pkg/querier/http.go`` do."""

from __future__ import annotations

import json

import pytest

from bridge import flamebearer, flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.errors import InvalidArgument
from bridge.profiletype import ProfileType

NOW_MS = 1577836800 * 1000  # attime_test.go's "now"


@pytest.mark.parametrize(
    ("text", "want_ms"),
    [
        ("now", NOW_MS),
        ("now-1s", NOW_MS - 1000),
        ("now+1s", NOW_MS + 1000),
        ("now-1min", NOW_MS - 60_000),
        ("now-1h", NOW_MS - 3_600_000),
        ("now-1d", NOW_MS - 86_400_000),
        ("now-1w", NOW_MS - 7 * 86_400_000),
        ("now-1mon", NOW_MS - 30 * 86_400_000),
        ("now-1M", NOW_MS - 30 * 86_400_000),
        ("now-1y", NOW_MS - 365 * 86_400_000),
        ("now-1", NOW_MS),  # a number without a unit counts for nothing, as there
        ("20200101", 1577836800 * 1000),
        ("1577836800", 1577836800 * 1000),
        ("1577836800001", 1577836800001),
        ("1577836800000001", 1577836800000),
        ("1577836800000000001", 1577836800000),
        # beyond attime_test.go: attime.go's other branches
        (" now - 1h ", NOW_MS - 3_600_000),  # spaces are removed
        ("1_577_836_800", 1577836800 * 1000),  # so are underscores and commas
        ("now-1h30m", NOW_MS - 5_400_000),  # offsets add up
        ("now-2ms", NOW_MS - 120_000),  # "ms" starts with "m": minutes, as there
        ("-1h", NOW_MS - 3_600_000),  # no reference: now
        ("20201301", 20201301 * 1000),  # not a date: seconds
    ],
)
def test_at_time_forms_as_pyroscope_reads_them(text: str, want_ms: int) -> None:
    assert flamebearer.parse_at_time(text, NOW_MS, "from") == want_ms


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("yesterday", "neither a Unix time"),
        ("now-1x", "not a number with a unit"),
        ("now-h", "not a number with a unit"),
        ("now-", "needs a number and a unit"),
        ("1" * 25, "too large"),
    ],
)
def test_at_time_text_pyroscope_would_read_as_now_is_refused(text: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words) as info:
        flamebearer.parse_at_time(text, NOW_MS, "until")
    assert "until" in info.value.message


@pytest.mark.parametrize(
    ("seconds", "step"),
    [
        (1, 15),
        (3600, 15),
        (7 * 86400, 300),
        (30 * 86400, 1800),
        (6 * 30 * 86400, 10800),
        (12 * 30 * 86400, 21600),
        (2 * 12 * 30 * 86400, 43200),
        (5 * 12 * 30 * 86400, 86400),
        (6 * 3600, 15),  # the 6-hour render: 14.4 s rounds to the 15 s minimum
        (24 * 3600, 60),
    ],
)
def test_calc_step_is_calc_point_interval(seconds: int, step: int) -> None:
    start = 1681779723000  # calculator_test.go's date (2023-04-18 01:02:03 UTC), in ms
    assert flamebearer.calc_step(start, start + seconds * 1000) == step


# timeline_test.go: (start ms, end ms, step s, points {ts: value}) → (startTime, samples)
TIMELINES = [
    ("no backfill", 1692395965, 1692395965 + 10_000, 10, {1692395965: 99}, 1692390, [99]),
    (
        "backfill data start end",
        1692397017190,
        1692397137190,
        10,
        {1692397077190: 99},
        1692397010,
        [0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0],
    ),
    (
        "backfill data middle",
        1692397658567,
        1692397778567,
        10,
        {1692397718567: 99, 1692397738567: 98},
        1692397650,
        [0, 0, 0, 0, 0, 0, 99, 0, 98, 0, 0, 0],
    ),
    ("backfill all", 1692398026941, 1692398146941, 10, {}, 1692398020, [0] * 12),
    ("arbitrary", 0, 10_000, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 0, [0, 0, 69, 83, 0, 0, 85, 0, 91, 0]),
    ("last step excluded", 3000, 53000, 10, {23000: 69, 53000: 91}, 0, [0, 0, 69, 0, 0]),
    ("last step kept", 3000, 63000, 10, {23000: 69, 53000: 91}, 0, [0, 0, 69, 0, 0, 91]),
    ("start bounded", 1000, 10_000, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 1, [0, 69, 83, 0, 0, 85, 0, 91, 0]),
    ("end bounded", 0, 9000, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 0, [0, 0, 69, 83, 0, 0, 85, 0, 91]),
    ("both bounded", 1000, 9000, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 1, [0, 69, 83, 0, 0, 85, 0, 91]),
    ("start == end", 1000, 1000, 1, {2000: 69}, 1, []),
    ("start > end", 9000, 1000, 1, {2000: 69}, 9, []),
    ("outside", 10_000, 20_000, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 10, [0] * 10),
    ("start mid-bucket", 500, 9000, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 0, [0, 0, 69, 83, 0, 0, 85, 0, 91]),
    ("end mid-bucket", 0, 8500, 1, {2000: 69, 3000: 83, 6000: 85, 8000: 91}, 0, [0, 0, 69, 83, 0, 0, 85, 0]),
]


@pytest.mark.parametrize(("name", "start", "end", "step", "points", "start_time", "samples"), TIMELINES)
def test_timeline_is_timeline_new(
    name: str, start: int, end: int, step: int, points: dict[int, float], start_time: int, samples: list[int]
) -> None:
    out = flamebearer.timeline(points, start, end, step)
    assert (out["startTime"], out["samples"], out["durationDelta"]) == (start_time, samples, step)
    assert out["watermarks"] is None


def test_a_profile_counts_at_the_right_edge_of_its_step() -> None:
    """Pyroscope v2's RangeSeries labels a step by its right edge, counting from the request's start."""
    start, step = 1_000_000, 15
    assert flamebearer.point_label(start, start, step * 1000) == start
    assert flamebearer.point_label(start + 1, start, step * 1000) == start + 15_000
    assert flamebearer.point_label(start - 14_999, start, step * 1000) == start
    assert flamebearer.point_label(start + 15_000, start, step * 1000) == start + 15_000
    rows = [((), flamebearer.point_label(t, start, 15_000), v, 1) for t, v in ((start + 1, 5), (start + 14_000, 7))]
    rows.append(((("pod", "a"),), flamebearer.point_label(start + 20_000, start, 15_000), 2, 1))
    assert flamebearer.series_points(rows, False) == {
        (): {start + 15_000: 12.0},
        (("pod", "a"),): {start + 30_000: 2.0},
    }
    assert flamebearer.series_points([((), start + 15_000, 12, 2)], True) == {(): {start + 15_000: 6.0}}


@pytest.mark.parametrize(
    ("query", "type_id", "selector"),
    [
        ('process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="shop"}', None, '{service_name="shop"}'),
        ("process_cpu:cpu:nanoseconds:cpu:nanoseconds", None, "{}"),
        ('{__name__="process_cpu:cpu:nanoseconds:cpu:nanoseconds", env=~"a|b"}', None, '{env=~"a|b"}'),
        ("memory:alloc_space:bytes:space:bytes{}", "memory:alloc_space:bytes:space:bytes", "{}"),
    ],
)
def test_render_query_is_the_profile_type_and_the_other_matchers(
    query: str, type_id: str | None, selector: str
) -> None:
    ptype, got = flamebearer.parse_query(query, "query")
    assert ptype.id == (type_id or "process_cpu:cpu:nanoseconds:cpu:nanoseconds")
    assert got == selector


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("", '"query" is required'),
        ('{service_name="x"}', "must contain a profile-type selection"),
        ("cpu{", "not <profile type>"),
        ("process_cpu:cpu{}", "is not name:sample_type"),
        ('process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="x}', "cannot parse"),
        ('a:b:c:d:e{__name__="a:b:c:d:e"}', "given twice"),
    ],
)
def test_bad_render_queries_say_what_is_wrong(query: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        flamebearer.parse_query(query, "query")


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({}, 8192),
        ({"max-nodes": "100"}, 100),
        ({"maxNodes": "50", "max-nodes": "100"}, 50),
        ({"maxNodes": "0"}, 8192),
        ({"maxNodes": "many"}, 8192),
        ({"maxNodes": str(1 << 20)}, 1 << 20),
    ],
)
def test_max_nodes_as_pyroscope_reads_it(params: dict[str, str], want: int) -> None:
    assert flamebearer.parse_max_nodes(params) == want


@pytest.mark.parametrize("value", [str((1 << 20) + 1), "-1"])
def test_max_nodes_out_of_range_is_refused(value: str) -> None:
    with pytest.raises(InvalidArgument, match="max flamegraph nodes limit"):
        flamebearer.parse_max_nodes({"maxNodes": value})


@pytest.mark.parametrize(
    ("type_id", "units", "rate"),
    [
        ("process_cpu:cpu:nanoseconds:cpu:nanoseconds", "samples", 1_000_000_000),
        ("memory:alloc_objects:count:space:bytes", "objects", 100),
        ("memory:inuse_space:bytes:space:bytes", "bytes", 100),
        ("goroutines:goroutine:count:goroutine:count", "objects", 100),
        ("wall:wall:nanoseconds:wall:nanoseconds", "nanoseconds", 100),
        ("block:delay:nanoseconds:contentions:count", "nanoseconds", 100),
    ],
)
def test_flamebearer_document_is_export_to_flamebearer(type_id: str, units: str, rate: int) -> None:
    stacks = [(("main", "work"), 30), (("main",), 12)]
    fg = flamegraph.encode_stacks(stacks)
    doc = json.loads(json.dumps(flamebearer.flamebearer(flamegraph.stack_levels(stacks), ProfileType.parse(type_id))))
    assert doc["version"] == 1
    assert doc["flamebearer"] == {
        "names": list(fg.names),
        "levels": [list(level.values) for level in fg.levels],
        "numTicks": 42,
        "maxSelf": 30,
    }
    assert doc["metadata"] == {
        "format": "single",
        "spyName": "",
        "sampleRate": rate,
        "units": units,
        "name": type_id.split(":")[1],
    }
    assert (doc["timeline"], doc["groups"], doc["heatmap"]) == (None, None, None)
    assert "leftTicks" not in doc and "rightTicks" not in doc


def test_diff_document_is_double_with_both_sides_ticks() -> None:
    fg = qpb.FlameGraphDiff(
        names=["total", "a"],
        levels=[qpb.Level(values=[0, 3, 0, 0, 5, 0, 0]), qpb.Level(values=[0, 3, 3, 0, 5, 5, 1])],
        total=8,
        max_self=5,
        leftTicks=3,
        rightTicks=5,
    )
    doc = flamebearer.diff_flamebearer(fg, ProfileType.parse("process_cpu:cpu:nanoseconds:cpu:nanoseconds"))
    assert doc["metadata"]["format"] == "double"
    assert (doc["leftTicks"], doc["rightTicks"], doc["flamebearer"]["numTicks"]) == (3, 5, 8)
    assert doc["flamebearer"]["levels"][1] == [0, 3, 3, 0, 5, 5, 1]
    empty = flamebearer.diff_flamebearer(qpb.FlameGraphDiff(), ProfileType.parse("a:b:c:d:e"))
    assert "leftTicks" not in empty and "rightTicks" not in empty  # Go's omitempty


def test_groups_are_one_timeline_per_value_of_the_first_group_label() -> None:
    q = flamebearer.RenderQuery(ProfileType.parse("a:b:c:d:e"), "{}", 0, 60_000, 8192)
    series = {(("pod", "b"),): {15_000: 2.0}, (("pod", "a"),): {30_000: 3.0}, (): {45_000: 1.0}}
    doc = flamebearer.with_timeline({}, series, q, 15, ["pod"])
    assert list(doc["groups"]) == ["*", "a", "b"]
    assert doc["groups"]["a"]["samples"] == [0, 0, 3, 0]
    assert doc["timeline"]["samples"] == [0, 0, 0, 0]  # more than one series: Render leaves the timeline empty
    one = flamebearer.with_timeline({}, {(): {15_000: 2.0}}, q, 15, [])
    assert one["timeline"]["samples"] == [0, 2, 0, 0] and "groups" not in one
