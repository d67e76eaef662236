"""Pure: a TraceQL search, planned once and run trace by trace (Tempo ``engine.go`` ``Compile`` / ``ExecuteSearch``,
``combine.go``), and the answer's shape (``tempopb.SearchResponse`` as Tempo's frontend writes it in JSON).

``compile_search`` parses, validates and plans: the pipeline, the fetch request (what storage can test: ``plan.fetch``
— the store pushes down what it can), the fetch layer's span filter and what each span of the answer shows. Then
``run`` evaluates one whole trace: the spans storage would hand over, the pipeline, each resulting spanset's
``matched`` count and its first ``spss`` spans. ``Combiner`` keeps up to ``limit`` traces — the newest when asked
(``with(most_recent=true)``), the first found otherwise, as Tempo's combiners do — merging spansets of one trace by
their ``by()`` values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.traceql.ast import Op, Pipeline, Root, SpansetFilter, SpansetOp, references_span
from bridge.traceql.build import evaluate_constant
from bridge.traceql.conditions import (
    FetchRequest,
    condition_values,
    extract,
    fetch_filter,
    name_condition,
    visible_attributes,
)
from bridge.traceql.engine import compile_pipeline
from bridge.traceql.errors import NotRunnable, QueryError
from bridge.traceql.model import Span, Spanset, TraceInfo, span_id_hex
from bridge.traceql.parser import parse
from bridge.traceql.validate import validate_root
from bridge.traceql.values import Static, T, any_value, encode_to_string

DEFAULT_SPSS: Final = 3
ROOT_NOT_RECEIVED: Final = "<root span not yet received>"  # pkg/search/util.go, set by Tempo's frontend combiner


@dataclass(slots=True, eq=False)
class SearchPlan:
    root: Root
    pipeline: Pipeline
    fetch: FetchRequest
    evaluate: Callable[[list[Spanset]], list[Spanset]]
    keep: Callable[[Span], bool]
    attributes: Callable[[Span], list[tuple[str, Static]]]
    name_of: Callable[[Span], str]
    most_recent: bool
    noop: bool


def compile_search(text: str) -> SearchPlan:
    """``Compile`` for a search: math between sub-queries is refused, as Tempo refuses it. A metrics query is searched
    as Tempo searches one (``engine.go`` ``Compile``: ``SinglePipeline``): its spanset pipeline runs, its metrics
    stages only add what they read (a ``by()`` attribute) to what each span shows, its hints are ignored."""
    root = parse(text)
    validate_root(root)
    pipeline = root.single_pipeline()
    if pipeline is None:
        raise NotRunnable("math expressions not supported")
    fetch = next(iter(extract(root).values()))
    names = name_condition(fetch)

    def name_of(s: Span) -> str:
        return s.name if any(condition_values(c, s) for c in names) else ""

    most_recent = root.hint("most_recent", T.BOOLEAN)
    return SearchPlan(
        root=root,
        pipeline=pipeline,
        fetch=fetch,
        evaluate=compile_pipeline(pipeline),
        keep=fetch_filter(fetch),
        attributes=visible_attributes(fetch),
        name_of=name_of,
        most_recent=most_recent.type is T.BOOLEAN and bool(most_recent.value),
        noop=is_noop(root),
    )


def is_noop(root: Root) -> bool:
    """``IsNoop``: every filter (one level deep) is a constant false, as in ``{ false }``."""

    def false_filter(x: object) -> bool:
        if not isinstance(x, SpansetFilter) or references_span(x.expr):
            return False
        try:
            return evaluate_constant(x.expr) == Static(T.BOOLEAN, False)
        except QueryError:
            return False

    for p in root.pipelines.values():
        for e in p.elements:
            if isinstance(e, SpansetOp):
                if not (false_filter(e.lhs) and false_filter(e.rhs)):
                    return False
            elif not false_filter(e):
                return False
    return True


@dataclass(slots=True)
class Found:
    """One spanset of the answer: its spans (at most ``spss``), how many matched, its attributes."""

    spans: list[Span]
    matched: int
    attributes: list[tuple[str, Static]]


def in_window(trace: TraceInfo, start_s: int, end_s: int) -> bool:
    """Does the trace overlap the search window (seconds; 0 and 0: no window)? Tempo tests the trace's own bounds
    (``createTraceIterator``: start <= end of window, end >= start of window)."""
    if not start_s and not end_s:
        return True
    return trace.start_ns <= end_s * 1_000_000_000 and trace.end_ns >= start_s * 1_000_000_000


def run(plan: SearchPlan, trace: TraceInfo, spans: list[Span], spss: int) -> list[Found]:
    """The spansets one trace contributes (empty: it does not match)."""
    start = [s for s in spans if plan.keep(s)]
    if not start:
        return []
    results = plan.evaluate([Spanset(trace, start)])
    ordered = []
    for ss in results:
        if not ss.spans:
            continue
        kept = ss.spans[: spss or DEFAULT_SPSS]
        ordered.append((kept[-1].order, Found(kept, len(ss.spans), ss.attributes)))
    ordered.sort(key=lambda x: x[0])
    return [f for _, f in ordered]


# ------------------------------------------------------------------------------------------------------ answer


def span_json(plan: SearchPlan, s: Span) -> dict[str, Any]:
    """A ``tempopb.Span`` as gogo jsonpb writes it (uint64 as strings, empty fields left out)."""
    out: dict[str, Any] = {"spanID": span_id_hex(s.span_id)}
    name = plan.name_of(s)
    if name:
        out["name"] = name
    out["startTimeUnixNano"] = str(s.start_ns)
    out["durationNanos"] = str(s.duration_ns)
    attrs = plan.attributes(s)
    if attrs:
        out["attributes"] = [{"key": k, "value": any_value(v)} for k, v in attrs]
    return out


def spanset_json(plan: SearchPlan, f: Found) -> dict[str, Any]:
    out: dict[str, Any] = {"spans": [span_json(plan, s) for s in f.spans], "matched": f.matched}
    if f.attributes:
        out["attributes"] = [{"key": k, "value": any_value(v)} for k, v in f.attributes]
    return out


def spanset_id(ss: dict[str, Any]) -> str:
    """``spansetID``: the spanset's ``by…`` attributes make it the same as another one."""
    return "".join(a["key"] + repr(a["value"]) for a in ss.get("attributes", []) if a["key"].startswith("by"))


@dataclass(slots=True, eq=False)
class TraceResult:
    trace_id: str
    root_service: str
    root_name: str
    start_ns: int
    duration_ms: int
    service_stats: dict[str, tuple[int, int]]
    spansets: list[dict[str, Any]] = field(default_factory=list)

    def add(self, ss: dict[str, Any]) -> None:
        """``combineSearchResults``: the same spanset (by its ``by()`` values) keeps the one that matched most."""
        key = spanset_id(ss)
        for existing in self.spansets:
            if spanset_id(existing) == key:
                if existing["matched"] < ss["matched"]:
                    existing.clear()
                    existing.update(ss)
                return
        self.spansets.append(ss)

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"traceID": self.trace_id, "rootServiceName": self.root_service or ROOT_NOT_RECEIVED}
        if self.root_name:
            out["rootTraceName"] = self.root_name
        out["startTimeUnixNano"] = str(self.start_ns)
        if self.duration_ms:
            out["durationMs"] = self.duration_ms
        if self.spansets:
            out["spanSet"] = self.spansets[0]
            out["spanSets"] = self.spansets
        if self.service_stats:
            out["serviceStats"] = {
                svc: {k: v for k, v in (("spanCount", n), ("errorCount", e)) if v}
                for svc, (n, e) in sorted(self.service_stats.items())
            }
        return out


def service_stats(spans: list[Span]) -> dict[str, tuple[int, int]]:
    stats: dict[str, list[int]] = {}
    for s in spans:
        entry = stats.setdefault(s.service, [0, 0])
        entry[0] += 1
        entry[1] += s.status == 0
    return {k: (v[0], v[1]) for k, v in stats.items()}


class Combiner:
    """Up to ``limit`` traces (``NewMetadataCombiner``): first found, or the newest with ``most_recent``."""

    def __init__(self, limit: int, most_recent: bool) -> None:
        self.limit = limit
        self.most_recent = most_recent
        self.traces: dict[str, TraceResult] = {}

    def complete(self) -> bool:
        """Enough traces: the store reads newest first, so the first ``limit`` found are the most recent too."""
        return self.limit > 0 and len(self.traces) >= self.limit

    def add(self, plan: SearchPlan, trace: TraceInfo, spans: list[Span], found: list[Found]) -> None:
        key = trace.id_hex
        result = self.traces.get(key)
        if result is None:
            if self.complete():
                return
            if self.most_recent and self.limit > 0 and len(self.traces) >= self.limit:
                oldest = min(self.traces.values(), key=lambda t: t.start_ns)
                if oldest.start_ns > trace.start_ns:
                    return
                del self.traces[oldest.trace_id]
            result = self.traces[key] = TraceResult(
                trace_id=key,
                root_service=trace.root_service,
                root_name=trace.root_name,
                start_ns=trace.start_ns,
                duration_ms=trace.duration_ns // 1_000_000,
                service_stats=service_stats(spans),
            )
        for f in found:
            result.add(spanset_json(plan, f))

    def answer(self) -> list[dict[str, Any]]:
        ordered = sorted(self.traces.values(), key=lambda t: t.start_ns, reverse=True)
        return [t.json() for t in ordered]


def response_json(traces: list[dict[str, Any]], inspected_spans: int, inspected_bytes: int = 0) -> dict[str, Any]:
    metrics: dict[str, Any] = {"inspectedTraces": len(traces)}
    if inspected_bytes:
        metrics["inspectedBytes"] = str(inspected_bytes)
    metrics.update({"completedJobs": 1, "totalJobs": 1})
    if inspected_spans:
        metrics["inspectedSpans"] = str(inspected_spans)
    doc: dict[str, Any] = {"traces": traces}  # `"traces":[]` when none, as Tempo's frontend writes it
    doc["metrics"] = metrics
    return doc


__all__ = ["Op", "encode_to_string"]
