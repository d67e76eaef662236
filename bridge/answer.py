"""One span's profile, in the two scopes the API, the pages and ``profile-bridge resolve`` offer.

- ``scope=span``: the resolver's answer for the span (linked → local-root → time-window → none).
- ``scope=request``: what the whole request cost across services: the span's own answer plus, for every
  *descendant local root* (a span another process served on this span's behalf, found through the trace tree), that
  local root's linked samples. A slow CLIENT span of a frontend thus shows the CPU its backend burnt for it.

Only samples that belong to the request are added up: a descendant answered by ``time-window`` holds the whole
service's CPU during the window, not this request's, so it is listed in the breakdown with ``included: false`` and the
reason, never merged. Each included part is placed under a frame named after its service, which is the per-service
breakdown on the flame graph itself.

The span's own answer is always drawn, also when it is a ``time-window`` fallback (there is nothing better to show
for it); it is then placed under a frame that says so (``shop-frontend (time-window: whole service)``) and kept out of
the per-service percentages, which are shares of what is attributed to the request only.

The decisions (``query_for``, ``combine``) and the JSON document (``answer_json``) are pure; ``answer`` is the one
coroutine that asks the resolver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from google.protobuf import json_format

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import BridgeError, NotFound
from bridge.grafana import span_window
from bridge.resolution import REQUEST_STEPS, Attribution, Measure, Resolution, SpanQuery, Step, measure_of
from bridge.resolve import Resolver
from bridge.sampling import Sampler, Sampling, Tally, add_tallies, quantity_of, sampling_json, sampling_of
from bridge.selector import merge_selector
from bridge.spans import Span, Trace
from bridge.timewindow import labels_of

Scope = Literal["span", "request"]
SCOPES: Final = ("span", "request")

# descendant local roots asked about per request, and how many at once
MAX_DESCENDANTS: Final = 64
CONCURRENCY: Final = 8
MAX_LINKED_QUERIES: Final = 64  # local roots whose own linked samples a span tree shows


@dataclass(frozen=True, slots=True)
class Part:
    """One span's contribution to a request profile."""

    span: Span
    resolution: Resolution
    value: int  # total of the part's answer
    included: bool
    note: str  # why it is (not) included


@dataclass(frozen=True, slots=True)
class ServiceShare:
    service: str
    value: int  # included value
    spans: int  # included parts
    attributed: bool = True  # False: a time-window fallback drawn for the span itself, not this request's cost
    frame: str = ""  # the frame its part hangs under on the flame graph
    tally: Tally | None = None  # the value as a count of samples (None: not counted, or a part was not)

    @property
    def label(self) -> str:
        return self.frame or self.service or UNKNOWN_SERVICE


UNKNOWN_SERVICE: Final = "(unknown service)"


def fallback_frame(service: str, mode: Step) -> str:
    """The frame a fallback part hangs under: it says on the flame graph itself that this is not the request's."""
    return f"{service or UNKNOWN_SERVICE} ({mode.value}: whole service)"


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer for one span in one scope: what the API serialises and the pages render."""

    scope: Scope
    span: Span
    trace: Trace
    profile_type: str
    resolution: Resolution  # the span's own answer (scope=span: the whole answer)
    tree: flamegraph.Node  # the flame graph to show, root named ``total``
    flamegraph: qpb.FlameGraph
    parts: tuple[Part, ...] = ()
    services: tuple[ServiceShare, ...] = ()
    skipped: int = 0  # descendant local roots over MAX_DESCENDANTS, not asked about

    @property
    def step(self) -> Step:
        return self.resolution.step

    @property
    def attributed_total(self) -> int:
        """What the request (or the span) itself cost: the total without fallback parts."""
        if self.scope == "span":
            return self.tree.total if self.resolution.step in REQUEST_STEPS else 0
        return sum(s.value for s in self.services if s.attributed)

    @property
    def fallback_total(self) -> int:
        """What is drawn but is a whole service's cost during a window (a time-window answer)."""
        return self.tree.total - self.attributed_total

    @property
    def measure(self) -> Measure:
        """What the answer's total is, in words (the headline of the page, the API and ``resolve``)."""
        own = measure_of(self.resolution, self.profile_type)
        if self.scope == "span":
            return own
        sampling = self.sampling
        what = sampling.measure if sampling is not None and sampling.sampler.sdk else quantity_of(self.profile_type)
        counted = [s for s in self.services if s.attributed]
        services = f"{len(counted)} service{'' if len(counted) == 1 else 's'}"
        if not counted and not self.fallback_total:
            return Measure(Attribution.NOTHING, f"no {what} samples for this request")
        if not counted:
            return Measure(own.attribution, f"no {what} linked to this request; shown: {own.text}")
        text = f"{what} linked to this request across {services}"
        if own.attribution is Attribution.REQUEST:
            text += f" (for this span: {own.text})"
        if self.fallback_total:
            text += f", plus {own.text} (time-window fallback, not counted)"
            return Measure(Attribution.SERVICE, text)
        attribution = Attribution.SPAN if own.attribution is Attribution.SPAN else Attribution.REQUEST
        return Measure(attribution, text)

    @property
    def sampling(self) -> Sampling | None:
        """What the number is and how sure (``bridge.sampling``): the span's own answer's, or for a request the sum
        of what is attributed to it — counted only when every part it adds up was."""
        if self.scope == "span":
            return self.resolution.sampling
        parts = [p.resolution.sampling for p in self.parts if p.included and p.resolution.step in REQUEST_STEPS]
        if not parts:
            return self.resolution.sampling if self.fallback_total else None
        known = [s for s in parts if s is not None]
        samplers = {s.sampler for s in known}
        units = {s.unit for s in known}
        sampler = samplers.pop() if len(samplers) == 1 else None
        if sampler is None:
            what = quantity_of(self.profile_type)
            sampler = Sampler("", what, f"{what}: the request's parts were sampled by different SDKs")
        tallies = [s.tally for s in known if s.tally is not None]
        tally = add_tallies(tallies) if len(tallies) == len(parts) else None
        return Sampling(sampler, tally, units.pop() if len(units) == 1 else "")

    @property
    def wall_ns(self) -> int | None:
        """The wall time the number belongs to, for the "more than the span lasted" flag: the span for ``linked``,
        its local root (the request) for ``local-root``; None for a time window, and for a request across services
        (processes may work for it at the same time)."""
        res = self.resolution
        if self.scope == "request":
            return None
        if res.step is Step.LINKED:
            return self.span.duration_ns
        if res.step is Step.LOCAL_ROOT and res.local_root is not None:
            return res.local_root.duration_ns
        return None

    @property
    def reasons(self) -> list[str]:
        if self.scope == "span":
            return [self.resolution.reason]
        return [f"{p.span.service} {p.span.name}: {p.resolution.reason}" for p in self.parts]


# --------------------------------------------------------------------------------------------- pure decisions


def selector_for(span: Span, label_map: Sequence[tuple[str, str]]) -> str:
    """The label selector for ``span``'s service: each mapped resource attribute the span has, as a profile label."""
    return merge_selector("{}", labels_of(span, label_map))


def query_for(span: Span, profile_type: str, settings: Settings, *, max_nodes: int | None = None) -> SpanQuery:
    """The query Grafana would send for ``span`` (its window widened by a minute each side), with the trace id."""
    window = span_window(span)
    return SpanQuery(
        span_ids=(span.span_id,),
        profile_type=profile_type,
        label_selector=selector_for(span, settings.label_map),
        start_ms=window[0],
        end_ms=window[1],
        max_nodes=max_nodes,
        trace_id=span.trace_id,
    )


def _own_note(own: Resolution, total: int) -> str:
    """What the request profile says of the span's own answer."""
    if total <= 0:
        return "no samples"
    if own.step in REQUEST_STEPS:
        return f"the span's own answer ({own.step.value})"
    return (
        f"the span's own answer is a {own.step.value} fallback: drawn, but it is the whole service's "
        "CPU, so it is not counted in the request's shares"
    )


def _left_out(res: Resolution, total: int, counted: set[str]) -> str | None:
    """Why a descendant's answer is not added to the request profile, or None when it is."""
    if res.step not in REQUEST_STEPS:
        if res.step != Step.NONE:
            return f"not added: a {res.step.value} answer is the whole service's CPU, not this request's"
        return "no samples"
    if res.span_ids and set(res.span_ids) <= counted:
        return "already counted (same local root)"
    if total <= 0:
        return "no samples"
    return None


def combine(
    own_span: Span, own: Resolution, descendants: Sequence[tuple[Span, Resolution]]
) -> tuple[flamegraph.Node, tuple[Part, ...], tuple[ServiceShare, ...]]:
    """Pure: the request profile from the span's own answer and its descendant local roots' answers.

    The own answer is always included (it is what ``scope=span`` shows, labelled with its mode). A descendant is
    included when it was answered from samples linked to the request (``linked``/``local-root``) and those span ids
    were not already counted."""
    root = flamegraph.Node(flamegraph.ROOT_NAME)
    counted: set[str] = set()
    parts: list[Part] = []
    by_service: dict[str, list[int]] = {}
    fallback: dict[str, list[int]] = {}
    tallies: dict[tuple[str, bool], list[Tally | None]] = {}

    def add(span: Span, res: Resolution, tree: flamegraph.Node, attributed: bool = True) -> None:
        name = (span.service or UNKNOWN_SERVICE) if attributed else fallback_frame(span.service, res.step)
        wrapper = flamegraph.Node(name)
        wrapper.children = tree.children
        wrapper.total = tree.total
        wrapper.self = tree.self
        holder = flamegraph.Node(flamegraph.ROOT_NAME, tree.total)
        holder.children[wrapper.name] = wrapper
        flamegraph.merge_into(root, holder)
        share = (by_service if attributed else fallback).setdefault(span.service, [0, 0])
        share[0] += tree.total
        share[1] += 1
        tallies.setdefault((span.service, attributed), []).append(res.sampling.tally if res.sampling else None)
        counted.update(res.span_ids)

    own_tree = flamegraph.decode(own.flamegraph)
    own_attributed = own.step in REQUEST_STEPS
    if own_tree.total > 0:
        add(own_span, own, own_tree, own_attributed)
    parts.append(Part(own_span, own, own_tree.total, own_tree.total > 0, _own_note(own, own_tree.total)))

    for span, res in descendants:
        tree = flamegraph.decode(res.flamegraph)
        skipped = _left_out(res, tree.total, counted)
        if skipped is not None:
            parts.append(
                Part(span, res, max(tree.total, 0) if res.step in REQUEST_STEPS else tree.total, False, skipped)
            )
            continue
        add(span, res, tree)
        parts.append(Part(span, res, tree.total, True, f"called on this span's behalf ({res.step.value})"))

    def summed(service: str, attributed: bool) -> Tally | None:
        parts = tallies.get((service, attributed), [])
        known = [t for t in parts if t is not None]
        return add_tallies(known) if len(known) == len(parts) else None

    services = tuple(
        ServiceShare(service, value, count, frame=service or UNKNOWN_SERVICE, tally=summed(service, True))
        for service, (value, count) in sorted(by_service.items(), key=lambda kv: (-kv[1][0], kv[0]))
    ) + tuple(
        ServiceShare(
            service,
            value,
            count,
            attributed=False,
            frame=fallback_frame(service, own.step),
            tally=summed(service, False),
        )
        for service, (value, count) in sorted(fallback.items(), key=lambda kv: (-kv[1][0], kv[0]))
    )
    return root, tuple(parts), services


# --------------------------------------------------------------------------------------------- the coroutine


async def answer(
    resolver: Resolver,
    trace_id: str,
    span_id: str,
    *,
    scope: Scope,
    profile_type: str,
    settings: Settings,
    ctx: CallContext,
    max_nodes: int | None = None,
) -> Answer:
    """Find the span (``NotFound`` when it is not in its trace) and answer it in ``scope``. Ids must already be
    normalised (``bridge.ids.trace_id`` / ``bridge.ids.span_id``)."""
    found = await resolver.lookup_span(span_id, ctx, trace_id=trace_id)
    if found is None:
        raise NotFound(f"span {span_id} was not found in trace {trace_id}")
    span, trace = found
    own = await resolver.resolve(query_for(span, profile_type, settings, max_nodes=max_nodes), ctx)
    if scope == "span":
        tree = flamegraph.decode(own.flamegraph)
        tree.name = flamegraph.ROOT_NAME
        return Answer("span", span, trace, profile_type, own, tree, own.flamegraph)

    # the tree is known now: the resolver finds every descendant in the span cache instead of asking Tempo again
    resolver.span_cache.put_trace(ctx.cache_scope, trace)
    descendants = trace.descendant_local_roots(span.span_id)
    asked, skipped = descendants[:MAX_DESCENDANTS], max(0, len(descendants) - MAX_DESCENDANTS)
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(child: Span) -> Resolution:
        async with limit:
            return await resolver.resolve(query_for(child, profile_type, settings, max_nodes=max_nodes), ctx)

    answers = await asyncio.gather(*(one(child) for child in asked))
    tree, parts, services = combine(span, own, list(zip(asked, answers, strict=True)))
    return Answer(
        "request",
        span,
        trace,
        profile_type,
        own,
        tree,
        flamegraph.encode(tree, max_nodes),
        parts=parts,
        services=services,
        skipped=skipped,
    )


# --------------------------------------------------------------------------------------------- local roots' own samples


@dataclass(frozen=True, slots=True)
class Linked:
    """A local root's own linked samples: their total and, when they are a count, how many (``bridge.sampling``)."""

    total: int
    tally: Tally | None


async def linked_totals(
    resolver: Resolver, trace: Trace, current: str, profile_type: str, settings: Settings, ctx: CallContext
) -> dict[str, Linked | None]:
    """Each local root's own linked samples (``SelectMergeSpanProfile`` with its id alone), counted by what its
    service's profiles say (``Resolver.samplers``); None when the backend failed for that span. Children have
    none of their own: the SDKs record their CPU under the local root. At most ``MAX_LINKED_QUERIES`` are asked: the
    current span's local root and the local roots below it first."""
    first = [trace.local_root(current), *trace.descendant_local_roots(current)]
    ordered = {s.span_id: s for s in first if s is not None}
    for s in trace.spans.values():
        if s.span_id not in ordered and trace.is_local_root(s):
            ordered[s.span_id] = s
    roots = list(ordered.values())[:MAX_LINKED_QUERIES]
    limit = asyncio.Semaphore(8)

    async def one(span: Span) -> Linked | None:
        start, end = span_window(span)
        selector = selector_for(span, settings.label_map)
        req = qpb.SelectMergeSpanProfileRequest(
            profile_typeID=profile_type,
            label_selector=selector,
            span_selector=[span.span_id],
            start=start,
            end=end,
        )
        async with limit:
            try:
                resp = await resolver.profiles.select_merge_span_profile(req, ctx)
            except BridgeError:
                return None
            fg = resp.flamegraph if resp.HasField("flamegraph") else None
            if fg is None or flamegraph.is_empty(fg):
                return Linked(0, None)
            sdks, periods = await resolver.samplers.facts(profile_type, selector, (start, end), ctx)
        return Linked(int(fg.total), sampling_of(fg, profile_type, sdks, periods).tally)

    values = await asyncio.gather(*(one(s) for s in roots))
    return {s.span_id: v for s, v in zip(roots, values, strict=True)}


# --------------------------------------------------------------------------------------------- the JSON document


def _part_json(part: Part) -> dict[str, Any]:
    return {
        "spanId": part.span.span_id,
        "service": part.span.service,
        "name": part.span.name,
        "mode": part.resolution.step.value,
        "reason": part.resolution.reason,
        "total": part.value,
        "included": part.included,
        "attributed": part.included and part.resolution.step in REQUEST_STEPS,
        "note": part.note,
        "answeredBy": list(part.resolution.span_ids),
        "sampling": sampling_json(part.resolution.sampling, _part_wall(part)),
    }


def _part_wall(part: Part) -> int | None:
    res = part.resolution
    if res.step is Step.LINKED:
        return part.span.duration_ns
    if res.step is Step.LOCAL_ROOT and res.local_root is not None:
        return res.local_root.duration_ns
    return None


def _tally_json(t: Tally | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"samples": t.samples, "interval95": {"low": round(t.low), "high": round(t.high)}}


def answer_json(ans: Answer) -> dict[str, Any]:
    """The JSON document of an answer. The flame graph is Pyroscope's own encoding in protojson (int64 as strings),
    what Grafana's flame graph and Pyroscope's clients read."""
    res = ans.resolution
    measure = ans.measure
    doc: dict[str, Any] = {
        "scope": ans.scope,
        "traceId": ans.span.trace_id,
        "spanId": ans.span.span_id,
        "profileType": ans.profile_type,
        "mode": res.step.value,
        "reason": res.reason,
        "reasons": ans.reasons,
        "span": ans.span.to_json(),
        "localRoot": res.local_root.to_json() if res.local_root is not None else None,
        "window": {"startMs": res.window_ms[0], "endMs": res.window_ms[1]} if res.window_ms else None,
        # the capture windows the samples were taken in (time-window): what the total covers
        "covered": {"startMs": res.covered_ms[0], "endMs": res.covered_ms[1]} if res.covered_ms else None,
        "labelSelector": res.label_selector,
        "answeredBy": list(res.span_ids),
        "total": ans.tree.total,
        # what ``total`` is: only attribution "span" is this span's own cost (see README, "Reading an answer")
        "measure": {"attribution": measure.attribution.value, "own": measure.own, "text": measure.text},
        "attributedTotal": ans.attributed_total,
        "fallbackTotal": ans.fallback_total,
        # how many samples make up ``total`` (attributed, for a request), their 95 % interval and what they measure
        "sampling": sampling_json(ans.sampling, ans.wall_ns),
    }
    if ans.scope == "request":
        attributed = ans.attributed_total
        doc["services"] = [
            {
                "service": s.service,
                "frame": s.label,
                "total": s.value,
                "spans": s.spans,
                "attributed": s.attributed,
                # shares of what the request cost; a fallback part is the whole service's, so it has no share
                "share": (round(s.value / attributed, 4) if attributed else 0.0) if s.attributed else None,
                "sampling": _tally_json(s.tally),
            }
            for s in ans.services
        ]
        doc["parts"] = [_part_json(p) for p in ans.parts]
        doc["skippedLocalRoots"] = ans.skipped
    doc["flamegraph"] = json_format.MessageToDict(ans.flamegraph)
    return doc
