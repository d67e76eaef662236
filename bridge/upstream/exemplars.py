"""Proxy mode's function → spans: Pyroscope's span exemplars (``../shared/contracts/pyroscope.md``, "Span
exemplars"), as a ``FunctionIndex``.

1. The service's flame graph over the range (``SelectMergeStacktraces``) gives every *call site* of the function:
   the path from the root to each outermost frame that matches (a ``stack_trace_selector`` selects stacks by such a
   root-first prefix, not by a function anywhere in the stack).
2. Per call site, ``SelectSeries`` with that ``stack_trace_selector`` and ``exemplar_type = EXEMPLAR_TYPE_SPAN``:
   each point names the spans that contributed most to it. Their values, summed over points and call sites, rank
   the candidates.
3. Each candidate's own linked samples (``SelectMergeSpanProfile`` of its id alone) give the exact value through
   the function, in it, and the span's whole linked value — so the list never shows a number the exemplars only
   estimated.

A Pyroscope that cannot answer span exemplars says ``unimplemented``, or answers points without any exemplar (one
that does not know field 10): both become ``Unimplemented`` naming the version needed, never a list.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from bridge import flamegraph, ids
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.errors import Code, Unimplemented, UpstreamError
from bridge.functions import (
    FunctionHits,
    FunctionMatch,
    FunctionQuery,
    SpanValue,
    matched_names,
    order_spans,
    through_function,
)
from bridge.sources import ProfileSource
from bridge.wire.pyroscope import SPAN_EXEMPLARS_NEEDED, TRACE_ID_LABEL

SOURCE: Final = "Pyroscope's span exemplars"
CALL_SITE_NODES: Final = 65_536  # nodes of the flame graph the call sites are read from
MAX_CALL_SITES: Final = 32  # call sites asked about, the biggest first
SERIES_POINTS: Final = 60  # points per SelectSeries: exemplars are per point, so more points name more spans
MAX_CANDIDATES: Final = 100  # spans whose own profile is read
CANDIDATE_SLACK: Final = 10  # read a few more than the limit: the exemplars' ranking is an estimate
CONCURRENCY: Final = 4


@dataclass(frozen=True, slots=True)
class CallSite:
    path: tuple[str, ...]  # root first; the matching frame last
    total: int


def call_sites(tree: flamegraph.Node, match: FunctionMatch) -> tuple[list[CallSite], bool]:
    """Pure: the paths to the outermost frames that match, biggest first, and whether the flame graph folded nodes
    into ``other`` (a call site inside one cannot be seen)."""
    sites: list[CallSite] = []
    folded = False
    work: list[tuple[flamegraph.Node, tuple[str, ...]]] = [(c, (c.name,)) for c in tree.children.values()]
    while work:
        node, path = work.pop()
        if node.name == flamegraph.OTHER_NAME:
            folded = True
            continue
        if match.matches(node.name):
            sites.append(CallSite(path, node.total))
            continue
        work.extend((c, (*path, c.name)) for c in node.children.values())
    return sorted(sites, key=lambda s: (-s.total, s.path)), folded


def step_seconds(start_ms: int, end_ms: int) -> float:
    return max(1.0, (end_ms - start_ms) / 1000 / SERIES_POINTS)


def unsupported(detail: str) -> Unimplemented:
    return Unimplemented(
        f"Pyroscope cannot list the spans that burn a function here: {detail}. This needs "
        f"{SPAN_EXEMPLARS_NEEDED}; standalone mode answers it from its own store"
    )


@dataclass(frozen=True, slots=True)
class Candidates:
    """What the exemplars of every call site said: span id → (estimated value, trace id)."""

    spans: dict[str, tuple[int, str]]
    points: int  # points with a value
    exemplars: int  # exemplars with a span id


class ExemplarIndex:
    """Pyroscope (any ``ProfileSource`` that answers span exemplars) as a ``FunctionIndex``."""

    name = "pyroscope"

    def __init__(self, profiles: ProfileSource) -> None:
        self.profiles = profiles

    async def function_spans(self, query: FunctionQuery, selector: str, ctx: CallContext) -> FunctionHits:
        merged = await self.profiles.select_merge_stacktraces(
            qpb.SelectMergeStacktracesRequest(
                profile_typeID=query.profile_type,
                label_selector=selector,
                start=query.start_ms,
                end=query.end_ms,
                max_nodes=CALL_SITE_NODES,
                format=qpb.PROFILE_FORMAT_FLAMEGRAPH,
            ),
            ctx,
        )
        tree = flamegraph.decode(merged.flamegraph if merged.HasField("flamegraph") else None)
        sites, folded = call_sites(tree, query.match)
        notes: list[str] = []
        if folded:
            notes.append(
                f"Pyroscope folded the service's flame graph to {CALL_SITE_NODES} nodes: call sites inside "
                "its \u201cother\u201d bars were not searched"
            )
        if not sites:
            return FunctionHits((), (), 0, None, 0, SOURCE, tuple(notes))
        asked, skipped = sites[:MAX_CALL_SITES], sites[MAX_CALL_SITES:]
        if skipped:
            notes.append(
                f"{len(skipped)} smaller call sites (holding {sum(s.total for s in skipped)} of "
                f"{sum(s.total for s in sites)}) were not searched"
            )
        found = await self._candidates(query, selector, asked, ctx)
        if found.points and not found.exemplars:
            raise unsupported(
                "it answered SelectSeries without span exemplars (a Pyroscope that does not know "
                "exemplar_type ignores it)"
            )
        ranked = sorted(found.spans.items(), key=lambda kv: (-kv[1][0], kv[0]))
        read = ranked[: min(MAX_CANDIDATES, query.limit + CANDIDATE_SLACK)]
        values = order_spans(v for v in await self._measure(query, selector, read, ctx) if v.total > 0)
        top = values[: query.limit]
        more = len(values) - len(top) + len(ranked) - len(read)
        notes.append(
            "span exemplars name the spans that contributed most to each point of the series: a span that "
            "burnt little of the function may be missing"
        )
        return FunctionHits(
            tuple(top),
            tuple(matched_names(tree, query.match)),
            sum(s.total for s in sites),
            None,
            more,
            SOURCE,
            tuple(notes),
        )

    async def _candidates(
        self, query: FunctionQuery, selector: str, sites: list[CallSite], ctx: CallContext
    ) -> Candidates:
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(site: CallSite) -> qpb.SelectSeriesResponse:
            req = qpb.SelectSeriesRequest(
                profile_typeID=query.profile_type,
                label_selector=selector,
                start=query.start_ms,
                end=query.end_ms,
                step=step_seconds(query.start_ms, query.end_ms),
                exemplar_type=tpb.EXEMPLAR_TYPE_SPAN,
                stack_trace_selector=tpb.StackTraceSelector(call_site=[tpb.Location(name=n) for n in site.path]),
            )
            async with limit:
                try:
                    return await self.profiles.select_series(req, ctx)
                except UpstreamError as exc:
                    if exc.code is Code.UNIMPLEMENTED:
                        raise unsupported(f"it answered SelectSeries with span exemplars: {exc.message}") from exc
                    raise

        spans: dict[str, tuple[int, str]] = {}
        points = exemplars = 0
        for answer in await asyncio.gather(*(one(site) for site in sites)):
            for series in answer.series:
                for point in series.points:
                    points += point.value > 0
                    for ex in point.exemplars:
                        span_id = ids.span_id(ex.span_id) if ex.span_id else None
                        if span_id is None:
                            continue
                        exemplars += 1
                        trace = next((lp.value for lp in ex.labels if lp.name == TRACE_ID_LABEL), "")
                        value, known = spans.get(span_id, (0, ""))
                        spans[span_id] = (value + max(0, ex.value), known or (ids.trace_id(trace) or ""))
        return Candidates(spans, points, exemplars)

    async def _measure(
        self, query: FunctionQuery, selector: str, read: list[tuple[str, tuple[int, str]]], ctx: CallContext
    ) -> list[SpanValue]:
        """Each candidate's own linked samples, measured: through the function, in it, and in all."""
        limit = asyncio.Semaphore(CONCURRENCY * 2)

        async def one(span_id: str, trace_id: str) -> SpanValue:
            req = qpb.SelectMergeSpanProfileRequest(
                profile_typeID=query.profile_type,
                label_selector=selector,
                span_selector=[span_id],
                start=query.start_ms,
                end=query.end_ms,
                format=qpb.PROFILE_FORMAT_FLAMEGRAPH,
            )
            async with limit:
                answer = await self.profiles.select_merge_span_profile(req, ctx)
            tree = flamegraph.decode(answer.flamegraph if answer.HasField("flamegraph") else None)
            total, self_value = through_function(tree, query.match)
            return SpanValue(span_id, trace_id, total, self_value, tree.total)

        return list(await asyncio.gather(*(one(sid, trace) for sid, (_, trace) in read)))
