"""What the store answers about itself and its profiles beyond the flame graphs: ``GetProfileStats``,
``AnalyzeQuery``, ``SelectHeatmap`` and ``Diff`` (Pyroscope's querier, read at grafana/pyroscope 3fe6a457).

- ``GetProfileStats`` (``pkg/phlaredb/phlaredb.go`` ``getProfileStatsFromBounds``): whether the tenant holds any
  profile, and the capture start of its oldest and newest one in ms — ``int64`` max and min when it holds none.
  Profiles Drilldown shows its onboarding screen when ``dataIngested`` is false.
- ``AnalyzeQuery`` (``pkg/querier/analyze_query.go``): Pyroscope reports, per component that would serve the time
  range, its blocks, series, profiles, samples and bytes, and the series the query selects. The store is one
  component (``embedded store``, one replica, one block — its SQLite file — when it holds profiles in the range);
  series, profiles and sample rows are counted in the range for the whole tenant, as Pyroscope counts its blocks'
  contents; the bytes are the store's size pro rata of its profiles in the range (the file does not split its size
  by time); ``total_queried_series`` counts the series the query's selector (``{…}``, the profile type given as its
  name) matches in the range.
- ``SelectHeatmap``: the points (``bridge.heatmap``) read here — per profile its total (``INDIVIDUAL``), or per
  profile and span the span's samples (``SPAN``), from one step before ``start`` to ``end``.
- ``Diff``: both sides merged as ``SelectMergeStacktraces`` selects them, each truncated as Pyroscope's tree format
  is (``bridge.treeformat``) to the larger of their ``max_nodes`` (8192 when neither sets one), then compared
  (``bridge.flamediff``) with the same limit (``pkg/frontend/readpath/queryfrontend/query_diff.go``).
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any, Final

from bridge import flamediff, heatmap, treeformat
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.errors import InvalidArgument
from bridge.flamegraph import build_tree
from bridge.profiletype import NAME_LABEL, PROFILE_TYPE_LABEL, ProfileType
from bridge.selector import Matcher, parse_selector
from bridge.store.database import Database
from bridge.store.decode import int_to_span_id
from bridge.store.profiles import Profiles, exemplar_of, max_nodes_of
from bridge.store.query import window_ns

INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
COMPONENT: Final = "embedded store"
_NAME_THEN_BRACES = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{.*\})?\s*$", re.DOTALL)


def _stats(conn: sqlite3.Connection, tenant: str) -> tuple[int | None, int | None]:
    """The oldest and newest capture start of the tenant's profiles: per series from its time index."""
    row = conn.execute(
        "SELECT min((SELECT min(time_ns) FROM profiles WHERE series_id = s.id)), "
        "max((SELECT max(time_ns) FROM profiles WHERE series_id = s.id)) FROM series AS s WHERE s.tenant = ?",
        (tenant,),
    ).fetchone()
    return row[0], row[1]


def query_matchers(query: str) -> tuple[Matcher, ...]:
    """``createMatchersFromQuery``: ``<profile type>{…}`` or ``{…}``, the name (or ``__name__``) read as the
    ``__profile_type__`` label; ``""`` selects every series."""
    match = _NAME_THEN_BRACES.match(query)
    if match is None:
        raise InvalidArgument(f'query {query[:80]!r} is not a label selector ({{name="value", …}})')
    name, braces = match.group(1), match.group(2)
    matchers = [
        Matcher(PROFILE_TYPE_LABEL, m.op, m.value, m.pattern) if m.name == NAME_LABEL else m
        for m in parse_selector(braces or "")
    ]
    if name:
        matchers.append(Matcher(PROFILE_TYPE_LABEL, "=", name))
    return tuple(matchers)


class Overview:
    """``GetProfileStats``, ``AnalyzeQuery``, ``SelectHeatmap`` and ``Diff`` of the store."""

    def __init__(self, db: Database, profiles: Profiles) -> None:
        self._db = db
        self._profiles = profiles

    async def get_profile_stats(self, req: tpb.GetProfileStatsRequest, ctx: CallContext) -> tpb.GetProfileStatsResponse:
        oldest, newest = await self._db.read(_stats, ctx.tenant_key)
        if oldest is None or newest is None:
            return tpb.GetProfileStatsResponse(
                data_ingested=False, oldest_profile_time=INT64_MAX, newest_profile_time=INT64_MIN
            )
        return tpb.GetProfileStatsResponse(
            data_ingested=True, oldest_profile_time=oldest // 1_000_000, newest_profile_time=newest // 1_000_000
        )

    async def analyze_query(self, req: qpb.AnalyzeQueryRequest, ctx: CallContext) -> qpb.AnalyzeQueryResponse:
        matchers = query_matchers(req.query)
        window = window_ns(req.start, req.end)
        counts = await self._db.read(self._analyze, ctx.tenant_key, matchers, window)
        series, profiles, samples, queried, in_range_bytes = counts
        scope = qpb.QueryScope(
            component_type=COMPONENT,
            component_count=1,
            block_count=1 if profiles else 0,
            series_count=series,
            profile_count=profiles,
            sample_count=samples,
            profile_bytes=in_range_bytes,
        )
        impact = qpb.QueryImpact(
            total_bytes_in_time_range=in_range_bytes, total_queried_series=queried, deduplication_needed=False
        )
        return qpb.AnalyzeQueryResponse(query_scopes=[scope], query_impact=impact)

    def _analyze(
        self, conn: sqlite3.Connection, tenant: str, matchers: tuple[Matcher, ...], window: tuple[int, int]
    ) -> tuple[int, int, int, int, int]:
        conn.execute("BEGIN")  # one snapshot for every count
        try:
            every = self._profiles.series_in(conn, tenant, (), window)
            chosen = self._profiles.series_in(conn, tenant, matchers, window)
            ids = json.dumps(sorted(every))
            (profiles,) = conn.execute(
                "SELECT count(*) FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
                "AND time_ns >= ? AND time_ns < ?",
                (ids, *window),
            ).fetchone()
            (samples,) = conn.execute(
                "SELECT count(*) FROM samples WHERE profile_id IN (SELECT id FROM profiles WHERE series_id IN "
                "(SELECT value FROM json_each(?)) AND time_ns >= ? AND time_ns < ?)",
                (ids, *window),
            ).fetchone()
            (all_profiles,) = conn.execute("SELECT count(*) FROM profiles").fetchone()
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        finally:
            conn.execute("COMMIT")
        used = max(0, pages - free) * page_size
        in_range = used * profiles // all_profiles if all_profiles else 0
        return len(every), int(profiles), int(samples), len(chosen), in_range

    # ----------------------------------------------------------------------------------------- SelectHeatmap

    async def select_heatmap(self, req: qpb.SelectHeatmapRequest, ctx: CallContext) -> qpb.SelectHeatmapResponse:
        ProfileType.parse(req.profile_typeID)
        query = heatmap.parse_request(req)
        parse_selector(req.label_selector)
        window = window_ns(query.read_from_ms, query.end_ms)
        builder = await self._db.read(
            self._heatmap_points, ctx.tenant_key, req.profile_typeID, req.label_selector, window, query
        )
        return qpb.SelectHeatmapResponse(series=heatmap.range_heatmap(builder, query))

    def _heatmap_points(
        self,
        conn: sqlite3.Connection,
        tenant: str,
        profile_type: str,
        selector: str,
        window: tuple[int, int],
        query: heatmap.HeatmapQuery,
    ) -> heatmap.Builder:
        builder = heatmap.Builder(query.group_by)
        conn.execute("BEGIN")
        try:
            rows = self._profiles.profile_rows(conn, tenant, profile_type, selector, window)
            if not query.span:
                for row in rows:
                    ex = exemplar_of(row, ())
                    builder.add(row.labels, ex.timestamp, row.total, ex.profile_id, "", "")
                return builder
            by_id = {row.row_id: row for row in rows}
            for start in range(0, len(rows), 500):
                ids = json.dumps([row.row_id for row in rows[start : start + 500]])
                for profile_id, span_id, trace_id, value in conn.execute(
                    "SELECT profile_id, span_id, trace_id, sum(value) FROM samples WHERE profile_id IN "
                    "(SELECT value FROM json_each(?)) AND span_id IS NOT NULL GROUP BY profile_id, span_id, trace_id",
                    (ids,),
                ):
                    row = by_id[profile_id]
                    trace = bytes(trace_id).hex() if trace_id is not None and len(trace_id) == 16 else ""
                    builder.add(row.labels, row.time_ns // 1_000_000, int(value), "", int_to_span_id(span_id), trace)
        finally:
            conn.execute("COMMIT")
        return builder

    # ----------------------------------------------------------------------------------------- Diff

    async def diff(self, req: qpb.DiffRequest, ctx: CallContext) -> qpb.DiffResponse:
        left = req.left if req.HasField("left") else qpb.SelectMergeStacktracesRequest()
        right = req.right if req.HasField("right") else qpb.SelectMergeStacktracesRequest()
        max_nodes = max_nodes_of(max(left.max_nodes, right.max_nodes))
        ProfileType.parse(left.profile_typeID)
        ProfileType.parse(right.profile_typeID)
        trees: list[Any] = []
        for side in (left, right):
            stacks = await self._profiles.stacks_of(side, ctx)
            trees.append(treeformat.truncate(build_tree(stacks), max_nodes))
        return qpb.DiffResponse(flamegraph=flamediff.encode_diff(trees[0], trees[1], max_nodes))
