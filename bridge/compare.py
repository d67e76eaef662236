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
  only when its self sample counts differ beyond sampling noise: the exact conditional test of two Poisson rates,
  exposure-adjusted for the number of requests (``bridge.poisson.rate_test``), at p < 0.01 — each side's self value
  read as a count of samples at one period both sides' values divide (``sampling.tally_of`` over both). Values that
  are not counts (measured CPU) are not tested: nothing is called unusual then, and a note says why.
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
    function_totals,
    layout_diff,
    per_request,
)
from bridge.parsing import parse_seconds
from bridge.poisson import ALPHA, p_text, rate_test
from bridge.profiletype import ProfileType
from bridge.recent import span_path
from bridge.resolution import REQUEST_STEPS
from bridge.resolve import Resolver
from bridge.sampling import Tally, figure_text, sampler_of, tally_of, tree_values
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
TEST_NAME: Final = "exact conditional test of two Poisson rates (binomial, exposure-adjusted per request), two-sided"
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
class FunctionDiff:
    name: str
    here_self: int
    here_total: int
    usual_self: float  # per request, exact
    usual_total: float
    here_samples: int | None = None  # self samples here (None: not a count)
    usual_samples: int | None = None  # self samples in all the usual requests together
    p_value: float | None = None  # the conditional Poisson test of the two self counts (None: not tested)

    @property
    def diff_self(self) -> float:
        return self.here_self - self.usual_self

    @property
    def diff_total(self) -> float:
        return self.here_total - self.usual_total

    @property
    def order(self) -> tuple[float, float, str]:
        return -abs(self.diff_self), -abs(self.diff_total), self.name


@dataclass(frozen=True, slots=True)
class Comparison:
    ans: Answer  # the span's own answer (scope=span)
    endpoint: Span  # the local root whose name is the endpoint
    baseline: Baseline
    here: flamegraph.Node
    usual: flamegraph.Node  # per request, whole units
    functions: tuple[FunctionDiff, ...]  # largest difference first
    notes: tuple[str, ...] = field(default=())
    here_tally: Tally | None = None  # this request's total as a count of samples
    usual_tally: Tally | None = None  # every usual request's total together, as a count

    @property
    def own_is_request(self) -> bool:
        return self.ans.step in REQUEST_STEPS


def function_diffs(
    here: flamegraph.Node, baseline: flamegraph.Node, requests: int, period: int = 0
) -> list[FunctionDiff]:
    """Pure: per function, this request's self and total against the baseline's per request (exact quotients),
    largest difference first; with ``period`` (what one sample adds, dividing every value of both), each side's
    self samples and the p-value of the conditional Poisson test of the two."""
    mine = function_totals(here)
    theirs = function_totals(baseline)
    n = max(1, requests)
    out = []
    for name in mine.keys() | theirs.keys():
        here_self, here_total = mine.get(name, (0, 0))
        usual_self, usual_total = theirs.get(name, (0, 0))
        per = (usual_self / n, usual_total / n) if requests else (0.0, 0.0)
        diff = FunctionDiff(name, here_self, here_total, *per)
        if period > 0 and requests:
            x, y = here_self // period, usual_self // period
            diff = FunctionDiff(name, here_self, here_total, *per, x, y, rate_test(x, y, requests))
        out.append(diff)
    return sorted(out, key=lambda f: f.order)


def common_count(
    here: flamegraph.Node,
    baseline: flamegraph.Node,
    unit: str,
    ans: Answer,
    sdks: frozenset[str],
    periods: dict[int, int],
) -> tuple[Tally | None, Tally | None]:
    """Pure: both sides' totals as counts of samples at one period, the one every value of both divides (the
    stored or the SDK's, else their common divisor): (here, usual). (None, None) when they are not counts."""
    sampler = ans.sampling.sampler if ans.sampling is not None else sampler_of(ans.profile_type, sdks)
    joint = tally_of(tree_values(here) + tree_values(baseline), here.total + baseline.total, unit, sampler, periods)
    if joint is None or joint.period <= 0:
        return None, None
    p = joint.period
    return (
        tally_of(tree_values(here), here.total, unit, sampler, {p: 1}),
        tally_of(tree_values(baseline), baseline.total, unit, sampler, {p: 1}),
    )


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
    unit = ProfileType.parse(params.profile_type).sample_unit
    sdks, periods = await resolver.samplers.facts(
        params.profile_type, service_selector(endpoint.service, settings), window, ctx
    )
    here_tally, usual_tally = common_count(here, baseline.tree, unit, ans, sdks, periods)
    period = here_tally.period if here_tally is not None and baseline.requests else 0
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
    if baseline.requests and not period:
        notes.append(
            "the values are not counts of samples (measured, or of no known period): no function is tested, so none "
            "is called unusual"
        )
    return Comparison(
        ans,
        endpoint,
        baseline,
        here,
        per_request(baseline.tree, baseline.requests),
        tuple(function_diffs(here, baseline.tree, baseline.requests, period)),
        tuple(notes),
        here_tally,
        usual_tally,
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


def unusual_words(f: FunctionDiff, unit: str, requests: int = 0) -> str:
    """``count_primes: 120 ms here (12 samples) vs …`` (self values: time in the function itself)."""
    return f"{f.name}: {unusual_rest(f, unit, requests)}"


def unusual_rest(f: FunctionDiff, unit: str, requests: int = 0) -> str:
    """``120 ms here (12 samples) vs 8.00 ms per request usually (80 samples in 10 requests; p < 0.0001)``."""
    here = format_value(f.here_self, unit) if f.here_self else "none"
    usual = format_value(round(f.usual_self), unit) if round(f.usual_self) else "none"
    if f.here_samples is None or f.usual_samples is None or f.p_value is None:
        return f"{here} here vs {usual} per request usually"
    counted = f"{f.usual_samples:,} sample{'' if f.usual_samples == 1 else 's'} in {requests} request"
    return (
        f"{here} here ({f.here_samples:,} sample{'' if f.here_samples == 1 else 's'}) vs {usual} per request "
        f"usually ({counted}{'' if requests == 1 else 's'}; {p_text(f.p_value)})"
    )


def unusual(cmp: Comparison, top: int = TOP_UNUSUAL) -> list[FunctionDiff]:
    """The most unusual functions: those whose self sample counts differ beyond sampling noise (``rate_test``,
    p < ``ALPHA``), largest difference first. Not counted: none."""
    return [f for f in cmp.functions if f.p_value is not None and f.p_value < ALPHA][:top]


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
        # self samples on each side (usual: every usual request together) and the test's p-value; null: not counted
        "samples": {"here": f.here_samples, "usual": f.usual_samples},
        "pValue": None if f.p_value is None else float(f"{f.p_value:.6g}"),
    }


def _count_json(t: Tally | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"samples": t.samples, "period": t.period, "interval95": {"low": round(t.low), "high": round(t.high)}}


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
            "sampling": _count_json(cmp.here_tally),
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
            "sampling": _count_json(cmp.usual_tally),
            "spanIds": [s.span_id for s in b.spans],
        },
        # how "unusual" is decided: the test, its threshold and the period the counts are read at (null: untested)
        "test": {"name": TEST_NAME, "alpha": ALPHA, "period": cmp.here_tally.period}
        if cmp.here_tally is not None and b.requests
        else None,
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
            "" if f.here_samples is None else f"{f.here_samples:,}",
            "" if f.usual_samples is None else f"{f.usual_samples:,}",
            "" if f.p_value is None else p_text(f.p_value),
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
        "tested": cmp.here_tally is not None and b.requests > 0,
        "frames": frames,
        "svg_width": SVG_WIDTH,
        "svg_height": height,
        "folded": folded,
        "table": table,
        "here_total": figure_text(cmp.here.total, cmp.here_tally, unit),
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
