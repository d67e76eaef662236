"""Proxy mode's function → spans, built on what a released Pyroscope serves (grafana/pyroscope v2.2.1), as a
``FunctionIndex``.

Pyroscope cannot be asked "which spans burn function F" in one call: ``SelectSeries`` serves no span exemplars (v1
refuses every exemplar type, v2 answers "exemplar type span is not implemented", ``pkg/querybackend/
query_time_series.go``), and ``SelectHeatmap`` — which does serve them — takes no stack-trace selector. So:

1. The service's flame graph over the range (``SelectMergeStacktraces``) says how much went through the function at
   all, which frame names match, and whether there is anything to look for.
2. ``SelectHeatmap`` with ``query_type = HEATMAP_QUERY_TYPE_SPAN`` and ``exemplar_type = EXEMPLAR_TYPE_SPAN``
   (``pkg/frontend/readpath/queryfrontend/query_heatmap.go``, ``pkg/querybackend/query_heatmap.go``): each point is
   one span's samples in one profile; per time slot of ``step`` and per value band (20 bands from the smallest to
   the largest point, ``pkg/model/heatmap/range.go``), the highest point is the cell's exemplar, with its span id and
   (from v2.2) trace id. Those spans are the candidates, biggest first by what the exemplars say. The heatmap is
   grouped by ``span_name``: Pyroscope keeps that pprof label (pyroscope-otel's local-root span name) as a series
   label (``pkg/model/pprofsplit``), so each endpoint's spans get bands of their own instead of competing with
   every other endpoint's; without the label it is one series, as ungrouped.
3. Each candidate is measured on its own linked samples (``SelectMergeSpanProfile`` of its id alone — one call gives
   the value through the function, in it and the span's whole value, for a function anywhere in the stack, on every
   Pyroscope version; ``SelectMergeStacktraces`` with a span and a stack-trace selector gives one call site's value
   per call and only on the v2 read path), so the list never shows a number the exemplars only estimated.

What this can miss, said in the answer's notes: a span that was not the highest of its band in any slot, and spans
past the candidates read. A Pyroscope without the v2 read path (the old querier answers "SelectHeatmap not
implemented in old querier"; one older than v2.1 has no such procedure) cannot answer: ``Unimplemented``, naming
what is needed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final, Protocol

from bridge import flamegraph, ids
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.errors import Code, Unimplemented, UpstreamError
from bridge.functions import (
    FunctionHits,
    FunctionQuery,
    SpanValue,
    matched_names,
    order_spans,
    through_function,
)
from bridge.wire.pyroscope import SPAN_EXEMPLARS_NEEDED, SPAN_NAME_LABEL

SOURCE: Final = "Pyroscope's span heatmap exemplars"
SERVICE_NODES: Final = 65_536  # nodes of the service's flame graph the function is measured in
HEATMAP_SLOTS: Final = 240  # time slots asked for: each names at most one span per value band
MIN_STEP_S: Final = 1.0
MAX_CANDIDATES: Final = 100  # spans whose own profile is read, at most
CANDIDATES_PER_ROW: Final = 3  # read three per row asked for: the exemplars rank spans by all they burnt, not by F
CONCURRENCY: Final = 8
# what a Pyroscope that cannot answer says: Connect's own code, or HTTP 404 from one that has no such procedure
_CANNOT: Final = (Code.UNIMPLEMENTED, Code.NOT_FOUND)


class HeatmapSource(Protocol):
    """What this index asks of Pyroscope (``PyroscopeClient``)."""

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse: ...

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse: ...

    async def select_heatmap(self, req: qpb.SelectHeatmapRequest, ctx: CallContext) -> qpb.SelectHeatmapResponse: ...


def step_seconds(start_ms: int, end_ms: int) -> float:
    return max(MIN_STEP_S, (end_ms - start_ms) / 1000 / HEATMAP_SLOTS)


def unsupported(detail: str) -> Unimplemented:
    return Unimplemented(
        f"Pyroscope cannot list the spans that burn a function here: {detail}. This needs "
        f"{SPAN_EXEMPLARS_NEEDED}; standalone mode answers it from its own store"
    )


@dataclass(frozen=True, slots=True)
class Candidates:
    """What the heatmap's exemplars said: span id → (the most the exemplars saw it burn, its trace id or "")."""

    spans: dict[str, tuple[int, str]]
    points: int  # points the heatmap counted


def candidates_of(answer: qpb.SelectHeatmapResponse) -> Candidates:
    """Pure: the spans a SelectHeatmap answer names, each with the sum of its exemplars' values (one span may be the
    exemplar of several slots) and its trace id when an exemplar gave one."""
    spans: dict[str, tuple[int, str]] = {}
    points = 0
    for series in answer.series:
        for slot in series.slots:
            points += sum(max(0, c) for c in slot.counts)
            for ex in slot.exemplars:
                span_id = ids.span_id(ex.span_id) if ex.span_id else None
                if span_id is None:
                    continue
                value, known = spans.get(span_id, (0, ""))
                trace = ids.trace_id(ex.trace_id, padded=False) if ex.trace_id else None
                spans[span_id] = (value + max(0, ex.value), known or trace or "")
    return Candidates(spans, points)


class ExemplarIndex:
    """Pyroscope (a ``HeatmapSource``) as a ``FunctionIndex``."""

    name = "pyroscope"

    def __init__(self, profiles: HeatmapSource) -> None:
        self.profiles = profiles

    async def function_spans(self, query: FunctionQuery, selector: str, ctx: CallContext) -> FunctionHits:
        merged = await self.profiles.select_merge_stacktraces(
            qpb.SelectMergeStacktracesRequest(
                profile_typeID=query.profile_type,
                label_selector=selector,
                start=query.start_ms,
                end=query.end_ms,
                max_nodes=SERVICE_NODES,
                format=qpb.PROFILE_FORMAT_FLAMEGRAPH,
            ),
            ctx,
        )
        tree = flamegraph.decode(merged.flamegraph if merged.HasField("flamegraph") else None)
        total, _ = through_function(tree, query.match)
        names = tuple(matched_names(tree, query.match))
        notes: list[str] = []
        if any(node.name == flamegraph.OTHER_NAME for node in _walk(tree)):
            notes.append(
                f"Pyroscope folded the service's flame graph to {SERVICE_NODES} nodes: the function's total leaves "
                "out what its \u201cother\u201d bars hold"
            )
        if not total:
            return FunctionHits((), names, 0, None, 0, SOURCE, tuple(notes))
        found = candidates_of(await self._heatmap(query, selector, ctx))
        ranked = sorted(found.spans.items(), key=lambda kv: (-kv[1][0], kv[0]))
        read = ranked[: min(MAX_CANDIDATES, CANDIDATES_PER_ROW * query.limit)]
        values = order_spans(v for v in await self._measure(query, selector, read, ctx) if v.total > 0)
        top = values[: query.limit]
        notes.append(
            f"Pyroscope's span heatmap names the biggest span of each value band in each time slot; of the "
            f"{len(ranked)} spans it named, the {len(read)} that burnt the most were measured: a span that burnt "
            "less than another of its band and slot is not seen"
        )
        more = len(values) - len(top)  # a lower bound: spans not measured may burn it too
        return FunctionHits(tuple(top), names, total, None, more, SOURCE, tuple(notes))

    async def _heatmap(self, query: FunctionQuery, selector: str, ctx: CallContext) -> qpb.SelectHeatmapResponse:
        req = qpb.SelectHeatmapRequest(
            profile_typeID=query.profile_type,
            label_selector=selector,
            start=query.start_ms,
            end=query.end_ms,
            step=step_seconds(query.start_ms, query.end_ms),
            group_by=[SPAN_NAME_LABEL],
            query_type=qpb.HEATMAP_QUERY_TYPE_SPAN,
            exemplar_type=tpb.EXEMPLAR_TYPE_SPAN,
        )
        try:
            return await self.profiles.select_heatmap(req, ctx)
        except UpstreamError as exc:
            if exc.code in _CANNOT:
                raise unsupported(f"it answered SelectHeatmap with {exc.code.value}: {exc.message}") from exc
            raise

    async def _measure(
        self, query: FunctionQuery, selector: str, read: list[tuple[str, tuple[int, str]]], ctx: CallContext
    ) -> list[SpanValue]:
        """Each candidate's own linked samples, measured: through the function, in it, and in all."""
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(span_id: str, trace_id: str) -> SpanValue:
            req = qpb.SelectMergeSpanProfileRequest(
                profile_typeID=query.profile_type,
                label_selector=selector,
                span_selector=[span_id],
                start=query.start_ms,
                end=query.end_ms,
                max_nodes=SERVICE_NODES,
                format=qpb.PROFILE_FORMAT_FLAMEGRAPH,
            )
            async with limit:
                answer = await self.profiles.select_merge_span_profile(req, ctx)
            tree = flamegraph.decode(answer.flamegraph if answer.HasField("flamegraph") else None)
            total, self_value = through_function(tree, query.match)
            return SpanValue(span_id, trace_id, total, self_value, tree.total)

        return list(await asyncio.gather(*(one(sid, trace) for sid, (_, trace) in read)))


def _walk(tree: flamegraph.Node) -> list[flamegraph.Node]:
    out: list[flamegraph.Node] = []
    work = list(tree.children.values())
    while work:
        node = work.pop()
        out.append(node)
        work.extend(node.children.values())
    return out
