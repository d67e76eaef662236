"""Trace queries of the store: a trace by id (as stored, or as the bridge's ``Trace``), span lookup, TraceQL search
(``search``: planned by ``bridge.traceql``, pushed down and run by ``bridge.store.search``), TraceQL metrics
(``bridge.store.metrics``) and the tag endpoints. Every query runs on a reader thread.

Lookups by trace or span id probe the 10-minute buckets that hold spans (``span_buckets``): the indexes' keys lead
with the bucket, so ingest writes into their newest part instead of all over them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Final

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge import ids
from bridge.call import CallContext, tenant_key
from bridge.errors import InvalidArgument
from bridge.spans import SearchHit, Trace, spans_from_otlp
from bridge.store import metrics as store_metrics
from bridge.store import search as store_search
from bridge.store.database import Database
from bridge.store.trace_rows import BUCKETS_IN, span_buckets
from bridge.traceql.metrics import compile_metrics
from bridge.traceql.model import span_id_hex
from bridge.traceql.search import compile_search
from bridge.traceql.timeseries import QueryRange

SEARCH_SCAN_BUDGET: Final = store_search.SEARCH_SCAN_BUDGET


class Traces:
    """The store as a ``TraceSource`` (``trace_by_id``, ``find_span``, ``search``), plus what ``tempo_api`` serves:
    ``trace_resource_spans``, ``search_traces``, ``tag_names``, ``tag_values``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _trace_resource_spans(
        self, conn: sqlite3.Connection, tenant: str, trace_id: bytes
    ) -> list[otlp_trace.ResourceSpans]:
        rows = conn.execute(
            f"SELECT resource_id, scope_id, body FROM spans INDEXED BY spans_trace WHERE tenant = ? AND {BUCKETS_IN} "
            "AND trace_id = ? ORDER BY start_ns, id",
            (tenant, span_buckets(conn), trace_id),
        ).fetchall()
        if not rows:
            return []
        scopes: dict[int, bytes] = dict(
            conn.execute(
                "SELECT id, body FROM scopes WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted({r[1] for r in rows})),),
            ).fetchall()
        )
        resource_bodies: dict[int, bytes] = dict(
            conn.execute(
                "SELECT id, body FROM resources WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted({r[0] for r in rows})),),
            ).fetchall()
        )
        grouped: dict[int, dict[int, list[bytes]]] = {}
        for resource_id, scope_id, body in rows:
            grouped.setdefault(resource_id, {}).setdefault(scope_id, []).append(body)
        out: list[otlp_trace.ResourceSpans] = []
        for resource_id, by_scope in grouped.items():
            rs = otlp_trace.ResourceSpans()
            rs.MergeFromString(resource_bodies.get(resource_id, b""))
            for scope_id, bodies in by_scope.items():
                ss = rs.scope_spans.add()
                ss.MergeFromString(scopes.get(scope_id, b""))
                for body in bodies:
                    ss.spans.add().MergeFromString(body)
            out.append(rs)
        return out

    async def trace_resource_spans(self, trace_id: str, tenant: str | None) -> list[otlp_trace.ResourceSpans]:
        """The trace as stored: OTLP ResourceSpans with every field as received (empty when unknown)."""
        norm = ids.trace_id(trace_id)
        if norm is None:
            raise InvalidArgument(f"trace id {trace_id!r} is not up to 32 hex characters")
        return await self._db.read(self._trace_resource_spans, tenant_key(tenant), bytes.fromhex(norm))

    async def trace_by_id(
        self, trace_id: str, ctx: CallContext, start_s: int | None = None, end_s: int | None = None
    ) -> Trace | None:
        resource_spans = await self.trace_resource_spans(trace_id, ctx.tenant)
        if not resource_spans:
            return None
        spans = spans_from_otlp(resource_spans)
        return Trace.from_spans(spans, trace_id=spans[0].trace_id)

    async def find_span(self, span_id: str, start_s: int, end_s: int, ctx: CallContext) -> SearchHit | None:
        hits = await self.search(f'{{ span:id = "{span_id.lower()}" }}', start_s, end_s, 1, ctx)
        return hits[0] if hits else None

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        """The spans a search finds (the resolver's and the pages' view), each with its trace's root."""
        outcome = await self.search_traces(query, start_s, end_s, limit, spss, ctx.tenant, keep_hits=True)
        return [
            SearchHit(
                trace_id=info.trace_id.hex(),
                span_id=span_id_hex(s.span_id),
                name=s.name,
                service=s.service,
                start_ns=s.start_ns,
                duration_ns=s.duration_ns,
                root_service=info.root_service or "<root span not yet received>",
                root_name=info.root_name,
            )
            for info, spans in outcome.hits
            for s in spans
        ]

    async def search_traces(
        self,
        query: str,
        start_s: int,
        end_s: int,
        limit: int,
        spss: int,
        tenant: str | None,
        budget: int | None = None,
        keep_hits: bool = False,
    ) -> store_search.Outcome:
        """Up to ``limit`` traces matching the TraceQL ``query`` and overlapping the window, newest first; at most
        ``budget`` spans examined (``SEARCH_SCAN_BUDGET``), or the answer says it is partial."""
        plan = compile_search(query)
        return await self._db.read(
            store_search.execute,
            tenant_key(tenant),
            plan,
            start_s,
            end_s,
            limit,
            spss,
            SEARCH_SCAN_BUDGET if budget is None else budget,
            keep_hits,
        )

    async def query_range(
        self, q: QueryRange, tenant: str | None, budget: int | None = None
    ) -> store_metrics.MetricsOutcome:
        """A TraceQL metrics query over the request's window (already parsed, checked and aligned)."""
        plan = compile_metrics(q.query)
        return await self._db.read(
            store_metrics.execute,
            tenant_key(tenant),
            plan,
            q,
            store_metrics.METRICS_SCAN_BUDGET if budget is None else budget,
        )

    async def tag_keys(self, tenant: str | None, scopes: Sequence[str], since_ns: int = 0) -> dict[str, list[str]]:
        """The keys listed in each of ``scopes`` (``store/tag_rows.py``), seen since ``since_ns``; sorted."""

        def read(conn: sqlite3.Connection) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            marks = ", ".join("?" * len(scopes))
            for scope, key in conn.execute(
                f"SELECT DISTINCT scope, key FROM tags WHERE tenant = ? AND scope IN ({marks}) AND last_ns >= ? "
                "ORDER BY key",
                (tenant_key(tenant), *scopes, since_ns),
            ):
                out.setdefault(scope, []).append(key)
            return out

        return await self._db.read(read)

    async def tag_values(
        self, tenant: str | None, where: Sequence[tuple[str, str]], since_ns: int = 0, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """The distinct (type, value) pairs of the (scope, key) pairs in ``where``, seen since ``since_ns``: at most
        ``limit``, by value."""
        if not where:
            return []

        def read(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            pairs = " OR ".join("(scope = ? AND key = ?)" for _ in where)
            sql = (
                f"SELECT DISTINCT type, value FROM tags WHERE tenant = ? AND ({pairs}) AND last_ns >= ? "
                "ORDER BY value, type LIMIT ?"
            )
            params = (tenant_key(tenant), *(x for pair in where for x in pair), since_ns, limit)
            return [(str(kind), str(value)) for kind, value in conn.execute(sql, params)]

        return await self._db.read(read)
