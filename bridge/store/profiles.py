"""Profile queries of the store, Pyroscope's querier answered from SQLite: merged stacks (``GROUP BY stack`` over
the selected series and window, from per-profile stack totals or, when span or trace ids select, from the samples),
flame graphs and pprof built from them, profile types, label names and values, series and time series. Every query
runs on a reader thread."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from bridge import flamegraph
from bridge._proto import profile_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.errors import InvalidArgument, Unimplemented
from bridge.pprof import encode_pprof
from bridge.profiletype import ProfileType
from bridge.selector import Matcher, matches_any, parse_selector, parse_selectors
from bridge.store.database import Database
from bridge.store.query import (
    DEFAULT_MAX_NODES,
    filter_call_site,
    parse_span_selector,
    parse_trace_selector,
    window_ns,
)
from bridge.store.schema import unpack_frames
from bridge.upstream.base import CallContext

SERIES_LABELS_CACHE: Final = 100_000  # parsed label sets kept, keyed by their JSON text


def _require_flamegraph_format(rpc: str, fmt: int) -> None:
    """The store answers span and stack-trace queries as flame graphs only (no tree, dot or pprof format)."""
    if fmt not in (qpb.PROFILE_FORMAT_UNSPECIFIED, qpb.PROFILE_FORMAT_FLAMEGRAPH):
        raise Unimplemented(
            f"standalone mode answers {rpc} as a flame graph only, not format {qpb.ProfileFormat.Name(fmt)}"
        )


class Profiles:
    """The store as a ``ProfileSource`` and as the rest of Pyroscope's querier (``querier_api``), plus
    ``merged_stacks``, the rows every flame-graph answer is built from."""

    def __init__(self, db: Database) -> None:
        self._db = db
        # reader-side caches of immutable rows
        self._names: dict[int, str] = {}
        # keyed by content, not id: SQLite may hand a deleted row's id to a new row
        self._series_labels: dict[str, dict[str, str]] = {}

    def _series(
        self, conn: sqlite3.Connection, tenant: str, selectors: Sequence[Sequence[Matcher]],
        profile_type: str | None = None, window: tuple[int, int] | None = None,
    ) -> dict[int, dict[str, str]]:
        sql = "SELECT id, labels FROM series WHERE tenant = ?"
        params: list[Any] = [tenant]
        if profile_type:
            sql += " AND profile_type = ?"
            params.append(profile_type)
        if window is not None:
            sql += " AND id IN (SELECT DISTINCT series_id FROM profiles WHERE time_ns >= ? AND time_ns < ?)"
            params.extend(window)
        out: dict[int, dict[str, str]] = {}
        for sid, text in conn.execute(sql, params):
            labels = self._series_labels.get(text)
            if labels is None:
                if len(self._series_labels) > SERIES_LABELS_CACHE:
                    self._series_labels.clear()
                labels = self._series_labels[text] = json.loads(text)
            if matches_any(selectors, labels):
                out[sid] = labels
        return out

    def _names_of(self, conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, str]:
        names = self._names
        missing = {i for i in ids if i not in names}
        if missing:
            for fid, name in conn.execute(
                "SELECT id, name FROM functions WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(missing)),),
            ):
                names[fid] = name
        return names

    def _merged_stacks(
        self, conn: sqlite3.Connection, series_ids: Sequence[int], window: tuple[int, int],
        span_ids: Sequence[int] | None = None, trace_ids: Sequence[bytes] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        """``GROUP BY stack`` over the selected profiles → (frames root first, summed value) per distinct stack: from
        the per-profile stack totals, or from the samples when span or trace ids select them."""
        if not series_ids:
            return []
        inner = "SELECT stack_id, SUM(value) AS v FROM " + (
            "profile_stacks" if span_ids is None and trace_ids is None else "samples"
        )
        where = [
            "profile_id IN (SELECT id FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
            "AND time_ns >= ? AND time_ns < ?)"
        ]
        params: list[Any] = [json.dumps(list(series_ids)), *window]
        if span_ids is not None:
            if not span_ids:
                return []
            inner += " INDEXED BY samples_span"
            where.append(f"span_id IS NOT NULL AND span_id IN ({','.join('?' * len(span_ids))})")
            params.extend(span_ids)
        elif trace_ids is not None:
            if not trace_ids:
                return []
            inner += " INDEXED BY samples_trace"
            where.append(f"trace_id IS NOT NULL AND trace_id IN ({','.join('?' * len(trace_ids))})")
            params.extend(trace_ids)
        sql = (
            f"SELECT st.frames, agg.v FROM ({inner} WHERE {' AND '.join(where)} GROUP BY stack_id) AS agg "
            "JOIN stacks AS st ON st.id = agg.stack_id"
        )
        rows = [(unpack_frames(frames), int(v)) for frames, v in conn.execute(sql, params) if v]
        names = self._names_of(conn, {i for ids, _ in rows for i in ids})
        return [(tuple(names.get(i, f"<function {i}>") for i in ids), v) for ids, v in rows]

    def _select_stacks(
        self, conn: sqlite3.Connection, tenant: str, profile_type: str, selector: str, start_ms: int, end_ms: int,
        span_ids: Sequence[int] | None, trace_ids: Sequence[bytes] | None,
    ) -> list[tuple[tuple[str, ...], int]]:
        ProfileType.parse(profile_type)
        window = window_ns(start_ms, end_ms)
        series = self._series(conn, tenant, [parse_selector(selector)], profile_type)
        return self._merged_stacks(conn, list(series), window, span_ids, trace_ids)

    async def merged_stacks(
        self, tenant: str | None, profile_type: str, selector: str, start_ms: int, end_ms: int, *,
        span_ids: Sequence[int] | None = None, trace_ids: Sequence[bytes] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        """Merged (frames, value) rows of a query: what every flame-graph answer is built from."""
        return await self._db.read(
            self._select_stacks, tenant or "anonymous", profile_type, selector, start_ms, end_ms, span_ids, trace_ids
        )

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse:
        _require_flamegraph_format("SelectMergeStacktraces", req.format)
        if req.span_selector and req.trace_id_selector:
            raise InvalidArgument("span_selector and trace_id_selector cannot be combined")
        span_ids = parse_span_selector(req.span_selector) if req.span_selector else None
        trace_ids = parse_trace_selector(req.trace_id_selector) if req.trace_id_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end,
            span_ids=span_ids, trace_ids=trace_ids,
        )
        if req.HasField("stack_trace_selector") and req.stack_trace_selector.call_site:
            stacks = filter_call_site(stacks, [loc.name for loc in req.stack_trace_selector.call_site])
        max_nodes = req.max_nodes if req.HasField("max_nodes") and req.max_nodes > 0 else DEFAULT_MAX_NODES
        return qpb.SelectMergeStacktracesResponse(flamegraph=flamegraph.encode_stacks(stacks, max_nodes))

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse:
        _require_flamegraph_format("SelectMergeSpanProfile", req.format)
        # An empty span selector selects everything, as Pyroscope's v2 read path does.
        span_ids = parse_span_selector(req.span_selector) if req.span_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end, span_ids=span_ids
        )
        max_nodes = req.max_nodes if req.HasField("max_nodes") and req.max_nodes > 0 else DEFAULT_MAX_NODES
        return qpb.SelectMergeSpanProfileResponse(flamegraph=flamegraph.encode_stacks(stacks, max_nodes))

    async def select_merge_profile(self, req: qpb.SelectMergeProfileRequest, ctx: CallContext) -> profile_pb2.Profile:
        trace_ids = parse_trace_selector(req.trace_id_selector) if req.trace_id_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end, trace_ids=trace_ids
        )
        if req.HasField("stack_trace_selector") and req.stack_trace_selector.call_site:
            stacks = filter_call_site(stacks, [loc.name for loc in req.stack_trace_selector.call_site])
        return encode_pprof(stacks, req.profile_typeID, time_nanos=max(0, req.start) * 1_000_000,
                            duration_nanos=max(0, req.end - req.start) * 1_000_000)

    async def profile_types(self, req: qpb.ProfileTypesRequest, ctx: CallContext) -> qpb.ProfileTypesResponse:
        window = window_ns(req.start, req.end) if req.start or req.end else None

        def read(conn: sqlite3.Connection) -> list[str]:
            sql = "SELECT DISTINCT profile_type FROM series WHERE tenant = ?"
            params: list[Any] = [ctx.tenant_key]
            if window is not None:
                sql += " AND id IN (SELECT DISTINCT series_id FROM profiles WHERE time_ns >= ? AND time_ns < ?)"
                params.extend(window)
            return sorted(row[0] for row in conn.execute(sql, params))

        out = qpb.ProfileTypesResponse()
        for type_id in await self._db.read(read):
            pt = ProfileType.parse(type_id)
            out.profile_types.add(
                ID=type_id, name=pt.name, sample_type=pt.sample_type, sample_unit=pt.sample_unit,
                period_type=pt.period_type, period_unit=pt.period_unit,
            )
        return out

    async def _matching_series(
        self, tenant: str, matchers: Sequence[str], start_ms: int, end_ms: int
    ) -> dict[int, dict[str, str]]:
        selectors = parse_selectors(matchers)
        window = window_ns(start_ms, end_ms) if start_ms or end_ms else None
        return await self._db.read(self._series, tenant, selectors, None, window)

    async def label_names(self, req: tpb.LabelNamesRequest, ctx: CallContext) -> tpb.LabelNamesResponse:
        series = await self._matching_series(ctx.tenant_key, req.matchers, req.start, req.end)
        return tpb.LabelNamesResponse(names=sorted({k for labels in series.values() for k in labels}))

    async def label_values(self, req: tpb.LabelValuesRequest, ctx: CallContext) -> tpb.LabelValuesResponse:
        series = await self._matching_series(ctx.tenant_key, req.matchers, req.start, req.end)
        values = {labels[req.name] for labels in series.values() if labels.get(req.name)}
        return tpb.LabelValuesResponse(names=sorted(values))

    async def series(self, req: qpb.SeriesRequest, ctx: CallContext) -> qpb.SeriesResponse:
        series = await self._matching_series(ctx.tenant_key, req.matchers, req.start, req.end)
        wanted = set(req.label_names)
        seen: set[tuple[tuple[str, str], ...]] = set()
        for labels in series.values():
            pairs = tuple(sorted((k, v) for k, v in labels.items() if not wanted or k in wanted))
            seen.add(pairs)
        out = qpb.SeriesResponse()
        for pairs in sorted(seen):
            out.labels_set.add().labels.extend(tpb.LabelPair(name=k, value=v) for k, v in pairs)
        return out

    async def select_series(self, req: qpb.SelectSeriesRequest, ctx: CallContext) -> qpb.SelectSeriesResponse:
        ProfileType.parse(req.profile_typeID)
        step_ms = int(req.step * 1000) if req.step > 0 else 15_000
        if step_ms <= 0:
            raise InvalidArgument(f"step {req.step} must be positive")
        window = window_ns(req.start, req.end)
        selector = parse_selector(req.label_selector)
        average = req.HasField("aggregation") and req.aggregation == tpb.TIME_SERIES_AGGREGATION_TYPE_AVERAGE

        def read(conn: sqlite3.Connection) -> list[tuple[dict[str, str], int, int]]:
            series = self._series(conn, ctx.tenant_key, [selector], req.profile_typeID)
            if not series:
                return []
            rows = conn.execute(
                "SELECT series_id, time_ns, total FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
                "AND time_ns >= ? AND time_ns < ? ORDER BY time_ns",
                (json.dumps(list(series)), *window),
            ).fetchall()
            return [(series[sid], t, total) for sid, t, total in rows]

        rows = await self._db.read(read)
        group_by = list(req.group_by)
        buckets: dict[tuple[tuple[str, str], ...], dict[int, list[int]]] = {}
        for labels, time_ns, total in rows:
            key = tuple((g, labels[g]) for g in group_by if labels.get(g))
            t_ms = time_ns // 1_000_000
            ts = req.start + ((t_ms - req.start) // step_ms) * step_ms
            buckets.setdefault(key, {}).setdefault(ts, []).append(total)
        ordered = sorted(buckets.items(), key=lambda kv: (-sum(sum(v) for v in kv[1].values()), kv[0]))
        if req.HasField("limit") and req.limit > 0:
            ordered = ordered[: req.limit]
        out = qpb.SelectSeriesResponse()
        for key, points in sorted(ordered):
            s = out.series.add()
            s.labels.extend(tpb.LabelPair(name=k, value=v) for k, v in key)
            for ts in sorted(points):
                values = points[ts]
                value = sum(values) / len(values) if average else float(sum(values))
                s.points.add(value=value, timestamp=ts)
        return out
