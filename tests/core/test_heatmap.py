"""``bridge.heatmap``: ``SelectHeatmap``'s layout held to grafana/pyroscope's own cases (``pkg/model/heatmap/
range_test.go`` and ``points_builder_test.go`` at 3fe6a457, ported as data) and to the request checks of
``query_heatmap.go``."""

from __future__ import annotations

import pytest

from bridge import heatmap
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.errors import InvalidArgument


@pytest.mark.parametrize(
    ("timestamp", "start", "end", "step", "want"),
    [
        (50, 200, 1000, 100, 200),  # before start: clamped to start
        (100, 100, 1000, 100, 100),  # at start
        (150, 100, 1000, 100, 200),  # in the first bucket
        (200, 100, 1000, 100, 200),  # at the second bucket's boundary
        (550, 100, 1000, 100, 600),  # in a middle bucket
        (1000, 100, 1000, 100, 1000),  # at end
        (1001, 100, 1000, 100, 1000),  # after end: clamped to end
        (180, 12, 1000, 200, 212),  # odd start
    ],
)
def test_normalize_timestamp(timestamp: int, start: int, end: int, step: int, want: int) -> None:
    assert heatmap.normalize_timestamp(timestamp, start, end, step) == want


def query(
    start: int = 0, end: int = 1000, step: int = 100, exemplars: bool = False, limit: int = 0
) -> heatmap.HeatmapQuery:
    return heatmap.HeatmapQuery(False, exemplars, start, end, step, (), limit)


def builder(*points: tuple[int, int], labels: dict[str, str] | None = None) -> heatmap.Builder:
    b = heatmap.Builder(())
    for i, (ts, value) in enumerate(points):
        b.add(labels or {}, ts, value, f"p{i}", "", "")
    return b


def test_no_points_no_series() -> None:
    assert heatmap.range_heatmap(heatmap.Builder(()), query()) == []


def test_single_point() -> None:
    [series] = heatmap.range_heatmap(builder((500, 1000)), query())
    [slot] = series.slots
    assert slot.timestamp == 500 and len(slot.y_min) == len(slot.counts) == 20
    assert sum(slot.counts) == 1 and not series.labels


def test_points_of_one_time_bucket_spread_over_value_buckets() -> None:
    [series] = heatmap.range_heatmap(builder((100, 1000), (150, 1500), (180, 2000)), query(step=200))
    [slot] = series.slots
    assert sum(1 for c in slot.counts if c) == 3 and sum(slot.counts) == 3
    assert slot.y_min[0] == 1000.0 and slot.counts[0] == 1 and slot.counts[-1] == 1  # min and max at the edges
    assert [round(y) for y in slot.y_min[:3]] == [1000, 1050, 1100]  # 20 even buckets over [1000, 2000]


def test_points_of_different_time_buckets_make_sorted_slots() -> None:
    [series] = heatmap.range_heatmap(builder((100, 1000), (300, 1500), (500, 2000)), query(step=200))
    assert [s.timestamp for s in series.slots] == [200, 400, 600]


def test_equal_values_share_one_bucket() -> None:
    [series] = heatmap.range_heatmap(builder((100, 1000), (200, 1000), (300, 1000)), query(step=200))
    assert all(sum(1 for c in s.counts if c) == 1 for s in series.slots)


def test_exemplar_is_the_highest_point_of_each_cell_with_its_ids() -> None:
    b = heatmap.Builder(("service_name",))
    labels = {"service_name": "shop", "pod": "a"}
    b.add(labels, 501, 1000, "", "0807060504030201", "4bf92f3577b34da6a3ce929d0e0e4736")
    b.add(labels, 520, 1001, "", "1111111111111111", "")
    b.add(labels, 540, 9000, "", "2222222222222222", "")
    [series] = heatmap.range_heatmap(b, query(exemplars=True))
    assert [(lp.name, lp.value) for lp in series.labels] == [("service_name", "shop")]
    [slot] = series.slots
    assert [e.span_id for e in slot.exemplars] == ["1111111111111111", "2222222222222222"]  # by bucket
    low = slot.exemplars[0]
    assert (low.value, low.timestamp, low.trace_id) == (1001, 520, "")
    assert [(lp.name, lp.value) for lp in low.labels] == [("pod", "a")]  # without the group-by labels
    without = heatmap.range_heatmap(b, query(exemplars=False))
    assert not without[0].slots[0].exemplars


def test_equal_points_are_one_point_with_values_added_and_labels_intersected() -> None:
    """points_builder.go: same timestamp, span, trace and profile id — one point."""
    b = heatmap.Builder(())
    b.add({"pod": "a", "thread": "1"}, 100, 5, "", "0000000000000001", "")
    b.add({"pod": "a", "thread": "2"}, 100, 7, "", "0000000000000001", "")
    [points] = b.series.values()
    [point] = points.values()
    assert (point.value, point.labels) == (12, {"pod": "a"})
    b.add({"pod": "a"}, 100, 1, "", "", "")  # neither a profile nor a span: not a point
    assert len(points) == 1


def test_series_per_group_by_value_and_top_k_by_counts() -> None:
    b = heatmap.Builder(("pod",))
    for i in range(3):
        b.add({"pod": "a"}, 100 + i, 10, f"a{i}", "", "")
    b.add({"pod": "b"}, 100, 10, "b0", "", "")
    b.add({}, 100, 10, "n0", "", "")
    every = heatmap.range_heatmap(b, query())
    assert [[(lp.name, lp.value) for lp in s.labels] for s in every] == [[], [("pod", "a")], [("pod", "b")]]
    [top] = heatmap.range_heatmap(b, query(limit=1))
    assert [(lp.name, lp.value) for lp in top.labels] == [("pod", "a")]


def request(**fields: object) -> qpb.SelectHeatmapRequest:
    base: dict[str, object] = {
        "profile_typeID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        "start": 1000,
        "end": 2000,
        "step": 1.0,
        "query_type": qpb.HEATMAP_QUERY_TYPE_INDIVIDUAL,
    }
    return qpb.SelectHeatmapRequest(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"step": 0.0}, "step must be >= 1ms"),
        ({"step": 0.0005}, "step must be >= 1ms"),
        ({"step": float("nan")}, "step must be >= 1ms"),
        ({"limit": -1}, "limit must be non-negative"),
        ({"start": 2000}, "start time must be before end time"),
        ({"exemplar_type": tpb.EXEMPLAR_TYPE_SPAN}, "span exemplars only available for span query type"),
        (
            {"query_type": qpb.HEATMAP_QUERY_TYPE_SPAN, "exemplar_type": tpb.EXEMPLAR_TYPE_INDIVIDUAL},
            "individual exemplars only available",
        ),
        ({"query_type": qpb.HEATMAP_QUERY_TYPE_UNSPECIFIED}, "valid heatmap query type must be specified"),
    ],
)
def test_bad_requests_are_refused_in_pyroscope_s_words(fields: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        heatmap.parse_request(request(**fields))


def test_a_request_reads_from_one_step_before_its_start() -> None:
    q = heatmap.parse_request(request(step=15.0, exemplar_type=tpb.EXEMPLAR_TYPE_INDIVIDUAL, group_by=["pod"]))
    assert (q.read_from_ms, q.step_ms, q.exemplars, q.span, q.group_by) == (-14_000, 15_000, True, False, ("pod",))
