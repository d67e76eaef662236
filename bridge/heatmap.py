"""Pure: ``SelectHeatmap`` as Pyroscope's v2 read path answers it (grafana/pyroscope, read at 3fe6a457:
``pkg/frontend/readpath/queryfrontend/query_heatmap.go``, ``pkg/querybackend/query_heatmap.go``,
``pkg/model/heatmap/{heatmap,points_builder,range,top}.go``).

Points: ``HEATMAP_QUERY_TYPE_INDIVIDUAL`` has one per profile (its total, its id); ``HEATMAP_QUERY_TYPE_SPAN`` one
per span and profile (the value of the span's samples in that profile, its span and trace id). Points are grouped
into series by the ``group_by`` labels; within a series, points with the same timestamp, span id, trace id and
profile id are one point (values added, labels intersected); a point's labels are its series' labels without the
``group_by`` ones.

``RangeHeatmap``: 20 value buckets spread evenly over the smallest and largest point value of all series (a bucket
holds ``[min, max)``, the last also its max); time slots of ``step`` whose timestamp is the slot's right edge —
``(start - step, start]``, ``(start, start + step]`` … —, earlier points in the first, later ones in the slot of
``end``; per slot, every bucket's minimum, its count, and with exemplars asked for, the point of highest value in
each non-empty bucket (the first of equal ones; Go lists a slot's exemplars in map order, here by bucket). With a
``limit``, the series with the largest sum of counts (``TopSeries``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.errors import InvalidArgument

Y_BUCKETS: Final = 20
INT64_MAX: Final = 2**63 - 1
MAX_POINTS: Final = 2_000_000  # distinct points one heatmap may gather (memory bound)

Key = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class HeatmapQuery:
    """A validated ``SelectHeatmapRequest``: the points to read and how to lay them out."""

    span: bool  # HEATMAP_QUERY_TYPE_SPAN (else INDIVIDUAL)
    exemplars: bool
    start_ms: int
    end_ms: int
    step_ms: int
    group_by: tuple[str, ...]
    limit: int

    @property
    def read_from_ms(self) -> int:
        """The query reads from one step before ``start`` (``stepAdjustment``)."""
        return self.start_ms - self.step_ms


def parse_request(req: qpb.SelectHeatmapRequest) -> HeatmapQuery:
    """The frontend's and the backend's checks, in their order and words."""
    if not req.step >= 0.001:
        raise InvalidArgument(f"step must be >= 1ms, got {req.step:f}")
    if req.HasField("limit") and req.limit < 0:
        raise InvalidArgument(f"limit must be non-negative, got {req.limit}")
    if req.start >= req.end:
        raise InvalidArgument(f"start time must be before end time, got start={req.start} end={req.end}")
    exemplar = req.exemplar_type
    individual, span = qpb.HEATMAP_QUERY_TYPE_INDIVIDUAL, qpb.HEATMAP_QUERY_TYPE_SPAN
    if exemplar == tpb.EXEMPLAR_TYPE_INDIVIDUAL and req.query_type != individual:
        raise InvalidArgument("individual exemplars only available for individual query type")
    if exemplar == tpb.EXEMPLAR_TYPE_SPAN and req.query_type != span:
        raise InvalidArgument("span exemplars only available for span query type")
    if exemplar not in (tpb.EXEMPLAR_TYPE_UNSPECIFIED, tpb.EXEMPLAR_TYPE_NONE, tpb.EXEMPLAR_TYPE_INDIVIDUAL,
                        tpb.EXEMPLAR_TYPE_SPAN):  # fmt: skip
        raise InvalidArgument(f"unknown exemplar type: {exemplar}")
    if req.query_type not in (individual, span):
        raise InvalidArgument("valid heatmap query type must be specified")
    # Go's int64() of a float beyond int64 (amd64: CVTTSD2SI's "integer indefinite", math.MinInt64) leaves
    # Pyroscope's next check to refuse it; Python's int() would raise instead (fuzzed: "step": 1e308 was a 500)
    scaled = req.step * 1000
    step_ms = int(scaled) if math.isfinite(scaled) and abs(scaled) < 2**63 else -(2**63)
    if step_ms < 1:
        raise InvalidArgument(f"step must be >= 1ms, got {req.step:f}")
    return HeatmapQuery(
        span=req.query_type == span,
        exemplars=exemplar in (tpb.EXEMPLAR_TYPE_INDIVIDUAL, tpb.EXEMPLAR_TYPE_SPAN),
        start_ms=req.start,
        end_ms=req.end,
        step_ms=step_ms,
        group_by=tuple(req.group_by),
        limit=req.limit if req.HasField("limit") else 0,
    )


@dataclass(slots=True)
class Point:
    timestamp: int  # ms
    value: int
    profile_id: str = ""
    span_id: str = ""  # 16 hex, "" for none
    trace_id: str = ""  # 32 hex, "" for none
    labels: dict[str, str] = field(default_factory=dict)


class Builder:
    """``heatmap.Builder`` + ``pointsBuilder``: points grouped into series by the ``group_by`` labels."""

    def __init__(self, group_by: Sequence[str]) -> None:
        self.group_by = tuple(group_by)
        self.series: dict[Key, dict[tuple[int, str, str, str], Point]] = {}
        self.size = 0

    def add(
        self, labels: Mapping[str, str], timestamp: int, value: int, profile_id: str, span_id: str, trace_id: str
    ) -> None:
        if not profile_id and not span_id:
            return
        key = tuple(sorted((k, v) for k, v in labels.items() if k in self.group_by))
        points = self.series.setdefault(key, {})
        point_key = (timestamp, span_id, trace_id, profile_id)
        own = {k: v for k, v in labels.items() if k not in self.group_by}
        found = points.get(point_key)
        if found is not None:
            found.value += value
            found.labels = {k: v for k, v in found.labels.items() if own.get(k) == v}
            return
        if self.size >= MAX_POINTS:
            raise InvalidArgument(
                f"the heatmap gathers more than {MAX_POINTS} points: narrow the time range or the label selector"
            )
        self.size += 1
        points[point_key] = Point(timestamp, value, profile_id, span_id, trace_id, own)


@dataclass(slots=True)
class _Cell:
    count: int
    best: Point  # the highest value in the cell, the first of equal ones


def _y_buckets(low: int, high: int) -> list[tuple[int, int]]:
    size = float(high - low) / Y_BUCKETS
    buckets = [(low + int(i * size), low + int((i + 1) * size)) for i in range(Y_BUCKETS)]
    buckets[-1] = (buckets[-1][0], high)
    return buckets


def _bucket_of(value: int, buckets: Sequence[tuple[int, int]]) -> int:
    for i, (low, high) in enumerate(buckets):
        if low <= value < high:
            return i
    return len(buckets) - 1 if value >= buckets[-1][0] else -1


def _round_up(timestamp: int, start: int, step: int) -> int:
    mod = start % step
    timestamp -= mod
    if timestamp % step:
        timestamp = (timestamp // step + 1) * step
    return timestamp + mod


def normalize_timestamp(timestamp: int, start: int, end: int, step: int) -> int:
    """The right edge of the slot a point falls in, within ``[start, end rounded up]``."""
    timestamp, end = _round_up(timestamp, start, step), _round_up(end, start, step)
    return start if timestamp < start else end if timestamp > end else timestamp


def _exemplar(point: Point) -> tpb.Exemplar:
    return tpb.Exemplar(
        timestamp=point.timestamp,
        profile_id=point.profile_id,
        span_id=point.span_id,
        trace_id=point.trace_id,
        value=point.value,
        labels=[tpb.LabelPair(name=k, value=v) for k, v in sorted(point.labels.items())],
    )


def range_heatmap(builder: Builder, query: HeatmapQuery) -> list[tpb.HeatmapSeries]:
    """``RangeHeatmap`` then ``TopSeries``: the answer's series, in label order."""
    ordered = [(key, list(points.values())) for key, points in sorted(builder.series.items()) if points]
    values = [p.value for _, points in ordered for p in points]
    if not values:
        return []
    low, high = min(values), max(0, *values)
    if low == high:
        high = low + 1
    buckets = _y_buckets(low, high)
    result: list[tpb.HeatmapSeries] = []
    for key, points in ordered:
        cells: dict[tuple[int, int], _Cell] = {}  # (slot, bucket) → its count and its best point
        for point in sorted(points, key=lambda p: (p.timestamp, p.span_id, p.trace_id, p.profile_id)):
            y = _bucket_of(point.value, buckets)
            if y < 0:
                continue
            at = normalize_timestamp(point.timestamp, query.start_ms, query.end_ms, query.step_ms)
            cell = cells.get((at, y))
            if cell is None:
                cells[(at, y)] = _Cell(1, point)
                continue
            cell.count += 1
            if point.value > cell.best.value:
                cell.best = point
        series = tpb.HeatmapSeries(labels=[tpb.LabelPair(name=k, value=v) for k, v in key])
        slots: dict[int, tpb.HeatmapSlot] = {}
        for (at, y), cell in sorted(cells.items()):
            slot = slots.get(at)
            if slot is None:
                slot = slots[at] = tpb.HeatmapSlot(
                    timestamp=at, y_min=[float(b[0]) for b in buckets], counts=[0] * len(buckets)
                )
            slot.counts[y] = cell.count
            if query.exemplars:
                slot.exemplars.append(_exemplar(cell.best))
        series.slots.extend(slots[at] for at in sorted(slots))
        result.append(series)
    return top_series(result, query.limit)


def top_series(series: list[tpb.HeatmapSeries], k: int) -> list[tpb.HeatmapSeries]:
    """``TopSeries``: the ``k`` series with the largest sum of counts (ties by labels)."""
    if k <= 0 or len(series) <= k:
        return series

    def order(s: tpb.HeatmapSeries) -> tuple[int, list[tuple[str, str]]]:
        return -sum(sum(slot.counts) for slot in s.slots), [(lp.name, lp.value) for lp in s.labels]

    return sorted(series, key=order)[:k]


def points_of(rows: Iterable[tuple[Mapping[str, str], int, int, str, str, str]], group_by: Sequence[str]) -> Builder:
    """Rows (labels, timestamp ms, value, profile id, span id, trace id) → a builder holding their points."""
    builder = Builder(group_by)
    for labels, ts, value, profile_id, span_id, trace_id in rows:
        builder.add(labels, ts, value, profile_id, span_id, trace_id)
    return builder
