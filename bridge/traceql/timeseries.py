"""Pure: TraceQL metrics' time axis and series (Tempo ``engine_metrics.go``): the request's step
(``DefaultQueryRangeStep``), its alignment (``AlignRequest``), which interval a timestamp falls in
(``IntervalMapper``: right-closed intervals ``(start + i·step, start + (i+1)·step]``, labelled by their end; an
instant query has one, ``[start, end]``), labels
and their identity (``Labels.MapKey``: ``__name__`` does not count), the exemplar budget per time bucket
(``util.go`` ``limitedBucketSet``), and the order of a final answer (``combiner/metrics_query_range.go``
``sortResponse``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.traceql.values import Static, T, any_value, encode_to_string, go_format_g, json_float

SECOND: Final = 1_000_000_000
MILLI: Final = 1_000_000
NAN: Final = float("nan")
MAX_EXEMPLARS_PER_BUCKET: Final = 2
METRIC_NAME: Final = "__name__"
QUERY_FRAGMENT: Final = "__query_fragment"
BUCKET_LABEL: Final = "__bucket"
META_TYPE: Final = "__meta_type"

_GRANULARITIES: Final = (3600 * SECOND, 300 * SECOND, 60 * SECOND, 15 * SECOND, 5 * SECOND, SECOND)


def default_step(start: int, end: int) -> int:
    """``DefaultQueryRangeStep``: about 240 points, rounded down to 1h, 5m, 1m, 15s, 5s or 1s (50 ms under a minute)."""
    delta = end - start
    baseline = delta // 240
    if delta < 60 * SECOND:
        g = 50 * MILLI
        return baseline // g * g if baseline > g else g
    for g in _GRANULARITIES:
        if baseline > g:
            return baseline // g * g
    return SECOND


@dataclass(slots=True)
class QueryRange:
    """A metrics request in nanoseconds (``tempopb.QueryRangeRequest``)."""

    query: str
    start: int
    end: int
    step: int
    instant: bool = False
    exemplars: int = 0
    max_series: int = 0

    def align(self) -> None:
        """``AlignRequest``: start and end onto the step, one more interval in front."""
        if self.instant or self.step == 0:
            return
        self.start -= self.start % self.step
        mod = self.end % self.step
        if mod:
            self.end += self.step - mod
        if self.start > self.step:
            self.start -= self.step

    def align_end_left(self) -> None:
        if not self.instant and self.step:
            self.end -= self.end % self.step


@dataclass(frozen=True, slots=True)
class Intervals:
    """``IntervalMapper`` for a request (nanoseconds; the ``_ms`` methods take milliseconds as Tempo does)."""

    start: int
    end: int
    step: int
    instant: bool
    start_ms: int
    end_ms: int

    @staticmethod
    def of(q: QueryRange) -> Intervals:
        start_ms, end_ms = q.start - q.start % MILLI, q.end - q.end % MILLI
        if q.instant:
            return Intervals(q.start, q.end, q.step, True, start_ms, end_ms)
        s = q.step
        start, end = q.start - q.start % s, _align_end(q.end, s)
        return Intervals(start, end, s, False, start_ms - start_ms % s, _align_end(end_ms, s))

    @property
    def count(self) -> int:
        return 1 if self.instant else (self.end - self.start) // self.step

    def index(self, ts: int) -> int:
        if self.instant:
            return 0 if self.start <= ts <= self.end and self.end != self.start else -1
        return _interval(ts, self.start, self.end, self.step)

    def index_ms(self, ts_ms: int) -> int:
        ts = ts_ms * MILLI
        if self.instant:
            return 0 if self.start_ms <= ts <= self.end_ms and self.end_ms != self.start_ms else -1
        return _interval(ts, self.start_ms, self.end_ms, self.step)

    def timestamp(self, i: int) -> int:
        return self.end if self.instant else self.start + (i + 1) * self.step


def _align_end(end: int, step: int) -> int:
    mod = end % step
    return end if mod == 0 else end + step - mod


def _interval(ts: int, start: int, end: int, step: int) -> int:
    if not (start < ts <= end and end != start and step != 0):
        return -1
    return (ts - start - 1) // step


class ExemplarBudget:
    """``limitedBucketSet``: at most ``total`` exemplars, at most two per slice of the range."""

    def __init__(self, total: int, q: QueryRange) -> None:
        self.full = q.instant
        start = q.start - q.start % q.step if q.step else 0
        end = _align_end(q.end, q.step) if q.step else 0
        self.size = max(total // MAX_EXEMPLARS_PER_BUCKET, 1)
        self.total = total
        self.start, self.end = start // MILLI, end // MILLI
        self.width = max((self.end - self.start) // self.size, 1)
        self.counts = [0] * self.size
        self.used = 0

    def exhausted(self) -> bool:
        return self.full or self.used >= self.total

    def take(self, ts_ms: int) -> bool:
        """Room for an exemplar at ``ts_ms``? (and count it)"""
        if self.full or not self.start <= ts_ms <= self.end or self.used >= self.total:
            return False
        i = 0 if self.start == self.end else min((ts_ms - self.start) // self.width, self.size - 1)
        if self.counts[i] >= MAX_EXEMPLARS_PER_BUCKET:
            return False
        self.counts[i] += 1
        self.used += 1
        return True


Label = tuple[str, Static]


@dataclass(slots=True)
class Exemplar:
    labels: list[Label]
    value: float
    ts_ms: int


@dataclass(slots=True)
class Series:
    labels: list[Label]
    values: list[float]
    exemplars: list[Exemplar] = field(default_factory=list)


def series_key(labels: list[Label]) -> tuple[Any, ...]:
    """``Labels.MapKey``: names and typed values, ``__name__`` left out."""
    return tuple((name, int(v.type), v.value) for name, v in labels if name != METRIC_NAME)


SeriesSet = dict[tuple[Any, ...], Series]


def go_map_key(s: Static) -> tuple[int, int, str]:
    """``StaticMapKey`` (typ, code, str) with Go's codes: a float by its bits, an int as uint64."""
    if s.type is T.STRING:
        return (int(s.type), 0, s.value)
    if s.type is T.NIL or s.type is T.STRING_ARRAY:
        return (int(s.type), 0, "")
    if s.type is T.FLOAT:
        return (int(s.type), struct.unpack("<Q", struct.pack("<d", s.value))[0], "")
    if isinstance(s.value, bool | int):
        return (int(s.type), int(s.value) & 0xFFFF_FFFF_FFFF_FFFF, "")
    return (int(s.type), 0, str(s.value))


# ----------------------------------------------------------------------------------------------------- answer


def _label_sort_text(v: Static) -> str:
    """How gogo's ``AnyValue.String()`` reads, which Tempo's frontend sorts series by."""
    if v.type is T.INT:
        return f"int_value:{v.value}"
    if v.type is T.FLOAT:
        return f"double_value:{go_format_g(v.value)}"
    if v.type is T.BOOLEAN:
        return f"bool_value:{'true' if v.value else 'false'}"
    text = encode_to_string(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'string_value:"{text}"'


def sort_key(s: Series) -> tuple[Any, ...]:
    """``sortResponse``: fewer labels first, then by each label's key and value text."""
    return (len(s.labels), [(k, _label_sort_text(v)) for k, v in s.labels])


def labels_json(labels: list[Label]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in labels]


def sample_json(ts_ms: int, value: float) -> dict[str, Any]:
    """A ``tempopb.Sample`` as gogo jsonpb writes it: int64 as a string, a zero value left out."""
    out: dict[str, Any] = {"timestampMs": str(ts_ms)}
    if value != 0:
        out["value"] = json_float(value)
    return out


def to_answer(ss: SeriesSet, iv: Intervals) -> list[dict[str, Any]]:
    """``SeriesSet.ToProto`` then the frontend's sort and exemplar values, as JSON documents."""
    out: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for s in ss.values():
        samples = [(iv.timestamp(i) // MILLI, v) for i, v in enumerate(s.values) if i < iv.count and not math.isnan(v)]
        if not samples:
            continue
        doc: dict[str, Any] = {"labels": labels_json(s.labels), "samples": [sample_json(t, v) for t, v in samples]}
        exemplars = []
        at: dict[int, float] = {}  # interval → its sample's value, for exemplars that carry none
        for e in sorted(s.exemplars, key=lambda e: e.ts_ms):
            i = iv.index_ms(e.ts_ms)
            if i < 0 or i >= len(s.values) or math.isnan(s.values[i]):
                continue
            value = e.value
            if math.isnan(value):
                if not at:
                    at = {iv.index_ms(t): v for t, v in samples}
                value = at.get(i, NAN)
            exemplars.append(
                {
                    "labels": labels_json(e.labels),
                    **({"value": json_float(value)} if value else {}),
                    "timestampMs": str(e.ts_ms),
                }  # fmt: skip
            )
        if exemplars:
            doc["exemplars"] = exemplars
        out.append((sort_key(s), doc))
    out.sort(key=lambda kv: kv[0])
    return [doc for _, doc in out]
