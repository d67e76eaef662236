"""Pure: a TraceQL metrics query, planned once and fed spans (Tempo ``engine_metrics.go``
``CompileMetricsQueryRange`` and the frontend's final stage, in one process).

``compile_metrics`` parses and validates; each sub-query (one, or two and more under ``(A) + (B)``) gets its pipeline,
fetch request and first stage. A ``Run`` for one request takes spans — ``observe`` for a span a sub-query's filters
decide alone (``span_by_span``), ``observe_trace`` for a whole trace the pipeline must run on (structural operators,
aggregates) — counting only spans that start in ``(start, end]``, one exemplar per trace; ``answer`` finishes:
the sub-queries' series (with ``__query_fragment`` when there are several), the second stage, Tempo's answer shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.traceql.aggregate import FirstStage
from bridge.traceql.ast import MetricsAggregate, MetricsCompare, Pipeline, Root
from bridge.traceql.compare import CompareStage
from bridge.traceql.conditions import FetchRequest, condition_values, extract
from bridge.traceql.engine import compile_pipeline
from bridge.traceql.errors import NotRunnable
from bridge.traceql.model import Span, Spanset, TraceInfo
from bridge.traceql.parser import parse
from bridge.traceql.prefilter import Need, need, span_by_span
from bridge.traceql.second import process
from bridge.traceql.timeseries import (
    QUERY_FRAGMENT,
    ExemplarBudget,
    Intervals,
    Label,
    QueryRange,
    SeriesSet,
    series_key,
    to_answer,
)
from bridge.traceql.validate import validate_root
from bridge.traceql.values import Static, T

MAX_EXEMPLARS: Final = 100  # Tempo's frontend default (metrics.sharder.max_exemplars)


@dataclass(slots=True, eq=False)
class SubQuery:
    key: str
    pipeline: Pipeline
    first: MetricsAggregate | MetricsCompare
    fetch: FetchRequest
    evaluate: Callable[[list[Spanset]], list[Spanset]]
    need: Need
    span_by_span: bool


@dataclass(slots=True, eq=False)
class MetricsPlan:
    root: Root
    subqueries: list[SubQuery]

    def exemplars(self, asked: int) -> int:
        """``normalizeRequestExemplars``: the ``exemplars`` hint, else what was asked, else Tempo's default; at most
        the default."""
        hint = self.root.hint("exemplars", T.INT)
        if hint.type is T.INT:
            asked = max(int(hint.value), 0)
        elif (off := self.root.hint("exemplars", T.BOOLEAN)).type is T.BOOLEAN and not off.value:
            asked = 0
        elif asked == 0:
            asked = MAX_EXEMPLARS
        return min(asked, MAX_EXEMPLARS)


def compile_metrics(text: str) -> MetricsPlan:
    root = parse(text)
    validate_root(root)
    if not root.is_metrics:
        raise NotRunnable("not a metrics query")
    requests = extract(root)
    subs = [
        SubQuery(
            key=key,
            pipeline=pipeline,
            first=root.first_stages[key],
            fetch=requests[key],
            evaluate=compile_pipeline(pipeline),
            need=need(pipeline),
            span_by_span=span_by_span(pipeline),
        )
        for key, pipeline in root.pipelines.items()
    ]
    return MetricsPlan(root, subs)


def exemplar_labels(fetch: FetchRequest) -> Callable[[Span], list[Label]]:
    """An exemplar's labels: the span's trace id and the attributes the query read (``AllAttributes``)."""
    conditions = [*fetch.conditions, *fetch.second_pass]

    def labels(s: Span) -> list[Label]:
        out: list[Label] = [("trace:id", Static(T.STRING, s.trace.id_hex))]
        seen = {"trace:id"}
        for c in conditions:
            for attr, value in condition_values(c, s):
                name = str(attr)
                if name not in seen and value.type is not T.NIL and value.type is not T.DURATION:
                    seen.add(name)
                    out.append((name, value))
        return out

    return labels


@dataclass(slots=True, eq=False)
class Run:
    """One request's aggregation."""

    plan: MetricsPlan
    q: QueryRange
    stages: dict[str, FirstStage | CompareStage] = field(default_factory=dict)
    labels: dict[str, Callable[[Span], list[Label]]] = field(default_factory=dict)
    exemplar_traces: dict[str, set[bytes]] = field(default_factory=dict)
    spans: int = 0

    def __post_init__(self) -> None:
        exemplars = self.plan.exemplars(self.q.exemplars)
        self.q.exemplars = exemplars
        share = exemplars // len(self.plan.subqueries) if exemplars else 0
        if exemplars and share == 0:
            share = 1
        for sub in self.plan.subqueries:
            if isinstance(sub.first, MetricsCompare):
                self.stages[sub.key] = CompareStage(sub.first, self.q)
            else:
                self.stages[sub.key] = FirstStage(sub.first, self.q, share)
            self.labels[sub.key] = exemplar_labels(sub.fetch)

    def counts(self, start_ns: int) -> bool:
        """Does a span starting then count (``(start, end]``)?"""
        return self.q.start < start_ns <= self.q.end

    def observe(self, sub: SubQuery, s: Span, exemplar: bool = False) -> None:
        self.spans += 1
        stage = self.stages[sub.key]
        stage.observe(s)
        if exemplar:
            stage.observe_exemplar(s, self.labels[sub.key](s))

    def want_exemplar(self, key: str, trace_id: bytes) -> bool:
        """One exemplar per trace and sub-query, while the request has room (``sampleExemplar``): each sub-query of
        ``(A) + (B)`` is its own evaluator in Tempo (``CompileMetricsQueryRangeNonRaw``), so both sides keep theirs
        and the math merges them (``mergeExemplars``)."""
        seen = self.exemplar_traces.setdefault(key, set())
        if len(seen) >= self.q.exemplars or trace_id in seen:
            return False
        seen.add(trace_id)
        return True

    def observe_trace(self, sub: SubQuery, info: TraceInfo, spans: list[Span], keep: Callable[[Span], bool]) -> None:
        """Run the pipeline on a whole trace and count its result spans that start in the window."""
        start = [s for s in spans if keep(s)]
        if not start:
            return
        exemplar = self.want_exemplar(sub.key, info.trace_id)
        for ss in sub.evaluate([Spanset(info, start)]):
            counted = [s for s in ss.spans if self.counts(s.start_ns)]
            for i, s in enumerate(counted):
                self.observe(sub, s, exemplar and i == 0)
                exemplar = exemplar and i != 0

    def length(self) -> int:
        return sum(stage.length() for stage in self.stages.values())

    def series(self) -> SeriesSet:
        """All sub-queries' series, then the second stage (``MetricsFrontendEvaluator.Results``)."""
        combined: SeriesSet = {}
        many = len(self.stages) > 1
        for key, stage in self.stages.items():
            for s in stage.series().values():
                if many:
                    s.labels = s.labels + [(QUERY_FRAGMENT, Static(T.STRING, key))]
                combined[series_key(s.labels)] = s
        _limit_exemplars(combined, self.q)
        return process(self.plan.root.second_stage(), combined, Intervals.of(self.q).count)

    def answer(self) -> list[dict[str, Any]]:
        return to_answer(self.series(), Intervals.of(self.q))


def _limit_exemplars(ss: SeriesSet, q: QueryRange) -> None:
    """The frontend's one exemplar budget over every series (``SimpleAggregator.aggregateExemplars``)."""
    budget = ExemplarBudget(q.exemplars, q)
    for s in ss.values():
        s.exemplars = [e for e in s.exemplars if not budget.exhausted() and budget.take(e.ts_ms)]
