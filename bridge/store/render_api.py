"""``GET /pyroscope/render`` and ``/pyroscope/render-diff`` answered by the store — what Perses' Pyroscope panel and
Profiles Drilldown's ``ProfileApiClient`` / ``DiffProfileApiClient`` read (under the bridge's mount:
``/pyroscope/pyroscope/render``, the data source's URL being ``…/pyroscope``). Pyroscope's handlers
(``pkg/querier/http.go`` ``Render`` / ``RenderDiff``) call its own querier; these call the store the same way:

- ``render``: ``SelectMergeStacktraces`` of the query (the flame graph) and the timeline from the same profiles
  (``bridge.flamebearer``), ``groupBy`` giving one timeline per value; ``aggregation=avg`` averages each step;
  ``format=dot`` answers the DOT graph of the merged pprof instead (text, empty when nothing matched; at most
  ``maxNodes`` nodes, 100 by default).
- ``render-diff``: ``Diff`` of ``leftQuery`` / ``leftFrom`` / ``leftUntil`` against the right ones; both sides must
  be of one profile type.

Both answer JSON (``Content-Type: application/json``, one line and a newline, as Go's ``json.Encoder`` writes it);
a bad parameter is ``invalid_argument`` in Connect's error JSON, as Pyroscope's ``httputil.Error`` writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web
from multidict import MultiMapping

from bridge import dot, flamebearer
from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.errors import InvalidArgument
from bridge.pprof import encode_pprof
from bridge.store.backend import Store
from bridge.store.query import window_ns

RENDER: Final = "pyroscope/render"
RENDER_DIFF: Final = "pyroscope/render-diff"
DIFF_FIELDS: Final = (("leftQuery", "leftFrom", "leftUntil"), ("rightQuery", "rightFrom", "rightUntil"))


def _json(doc: Any) -> web.Response:
    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n"
    return web.Response(body=body.encode(), content_type="application/json")


def _merge_request(q: flamebearer.RenderQuery) -> qpb.SelectMergeStacktracesRequest:
    return qpb.SelectMergeStacktracesRequest(
        profile_typeID=q.profile_type.id,
        label_selector=q.selector,
        start=q.start_ms,
        end=q.end_ms,
        max_nodes=q.max_nodes,
    )


async def render(store: Store, query: MultiMapping[str], ctx: CallContext, now_ms: int) -> web.Response:
    q = flamebearer.parse_render(query, now_ms)
    if query.get("format") == "dot":
        return await _render_dot(store, q, query, ctx)
    flame = await store.select_merge_stacktraces(_merge_request(q), ctx)
    doc = flamebearer.flamebearer(flame.flamegraph, q.profile_type)
    step_s = flamebearer.calc_step(q.start_ms, q.end_ms)
    group_by = query.getall("groupBy", [])
    rows = await store.profile_rows(
        ctx.tenant_key, q.profile_type.id, q.selector, window_ns(q.start_ms - step_s * 1000, q.end_ms)
    )
    points = flamebearer.series_points(
        ((tuple((g, r.labels[g]) for g in group_by if r.labels.get(g)), r.time_ns // 1_000_000, r.total) for r in rows),
        q.start_ms,
        step_s,
        average=query.get("aggregation") == "avg",
    )
    return _json(flamebearer.with_timeline(doc, points, q, step_s, group_by))


async def _render_dot(
    store: Store, q: flamebearer.RenderQuery, query: Mapping[str, str], ctx: CallContext
) -> web.Response:
    stacks = await store.merged_stacks(ctx.tenant, q.profile_type.id, q.selector, q.start_ms, q.end_ms)
    lo, hi = window_ns(q.start_ms, q.end_ms)
    profile = encode_pprof(stacks, q.profile_type.id, time_nanos=lo, duration_nanos=max(0, hi - 1_000_000 - lo))
    if not profile.sample:
        return web.Response(body=b"", content_type="text/plain")
    nodes = max(0, flamebearer.requested_max_nodes(query)) or dot.DEFAULT_NODES
    return web.Response(text=dot.from_profile(profile, nodes), content_type="text/plain")


async def render_diff(store: Store, query: MultiMapping[str], ctx: CallContext, now_ms: int) -> web.Response:
    left, right = (flamebearer.parse_render(query, now_ms, names) for names in DIFF_FIELDS)
    if left.profile_type.id != right.profile_type.id:
        raise InvalidArgument("profile types must match")
    answer = await store.diff(qpb.DiffRequest(left=_merge_request(left), right=_merge_request(right)), ctx)
    return _json(flamebearer.diff_flamebearer(answer.flamegraph, left.profile_type))
