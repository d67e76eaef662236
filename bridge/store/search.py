"""Run a planned TraceQL search (``bridge.traceql.search``) on the store, in two phases (on a reader thread):

1. **Candidates.** The scans of ``pushdown`` read the window's spans newest first, with what SQL answers pushed down
   (``resource.service.name``, ``name``, ``duration``, ids, root); each row is tested against the rest of what every
   span of the answer must satisfy (``prefilter``) — decoding the span only when that reads more than columns. A
   trace with a span that passes is a candidate.
2. **Answer.** Each candidate trace is read whole (``trace_rows``) and the query runs on it exactly as Tempo runs it
   on a trace; one that overlaps the window and matches joins the answer, until ``limit`` traces.

A search that examines ``budget`` spans in phase 1 before it has ``limit`` traces stops and says it is partial.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.store.pushdown import BUCKETS, TENANT, Scan, column_only, search_scans, sql_of_need
from bridge.store.query import FAR_FUTURE_NS
from bridge.store.trace_rows import Decoder, SpanRow, span_buckets, trace_rows
from bridge.traceql import model
from bridge.traceql.prefilter import compile_need, need
from bridge.traceql.search import Combiner, SearchPlan, in_window, run
from bridge.traceql.values import Static, T

SEARCH_SCAN_BUDGET: Final = 200_000  # spans a search examines at most before it answers partial


@dataclass(slots=True)
class Outcome:
    """A search's answer: Tempo's ``traces``, the spans examined, and why it is partial (None: complete)."""

    traces: list[dict[str, Any]]
    inspected_spans: int = 0
    partial: str | None = None
    hits: list[tuple[model.TraceInfo, list[model.Span]]] = field(default_factory=list)


def bind(scan: Scan, conn: sqlite3.Connection, tenant: str) -> list[Any]:
    """A scan's parameters with the tenant and the bucket list filled in."""
    out: list[Any] = []
    for p in scan.params:
        if p is TENANT:
            out.append(tenant)
        elif p is BUCKETS:
            lo, hi = scan.bucket_range or (0, FAR_FUTURE_NS)
            out.append(span_buckets(conn, lo, hi))
        else:
            out.append(p)
    return out


def column_span(row: SpanRow) -> model.Span:
    """A span built from the row's columns alone (for conditions that read nothing else)."""
    info = model.TraceInfo(row.trace_id)
    parent = b"" if row.parent_span_id is None else row.parent_span_id.to_bytes(8, "big", signed=True)
    return model.Span(
        trace=info,
        span_id=row.span_id.to_bytes(8, "big", signed=True),
        parent_id=parent,
        start_ns=row.start_ns,
        duration_ns=max(0, row.end_ns - row.start_ns),
        name=row.name,
        status=2,
        kind=0,
        status_message="",
        attrs={},
        resource=model.Scope({"service.name": Static(T.STRING, row.service)} if row.service else {}),
        scope=model.Scope({}),
        service=row.service,
    )


def candidate_test(decoder: Decoder, plan: SearchPlan) -> tuple[Callable[[SpanRow], bool] | None, bool]:
    """Phase 1's test of a row, and whether it needs the span's body."""
    wanted = need(plan.pipeline)
    test = compile_need(wanted)
    if test is None:
        return None, False
    if column_only(wanted):
        return lambda row: test(column_span(row)), False
    return lambda row: test(decoder.span(row, model.TraceInfo(row.trace_id), 0)), True


@dataclass(slots=True)
class _Run:
    """One search's state across its two phases."""

    conn: sqlite3.Connection
    tenant: str
    plan: SearchPlan
    start_s: int
    end_s: int
    spss: int
    combiner: Combiner
    keep_hits: bool
    decoder: Decoder = field(init=False)
    outcome: Outcome = field(default_factory=lambda: Outcome([]))
    seen: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.decoder = Decoder(self.conn)

    @property
    def window(self) -> tuple[int, int] | None:
        if not self.start_s and not self.end_s:
            return None
        hi = min((self.end_s + 1) * 1_000_000_000, FAR_FUTURE_NS) if self.end_s > 0 else FAR_FUTURE_NS
        return min(max(0, self.start_s) * 1_000_000_000, FAR_FUTURE_NS), hi

    def candidates(self, budget: int, limit: int) -> None:
        """Phase 1, handing each candidate trace to phase 2 as it is found."""
        test, with_body = candidate_test(self.decoder, self.plan)
        for scan in search_scans(sql_of_need(need(self.plan.pipeline)), self.window, with_body):
            for raw in self.conn.execute(scan.sql, bind(scan, self.conn, self.tenant)):
                self.outcome.inspected_spans += 1
                if self.outcome.inspected_spans > budget:
                    self.outcome.partial = _partial_message(budget, len(self.combiner.traces), limit)
                    return
                row = SpanRow._make(raw)
                if row.trace_id in self.seen or (test is not None and not test(row)):
                    continue
                self.seen.add(row.trace_id)
                self.answer(row.trace_id)
                if self.combiner.complete():
                    return

    def answer(self, trace_id: bytes) -> None:
        """Phase 2: the whole trace, the whole query."""
        rows = trace_rows(self.conn, self.tenant, trace_id, self.window)
        if not rows:
            return
        info, spans = self.decoder.trace(rows)
        if not in_window(info, self.start_s, self.end_s):
            return
        found = run(self.plan, info, spans, self.spss)
        if found:
            self.combiner.add(self.plan, info, spans, found)
            if self.keep_hits:
                self.outcome.hits.append((info, [s for f in found for s in f.spans]))


def execute(
    conn: sqlite3.Connection,
    tenant: str,
    plan: SearchPlan,
    start_s: int,
    end_s: int,
    limit: int,
    spss: int,
    budget: int = SEARCH_SCAN_BUDGET,
    keep_hits: bool = False,
) -> Outcome:
    """The search's answer: up to ``limit`` traces, newest first."""
    if plan.noop:
        return Outcome([])
    state = _Run(conn, tenant, plan, start_s, end_s, spss, Combiner(max(limit, 1), plan.most_recent), keep_hits)
    state.candidates(budget, limit)
    state.outcome.inspected_spans = min(state.outcome.inspected_spans, budget)
    state.outcome.traces = state.combiner.answer()
    return state.outcome


def _partial_message(budget: int, found: int, limit: int) -> str:
    return (
        f"the search examined its window's newest {budget:,} spans and stopped there with {found} of the {limit} "
        "traces asked for: older spans of the window were not looked at; narrow the time range, or add a condition "
        "the store finds by index (resource.service.name, span:id, trace:id)"
    )
