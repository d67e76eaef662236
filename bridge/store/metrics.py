"""Run a planned TraceQL metrics query (``bridge.traceql.metrics``) on the store, per sub-query the cheapest way that
gives Tempo's numbers (on a reader thread):

- **Counted in SQL**: ``rate()`` / ``count_over_time()`` whose filter and ``by()`` read only columns
  (``resource.service.name``, ``name``, ``duration``, root, ids) — one ``GROUP BY`` over the window's spans on the
  ``(tenant, service, start)`` index, services found by skipping through that index; a few spans per slice of the
  window read for exemplars.
- **Span by span**: a chain of filters each span decides alone — the window's spans (``start`` in ``(start, end]``,
  with what SQL answers pushed down), decoded only when the filter, ``by()`` or the measured attribute read more than
  columns.
- **Trace by trace**: anything else (structural operators, aggregates, ``rootName``, ``compare()``) — candidate traces
  from the window's spans, each read whole and run through the pipeline.

A query that examines ``budget`` spans stops there and says the answer is partial.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final

from bridge.store.pushdown import SERVICE, Sql, column_only, metric_scan, sql_of_need
from bridge.store.search import bind, column_span
from bridge.store.trace_rows import Decoder, SpanRow, trace_rows
from bridge.traceql.aggregate import FirstStage
from bridge.traceql.ast import Attribute, I, MetricsAggregate
from bridge.traceql.conditions import fetch_filter
from bridge.traceql.metrics import MetricsPlan, Run, SubQuery
from bridge.traceql.model import Span, TraceInfo
from bridge.traceql.prefilter import TRACE_WIDE, compile_need
from bridge.traceql.timeseries import Intervals, QueryRange
from bridge.traceql.values import Static, T

METRICS_SCAN_BUDGET: Final = 5_000_000  # spans a metrics query examines at most
COLUMN_ATTRIBUTES: Final = frozenset({I.NAME, I.DURATION, I.SPAN_ID, I.TRACE_ID})
SQL_GROUPS: Final = {SERVICE: "service", Attribute("name", intrinsic=I.NAME): "name"}
SERVICES_SQL: Final = (
    "WITH RECURSIVE s(v) AS (SELECT min(service) FROM spans INDEXED BY spans_service_time WHERE tenant = ? "
    "UNION ALL SELECT (SELECT min(service) FROM spans INDEXED BY spans_service_time WHERE tenant = ? AND service > v) "
    "FROM s WHERE v IS NOT NULL) SELECT v FROM s WHERE v IS NOT NULL"
)


class Budget(Exception):
    """The query examined as many spans as it may."""


@dataclass(slots=True)
class MetricsOutcome:
    run: Run
    inspected_spans: int = 0
    partial: str | None = None


def _column_attr(a: Attribute | None) -> bool:
    return a is None or a == SERVICE or a.intrinsic in COLUMN_ATTRIBUTES


def _trace_wide(a: Attribute | None) -> bool:
    return a is not None and (a.parent or a.intrinsic in TRACE_WIDE)


def mode_of(sub: SubQuery) -> str:
    """``sql``, ``spans`` or ``traces`` (see the module's docstring)."""
    first = sub.first
    if not isinstance(first, MetricsAggregate) or not sub.span_by_span:
        return "traces"
    if _trace_wide(first.attr) or any(_trace_wide(b) for b in first.by):
        return "traces"
    if first.op in ("rate", "count_over_time") and column_only(sub.need) and all(b in SQL_GROUPS for b in first.by):
        return "sql"
    return "spans"


class Executor:
    def __init__(self, conn: sqlite3.Connection, tenant: str, plan: MetricsPlan, q: QueryRange, budget: int) -> None:
        self.conn = conn
        self.tenant = tenant
        self.run = Run(plan, q)
        self.decoder = Decoder(conn)
        self.outcome = MetricsOutcome(self.run)
        self.budget = budget

    def tick(self) -> None:
        self.outcome.inspected_spans += 1
        if self.outcome.inspected_spans > self.budget:
            raise Budget

    def execute(self) -> MetricsOutcome:
        try:
            for sub in self.run.plan.subqueries:
                mode = mode_of(sub)
                if mode == "sql":
                    self.by_sql(sub)
                elif mode == "spans":
                    self.by_span(sub)
                else:
                    self.by_trace(sub)
        except Budget:
            self.outcome.inspected_spans = self.budget
            self.outcome.partial = (
                f"the query examined {self.budget:,} spans and stopped there: later spans of the window are not "
                "counted; narrow the time range or the filter"
            )
        return self.outcome

    def _rows(self, where: Sql | None, with_body: bool) -> list[SpanRow] | sqlite3.Cursor:
        q = self.run.q
        scan = metric_scan(where, q.start, q.end, with_body)
        return self.conn.execute(scan.sql, bind(scan, self.conn, self.tenant))

    def by_span(self, sub: SubQuery) -> None:
        first = sub.first
        assert isinstance(first, MetricsAggregate)
        cheap = column_only(sub.need) and _column_attr(first.attr) and all(_column_attr(b) for b in first.by)
        test = compile_need(sub.need)
        for raw in self._rows(sql_of_need(sub.need), not cheap):
            self.tick()
            row = SpanRow._make(raw)
            span = column_span(row) if cheap else self.decoder.span(row, TraceInfo(row.trace_id), 0)
            if test is None or test(span):
                self.run.observe(sub, span, self.run.want_exemplar(sub.key, row.trace_id))

    def by_trace(self, sub: SubQuery) -> None:
        test = compile_need(sub.need)
        keep = fetch_filter(sub.fetch)
        seen: set[bytes] = set()
        with_body = not column_only(sub.need)
        q = self.run.q
        window = (q.start, q.end + 1)
        for raw in list(self._rows(sql_of_need(sub.need), with_body)):
            self.tick()
            row = SpanRow._make(raw)
            if row.trace_id in seen:
                continue
            if test is not None:
                probe = column_span(row) if not with_body else self.decoder.span(row, TraceInfo(row.trace_id), 0)
                if not test(probe):
                    continue
            seen.add(row.trace_id)
            rows = trace_rows(self.conn, self.tenant, row.trace_id, window)
            if rows:
                info, spans = self.decoder.trace(rows)
                self.run.observe_trace(sub, info, spans, keep)

    def by_sql(self, sub: SubQuery) -> None:
        """``rate()`` / ``count_over_time()`` counted by SQL, then exemplars from a few spans per slice."""
        first = sub.first
        assert isinstance(first, MetricsAggregate)
        stage = self.run.stages[sub.key]
        assert isinstance(stage, FirstStage)
        q, iv = self.run.q, Intervals.of(self.run.q)
        where = sql_of_need(sub.need)
        groups = [SQL_GROUPS[b] for b in first.by]
        services = [r[0] for r in self.conn.execute(SERVICES_SQL, (self.tenant, self.tenant))]
        for service in services:
            text, params = counting_sql(where, [g for g in groups if g != "service"], q, iv)
            for *values, interval, count in self.conn.execute(text, (self.tenant, service, *params)):
                self.outcome.inspected_spans += count
                named = dict(zip([g for g in groups if g != "service"], values, strict=True)) | {"service": service}
                statics = tuple(Static(T.STRING, named[g]) for g in groups)
                stage.add_count(statics, interval, float(count))
        if self.outcome.inspected_spans > self.budget:
            raise Budget
        self._sql_exemplars(sub, where)

    def _sql_exemplars(self, sub: SubQuery, where: Sql | None) -> None:
        q = self.run.q
        if not q.exemplars:
            return
        slices = max(q.exemplars // 2, 1)
        width = max((q.end - q.start) // slices, 1)
        for k in range(slices):
            lo = q.start + k * width
            scan = metric_scan(where, lo, min(q.end, lo + width), False)
            for raw in self.conn.execute(scan.sql + " LIMIT 2", bind(scan, self.conn, self.tenant)):
                row = SpanRow._make(raw)
                if self.run.want_exemplar(sub.key, row.trace_id):
                    span: Span = column_span(row)
                    stage = self.run.stages[sub.key]
                    stage.observe_exemplar(span, self.run.labels[sub.key](span))


def counting_sql(where: Sql | None, groups: list[str], q: QueryRange, iv: Intervals) -> tuple[str, tuple[object, ...]]:
    """Pure: the ``GROUP BY`` that counts one service's spans per interval (``(start - interval start - 1) / step``)
    and group, on its range of the ``(tenant, service, start)`` index (parameters: tenant, service, then these)."""
    # an instant query has one interval; a bare 0 in GROUP BY would name a column, so it is an expression here
    interval = "(0 * start_ns)" if iv.instant else f"(start_ns - {iv.start} - 1) / {iv.step}"
    cols = "".join(f"{g}, " for g in groups)
    extra = f" AND ({where.text})" if where is not None else ""
    text = (
        f"SELECT {cols}{interval}, count(*) FROM spans INDEXED BY spans_service_time WHERE tenant = ? AND service = ? "
        f"AND start_ns > ? AND start_ns <= ?{extra} GROUP BY {cols}{interval}"
    )
    return text, (q.start, q.end, *(where.params if where is not None else ()))


def execute(conn: sqlite3.Connection, tenant: str, plan: MetricsPlan, q: QueryRange, budget: int) -> MetricsOutcome:
    return Executor(conn, tenant, plan, q, budget).execute()
