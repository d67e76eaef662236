"""Trace queries of the store: a trace by id (as stored, or as the bridge's ``Trace``), span lookup, TraceQL search
(the subset of ``traceql``: conditions SQL can answer become ``WHERE`` clauses, the rest are evaluated on the decoded
span) and the tag endpoints. Every query runs on a reader thread.

A search costs what its answer needs: it walks the spans of its time window newest first on an index that bounds the
window from both sides (spans longer than ``LONG_SPAN_NS``, a minute, which may start long before the window, come
from an index of their own) and stops as soon as it has ``limit`` traces; only then are those traces' matching spans
counted. If it examines ``SEARCH_SCAN_BUDGET`` spans first, it answers with what it found and says it is partial.

Lookups by trace or span id probe the 10-minute buckets that hold spans (``span_buckets``): the indexes' keys lead
with the bucket, so ingest writes into their newest part instead of all over them."""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Final

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge import ids
from bridge.call import CallContext, tenant_key
from bridge.errors import InvalidArgument
from bridge.spans import SERVICE_NAME, SearchHit, Trace, spans_from_otlp
from bridge.store import decode, traceql
from bridge.store.database import Database
from bridge.store.query import FAR_FUTURE_NS, SearchResult, TraceMatch, bound_attr_value, search_span
from bridge.store.schema import SPAN_BUCKET_NS, SPAN_BUCKET_SQL, SPAN_BUCKETS, present_buckets

SEARCH_SCAN_BUDGET: Final = 200_000  # spans a search examines at most before it answers partial
LONG_SPAN_NS: Final = 60 * 1_000_000_000  # the spans_long index's predicate (schema migration 6)
TRACE_MARGIN_NS: Final = 600 * 1_000_000_000  # a found trace's spans are looked up this far around the window first


def span_buckets(conn: sqlite3.Connection, lo: int = 0, hi: int = FAR_FUTURE_NS) -> str:
    """The 10-minute buckets (``SPAN_BUCKET_SQL``) holding spans that start in ``[lo, hi)``, as a JSON list: what a
    lookup by trace or span id probes (``present_buckets``: only buckets that hold spans, whatever the gaps)."""
    return present_buckets(conn, SPAN_BUCKETS, max(0, lo) // SPAN_BUCKET_NS, (max(1, hi) - 1) // SPAN_BUCKET_NS)


BUCKETS_IN: Final = f"{SPAN_BUCKET_SQL} IN (SELECT value FROM json_each(?))"


def _summarise(match: TraceMatch, rows: list[tuple[Any, ...]]) -> None:
    """A search answer's trace summary from all its spans (search rows + ``parent_span_id``): start, end, root."""
    if not rows:
        return
    match.start_ns = min(r[4] for r in rows)
    match.end_ns = max(r[5] for r in rows)
    root = min((r for r in rows if r[8] is None), key=lambda r: r[4], default=None)
    if root is None:
        match.root_service, match.root_name = "<root span not yet received>", ""
    else:
        match.root_service, match.root_name = root[2], root[3]


class Traces:
    """The store as a ``TraceSource`` (``trace_by_id``, ``find_span``, ``search``), plus what ``tempo_api`` serves:
    ``trace_resource_spans``, ``search_traces``, ``tag_names``, ``tag_values``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _resource(
        self, conn: sqlite3.Connection, resource_id: int, cache: dict[int, otlp_trace.ResourceSpans]
    ) -> otlp_trace.ResourceSpans:
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
            f"SELECT resource_id, scope_id, body FROM spans INDEXED BY spans_trace WHERE tenant = ? AND {BUCKETS_IN} "
            "AND trace_id = ? ORDER BY start_ns, id",
            (tenant, span_buckets(conn), trace_id),
        ).fetchall()
        if not rows:
            return []
        scopes: dict[int, bytes] = {}
        for sid, body in conn.execute(
            "SELECT id, body FROM scopes WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted({r[1] for r in rows})),),
        ):
            scopes[sid] = body
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
        hits = await self.search(
            f'{{ span:id = "{span_id.lower()}" }} | select(span:name, resource.service.name)',
            start_s,
            end_s,
            1,
            ctx,
        )
        return hits[0] if hits else None

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        result = await self.search_traces(traceql.parse(query), start_s, end_s, limit, spss, ctx.tenant)
        hits: list[SearchHit] = []
        for m in result.traces:
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
        self,
        query: traceql.Query,
        start_s: int,
        end_s: int,
        limit: int,
        spss: int,
        tenant: str | None,
        budget: int | None = None,
    ) -> SearchResult:
        """Up to ``limit`` traces with spans matching ``query`` in the window, newest first; at most ``budget``
        spans examined (``SEARCH_SCAN_BUDGET``), or the answer says it is partial."""
        return await self._db.read(
            self._search,
            tenant_key(tenant),
            query,
            start_s,
            end_s,
            limit,
            spss,
            SEARCH_SCAN_BUDGET if budget is None else budget,
        )

    def _search(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        query: traceql.Query,
        start_s: int,
        end_s: int,
        limit: int,
        spss: int,
        budget: int,
    ) -> SearchResult:
        limit = max(limit, 1)
        where = ["tenant = ?"]
        params: list[Any] = [tenant]
        index = "spans_time"
        python_conds: list[traceql.Cond] = []
        # the conditions SQL answers, as (column of the search row, operator, value): phase 2 checks them in Python
        column_conds: list[tuple[int, str, Any]] = []
        for cond in query.conds:
            a = cond.attr
            if a.scope == "intrinsic" and a.key == "span:id" and cond.op == "=" and isinstance(cond.value, str):
                number = decode.span_id_to_int(cond.value.lower().rjust(16, "0"))
                if number is None:
                    return SearchResult([])
                where.append("span_id = ?")
                params.append(number)
                column_conds.append((1, "=", number))
                index = "spans_span"
            elif a.scope == "intrinsic" and a.key == "trace:id" and cond.op == "=" and isinstance(cond.value, str):
                raw = decode.trace_id_to_bytes(cond.value.lower().rjust(32, "0"))
                if raw is None:
                    return SearchResult([])
                where.append("trace_id = ?")
                params.append(raw)
                column_conds.append((0, "=", raw))
                if index != "spans_span":
                    index = "spans_trace"
            elif a.scope == "intrinsic" and a.key == "name" and cond.op == "=" and isinstance(cond.value, str):
                where.append("name = ?")
                params.append(cond.value)
                column_conds.append((3, "=", cond.value))
            elif a.scope == "resource" and a.key == "service.name" and cond.op == "=" and isinstance(cond.value, str):
                where.append("service = ?")
                params.append(cond.value)
                column_conds.append((2, "=", cond.value))
                if index == "spans_time":
                    index = "spans_service_time"
            elif (
                a.scope == "intrinsic"
                and a.key == "duration"
                and isinstance(cond.value, int)
                and cond.op in ("=", "!=", ">", ">=", "<", "<=")
            ):
                where.append(f"(end_ns - start_ns) {cond.op} ?")
                params.append(cond.value)
                column_conds.append((-1, cond.op, cond.value))
            else:
                python_conds.append(cond)
        needs_body = bool(python_conds) or any(
            a.scope != "intrinsic" and not (a.key == SERVICE_NAME and a.scope in ("resource", "any"))
            for a in query.select
        )
        columns = "trace_id, span_id, service, name, start_ns, end_ns, resource_id, " + (
            "body" if needs_body else "NULL"
        )
        conds = " AND ".join(where)
        window: tuple[int, int] | None = None
        scans: list[tuple[str, list[Any]]] = []
        by_id = index in ("spans_span", "spans_trace")  # their keys lead with the bucket: probe each
        if start_s or end_s:
            hi = min((end_s + 1) * 1_000_000_000, FAR_FUTURE_NS) if end_s > 0 else FAR_FUTURE_NS
            lo = min(max(0, start_s) * 1_000_000_000, FAR_FUTURE_NS)
            window = (lo, hi)
            # spans that start within LONG_SPAN_NS before the window, or in it, and end in or after it: one range
            # (spans_time holds each span's end beside its start, so the end is checked in the index)
            near = max(0, lo - LONG_SPAN_NS)
            buckets = f" AND {BUCKETS_IN}" if by_id else ""
            scans.append(
                (
                    f"SELECT {columns} FROM spans INDEXED BY {index} WHERE {conds}{buckets} AND start_ns >= ? "
                    "AND start_ns < ? AND end_ns >= ? ORDER BY start_ns DESC",
                    [*params, *([span_buckets(conn, near, hi)] if by_id else []), near, hi, lo],
                )
            )
            if lo - LONG_SPAN_NS > 0:  # longer spans that started before that and still reach into the window
                scans.append(
                    (
                        f"SELECT {columns} FROM spans INDEXED BY spans_long WHERE end_ns - start_ns > {LONG_SPAN_NS} "
                        f"AND end_ns >= ? AND start_ns < ? AND {conds} ORDER BY start_ns DESC",
                        [lo, min(hi, lo - LONG_SPAN_NS), *params],
                    )
                )
        else:
            buckets = f" AND {BUCKETS_IN}" if by_id else ""
            scans.append(
                (
                    f"SELECT {columns} FROM spans INDEXED BY {index} WHERE {conds}{buckets} ORDER BY start_ns DESC",
                    [*params, *([span_buckets(conn)] if by_id else [])],
                )
            )

        resources: dict[int, otlp_trace.ResourceSpans] = {}

        def matches(
            row: tuple[Any, ...],
        ) -> (
            tuple[otlp_trace.Span | None, otlp_trace.ResourceSpans | None, functools.partial[traceql.Value | None]]
            | None
        ):
            trace_id, span_id, service, name, start_ns, end_ns, resource_id, body = row
            span = otlp_trace.Span.FromString(body) if body is not None else None
            resource = self._resource(conn, resource_id, resources) if needs_body else None
            value_of = functools.partial(
                bound_attr_value, (trace_id, span_id, service, name, start_ns, end_ns, span, resource)
            )
            if not all(traceql.compare(value_of(c.attr), c) for c in python_conds):
                return None
            return span, resource, value_of

        # 1. the newest traces with a matching span, until there are `limit` of them or the budget is spent
        chosen: dict[bytes, None] = {}
        inspected = 0
        partial: str | None = None
        for sql, args in scans:
            for row in conn.execute(sql, args):
                inspected += 1
                if inspected > budget:
                    partial = (
                        f"the search examined its window's newest {budget:,} spans and stopped there with "
                        f"{len(chosen)} of the {limit} traces asked for: older spans of the window were not looked "
                        "at; narrow the time range, or add a condition the store finds by index "
                        "(resource.service.name, span:id, trace:id)"
                    )
                    break
                if row[0] in chosen or matches(row) is None:
                    continue
                chosen[row[0]] = None
                if len(chosen) >= limit:
                    break
            if partial is not None or len(chosen) >= limit:
                break
        inspected = min(inspected, budget)

        # 2. each chosen trace: its spans near the window (all of them when its root is not there), for its summary
        # and its matching spans in the window (all counted, `spss` kept)
        lo, hi = window if window is not None else (0, FAR_FUTURE_NS)
        everywhere = span_buckets(conn)
        near_lo = max(0, lo - TRACE_MARGIN_NS) // SPAN_BUCKET_NS * SPAN_BUCKET_NS
        around = span_buckets(conn, near_lo, min(hi + TRACE_MARGIN_NS, FAR_FUTURE_NS))

        def sql_match(row: tuple[Any, ...]) -> bool:
            for column, op, want in column_conds:
                have = row[5] - row[4] if column < 0 else row[column]
                if not traceql.COMPARISONS[op](have, want):
                    return False
            return True

        def trace_spans(trace_id: bytes, buckets: str) -> list[tuple[Any, ...]]:
            return conn.execute(
                f"SELECT {columns}, parent_span_id FROM spans INDEXED BY spans_trace WHERE tenant = ? AND {BUCKETS_IN} "
                "AND trace_id = ? ORDER BY start_ns DESC",
                (tenant, buckets, trace_id),
            ).fetchall()

        out: list[TraceMatch] = []
        for trace_id in chosen:
            match = TraceMatch(trace_id.hex(), "", "", 0, 0)
            rows = trace_spans(trace_id, around if window is not None else everywhere)
            if window is not None:
                if any(r[8] is None for r in rows):  # the root is near: add long spans that began further back
                    rows += conn.execute(
                        f"SELECT {columns}, parent_span_id FROM spans INDEXED BY spans_long WHERE end_ns - start_ns > "
                        f"{LONG_SPAN_NS} AND end_ns >= ? AND start_ns < ? AND tenant = ? AND trace_id = ?",
                        (lo, near_lo, tenant, trace_id),
                    ).fetchall()
                else:  # the root lies further out, or has not arrived: the whole trace
                    rows = trace_spans(trace_id, everywhere)
            _summarise(match, rows)
            for full in rows:
                row = full[:8]
                if not (row[4] < hi and row[5] >= lo and sql_match(row)):
                    continue
                found = matches(row)
                if found is None:
                    continue
                span, resource, value_of = found
                match.matched += 1
                if len(match.spans) < max(spss, 1):
                    _, span_id, service, name, start_ns, end_ns, _, _ = row
                    match.spans.append(
                        search_span(query, span_id, service, name, start_ns, end_ns, span, resource, value_of)
                    )
            out.append(match)
        out.sort(key=lambda m: m.start_ns, reverse=True)
        return SearchResult(out, inspected, partial)

    async def tag_names(self, tenant: str | None) -> dict[str, list[str]]:
        def read(conn: sqlite3.Connection) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {"resource": [], "span": []}
            for scope, key in conn.execute(
                "SELECT DISTINCT scope, key FROM tags WHERE tenant = ? ORDER BY key", (tenant_key(tenant),)
            ):
                out.setdefault(scope, []).append(key)
            return out

        return await self._db.read(read)

    async def tag_values(self, tenant: str | None, tag: str, limit: int = 1000) -> list[str]:
        key = tenant_key(tenant)
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
