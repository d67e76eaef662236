"""Trace queries of the store: a trace by id (as stored, or as the bridge's ``Trace``), span lookup, TraceQL search
(the subset of ``traceql``: conditions SQL can answer become ``WHERE`` clauses, the rest are evaluated on the decoded
span) and the tag endpoints. Every query runs on a reader thread."""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Final

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge import ids
from bridge.errors import InvalidArgument
from bridge.spans import SERVICE_NAME, SearchHit, Trace, spans_from_otlp
from bridge.store import decode, traceql
from bridge.store.database import Database
from bridge.store.query import FAR_FUTURE_NS, TraceMatch, bound_attr_value, search_span
from bridge.upstream.base import CallContext

SEARCH_SCAN_LIMIT: Final = 50_000  # candidate spans examined per search


class Traces:
    """The store as a ``TraceSource`` (``trace_by_id``, ``find_span``, ``search``), plus what ``tempo_api`` serves:
    ``trace_resource_spans``, ``search_traces``, ``tag_names``, ``tag_values``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _resource(self, conn: sqlite3.Connection, resource_id: int,
                  cache: dict[int, otlp_trace.ResourceSpans]) -> otlp_trace.ResourceSpans:
        """A resource, decoded once per query (``cache`` lives as long as one read)."""
        rs = cache.get(resource_id)
        if rs is None:
            row = conn.execute("SELECT body FROM resources WHERE id = ?", (resource_id,)).fetchone()
            rs = cache[resource_id] = otlp_trace.ResourceSpans.FromString(row[0] if row else b"")
        return rs

    def _trace_resource_spans(
        self, conn: sqlite3.Connection, tenant: str, trace_id: bytes
    ) -> list[otlp_trace.ResourceSpans]:
        rows = conn.execute(
            "SELECT resource_id, scope_id, body FROM spans WHERE tenant = ? AND trace_id = ? ORDER BY start_ns, id",
            (tenant, trace_id),
        ).fetchall()
        if not rows:
            return []
        scopes: dict[int, bytes] = {}
        for sid, body in conn.execute(
            "SELECT id, body FROM scopes WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted({r[1] for r in rows})),),
        ):
            scopes[sid] = body
        resource_bodies: dict[int, bytes] = dict(conn.execute(
            "SELECT id, body FROM resources WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted({r[0] for r in rows})),),
        ).fetchall())
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
        return await self._db.read(self._trace_resource_spans, tenant or "anonymous", bytes.fromhex(norm))

    async def trace_by_id(
        self, trace_id: str, ctx: CallContext, start_s: int | None = None, end_s: int | None = None
    ) -> Trace | None:
        resource_spans = await self.trace_resource_spans(trace_id, ctx.tenant)
        if not resource_spans:
            return None
        spans = spans_from_otlp(resource_spans)
        return Trace.from_spans(spans, trace_id=spans[0].trace_id)

    async def find_span(self, span_id: str, start_s: int, end_s: int, ctx: CallContext) -> SearchHit | None:
        hits = await self.search(
            f'{{ span:id = "{span_id.lower()}" }} | select(span:name, resource.service.name)',
            start_s, end_s, 1, ctx,
        )
        return hits[0] if hits else None

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        matches = await self.search_traces(traceql.parse(query), start_s, end_s, limit, spss, ctx.tenant)
        hits: list[SearchHit] = []
        for m in matches:
            for s in m.spans:
                hits.append(
                    SearchHit(
                        trace_id=m.trace_id,
                        span_id=s["spanID"],
                        name=s["_name"],
                        service=s["_service"],
                        start_ns=int(s["startTimeUnixNano"]),
                        duration_ns=int(s["durationNanos"]),
                        root_service=m.root_service,
                        root_name=m.root_name,
                    )
                )
        return hits

    async def search_traces(
        self, query: traceql.Query, start_s: int, end_s: int, limit: int, spss: int, tenant: str | None
    ) -> list[TraceMatch]:
        return await self._db.read(self._search, tenant or "anonymous", query, start_s, end_s, limit, spss)

    def _search(
        self, conn: sqlite3.Connection, tenant: str, query: traceql.Query, start_s: int, end_s: int, limit: int,
        spss: int,
    ) -> list[TraceMatch]:
        where = ["tenant = ?"]
        params: list[Any] = [tenant]
        if start_s or end_s:
            where.append("start_ns < ? AND end_ns >= ?")
            params.extend([
                min((end_s + 1) * 1_000_000_000, FAR_FUTURE_NS) if end_s > 0 else FAR_FUTURE_NS,
                min(max(0, start_s) * 1_000_000_000, FAR_FUTURE_NS),
            ])
        python_conds: list[traceql.Cond] = []
        for cond in query.conds:
            a = cond.attr
            if a.scope == "intrinsic" and a.key == "span:id" and cond.op == "=" and isinstance(cond.value, str):
                number = decode.span_id_to_int(cond.value.lower().rjust(16, "0"))
                if number is None:
                    return []
                where.append("span_id = ?")
                params.append(number)
            elif a.scope == "intrinsic" and a.key == "trace:id" and cond.op == "=" and isinstance(cond.value, str):
                raw = decode.trace_id_to_bytes(cond.value.lower().rjust(32, "0"))
                if raw is None:
                    return []
                where.append("trace_id = ?")
                params.append(raw)
            elif a.scope == "intrinsic" and a.key == "name" and cond.op == "=" and isinstance(cond.value, str):
                where.append("name = ?")
                params.append(cond.value)
            elif a.scope == "resource" and a.key == "service.name" and cond.op == "=" and isinstance(cond.value, str):
                where.append("service = ?")
                params.append(cond.value)
            elif (a.scope == "intrinsic" and a.key == "duration" and isinstance(cond.value, int)
                  and cond.op in ("=", "!=", ">", ">=", "<", "<=")):
                where.append(f"(end_ns - start_ns) {cond.op} ?")
                params.append(cond.value)
            else:
                python_conds.append(cond)
        needs_body = bool(python_conds) or any(
            a.scope != "intrinsic" and not (a.key == SERVICE_NAME and a.scope in ("resource", "any"))
            for a in query.select
        )
        sql = (
            "SELECT trace_id, span_id, service, name, start_ns, end_ns, resource_id, "
            + ("body" if needs_body else "NULL")
            + f" FROM spans WHERE {' AND '.join(where)} ORDER BY start_ns DESC LIMIT {SEARCH_SCAN_LIMIT}"
        )
        traces: dict[bytes, TraceMatch] = {}
        resources: dict[int, otlp_trace.ResourceSpans] = {}
        for trace_id, span_id, service, name, start_ns, end_ns, resource_id, body in conn.execute(sql, params):
            span = otlp_trace.Span.FromString(body) if body is not None else None
            resource = self._resource(conn, resource_id, resources) if needs_body else None

            value_of = functools.partial(
                bound_attr_value, (trace_id, span_id, service, name, start_ns, end_ns, span, resource)
            )
            if not all(traceql.compare(value_of(c.attr), c) for c in python_conds):
                continue
            match = traces.get(trace_id)
            if match is None:
                if len(traces) >= max(limit, 1) * 4 and trace_id not in traces:
                    continue
                match = traces[trace_id] = TraceMatch(trace_id.hex(), "", "", 0, 0)
            match.matched += 1
            if len(match.spans) < max(spss, 1):
                match.spans.append(
                    search_span(query, span_id, service, name, start_ns, end_ns, span, resource, value_of)
                )
        chosen = list(traces.values())
        for m in chosen:
            self._summarise_trace(conn, tenant, m)
        chosen.sort(key=lambda m: m.start_ns, reverse=True)
        return chosen[: max(limit, 1)]

    def _summarise_trace(self, conn: sqlite3.Connection, tenant: str, match: TraceMatch) -> None:
        rows = conn.execute(
            "SELECT service, name, start_ns, end_ns, parent_span_id FROM spans WHERE tenant = ? AND trace_id = ? "
            "ORDER BY start_ns",
            (tenant, bytes.fromhex(match.trace_id)),
        ).fetchall()
        if not rows:
            return
        match.start_ns = min(r[2] for r in rows)
        match.end_ns = max(r[3] for r in rows)
        root = next((r for r in rows if r[4] is None), None)
        if root is None:
            match.root_service, match.root_name = "<root span not yet received>", ""
        else:
            match.root_service, match.root_name = root[0], root[1]

    async def tag_names(self, tenant: str | None) -> dict[str, list[str]]:
        def read(conn: sqlite3.Connection) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {"resource": [], "span": []}
            for scope, key in conn.execute(
                "SELECT DISTINCT scope, key FROM tags WHERE tenant = ? ORDER BY key", (tenant or "anonymous",)
            ):
                out.setdefault(scope, []).append(key)
            return out

        return await self._db.read(read)

    async def tag_values(self, tenant: str | None, tag: str, limit: int = 1000) -> list[str]:
        key = tenant or "anonymous"
        if tag in ("name", "span:name"):
            sql, params = "SELECT DISTINCT name FROM spans WHERE tenant = ? ORDER BY name LIMIT ?", (key, limit)
        else:
            scoped = tag in traceql.INTRINSICS or tag.startswith(("resource.", "span.", "."))
            attr = traceql.parse_attr(tag) if scoped else traceql.Attr("any", tag)
            if attr.scope == "intrinsic":
                return []
            if attr.scope == "any":
                sql = "SELECT DISTINCT value FROM tags WHERE tenant = ? AND key = ? ORDER BY value LIMIT ?"
                params = (key, attr.key, limit)  # type: ignore[assignment]
            else:
                sql = "SELECT value FROM tags WHERE tenant = ? AND scope = ? AND key = ? ORDER BY value LIMIT ?"
                params = (key, attr.scope, attr.key, limit)  # type: ignore[assignment]

        def read(conn: sqlite3.Connection) -> list[str]:
            return [row[0] for row in conn.execute(sql, params)]

        return await self._db.read(read)
