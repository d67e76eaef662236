"""From a hot function to the requests that burn it: ``GET /api/v1/functions/spans`` and its page.

The mode's ``FunctionIndex`` (the store, or Pyroscope's span exemplars) finds the spans whose linked samples hold the
function and measures them; this module adds what the trace source knows of each span (name, service, start,
duration, whether it is a local root — through the resolver's cached lookups) and shapes the answer: the JSON
document, the page's rows with their bars, and the service's top functions when the page has no function yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlencode

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.flamediff import function_totals
from bridge.functions import FunctionHits, FunctionQuery, SpanValue
from bridge.profiletype import ProfileType
from bridge.resolve import Resolver
from bridge.sampling import quantity_of
from bridge.selector import merge_selector
from bridge.services import service_label
from bridge.sources import FunctionIndex, ProfileSource
from bridge.spans import Span
from bridge.units import format_duration_ns, format_value, share

LOOKUP_MARGIN_MS: Final = 10 * 60_000  # a span may have started before the range its samples fall in
LOOKUP_CONCURRENCY: Final = 8
TOP_FUNCTIONS: Final = 25  # listed on the page when no function is given yet


@dataclass(frozen=True, slots=True)
class Burner:
    """One span of the answer: its values and what the trace source knows of it (None: nothing)."""

    value: SpanValue
    span: Span | None
    local_root: bool | None

    @property
    def trace_id(self) -> str:
        return self.span.trace_id if self.span is not None else self.value.trace_id


@dataclass(frozen=True, slots=True)
class FunctionAnswer:
    query: FunctionQuery
    selector: str
    hits: FunctionHits
    burners: tuple[Burner, ...]

    @property
    def message(self) -> str:
        return answer_message(self)


def service_selector(service: str, settings: Settings) -> str:
    """``{service_name="…"}``: the profile label that holds ``service.name`` (``PROFILE_BRIDGE_LABEL_MAP``)."""
    return merge_selector("{}", [(service_label(settings), service)])


def range_words(start_ms: int, end_ms: int) -> str:
    fmt = "%Y-%m-%d %H:%M:%S"
    start, end = (datetime.fromtimestamp(ms / 1000, UTC).strftime(fmt) for ms in (start_ms, end_ms))
    return f"between {start} and {end} UTC"


def answer_message(ans: FunctionAnswer) -> str:
    """What the answer says in one sentence (always set; the one thing to read when the list is empty)."""
    q, hits = ans.query, ans.hits
    unit = ProfileType.parse(q.profile_type).sample_unit
    what = quantity_of(q.profile_type)
    where = f"{q.service}'s {q.profile_type} profiles {range_words(q.start_ms, q.end_ms)}"
    if not hits.total:
        hint = (
            " (match=prefix or match=regex finds names that only start with it or contain it)"
            if q.match.kind == "exact"
            else ""
        )
        return f"no {q.match.describe()} in {where}{hint}"
    burnt = format_value(hits.total, unit)
    if not hits.spans:
        return (
            f"{q.match.describe()} burnt {burnt} of {what} in {where}, but none of it in samples linked to a "
            "span (the SDK links samples to spans only inside root spans)"
        )
    count = f"{len(hits.spans)}{'+' if hits.more else ''} span{'' if len(hits.spans) == 1 else 's'}"
    linked = (
        f"; {format_value(hits.linked, unit)} ({share(hits.linked, hits.total)}) of it is linked to spans"
        if hits.linked is not None
        else ""
    )
    return f"{count} burnt {q.match.describe()} in {where}: {burnt} of {what} in all{linked}"


async def spans_for_function(
    functions: FunctionIndex, resolver: Resolver, query: FunctionQuery, settings: Settings, ctx: CallContext
) -> FunctionAnswer:
    """The spans that burn the function, each described by the trace source (a span it cannot find is listed
    without a name; a failing lookup does not fail the list)."""
    selector = service_selector(query.service, settings)
    hits = await functions.function_spans(query, selector, ctx)
    limit = asyncio.Semaphore(LOOKUP_CONCURRENCY)

    async def one(value: SpanValue) -> Burner:
        async with limit:
            try:
                found = await resolver.lookup_span(
                    value.span_id,
                    ctx,
                    trace_id=value.trace_id or None,
                    start_ms=query.start_ms - LOOKUP_MARGIN_MS,
                    end_ms=query.end_ms + LOOKUP_MARGIN_MS,
                )
            except BridgeError:
                found = None
        if found is None:
            return Burner(value, None, None)
        span, trace = found
        return Burner(value, span, trace.is_local_root(span))

    burners = await asyncio.gather(*(one(v) for v in hits.spans))
    return FunctionAnswer(query, selector, hits, tuple(burners))


# --------------------------------------------------------------------------------------------- JSON


def links_of(burner: Burner) -> dict[str, str]:
    trace_id, span_id = burner.trace_id, burner.value.span_id
    if not trace_id:
        return {}
    span = f"/spans/{trace_id}/{span_id}"
    return {"span": span, "compare": f"{span}/compare"}


def burner_json(burner: Burner) -> dict[str, Any]:
    value, span = burner.value, burner.span
    return {
        "traceId": burner.trace_id or None,
        "spanId": value.span_id,
        "name": span.name if span is not None else None,
        "service": span.service if span is not None else None,
        "localRoot": burner.local_root,
        "function": {"total": value.total, "self": value.self},
        "spanTotal": value.span_total,
        "share": round(value.total / value.span_total, 4) if value.span_total else None,
        "startTimeUnixNano": str(span.start_ns) if span is not None else None,
        "durationNanos": str(span.duration_ns) if span is not None else None,
        "links": links_of(burner),
    }


def function_answer_json(ans: FunctionAnswer, mode: str) -> dict[str, Any]:
    q, hits = ans.query, ans.hits
    return {
        "mode": mode,
        "service": q.service,
        "function": q.match.text,
        "match": q.match.kind,
        "profileType": q.profile_type,
        "from": q.start_ms,
        "to": q.end_ms,
        "limit": q.limit,
        "labelSelector": ans.selector,
        "functions": list(hits.functions),
        "total": hits.total,
        "linked": hits.linked,
        "moreSpans": hits.more,
        "source": hits.source,
        "notes": list(hits.notes),
        "message": ans.message,
        "spans": [burner_json(b) for b in ans.burners],
    }


# --------------------------------------------------------------------------------------------- the page


@dataclass(frozen=True, slots=True)
class PageRow:
    burner: Burner
    name: str
    href: str
    compare: str
    bar: float  # percent of the widest row
    total: str
    self: str
    span_total: str
    share: str
    duration: str
    started: str


def function_href(
    service: str,
    function: str,
    *,
    match: str = "exact",
    start_ms: int | None = None,
    end_ms: int | None = None,
    profile_type: str = "",
) -> str:
    """The function page's URL for ``function`` of ``service`` (the non-empty parameters)."""
    params = {
        "service": service,
        "function": function,
        "match": "" if match == "exact" else match,
        "from": "" if start_ms is None else str(start_ms),
        "to": "" if end_ms is None else str(end_ms),
        "profile_type": profile_type,
    }
    return "/functions/spans?" + urlencode({k: v for k, v in params.items() if v})


def page_rows(ans: FunctionAnswer) -> list[PageRow]:
    unit = ProfileType.parse(ans.query.profile_type).sample_unit
    widest = max((b.value.total for b in ans.burners), default=0)
    rows = []
    for burner in ans.burners:
        value, span = burner.value, burner.span
        links = links_of(burner)
        name = span.name if span is not None else f"span {value.span_id} (not found in the trace source)"
        rows.append(
            PageRow(
                burner=burner,
                name=name,
                href=links.get("span", ""),
                compare=links.get("compare", ""),
                bar=round(100.0 * value.total / widest, 2) if widest else 0.0,
                total=format_value(value.total, unit),
                self=format_value(value.self, unit),
                span_total=format_value(value.span_total, unit),
                share=share(value.total, value.span_total),
                duration=format_duration_ns(span.duration_ns) if span is not None else "",
                started=datetime.fromtimestamp(span.start_ns / 1e9, UTC).strftime("%H:%M:%S.%f")[:-3]
                if span is not None
                else "",
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class TopFunction:
    name: str
    self: str
    total: str
    href: str


async def top_functions(
    profiles: ProfileSource,
    service: str,
    profile_type: str,
    start_ms: int,
    end_ms: int,
    settings: Settings,
    ctx: CallContext,
    top: int = TOP_FUNCTIONS,
) -> list[TopFunction]:
    """The service's functions with the most self value in the range (the page's starting point)."""
    merged = await profiles.select_merge_stacktraces(
        qpb.SelectMergeStacktracesRequest(
            profile_typeID=profile_type,
            label_selector=service_selector(service, settings),
            start=start_ms,
            end=end_ms,
            format=qpb.PROFILE_FORMAT_FLAMEGRAPH,
        ),
        ctx,
    )
    tree = flamegraph.decode(merged.flamegraph if merged.HasField("flamegraph") else None)
    return top_function_rows(tree, service, profile_type, start_ms, end_ms, top)


def top_function_rows(
    tree: flamegraph.Node, service: str, profile_type: str, start_ms: int, end_ms: int, top: int
) -> list[TopFunction]:
    unit = ProfileType.parse(profile_type).sample_unit
    ranked: Sequence[tuple[str, tuple[int, int]]] = sorted(
        function_totals(tree).items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0])
    )
    return [
        TopFunction(
            name,
            format_value(s, unit),
            format_value(t, unit),
            function_href(service, name, start_ms=start_ms, end_ms=end_ms, profile_type=profile_type),
        )
        for name, (s, t) in ranked[:top]
        if s > 0
    ]
