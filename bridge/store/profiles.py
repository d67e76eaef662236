"""Profile queries of the store, Pyroscope's querier answered from SQLite: merged stacks (``GROUP BY stack`` over
the selected series and window), flame graphs and pprof built from them, profile types, label names and values,
series and time series. Every query runs on a reader thread.

A merge reads what its answer needs, not what the store holds: without a span or trace selector, the coarsest
rollups that fit the window (``rollup.plan``) plus per-profile stack totals at its edges; with one, only the
profiles that hold samples of those spans or traces (``span_profiles`` / ``trace_profiles``, per 10 minutes), and of
those only their samples. Both are exact. A merge whose sum would pass int64 is refused with ``out_of_range``."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bridge import dot, flamegraph, treeformat
from bridge._proto import profile_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext, tenant_key
from bridge.errors import BridgeError, Code, InvalidArgument, Unimplemented
from bridge.pprof import encode_pprof
from bridge.profiletype import ProfileType
from bridge.selector import Matcher, matches_any, parse_selector, parse_selectors
from bridge.store import rollup
from bridge.store.database import Database
from bridge.store.query import (
    DEFAULT_MAX_NODES,
    filter_call_site,
    parse_profile_ids,
    parse_span_selector,
    parse_trace_selector,
    profile_uuid,
    window_ns,
)
from bridge.store.schema import unpack_frames

SERIES_LABELS_CACHE: Final = 100_000  # parsed label sets kept, keyed by their JSON text
INT64_MAX: Final = 2**63 - 1
MAX_MAX_NODES: Final = 1 << 20  # Pyroscope's querier.max-flamegraph-nodes-max
MAX_STEP_S: Final = 10**12  # SelectSeries steps are cut to this (31,700 years): longer than any window


def _overflow() -> BridgeError:
    return BridgeError(
        "the profiles selected add up to more than 2^63 - 1, the most a flame graph can hold: each stored value is at "
        "most 2^53, so over a thousand uploads at that bound were stored for this selection; narrow the time range "
        "or the label selector",
        code=Code.OUT_OF_RANGE,
    )


def _read_snapshot(conn: sqlite3.Connection, fn: Any, *args: Any) -> Any:
    """``fn(conn, *args)`` inside one read transaction: its statements see one snapshot (the rollups' watermarks and
    the rollups they describe)."""
    conn.execute("BEGIN")
    try:
        return fn(conn, *args)
    finally:
        conn.execute("COMMIT")


def max_nodes_of(value: int | None) -> int:
    """``max_nodes`` as Pyroscope's ``ValidateMaxNodes`` takes it: unset or 0 → 8192, at most 2^20, not negative."""
    if not value:
        return DEFAULT_MAX_NODES
    if value > MAX_MAX_NODES:
        raise InvalidArgument(f"max flamegraph nodes limit {value} is greater than allowed {MAX_MAX_NODES}")
    if value < 0:
        raise InvalidArgument(f"max flamegraph nodes limit must be set (max allowed {MAX_MAX_NODES})")
    return value


def present(
    stacks: list[tuple[tuple[str, ...], int]], req: qpb.SelectMergeStacktracesRequest, max_nodes: int
) -> qpb.SelectMergeStacktracesResponse:
    """The merged stacks in the format asked for, as Pyroscope's v2 query frontend answers each
    (``pkg/frontend/readpath/queryfrontend/query_select_merge_stacktraces.go``): ``TREE`` the tree bytes
    (``bridge.treeformat``), ``PPROF`` a pprof profile, ``DOT`` a DOT graph (``bridge.dot``; nothing at all for no
    samples), anything else — ``UNSPECIFIED``, ``FLAMEGRAPH`` and a value this version does not know — a flame
    graph."""
    if req.format == qpb.PROFILE_FORMAT_TREE:
        return qpb.SelectMergeStacktracesResponse(tree=treeformat.encode_stacks(stacks, max_nodes))
    if req.format in (qpb.PROFILE_FORMAT_PPROF, qpb.PROFILE_FORMAT_DOT):
        lo, hi = window_ns(req.start, req.end)
        profile = encode_pprof(stacks, req.profile_typeID, time_nanos=lo, duration_nanos=max(0, hi - 1_000_000 - lo))
        if req.format == qpb.PROFILE_FORMAT_PPROF:
            return qpb.SelectMergeStacktracesResponse(pprof=qpb.PprofProfile(profile=profile))
        if not profile.sample:
            return qpb.SelectMergeStacktracesResponse()
        nodes = req.max_nodes if req.HasField("max_nodes") and req.max_nodes > 0 else dot.DEFAULT_NODES
        return qpb.SelectMergeStacktracesResponse(dot=dot.from_profile(profile, nodes))
    return qpb.SelectMergeStacktracesResponse(flamegraph=flamegraph.encode_stacks(stacks, max_nodes))


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
        self,
        conn: sqlite3.Connection,
        tenant: str,
        selectors: Sequence[Sequence[Matcher]],
        profile_type: str | None = None,
        window: tuple[int, int] | None = None,
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

    def series_in(
        self, conn: sqlite3.Connection, tenant: str, matchers: Sequence[Matcher], window: tuple[int, int]
    ) -> dict[int, dict[str, str]]:
        """The tenant's series whose labels ``matchers`` match and that hold profiles captured in ``window``."""
        return self._series(conn, tenant, [matchers], None, window)

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
        self,
        conn: sqlite3.Connection,
        series_ids: Sequence[int],
        window: tuple[int, int],
        span_ids: Sequence[int] | None = None,
        trace_ids: Sequence[bytes] | None = None,
        profile_ids: Sequence[tuple[int, int]] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        """``GROUP BY stack`` over the selected profiles → (frames root first, summed value) per distinct stack."""
        if not series_ids:
            return []
        series_json = json.dumps(list(series_ids))
        if profile_ids is not None:
            chosen = self._chosen_rows(conn, series_json, window, profile_ids, span_ids, trace_ids)
            if chosen is None:
                return []
            inner, params = chosen
        elif span_ids is None and trace_ids is None:
            inner, params = self._rollup_rows(conn, series_json, window)
        else:
            linked = self._linked_rows(conn, series_json, window, span_ids, trace_ids)
            if linked is None:
                return []
            inner, params = linked
        sql = (
            f"SELECT st.frames, agg.v FROM (SELECT stack_id, SUM(value) AS v FROM ({inner}) GROUP BY stack_id) AS agg "
            "JOIN stacks AS st ON st.id = agg.stack_id"
        )
        try:
            rows = [(unpack_frames(frames), int(v)) for frames, v in conn.execute(sql, params) if v]
        except sqlite3.OperationalError as exc:
            if "integer overflow" in str(exc):
                raise _overflow() from exc
            raise
        if abs(sum(v for _, v in rows)) >= INT64_MAX or any(abs(v) >= INT64_MAX for _, v in rows):
            raise _overflow()  # past int64, or a rollup that saturated
        names = self._names_of(conn, {i for ids, _ in rows for i in ids})
        return [(tuple(names.get(i, f"<function {i}>") for i in ids), v) for ids, v in rows]

    @staticmethod
    def _rollup_rows(conn: sqlite3.Connection, series_json: str, window: tuple[int, int]) -> tuple[str, list[Any]]:
        return rollup.merge_rows(conn, series_json, window)

    @staticmethod
    def _chosen_rows(
        conn: sqlite3.Connection,
        series_json: str,
        window: tuple[int, int],
        profile_ids: Sequence[tuple[int, int]],
        span_ids: Sequence[int] | None,
        trace_ids: Sequence[bytes] | None,
    ) -> tuple[str, list[Any]] | None:
        """(stack_id, value) rows of the profiles ``profile_id_selector`` names (``query.profile_uuid``: row id and
        capture start, both must match) among the selected series and window; with a span or trace selector too,
        only those spans' or traces' samples in them."""
        wanted = set(profile_ids)
        found = [
            pid
            for pid, time_ns in conn.execute(
                "SELECT id, time_ns FROM profiles WHERE id IN (SELECT value FROM json_each(?)) "
                "AND series_id IN (SELECT value FROM json_each(?)) AND time_ns >= ? AND time_ns < ?",
                (json.dumps(sorted({pid for pid, _ in wanted})), series_json, *window),
            )
            if (pid, time_ns) in wanted
        ]
        if not found:
            return None
        ids = json.dumps(found)
        if span_ids is None and trace_ids is None:
            return "SELECT stack_id, value FROM profile_stacks WHERE profile_id IN (SELECT value FROM json_each(?))", [
                ids
            ]
        column, keys = ("span_id", list(span_ids)) if span_ids is not None else ("trace_id", list(trace_ids or ()))
        if not keys:
            return None
        marks = ",".join("?" * len(keys))
        return (
            f"SELECT stack_id, value FROM samples WHERE profile_id IN (SELECT value FROM json_each(?)) "
            f"AND {column} IN ({marks})",
            [ids, *keys],
        )

    @staticmethod
    def _linked_rows(
        conn: sqlite3.Connection,
        series_json: str,
        window: tuple[int, int],
        span_ids: Sequence[int] | None,
        trace_ids: Sequence[bytes] | None,
    ) -> tuple[str, list[Any]] | None:
        """(stack_id, value) rows of the samples of these spans (or traces): found through the profiles that hold
        them, 10 minutes by 10 minutes of the window's stored time, so the cost follows the spans, not the history."""
        ids: list[Any]
        if span_ids is not None:
            table, column, ids = "span_profiles", "span_id", list(span_ids)
        else:
            assert trace_ids is not None
            table, column, ids = "trace_profiles", "trace_id", list(trace_ids)
        if not ids:
            return None
        lo, hi = window
        buckets = rollup.link_buckets(conn, lo, hi)
        if buckets == "[]":
            return None
        marks = ",".join("?" * len(ids))
        inner = (
            f"SELECT stack_id, value FROM samples WHERE profile_id IN ("
            f"SELECT l.profile_id FROM {table} AS l JOIN profiles AS p ON p.id = l.profile_id "
            f"WHERE l.bucket IN (SELECT value FROM json_each(?)) AND l.{column} IN ({marks}) "
            "AND p.series_id IN (SELECT value FROM json_each(?)) AND p.time_ns >= ? AND p.time_ns < ?"
            f") AND {column} IN ({marks})"
        )
        return inner, [buckets, *ids, series_json, lo, hi, *ids]

    def _select_stacks(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        span_ids: Sequence[int] | None,
        trace_ids: Sequence[bytes] | None,
        profile_ids: Sequence[tuple[int, int]] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        ProfileType.parse(profile_type)
        window = window_ns(start_ms, end_ms)
        selectors = [parse_selector(selector)]

        def merge(c: sqlite3.Connection) -> list[tuple[tuple[str, ...], int]]:
            series = self._series(c, tenant, selectors, profile_type)
            return self._merged_stacks(c, list(series), window, span_ids, trace_ids, profile_ids)

        result: list[tuple[tuple[str, ...], int]] = _read_snapshot(conn, merge)
        return result

    async def merged_stacks(
        self,
        tenant: str | None,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        *,
        span_ids: Sequence[int] | None = None,
        trace_ids: Sequence[bytes] | None = None,
        profile_ids: Sequence[tuple[int, int]] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        """Merged (frames, value) rows of a query: what every flame-graph answer is built from."""
        return await self._db.read(
            self._select_stacks,
            tenant_key(tenant),
            profile_type,
            selector,
            start_ms,
            end_ms,
            span_ids,
            trace_ids,
            profile_ids,
        )

    async def stacks_of(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> list[tuple[tuple[str, ...], int]]:
        """The merged stacks a ``SelectMergeStacktracesRequest`` selects: its label, span, trace and profile id
        selectors and its call site applied (``Diff`` reads both sides this way)."""
        if req.span_selector and req.trace_id_selector:
            raise InvalidArgument("span_selector and trace_id_selector cannot be combined")
        span_ids = parse_span_selector(req.span_selector) if req.span_selector else None
        trace_ids = parse_trace_selector(req.trace_id_selector) if req.trace_id_selector else None
        profile_ids = parse_profile_ids(req.profile_id_selector) if req.profile_id_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant,
            req.profile_typeID,
            req.label_selector,
            req.start,
            req.end,
            span_ids=span_ids,
            trace_ids=trace_ids,
            profile_ids=profile_ids,
        )
        if req.HasField("stack_trace_selector") and req.stack_trace_selector.call_site:
            stacks = filter_call_site(stacks, [loc.name for loc in req.stack_trace_selector.call_site])
        return stacks

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse:
        max_nodes = max_nodes_of(req.max_nodes if req.HasField("max_nodes") else None)
        return present(await self.stacks_of(req, ctx), req, max_nodes)

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse:
        """Pyroscope's v2 read path: ``TREE`` answers tree bytes, every other format a flame graph
        (``query_select_merge_span_profile.go``); an empty span selector selects everything."""
        span_ids = parse_span_selector(req.span_selector) if req.span_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end, span_ids=span_ids
        )
        max_nodes = max_nodes_of(req.max_nodes if req.HasField("max_nodes") else None)
        if req.format == qpb.PROFILE_FORMAT_TREE:
            return qpb.SelectMergeSpanProfileResponse(tree=treeformat.encode_stacks(stacks, max_nodes))
        return qpb.SelectMergeSpanProfileResponse(flamegraph=flamegraph.encode_stacks(stacks, max_nodes))

    async def select_merge_profile(self, req: qpb.SelectMergeProfileRequest, ctx: CallContext) -> profile_pb2.Profile:
        trace_ids = parse_trace_selector(req.trace_id_selector) if req.trace_id_selector else None
        profile_ids = parse_profile_ids(req.profile_id_selector) if req.profile_id_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant,
            req.profile_typeID,
            req.label_selector,
            req.start,
            req.end,
            trace_ids=trace_ids,
            profile_ids=profile_ids,
        )
        if req.HasField("stack_trace_selector") and req.stack_trace_selector.call_site:
            stacks = filter_call_site(stacks, [loc.name for loc in req.stack_trace_selector.call_site])
        # start and end as Pyroscope stamps them (end - start), clipped to what int64 nanoseconds hold
        lo, hi = window_ns(req.start, req.end)
        return encode_pprof(stacks, req.profile_typeID, time_nanos=lo, duration_nanos=max(0, hi - 1_000_000 - lo))

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
                ID=type_id,
                name=pt.name,
                sample_type=pt.sample_type,
                sample_unit=pt.sample_unit,
                period_type=pt.period_type,
                period_unit=pt.period_unit,
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

    def profile_rows(
        self, conn: sqlite3.Connection, tenant: str, profile_type: str, selector: str, window: tuple[int, int]
    ) -> list[ProfileRow]:
        """Every stored profile of the selected series captured in ``window`` (ns), oldest first: the rows time
        series, timelines, individual heatmaps and exemplars are built from (on a reader connection)."""
        series = self._series(conn, tenant, [parse_selector(selector)], profile_type)
        if not series:
            return []
        rows = conn.execute(
            "SELECT id, series_id, time_ns, total FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
            "AND time_ns >= ? AND time_ns < ? ORDER BY time_ns",
            (json.dumps(list(series)), *window),
        ).fetchall()
        return [ProfileRow(series[sid], pid, t, total) for pid, sid, t, total in rows]

    async def sample_periods(
        self, profile_type: str, selector: str, start_ms: int, end_ms: int, ctx: CallContext
    ) -> dict[int, int]:
        """What one sample adds to the values (``profiles.period``, 0: not known) of the ``profile_type`` profiles
        ``selector`` matches in the window, each with the number of profiles that had it."""
        window = window_ns(start_ms, end_ms)
        parsed = parse_selector(selector)

        def read(conn: sqlite3.Connection) -> dict[int, int]:
            series = self._series(conn, ctx.tenant_key, [parsed], profile_type)
            if not series:
                return {}
            rows = conn.execute(
                "SELECT period, count(*) FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
                "AND time_ns >= ? AND time_ns < ? GROUP BY period",
                (json.dumps(list(series)), *window),
            )
            return {int(period): int(n) for period, n in rows}

        return await self._db.read(read)

    def step_totals(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        step_ms: int,
        by_series: bool = False,
    ) -> list[tuple[dict[str, str], int, int, int]]:
        """Pyroscope v2's time series points (``pkg/model/timeseries/range.go``): the profiles captured from one
        step before ``start_ms`` to ``end_ms``, each counted at the right edge of its step, ``start + ceil((t -
        start) / step) * step`` — (series labels, that edge in ms, sum of totals, number of profiles), added up in
        SQL per step, and per series too with ``by_series`` (else the labels are ``{}``)."""
        series = self._series(conn, tenant, [parse_selector(selector)], profile_type)
        if not series:
            return []
        lo, hi = window_ns(start_ms - step_ms, end_ms)
        group = "series_id, k" if by_series else "k"
        rows = conn.execute(
            # t - start >= -step, so adding two steps keeps SQLite's truncating division a ceiling
            f"SELECT {'series_id' if by_series else '0'}, (time_ns / 1000000 - ? + 3 * ? - 1) / ? - 2 AS k, "
            "sum(total), count(*) FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
            f"AND time_ns >= ? AND time_ns < ? GROUP BY {group}",
            (start_ms, step_ms, step_ms, json.dumps(list(series)), lo, hi),
        ).fetchall()
        none: dict[str, str] = {}
        return [(series[sid] if by_series else none, start_ms + k * step_ms, int(t), n) for sid, k, t, n in rows]

    async def select_series(self, req: qpb.SelectSeriesRequest, ctx: CallContext) -> qpb.SelectSeriesResponse:
        """Totals per step, each point the step that ends at it, from ``start`` (and, with
        ``EXEMPLAR_TYPE_INDIVIDUAL``, each point's largest profile as its exemplar, as Pyroscope's v2 read path keeps
        one per point: ``pkg/model/timeseries/aggregator.go`` ``DefaultMaxExemplarsPerPoint``). Span exemplars are
        Pyroscope's ``unimplemented`` too (``pkg/querybackend/query_time_series.go``): ``SelectHeatmap`` serves
        them."""
        ProfileType.parse(req.profile_typeID)
        if not (math.isfinite(req.step) and req.step > 0):
            raise InvalidArgument(f"step {req.step} must be a positive, finite number of seconds")
        # a step longer than every window (1970–2200) gives one point, whatever its size: cut before it overflows
        # (fuzzed: "step": 1e308 made int() of an infinity, a 500)
        step_ms = int(min(req.step, MAX_STEP_S) * 1000)
        if step_ms <= 0:
            raise InvalidArgument(f"step {req.step} must be at least a millisecond (0.001)")
        if req.exemplar_type == tpb.EXEMPLAR_TYPE_SPAN:
            raise Unimplemented("exemplar type span is not implemented")
        exemplars = req.exemplar_type == tpb.EXEMPLAR_TYPE_INDIVIDUAL
        # as Pyroscope's v2 read path: the profiles from one step before ``start`` to ``end``, each on the first point
        # (``start`` + k·step, up to ``end``) at or after it — a point sums the step that ends at it
        # (pkg/frontend/readpath/queryfrontend/query_select_time_series.go, pkg/model/timeseries/range.go)
        window = window_ns(req.start - step_ms, req.end)
        parse_selector(req.label_selector)
        average = req.HasField("aggregation") and req.aggregation == tpb.TIME_SERIES_AGGREGATION_TYPE_AVERAGE
        rows = await self._db.read(self.profile_rows, ctx.tenant_key, req.profile_typeID, req.label_selector, window)
        group_by = list(req.group_by)
        buckets: dict[tuple[tuple[str, str], ...], dict[int, list[ProfileRow]]] = {}
        for row in rows:
            key = tuple((g, row.labels[g]) for g in group_by if row.labels.get(g))
            t_ms = row.time_ns // 1_000_000
            ts = req.start + max(0, -(-(t_ms - req.start) // step_ms)) * step_ms
            if ts <= req.end:
                buckets.setdefault(key, {}).setdefault(ts, []).append(row)
        ordered = sorted(buckets.items(), key=lambda kv: (-sum(r.total for v in kv[1].values() for r in v), kv[0]))
        if req.HasField("limit") and req.limit > 0:
            ordered = ordered[: req.limit]
        out = qpb.SelectSeriesResponse()
        for key, points in sorted(ordered):
            s = out.series.add()
            s.labels.extend(tpb.LabelPair(name=k, value=v) for k, v in key)
            for ts in sorted(points):
                members = points[ts]
                total = sum(r.total for r in members)
                point = s.points.add(value=total / len(members) if average else float(total), timestamp=ts)
                if exemplars:
                    point.exemplars.append(exemplar_of(max(members, key=lambda r: r.total), group_by))
        return out


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One stored profile: its series' labels, row id, capture start (ns) and total."""

    labels: dict[str, str]
    row_id: int
    time_ns: int
    total: int

    @property
    def profile_id(self) -> str:
        return profile_uuid(self.row_id, self.time_ns)


def exemplar_of(row: ProfileRow, group_by: Sequence[str]) -> tpb.Exemplar:
    """A profile as an individual exemplar: its id, time (ms), total and the labels its series is not grouped by."""
    return tpb.Exemplar(
        timestamp=row.time_ns // 1_000_000,
        profile_id=row.profile_id,
        value=row.total,
        labels=[tpb.LabelPair(name=k, value=v) for k, v in sorted(row.labels.items()) if k not in group_by],
    )
