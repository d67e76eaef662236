"""Which span ``doctor`` checks: the one named (``--trace-id`` and ``--span-id``), a trace's root span (``--trace-id``
alone), a span found by Tempo's search (``--span-id`` alone), or, with neither, a recent root span picked here: the
slowest one with linked samples, else the slowest.

It only picks spans that ended at least a capture window plus the upload lag ago (``hops.settle_seconds``): a
profile is uploaded when its capture window closes, so a younger span may simply not have its samples yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bridge.call import CallContext
from bridge.commands.hops import RECENT_S, Hops, call_context, settle_seconds, settled
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.spans import Span, Trace

SPAN_SEARCH_S: Final = 24 * 3600  # how far back --span-id alone is searched
PICK_LIMIT: Final = 50  # traces the search for "a recent root span" asks for
PICK_TRACES: Final = 20  # of those, fetched to find the slowest root span
PICK_PROBES: Final = 5  # endpoints whose slowest root span is asked whether it has linked samples


@dataclass(frozen=True, slots=True)
class Missing:
    what: str  # "trace" or "span"
    message: str


@dataclass(frozen=True, slots=True)
class Picked:
    span: Span
    trace: Trace
    note: str = ""  # how the span was chosen, when the user did not name it


async def pick_span(
    hops: Hops, settings: Settings, trace_id: str | None, span_id: str | None, now: float, profile_type: str
) -> Picked | Missing:
    """The span to check, or which of trace and span was not found and why."""
    ctx = call_context(settings)
    if trace_id is None and span_id is not None:
        hit = await hops.traces.find_span(span_id, int(now) - SPAN_SEARCH_S, int(now) + 60, ctx)
        if hit is None:
            return Missing(
                "trace",
                f"span {span_id} not found by Tempo's search in the last "
                f"{SPAN_SEARCH_S // 3600} h (search lags ingest by 15-30 s; give --trace-id too)",
            )
        trace_id = hit.trace_id
    if trace_id is None:
        return await _pick_recent(hops, ctx, now, profile_type, settle_seconds(settings))
    trace = await hops.traces.trace_by_id(trace_id, ctx)
    if trace is None or not len(trace):
        return Missing("trace", f"trace {trace_id} not found")
    if span_id is None:
        roots = trace.roots() or sorted(trace.spans.values(), key=lambda s: (s.start_ns, s.span_id))
        return Picked(roots[0], trace, " (its root span)")
    span = trace.get(span_id)
    if span is None:
        return Missing("span", f"span {span_id} is not in trace {trace_id} ({len(trace)} spans)")
    return Picked(span, trace)


async def _pick_recent(hops: Hops, ctx: CallContext, now: float, profile_type: str, settle: float) -> Picked | Missing:
    """The slowest recent root span with linked samples (the one a healthy pipeline answers best), probing the
    slowest span of each endpoint (service, span name), slowest first; when none of those has any, the slowest root
    span (the checks then say why). Only root spans that ended ``settle`` seconds ago or earlier are candidates:
    younger ones may not have their profile uploaded yet. When there are only younger ones, the slowest of them, and
    the note says so."""
    roots = await _recent_roots(hops, ctx, now, settle)
    if isinstance(roots, Missing):
        return roots
    ready = [(span, trace) for span, trace in roots if settled(span, now, settle)]
    if not ready:
        span, trace = roots[0]
        return Picked(
            span,
            trace,
            f" (picked: the slowest recent root span; every recent root span ended less than "
            f"{settle:g} s ago — a capture window plus upload lag — so their profiles may not "
            "have arrived yet)",
        )
    endpoints: dict[tuple[str, str], tuple[Span, Trace]] = {}  # the slowest span of each endpoint, slowest first
    for span, trace in ready:
        endpoints.setdefault((span.service, span.name), (span, trace))
    probes = list(endpoints.values())[:PICK_PROBES]
    for span, trace in probes:
        try:
            doc = await hops.answer(span.trace_id, span.span_id, "span", profile_type)
        except BridgeError:
            break  # the checks below name the failing hop
        if doc.get("mode") == "linked":
            return Picked(span, trace, " (picked: the slowest recent root span with linked samples)")
    return Picked(
        *ready[0],
        f" (picked: the slowest recent root span; none of the {len(probes)} slowest endpoints has linked samples)",
    )


async def _recent_roots(hops: Hops, ctx: CallContext, now: float, settle: float) -> list[tuple[Span, Trace]] | Missing:
    """The root spans of up to ``PICK_TRACES`` recent traces, slowest first (settled traces searched first)."""
    # searches answer the newest traces first: ask for settled ones, or a busy service's last seconds fill the limit
    hits = await hops.traces.search("{ }", int(now) - RECENT_S, int(now - settle), PICK_LIMIT, ctx, spss=1)
    if not hits:
        hits = await hops.traces.search("{ }", int(now - settle), int(now) + 1, PICK_LIMIT, ctx, spss=1)
    if not hits:
        return Missing("trace", f"no traces in the last {RECENT_S // 60} minutes")
    roots: list[tuple[Span, Trace]] = []
    for tid in list(dict.fromkeys(h.trace_id for h in hits))[:PICK_TRACES]:
        trace = await hops.traces.trace_by_id(tid, ctx)
        if trace is not None:
            roots.extend((root, trace) for root in trace.roots())
    if not roots:
        return Missing("trace", "the recent traces Tempo's search found could not be fetched by ID")
    roots.sort(key=lambda st: (-st[0].duration_ns, st[0].span_id))
    return roots
