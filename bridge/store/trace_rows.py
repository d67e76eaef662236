"""Stored spans as the TraceQL engine reads them (``bridge.traceql.model``): a trace's rows fetched whole, decoded
once per read (each resource and instrumentation scope once per read, however many spans share it), in the order
they were stored.

A trace is read near a time window first (its spans within ``TRACE_MARGIN_NS``, and the long spans that began before
and still reach it, from the ``spans_long`` index); when its root is not among them, everywhere (every 10-minute
bucket that holds spans). Runs on a reader thread (``Database.read``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final, NamedTuple

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge.store.query import FAR_FUTURE_NS
from bridge.store.schema import SPAN_BUCKET_NS, SPAN_BUCKET_SQL, SPAN_BUCKETS, present_buckets
from bridge.traceql import model

LONG_SPAN_NS: Final = 60 * 1_000_000_000  # the spans_long index's predicate (schema migration 6)
TRACE_MARGIN_NS: Final = 600 * 1_000_000_000  # a trace's spans are looked up this far around the window first
BUCKETS_IN: Final = f"{SPAN_BUCKET_SQL} IN (SELECT value FROM json_each(?))"
SPAN_COLUMNS: Final = (
    "id, trace_id, span_id, parent_span_id, service, name, start_ns, end_ns, resource_id, scope_id, body"
)


class SpanRow(NamedTuple):
    """A ``spans`` row, by name (``SPAN_COLUMNS``)."""

    row_id: int
    trace_id: bytes
    span_id: int
    parent_span_id: int | None
    service: str
    name: str
    start_ns: int
    end_ns: int
    resource_id: int
    scope_id: int
    body: bytes


def span_buckets(conn: sqlite3.Connection, lo: int = 0, hi: int = FAR_FUTURE_NS) -> str:
    """The 10-minute buckets holding spans that start in ``[lo, hi)``, as a JSON list (only those holding spans)."""
    return present_buckets(conn, SPAN_BUCKETS, max(0, lo) // SPAN_BUCKET_NS, (max(1, hi) - 1) // SPAN_BUCKET_NS)


@dataclass
class Decoder:
    """Rows → engine spans within one read; resources and scopes decoded once each."""

    conn: sqlite3.Connection

    def __post_init__(self) -> None:
        self._resources: dict[int, model.Scope] = {}
        self._scopes: dict[int, model.Scope] = {}

    def resource(self, resource_id: int) -> model.Scope:
        found = self._resources.get(resource_id)
        if found is None:
            row = self.conn.execute("SELECT body FROM resources WHERE id = ?", (resource_id,)).fetchone()
            rs = otlp_trace.ResourceSpans.FromString(row[0] if row else b"")
            found = self._resources[resource_id] = model.Scope(model.attrs_of(rs.resource.attributes))
        return found

    def scope(self, scope_id: int) -> model.Scope:
        found = self._scopes.get(scope_id)
        if found is None:
            row = self.conn.execute("SELECT body FROM scopes WHERE id = ?", (scope_id,)).fetchone()
            ss = otlp_trace.ScopeSpans.FromString(row[0] if row else b"")
            found = self._scopes[scope_id] = model.Scope(
                model.attrs_of(ss.scope.attributes), ss.scope.name, ss.scope.version
            )
        return found

    def span(self, row: SpanRow, trace: model.TraceInfo, order: int) -> model.Span:
        body = otlp_trace.Span.FromString(row.body)
        return model.span_from_otlp(
            body, trace, self.resource(row.resource_id), self.scope(row.scope_id), row.service, order
        )

    def trace(self, rows: list[SpanRow]) -> tuple[model.TraceInfo, list[model.Span]]:
        """A whole trace from its rows (in stored order): its spans, nested sets and root."""
        rows = sorted(rows, key=lambda r: r.row_id)
        info = model.TraceInfo(rows[0].trace_id)
        spans = [self.span(r, info, i) for i, r in enumerate(rows)]
        model.finish_trace(spans)
        return info, spans


def trace_rows(conn: sqlite3.Connection, tenant: str, trace_id: bytes, window: tuple[int, int] | None) -> list[SpanRow]:
    """Every stored span of one trace (near ``window`` first; everywhere when its root is not near)."""
    if window is not None:
        lo, hi = window
        near_lo = max(0, lo - TRACE_MARGIN_NS) // SPAN_BUCKET_NS * SPAN_BUCKET_NS
        rows = _rows_in(conn, tenant, trace_id, span_buckets(conn, near_lo, min(hi + TRACE_MARGIN_NS, FAR_FUTURE_NS)))
        if any(r.parent_span_id is None for r in rows):
            known = {r.row_id for r in rows}
            rows += [
                r
                for r in map(
                    SpanRow._make,
                    conn.execute(
                        f"SELECT {SPAN_COLUMNS} FROM spans INDEXED BY spans_long WHERE end_ns - start_ns > "
                        f"{LONG_SPAN_NS} AND end_ns >= ? AND start_ns < ? AND tenant = ? AND trace_id = ?",
                        (lo, near_lo, tenant, trace_id),
                    ),
                )
                if r.row_id not in known
            ]
            return rows
    return _rows_in(conn, tenant, trace_id, span_buckets(conn))


def _rows_in(conn: sqlite3.Connection, tenant: str, trace_id: bytes, buckets: str) -> list[SpanRow]:
    return [
        SpanRow._make(r)
        for r in conn.execute(
            f"SELECT {SPAN_COLUMNS} FROM spans INDEXED BY spans_trace WHERE tenant = ? AND {BUCKETS_IN} "
            "AND trace_id = ? ORDER BY id",
            (tenant, buckets, trace_id),
        )
    ]
