"""A span against its usual self: ``GET /api/v1/spans/{trace}/{span}/compare``, the compare page and
``profile-bridge resolve --compare``.

- **Here**: the span's own answer (``scope=span``: linked → local-root → time-window → none) — one request. When it
  is not ``linked`` or ``local-root`` the answer is not this request's cost (a time window holds every request the
  service served then): the comparison says so, and is made anyway.
- **Usual** (``baseline=endpoint``): the same service's other local-root spans of the same name (the endpoint's other
  requests: the name of the span's local root, which is the span itself when it is one) that started within the
  window around the span (half before, half after, never past now), found with one trace search; each is checked to
  be a local root against its trace. Their linked samples (``SelectMergeSpanProfile`` of their ids) are added up and
  divided by their number: the cost of one usual request, requests without any sample included.
- Per function: self and total on each side (per request), the difference, sorted by the largest difference of self
  value per request first (what ``pprof -top -diff_base`` sorts by), then of total. A function is called *unusual*
  only when its self sample counts differ beyond sampling noise (``bridge.function_diff``: a Poisson test at p < 0.01).
- ``format=json`` carries the diff flame graph in Pyroscope's ``FlameGraphDiff`` encoding (``bridge.flamediff``), the
  baseline on the left; ``format=collapsed`` differential folded stacks (``usual here`` per line).

Values per request are whole units: the baseline's self values divided by its request count, rounded half up, its
totals the sums of those (``flamediff.per_request``); the function table keeps the exact quotients.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf import json_format

from bridge import flamegraph, ids
from bridge._proto import querier_pb2 as qpb
from bridge.answer import Answer, answer
from bridge.burners import function_href, service_selector
from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import BridgeError, InvalidArgument
from bridge.flamediff import (
    collapsed_diff,
    combine,
    diff_colour,
    encode_diff,
    layout_diff,
    per_request,
)
from bridge.function_diff import (
    NOT_COUNTED,
    Counting,
    FunctionDiff,
    counts_json,
    function_diffs,
    table_cells,
    tally_json,
    unusual_rest,
    unusual_words,
)
from bridge.parsing import parse_seconds
from bridge.profiletype import ProfileType
from bridge.recent import span_path
from bridge.resolution import REQUEST_STEPS
from bridge.resolve import Resolver
from bridge.sampling import figure_text
from bridge.spans import Span
from bridge.units import format_duration_ns, format_value
from bridge.views import ROW_HEIGHT, SVG_WIDTH, Frame, fit_label
from bridge.wire.tempo import endpoint_query

BASELINES: Final = ("endpoint",)
FORMATS: Final = ("json", "collapsed")
DEFAULT_WINDOW_S: Final = 3600.0
MIN_WINDOW_S: Final = 60.0
MAX_WINDOW_S: Final = 24 * 3600.0
MAX_BASELINE: Final = 100  # requests of the endpoint asked about, the nearest to the span first
SEARCH_SPSS: Final = 5  # matching spans per trace in the search answer
LOOKUP_CONCURRENCY: Final = 8
IDS_PER_QUERY: Final = 100  # span ids per SelectMergeSpanProfile
PROFILE_MARGIN_MS: Final = 5 * 60_000  # profiles stamped this far outside the window may hold the requests' samples
DIFF_MAX_NODES: Final = 8192
TOP_UNUSUAL: Final = 5
MAX_LISTED: Final = 200  # functions in the JSON document


# --------------------------------------------------------------------------------------------- parameters


@dataclass(frozen=True, slots=True)
class CompareParams:
    trace_id: str
    span_id: str
    baseline: str
    window_s: float
    format: str
    profile_type: str


def parse_compare_params(
    match_info: Mapping[str, str], query: Mapping[str, str], default_profile_type: str
) -> CompareParams:
    """Pure: the path ids and the parameters, validated; ``InvalidArgument`` naming the bad one."""
    raw_trace, raw_span = match_info["trace_id"], match_info["span_id"]
    trace_id, span_id = ids.span_of_trace(raw_trace, raw_span)
    baseline = query.get("baseline", "") or "endpoint"
    if baseline not in BASELINES:
        raise InvalidArgument(
            f"baseline {baseline[:40]!r} is not one of: {', '.join(BASELINES)} (the same "
            "service's requests of the same name)"
        )
    text = query.get("window", "") or "1h"
    try:
        window_s = parse_seconds(text)
    except ValueError as exc:
        raise InvalidArgument(f"window {text[:40]!r}: {exc}") from exc
    if not MIN_WINDOW_S <= window_s <= MAX_WINDOW_S:
        raise InvalidArgument(f"window {text[:40]!r} is not between 1m and 24h")
    fmt = query.get("format", "") or "json"
    if fmt not in FORMATS:
        raise InvalidArgument(f"format {fmt[:40]!r} is not one of: {', '.join(FORMATS)}")
    profile_type = query.get("profile_type", "") or default_profile_type
    ProfileType.parse(profile_type)  # BadProfileType: invalid_argument, naming the form
    return CompareParams(trace_id, span_id, baseline, window_s, fmt, profile_type)


# --------------------------------------------------------------------------------------------- the comparison


@dataclass(frozen=True, slots=True)
class Baseline:
    """The endpoint's usual requests: who they are, and their linked samples added up."""

    service: str
    name: str
    window_ms: tuple[int, int]
    spans: tuple[Span, ...]
    tree: flamegraph.Node
    capped: bool  # the search found more requests than were asked about
    not_local_roots: int  # hits of the same name that are not local roots (left out)
    not_found: int  # hits whose trace could not be read (left out)

    @property
    def requests(self) -> int:
        return len(self.spans)


@dataclass(frozen=True, slots=True)
class Comparison:
    ans: Answer  # the span's own answer (scope=span)
    endpoint: Span  # the local root whose name is the endpoint
    baseline: Baseline
    here: flamegraph.Node
    usual: flamegraph.Node  # per request, whole units
    functions: tuple[FunctionDiff, ...]  # largest difference first
    notes: tuple[str, ...] = field(default=())
    counting: Counting = field(default_factory=Counting)  # both sides' totals as counts of samples

    @property
    def own_is_request(self) -> bool:
        return self.ans.step in REQUEST_STEPS


def window_around(span: Span, window_s: float, now_ms: int) -> tuple[int, int]:
    """Half the window before the span, half after; when that half after would reach past now, the window ends now
    instead (a span still in the future, by another clock, is left alone)."""
    width = int(window_s * 1000)
    span_start, span_end = span.start_ns // 1_000_000, -(-span.end_ns // 1_000_000)
    start, end = span_start - width // 2, span_end + width // 2
    if span_end <= now_ms < end:
        start, end = min(span_start, now_ms - width), now_ms
    return max(0, start), end


async def compare(
    resolver: Resolver, params: CompareParams, settings: Settings, ctx: CallContext, now_ms: int
) -> Comparison:
    """The span's answer against its endpoint's usual requests. ``NotFound`` when the span is unknown."""
    ans = await answer(
        resolver,
        params.trace_id,
        params.span_id,
        scope="span",
        profile_type=params.profile_type,
        settings=settings,
        ctx=ctx,
    )
    endpoint = ans.trace.local_root(ans.span.span_id) or ans.span
    window = window_around(ans.span, params.window_s, now_ms)
    baseline = await find_baseline(resolver, endpoint, window, params.profile_type, settings, ctx)
    here = flamegraph.Node(flamegraph.ROOT_NAME, ans.tree.total, ans.tree.self)
    here.children = ans.tree.children
    sides, selector = (here, baseline.tree, baseline.requests), service_selector(endpoint.service, settings)
    counted = await resolver.samplers.counting(sides, ans.sampling, params.profile_type, selector, window, ctx)
    notes: list[str] = []
    if ans.step not in REQUEST_STEPS:
        notes.append(
            f"this span's own answer is {ans.step.value}, not this request's cost ({ans.measure.text}): compared anyway"
        )
    if endpoint.span_id != ans.span.span_id:
        notes.append(
            f"{ans.span.name} is part of the request {endpoint.name} (its local root, whose samples "
            "hold its CPU): compared with other such requests"
        )
    if not baseline.requests:
        notes.append(f"no other {endpoint.name} requests of {endpoint.service} in the window: nothing to compare with")
    if baseline.capped:
        notes.append(
            f"the {baseline.requests} requests nearest to the span were asked about, not every one in the window"
        )
    if baseline.not_local_roots:
        notes.append(
            f"{baseline.not_local_roots} spans of the same name are not local roots (not requests of "
            "their own): left out"
        )
    if baseline.not_found:
        notes.append(f"{baseline.not_found} requests' traces could not be read: left out")
    if baseline.requests and not counted.period:
        notes.append(NOT_COUNTED)
    return Comparison(
        ans,
        endpoint,
        baseline,
        here,
        per_request(baseline.tree, baseline.requests),
        tuple(function_diffs(here, baseline.tree, baseline.requests, counted)),
        tuple(notes),
        counted,
    )


async def find_baseline(
    resolver: Resolver, endpoint: Span, window: tuple[int, int], profile_type: str, settings: Settings, ctx: CallContext
) -> Baseline:
    """The endpoint's other requests in the window (one search; each checked to be a local root against its trace)
    and their linked samples, added up."""
    hits = await resolver.traces.search(
        endpoint_query(endpoint.service, endpoint.name),
        window[0] // 1000,
        math.ceil(window[1] / 1000),
        MAX_BASELINE,
        ctx,
        spss=SEARCH_SPSS,
    )
    lo, hi = window[0] * 1_000_000, window[1] * 1_000_000
    seen: dict[str, tuple[str, int]] = {}
    for hit in hits:
        if hit.name == endpoint.name and hit.span_id != endpoint.span_id and lo <= hit.start_ns <= hi:
            seen.setdefault(hit.span_id, (hit.trace_id, hit.start_ns))
    nearest = sorted(seen.items(), key=lambda kv: (abs(kv[1][1] - endpoint.start_ns), kv[0]))
    asked = nearest[:MAX_BASELINE]
    limit = asyncio.Semaphore(LOOKUP_CONCURRENCY)

    async def one(span_id: str, trace_id: str) -> tuple[Span | None, bool]:
        async with limit:
            try:
                found = await resolver.lookup_span(
                    span_id, ctx, trace_id=trace_id, start_ms=window[0], end_ms=window[1]
                )
            except BridgeError:
                found = None
        if found is None:
            return None, False
        span, trace = found
        return span, trace.is_local_root(span) and span.service == endpoint.service

    looked = await asyncio.gather(*(one(sid, tid) for sid, (tid, _) in asked))
    spans = tuple(span for span, ok in looked if span is not None and ok)
    tree = await linked_samples(
        resolver, [s.span_id for s in spans], endpoint.service, window, profile_type, settings, ctx
    )
    capped = len(nearest) > len(asked) or len({hit.trace_id for hit in hits}) >= MAX_BASELINE
    return Baseline(
        endpoint.service,
        endpoint.name,
        window,
        spans,
        tree,
        capped,
        sum(1 for span, ok in looked if span is not None and not ok),
        sum(1 for span, _ in looked if span is None),
    )


async def linked_samples(
    resolver: Resolver,
    span_ids: Sequence[str],
    service: str,
    window: tuple[int, int],
    profile_type: str,
    settings: Settings,
    ctx: CallContext,
) -> flamegraph.Node:
    """The samples linked to any of ``span_ids`` (a few ids per query), merged into one tree."""
    root = flamegraph.Node(flamegraph.ROOT_NAME)
    chunks = [list(span_ids[i : i + IDS_PER_QUERY]) for i in range(0, len(span_ids), IDS_PER_QUERY)]

    async def one(chunk: list[str]) -> flamegraph.Node:
        req = qpb.SelectMergeSpanProfileRequest(
            profile_typeID=profile_type,
            label_selector=service_selector(service, settings),
            span_selector=chunk,
            start=max(0, window[0] - PROFILE_MARGIN_MS),
            end=window[1] + PROFILE_MARGIN_MS,
            format=qpb.PROFILE_FORMAT_FLAMEGRAPH,
        )
        resp = await resolver.profiles.select_merge_span_profile(req, ctx)
        return flamegraph.decode(resp.flamegraph if resp.HasField("flamegraph") else None)

    for tree in await asyncio.gather(*(one(c) for c in chunks)):
        tree.name = flamegraph.ROOT_NAME
        flamegraph.merge_into(root, tree)
    return root


# --------------------------------------------------------------------------------------------- words and documents


def unusual(cmp: Comparison, top: int = TOP_UNUSUAL) -> list[FunctionDiff]:
    """The most unusual functions: those whose self sample counts differ beyond sampling noise
    (``bridge.function_diff``), largest difference first. Not counted: none."""
    return [f for f in cmp.functions if f.counts is not None and f.counts.unusual][:top]


def headline(cmp: Comparison) -> str:
    b = cmp.baseline
    if not b.requests:
        return f"no other {b.name} requests of {b.service} in the window to compare with"
    plural = "request" if b.requests == 1 else "requests"
    return f"this {b.name} request against {b.requests} other {plural} of {b.service} (per request)"


def _diff_json(f: FunctionDiff) -> dict[str, Any]:
    return {
        "name": f.name,
        "here": {"self": f.here_self, "total": f.here_total},
        "usual": {"self": round(f.usual_self, 3), "total": round(f.usual_total, 3)},
        "diff": {"self": round(f.diff_self, 3), "total": round(f.diff_total, 3)},
        **counts_json(f.counts),
    }


def compare_json(cmp: Comparison) -> dict[str, Any]:
    ans, b = cmp.ans, cmp.baseline
    unit = ProfileType.parse(ans.profile_type).sample_unit
    return {
        "traceId": ans.span.trace_id,
        "spanId": ans.span.span_id,
        "profileType": ans.profile_type,
        "span": ans.span.to_json(),
        "headline": headline(cmp),
        "here": {
            "mode": ans.step.value,
            "reason": ans.resolution.reason,
            "measure": {"attribution": ans.measure.attribution.value, "own": ans.measure.own, "text": ans.measure.text},
            "isRequestCost": cmp.own_is_request,
            "requests": 1,
            "total": cmp.here.total,
            "sampling": tally_json(cmp.counting.here),
            "endpoint": cmp.endpoint.to_json(),
        },
        "baseline": {
            "kind": "endpoint",
            "service": b.service,
            "name": b.name,
            "window": {"startMs": b.window_ms[0], "endMs": b.window_ms[1]},
            "requests": b.requests,
            "capped": b.capped,
            "total": b.tree.total,
            "perRequest": round(b.tree.total / b.requests, 3) if b.requests else 0.0,
            "sampling": tally_json(cmp.counting.usual),
            "spanIds": [s.span_id for s in b.spans],
        },
        "test": cmp.counting.test_json(),
        "unusual": [{**_diff_json(f), "text": unusual_words(f, unit, b.requests)} for f in unusual(cmp)],
        "functions": [_diff_json(f) for f in cmp.functions[:MAX_LISTED]],
        "notes": list(cmp.notes),
        "flamegraphDiff": json_format.MessageToDict(encode_diff(cmp.usual, cmp.here, DIFF_MAX_NODES)),
    }


def compare_collapsed(cmp: Comparison) -> str:
    return collapsed_diff(cmp.usual, cmp.here)


# --------------------------------------------------------------------------------------------- the page


def diff_frames(cmp: Comparison, unit: str) -> tuple[list[Frame], int, int]:
    """The diff flame graph's bars (width: usual + here per request), its height and the frames folded."""
    rects, folded = layout_diff(combine(cmp.usual, cmp.here), SVG_WIDTH)
    frames = []
    for r in rects:
        n = r.node
        usual, here = n.left_total, n.right_total
        change = here - usual
        sign = "+" if change > 0 else "−" if change < 0 else "±"
        title = (
            f"{n.name}\nhere {format_value(here, unit)} · usual {format_value(usual, unit)} per request · "
            f"{sign}{format_value(abs(change), unit)}"
        )
        if r.folded:
            title = f"{r.folded} frames too narrow to draw\n" + title.split("\n", 1)[1]
        frames.append(
            Frame(
                x=round(r.x, 2),
                y=r.depth * ROW_HEIGHT,
                width=round(r.width, 2),
                depth=r.depth,
                name=n.name,
                label=fit_label(n.name, r.width),
                title=title,
                fill=diff_colour(usual, here) if r.depth else "rgb(190,190,200)",
                match=False,
                folded=r.folded > 0,
            )
        )
    depth = 1 + max((r.depth for r in rects), default=0)
    return frames, depth * ROW_HEIGHT + 2, folded


def compare_context(cmp: Comparison, settings: Settings, window_text: str) -> dict[str, Any]:
    """What ``compare.html`` shows."""
    ans, b = cmp.ans, cmp.baseline
    profile_type = ans.profile_type
    unit = ProfileType.parse(profile_type).sample_unit
    frames, height, folded = diff_frames(cmp, unit)
    span = ans.span
    api = f"/api/v1/spans/{span.trace_id}/{span.span_id}/compare"
    extra = "" if profile_type == settings.profile_type else f"&profile_type={profile_type}"
    start, end = b.window_ms
    table = [
        (
            f,
            format_value(f.here_self, unit),
            format_value(round(f.usual_self), unit),
            ("+" if f.diff_self > 0 else "−" if f.diff_self < 0 else "") + format_value(round(abs(f.diff_self)), unit),
            format_value(f.here_total, unit),
            format_value(round(f.usual_total), unit),
            *table_cells(f.counts),
            function_href(
                b.service,
                f.name,
                start_ms=start,
                end_ms=end,
                profile_type="" if profile_type == settings.profile_type else profile_type,
            ),
        )
        for f in cmp.functions[:30]
    ]
    return {
        "cmp": cmp,
        "span": span,
        "duration": format_duration_ns(span.duration_ns),
        "mode": ans.step.value,
        "headline": headline(cmp),
        "unusual": [(f.name, unusual_rest(f, unit, b.requests), f.diff_self > 0) for f in unusual(cmp)],
        "tested": cmp.counting.period > 0,
        "frames": frames,
        "svg_width": SVG_WIDTH,
        "svg_height": height,
        "folded": folded,
        "table": table,
        "here_total": figure_text(cmp.here.total, cmp.counting.here, unit),
        "usual_total": format_value(round(b.tree.total / b.requests), unit) if b.requests else "—",
        "window": window_text,
        "windows": ("15m", "1h", "6h", "24h"),
        "span_href": span_path(span, profile_type="" if profile_type == settings.profile_type else profile_type),
        "downloads": [("json", f"{api}?format=json{extra}"), ("collapsed", f"{api}?format=collapsed{extra}")],
        "service": b.service,
        "range": {"from": start, "to": end},
        "profile_type": profile_type,
        "default_profile_type": settings.profile_type,
        "offer": {
            "service": b.service,
            "from": start,
            "to": end,
            "profile_type": "" if profile_type == settings.profile_type else profile_type,
        },
    }
