"""``GET /pyroscope/render`` and ``/pyroscope/render-diff`` answered by the store — what Perses' Pyroscope panel and
Profiles Drilldown's ``ProfileApiClient`` / ``DiffProfileApiClient`` read (under the bridge's mount:
``/pyroscope/pyroscope/render``, the data source's URL being ``…/pyroscope``). Pyroscope's handlers
(``pkg/querier/http.go`` ``Render`` / ``RenderDiff``) call its own querier; these call the store the same way:

- ``render``: the flame graph ``SelectMergeStacktraces`` answers for the query (its lists, not its message) and the
  timeline of the same profiles (``bridge.flamebearer``), read side by side; ``groupBy`` gives one timeline per
  value, ``aggregation=avg`` averages each step; ``format=dot`` answers the DOT graph of the merged pprof instead
  (text, empty when nothing matched; at most ``maxNodes`` nodes, 100 by default).
- ``render-diff``: ``Diff`` of ``leftQuery`` / ``leftFrom`` / ``leftUntil`` against the right ones; both sides must
  be of one profile type.

Both answer JSON (``Content-Type: application/json``, one line and a newline, as Go's ``json.Encoder`` writes it),
to GET only and gzipped when accepted, as Pyroscope's read routes (``pkg/api/register_options.go``); a bad parameter
is ``invalid_argument`` in Connect's error JSON, as Pyroscope's ``httputil.Error`` writes it.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any, Final

import orjson
from aiohttp import web

from bridge import dot, flamebearer, flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.compression import accepts_gzip
from bridge.errors import InvalidArgument
from bridge.pprof import encode_pprof
from bridge.store.backend import Store
from bridge.store.query import window_ns

RENDER: Final = "pyroscope/render"
RENDER_DIFF: Final = "pyroscope/render-diff"
DIFF_FIELDS: Final = (("leftQuery", "leftFrom", "leftUntil"), ("rightQuery", "rightFrom", "rightUntil"))


GZIP_MIN_BYTES: Final = 1400  # gziphandler's DefaultMinSize
# gziphandler compresses at Go's default level (6); level 1 makes a Flamebearer's digits 25 % larger for a sixteenth
# of the time (0.9 ms instead of 16 for a 100 KB answer), which is what a render costs beside its flame graph
GZIP_LEVEL: Final = 1


def _dumps(doc: Any) -> bytes:
    """``doc`` as compact UTF-8 JSON and a newline: orjson (2.8 → 0.3 ms for a 100 KB Flamebearer, most of what a
    render costs beyond its flame graph: bench/render.py), the json module for what orjson refuses (an integer
    beyond 64 bits)."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_APPEND_NEWLINE)
    except (orjson.JSONEncodeError, TypeError):
        return (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def _json(doc: Any, accept_encoding: str | None) -> web.Response:
    """One line and a newline (Go's ``json.Encoder``), gzipped when the client takes it and it is worth it, as
    Pyroscope's read routes are (``pkg/api/register_options.go``: ``WithGzipMiddleware``)."""
    body = _dumps(doc)
    if len(body) >= GZIP_MIN_BYTES and accepts_gzip(accept_encoding):
        return web.Response(
            body=gzip.compress(body, compresslevel=GZIP_LEVEL),
            content_type="application/json",
            headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
        )
    return web.Response(body=body, content_type="application/json")


def _merge_request(q: flamebearer.RenderQuery) -> qpb.SelectMergeStacktracesRequest:
    return qpb.SelectMergeStacktracesRequest(
        profile_typeID=q.profile_type.id,
        label_selector=q.selector,
        start=q.start_ms,
        end=q.end_ms,
        max_nodes=q.max_nodes,
    )


async def render(store: Store, request: web.Request, ctx: CallContext, now_ms: int) -> web.Response:
    query = request.query
    q = flamebearer.parse_render(query, now_ms)
    if query.get("format") == "dot":
        return await _render_dot(store, q, request, ctx)
    step_s = flamebearer.calc_step(q.start_ms, q.end_ms)
    group_by = query.getall("groupBy", [])
    # the flame graph and the timeline side by side, as Pyroscope's handler asks its querier for both at once
    stacks, steps = await asyncio.gather(
        store.stacks_of(_merge_request(q), ctx),
        store.step_totals(
            ctx.tenant_key, q.profile_type.id, q.selector, q.start_ms, q.end_ms, step_s * 1000, bool(group_by)
        ),
    )
    doc = flamebearer.flamebearer(flamegraph.stack_levels(stacks, q.max_nodes), q.profile_type)
    average = query.get("aggregation") == "avg"
    if group_by:
        points = flamebearer.series_points(
            ((tuple((g, lb[g]) for g in group_by if lb.get(g)), edge, total, n) for lb, edge, total, n in steps),
            average,
        )
    else:  # one series: the steps as they are
        points = {(): {edge: total / n if average else float(total) for _, edge, total, n in steps}} if steps else {}
    return _json(flamebearer.with_timeline(doc, points, q, step_s, group_by), request.headers.get("Accept-Encoding"))


async def _render_dot(store: Store, q: flamebearer.RenderQuery, request: web.Request, ctx: CallContext) -> web.Response:
    stacks = await store.merged_stacks(ctx.tenant, q.profile_type.id, q.selector, q.start_ms, q.end_ms)
    lo, hi = window_ns(q.start_ms, q.end_ms)
    profile = encode_pprof(stacks, q.profile_type.id, time_nanos=lo, duration_nanos=max(0, hi - 1_000_000 - lo))
    if not profile.sample:
        return web.Response(body=b"", content_type="text/plain")
    nodes = max(0, flamebearer.requested_max_nodes(request.query)) or dot.DEFAULT_NODES
    body = dot.from_profile(profile, nodes).encode()
    if len(body) >= GZIP_MIN_BYTES and accepts_gzip(request.headers.get("Accept-Encoding")):
        headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
        return web.Response(body=gzip.compress(body, GZIP_LEVEL), content_type="text/plain", headers=headers)
    return web.Response(body=body, content_type="text/plain")


async def render_diff(store: Store, request: web.Request, ctx: CallContext, now_ms: int) -> web.Response:
    query = request.query
    left, right = (flamebearer.parse_render(query, now_ms, names) for names in DIFF_FIELDS)
    if left.profile_type.id != right.profile_type.id:
        raise InvalidArgument("profile types must match")
    answer = await store.diff(qpb.DiffRequest(left=_merge_request(left), right=_merge_request(right)), ctx)
    return _json(
        flamebearer.diff_flamebearer(answer.flamegraph, left.profile_type), request.headers.get("Accept-Encoding")
    )
