"""Pure: a metrics query's first stage — spans into series (Tempo ``ast_metrics.go`` ``MetricsAggregate``,
``engine_metrics.go`` aggregators, ``engine_metrics_average.go``, ``engine_metrics_functions.go``), computed in one
process, so Tempo's job and frontend layers meet here: ``rate`` and ``count_over_time`` count (0 where nothing
happened), ``min/max/sum_over_time`` fold values (nothing where nothing happened; ``sum`` with Kahan-Neumaier
compensation), ``avg_over_time`` keeps Tempo's running mean, ``histogram_over_time`` counts per power-of-two bucket
(``__bucket``, seconds for durations), ``quantile_over_time`` reads quantiles off those buckets (``Log2Quantile``, a
``p`` label each).

Values: ``duration`` in seconds; any other attribute as its number (a duration attribute in nanoseconds, as Tempo
reads it). Series are labelled by the ``by()`` attributes that have a value (all missing: the first, as nil); with no
``by()``, ``__name__`` is the function's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.traceql.ast import Attribute, I, MetricsAggregate, Scope
from bridge.traceql.fields import attribute_getter
from bridge.traceql.model import Span
from bridge.traceql.ops import go_pow
from bridge.traceql.timeseries import (
    BUCKET_LABEL,
    METRIC_NAME,
    NAN,
    SECOND,
    Exemplar,
    ExemplarBudget,
    Intervals,
    Label,
    QueryRange,
    Series,
    SeriesSet,
    series_key,
)
from bridge.traceql.values import NIL, Static, T, map_key, to_float

DURATION: Final = Attribute("duration", Scope.NONE, False, I.DURATION)


def kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    """``kahanSumInc`` (Neumaier)."""
    t = total + inc
    if math.isinf(t):
        c = 0.0
    elif abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


def log2_bucket(v: int) -> float:
    """``Log2Bucketize``: the next power of two up (-1 below 2)."""
    if v < 2:
        return -1.0
    return float(1 << (v - 1).bit_length())


def log2_quantile(p: float, buckets: list[tuple[float, int]]) -> float:
    """``Log2Quantile`` over sorted (bucket max, count) pairs: exponential interpolation inside a bucket."""
    if math.isnan(p) or p < 0 or p > 1 or not buckets:
        return 0.0
    total_count = sum(c for _, c in buckets)
    if total_count == 0:
        return 0.0
    max_samples = max(math.ceil(p * total_count), 1)
    total = bucket = 0
    for i, (top, count) in enumerate(buckets):
        bucket = i
        if total + count > max_samples:
            break
        total += count
        if total == max_samples:
            return top
    interp = (max_samples - total) / buckets[bucket][1]
    hi = math.log2(buckets[bucket][0])
    lo = math.log2(buckets[bucket - 1][0]) if bucket > 0 else hi - 1
    return go_pow(2.0, lo + (hi - lo) * interp)


def value_reader(attr: Attribute | None) -> Callable[[Span], float]:
    """A span's number for a ``*_over_time`` function: duration in seconds, other attributes as numbers, NaN when
    missing (``FloatizeAttribute``)."""
    if attr is None:
        return lambda s: NAN
    if attr == DURATION:
        return lambda s: s.duration_ns / SECOND
    get = attribute_getter(attr)

    def read(s: Span) -> float:
        return to_float(get(s))

    return read


def by_readers(by: list[Attribute]) -> list[Callable[[Span], Static]]:
    """``by()`` lookups: an unscoped ``.x`` reads the span's, then the resource's (``NewGroupingAggregator``)."""
    return [attribute_getter(a) for a in by]


def labels_for(op: str, by: list[Attribute], values: tuple[Static, ...], extra: list[Label]) -> list[Label]:
    """``labelsFor``: the non-nil ``by`` values; all nil: the first as nil; no ``by``: ``__name__``."""
    if not by and not extra:
        return [(METRIC_NAME, Static(T.STRING, op))]
    labels: list[Label] = [(str(b), v) for b, v in zip(by, values, strict=True) if v.type is not T.NIL]
    labels += extra
    if not labels:
        labels = [(str(by[0]), NIL)]
    return labels


@dataclass(slots=True)
class _Group:
    labels: list[Label]
    cells: list[Any]
    exemplars: list[Exemplar] = field(default_factory=list)
    budget: ExemplarBudget | None = None


class FirstStage:
    """One ``MetricsAggregate`` over a request: ``observe`` spans, then ``series``."""

    def __init__(self, agg: MetricsAggregate, q: QueryRange, exemplars: int) -> None:
        self.agg = agg
        self.op = agg.op
        self.q = q
        self.iv = Intervals.of(q)
        self.by = by_readers(agg.by)
        self.value = value_reader(agg.attr)
        self.groups: dict[tuple[Any, ...], _Group] = {}
        self.exemplars = exemplars
        self.rate = 1.0 / (q.step / SECOND) if q.step else 0.0
        self.bucketed = self.op in ("histogram_over_time", "quantile_over_time")
        self.bucket_of = self._bucketizer()

    def _bucketizer(self) -> Callable[[Span], float | None]:
        attr = self.agg.attr
        if attr == DURATION:
            return lambda s: None if s.duration_ns < 2 else log2_bucket(s.duration_ns) / SECOND
        get = attribute_getter(attr) if attr is not None else (lambda s: NIL)

        def bucket(s: Span) -> float | None:
            v = get(s)
            if v.type is T.INT and v.value >= 2:
                return log2_bucket(int(v.value))
            if v.type is T.DURATION and v.value >= 2:
                return log2_bucket(int(v.value)) / SECOND
            return None

        return bucket

    def length(self) -> int:
        return len(self.groups)

    def _group(self, s: Span) -> tuple[_Group, float | None] | None:
        bucket: float | None = None
        if self.bucketed:
            bucket = self.bucket_of(s)
            if bucket is None:
                return None
        return self.group_of(tuple(r(s) for r in self.by), bucket), bucket

    def group_of(self, values: tuple[Static, ...], bucket: float | None = None) -> _Group:
        key = tuple(map_key(v) for v in values) + ((bucket,) if bucket is not None else ())
        group = self.groups.get(key)
        if group is None:
            extra = [(BUCKET_LABEL, Static(T.FLOAT, bucket))] if bucket is not None else []
            labels = labels_for(self.op, self.agg.by, values, extra)
            group = self.groups[key] = _Group(labels, self._cells(), budget=ExemplarBudget(self.exemplars, self.q))
        return group

    def add_count(self, values: tuple[Static, ...], i: int, count: float) -> None:
        """``count`` spans of one group in interval ``i`` at once (counted elsewhere, by SQL)."""
        if 0 <= i < self.iv.count:
            self.group_of(values).cells[i] += count

    def _cells(self) -> list[Any]:
        n = self.iv.count
        if self.op in ("min_over_time", "max_over_time"):
            return [NAN] * n
        if self.op == "sum_over_time":
            return [[NAN, 0.0] for _ in range(n)]
        if self.op == "avg_over_time":
            return [[NAN, 0.0, NAN] for _ in range(n)]  # mean, compensation, weight
        return [0.0] * n

    def observe(self, s: Span) -> None:
        i = self.iv.index(s.start_ns)
        if i < 0:
            return
        if self.op == "avg_over_time":
            inc = self.value(s)
            if math.isnan(inc):
                return
        found = self._group(s)
        if found is None:
            return
        group, _ = found
        self._fold(group.cells, i, s)

    def _fold(self, cells: list[Any], i: int, s: Span) -> None:
        op = self.op
        if op in ("rate", "count_over_time", "histogram_over_time", "quantile_over_time"):
            cells[i] += 1.0
        elif op == "min_over_time":
            v = self.value(s)
            if math.isnan(cells[i]) or v < cells[i]:
                cells[i] = v
        elif op == "max_over_time":
            v = self.value(s)
            if math.isnan(cells[i]) or v > cells[i]:
                cells[i] = v
        elif op == "sum_over_time":
            cell = cells[i]
            v = self.value(s)
            if math.isnan(cell[0]):
                cell[0] = v
            else:
                cell[0], cell[1] = kahan_inc(v - cell[1], cell[0], 0.0)
        else:
            _average(cells[i], self.value(s))

    def observe_exemplar(self, s: Span, labels: list[Label]) -> None:
        found = self._group(s)
        if found is None:
            return
        group, _ = found
        assert group.budget is not None
        ts_ms = s.start_ns // 1_000_000
        if group.budget.exhausted() or not group.budget.take(ts_ms):
            return
        value = NAN if self.op in ("rate", "count_over_time", "histogram_over_time") else self.value(s)
        group.exemplars.append(Exemplar(labels, value, ts_ms))

    def series(self) -> SeriesSet:
        if self.op == "quantile_over_time":
            return self._quantiles()
        if not self.agg.by and not self.bucketed:
            self.group_of(())  # ``UngroupedAggregator``: its one series is there even when no span came (rate 0)
        out: SeriesSet = {}
        for group in self.groups.values():
            values = self._values(group.cells)
            out[series_key(group.labels)] = Series(group.labels, values, group.exemplars)
        return out

    def _values(self, cells: list[Any]) -> list[float]:
        if self.op == "rate":
            return [c * self.rate for c in cells]
        if self.op == "sum_over_time":
            return [c[0] for c in cells]
        if self.op == "avg_over_time":
            return [c[0] + c[1] for c in cells]
        return list(cells)

    def _quantiles(self) -> SeriesSet:
        """``HistogramAggregator.Results``: per series (its bucket label dropped) and quantile, the value of each
        interval from that interval's buckets."""
        merged: dict[tuple[Any, ...], tuple[list[Label], list[dict[float, int]], list[Exemplar]]] = {}
        for group in self.groups.values():
            labels = [(k, v) for k, v in group.labels if k != BUCKET_LABEL]
            bucket = next(v.value for k, v in group.labels if k == BUCKET_LABEL)
            entry = merged.setdefault(series_key(labels), (labels, [dict() for _ in group.cells], []))
            for i, count in enumerate(group.cells):
                if count:
                    entry[1][i][bucket] = entry[1][i].get(bucket, 0) + int(count)
            entry[2].extend(group.exemplars)
        out: SeriesSet = {}
        for labels, hist, exemplars in merged.values():
            for q in self.agg.quantiles:
                qlabels = labels + [("p", Static(T.FLOAT, q))]
                values = [log2_quantile(q, sorted(h.items())) if h else 0.0 for h in hist]
                out[series_key(qlabels)] = Series(qlabels, values, [])
            _assign_exemplars(out, labels, self.agg.quantiles, hist, exemplars)
        return out


def _assign_exemplars(
    out: SeriesSet, labels: list[Label], quantiles: list[float], hist: list[dict[float, int]], exemplars: list[Exemplar]
) -> None:
    """Each exemplar goes to the quantile whose overall value is closest (``assignExemplarToQuantile``)."""
    if not exemplars or not quantiles:
        return
    total: dict[float, int] = {}
    for h in hist:
        for b, c in h.items():
            total[b] = total.get(b, 0) + c
    buckets = sorted(total.items())
    if not buckets:
        return
    overall = [log2_quantile(q, buckets) for q in quantiles]
    for e in exemplars:
        best = min(range(len(quantiles)), key=lambda k: abs(e.value - overall[k]))
        out[series_key(labels + [("p", Static(T.FLOAT, quantiles[best]))])].exemplars.append(e)


def _average(cell: list[float], inc: float) -> None:
    """``addIncrementMean``: a running mean with Kahan compensation."""
    mean, comp, weight = cell
    if math.isnan(mean) and not math.isnan(inc):
        cell[0], cell[1], cell[2] = inc, 0.0, 1.0
        return
    weight += 1
    delta = inc / weight - mean / weight
    if math.isinf(mean) and (
        (math.isinf(delta) and (mean > 0) == (delta > 0)) or not math.isinf(delta) and not math.isnan(delta)
    ):
        cell[2] = weight
        return
    cell[0], cell[1] = kahan_inc(delta, mean, comp)
    cell[2] = weight
