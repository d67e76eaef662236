"""Pure: ``compare({selection}, topN, start, end)`` (Tempo ``engine_metrics_compare.go``): every attribute value of the
spans, counted per interval, once for the spans in the selection (the filter, within its own window when given) and
once for the rest (the baseline), with a total per attribute on each side; per attribute the ``topN`` values by count.

Series: ``{__meta_type="baseline"|"selection", <attribute>=<value>}`` and ``{__meta_type="baseline_total"|
"selection_total", <attribute>=nil}``. The attributes are those Tempo reads with "select all": the span's and its
resource's and instrumentation scope's attributes, ``name``, ``status``, ``statusMessage``, ``kind``,
``span:childCount``, ``rootName``, ``rootServiceName``, ``instrumentation:name`` / ``:version`` (durations, ids and
nested-set numbers are never compared), and Tempo's default dedicated columns, which a Tempo block holds for every
span: a span without one reads it as nil, and that nil is counted like any value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from bridge.traceql.ast import Attribute, MetricsCompare, Scope
from bridge.traceql.engine import span_predicate
from bridge.traceql.model import Span
from bridge.traceql.timeseries import META_TYPE, Intervals, QueryRange, Series, SeriesSet, series_key
from bridge.traceql.values import NIL, Static, T, map_key

BASELINE: Final = Static(T.STRING, "baseline")
SELECTION: Final = Static(T.STRING, "selection")
BASELINE_TOTAL: Final = Static(T.STRING, "baseline_total")
SELECTION_TOTAL: Final = Static(T.STRING, "selection_total")
# tempodb/backend/block_meta.go defaultDedicatedColumns: columns of their own in every vParquet5 block, so "select all"
# reads them for every span (vparquet5 block_traceql.go: each dedicated column selected as is), nil when unset
DEDICATED_RESOURCE: Final = ("k8s.cluster.name", "k8s.namespace.name", "k8s.pod.name", "k8s.container.name")
DEDICATED_SPAN: Final = (
    "http.request.method", "http.response.status_code", "url.path", "url.route", "server.address", "server.port",
    "http.method", "http.url", "http.route", "http.status_code",
)  # fmt: skip


def span_attributes(s: Span) -> Iterator[tuple[str, Static]]:
    """What "select all" reads of a span, named as Tempo names them (``Attribute.String()``)."""
    yield "name", Static(T.STRING, s.name)
    yield "status", Static(T.STATUS, s.status)
    yield "statusMessage", Static(T.STRING, s.status_message)
    yield "kind", Static(T.KIND, s.kind)
    yield "span:childCount", Static(T.INT, s.child_count)
    yield "rootName", Static(T.STRING, s.trace.root_name)
    yield "rootServiceName", Static(T.STRING, s.trace.root_service)
    yield "instrumentation:name", Static(T.STRING, s.scope.name)
    yield "instrumentation:version", Static(T.STRING, s.scope.version)
    for k, v in s.attrs.items():
        if v.type is not T.NIL:
            yield _name("span", k), v
    for k, v in s.resource.attrs.items():
        if v.type is not T.NIL:
            yield _name("resource", k), v
    for k, v in s.scope.attrs.items():
        if v.type is not T.NIL:
            yield _name("instrumentation", k), v
    for k in DEDICATED_SPAN:
        if k not in s.attrs:
            yield _name("span", k), NIL
    for k in DEDICATED_RESOURCE:
        if k not in s.resource.attrs:
            yield _name("resource", k), NIL


def _name(scope: str, key: str) -> str:
    return str(Attribute(key, Scope[scope.upper()]))


class CompareStage:
    """``MetricsCompare`` over a request."""

    def __init__(self, c: MetricsCompare, q: QueryRange) -> None:
        self.c = c
        self.iv = Intervals.of(q)
        self.selected = span_predicate(c.selection.expr)
        # side → attribute → value key → (value, counts); side → attribute → totals
        self.values: dict[bool, dict[str, dict[tuple[int, Any], tuple[Static, list[float]]]]] = {True: {}, False: {}}
        self.totals: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}

    def length(self) -> int:
        return sum(len(v) for v in self.values.values()) + sum(len(v) for v in self.totals.values())

    def _is_selection(self, s: Span) -> bool:
        if self.c.start_ns > 0 and self.c.end_ns > 0:
            return self.c.start_ns < s.start_ns <= self.c.end_ns and self.selected(s)
        return self.selected(s)

    def observe(self, s: Span) -> None:
        i = self.iv.index(s.start_ns)
        if i < 0:
            return
        side = self._is_selection(s)
        values, totals = self.values[side], self.totals[side]
        n = self.iv.count
        for name, v in span_attributes(s):
            if v.type is T.DURATION:
                continue
            per_value = values.setdefault(name, {})
            entry = per_value.get(map_key(v))
            if entry is None:
                entry = per_value[map_key(v)] = (v, [0.0] * n)
            entry[1][i] += 1
            totals.setdefault(name, [0.0] * n)[i] += 1

    def observe_exemplar(self, s: Span, labels: list[tuple[str, Static]]) -> None:
        return  # Tempo's compare exemplars carry no value; the answer here has none

    def series(self) -> SeriesSet:
        out: SeriesSet = {}
        for side, meta, total_meta in ((False, BASELINE, BASELINE_TOTAL), (True, SELECTION, SELECTION_TOTAL)):
            for name, per_value in self.values[side].items():
                ranked = list(per_value.values())
                if len(ranked) > self.c.top_n:
                    ranked.sort(key=lambda e: sum(e[1]), reverse=True)
                    ranked = ranked[: self.c.top_n]
                for value, counts in ranked:
                    labels = [(META_TYPE, meta), (name, value)]
                    out[series_key(labels)] = Series(labels, counts)
            for name, counts in self.totals[side].items():
                labels = [(META_TYPE, total_meta), (name, NIL)]
                out[series_key(labels)] = Series(labels, counts)
        return out
