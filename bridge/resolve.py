"""Span → profile: the resolution cascade ``linked → local-root → time-window → none``.

- ``linked``: samples whose ``span_id`` label is one of the asked spans (Pyroscope's ``SelectMergeSpanProfile``).
- ``local-root``: nothing linked, but the span's local root (same service, same request) has samples: SDKs record a
  child span's CPU under the local root's id. The span's tree comes from the span cache (filled by the Tempo mount)
  or, on a miss, from Tempo (search for the span, then the trace by ID).
- ``time-window``: nothing linked to either: the span's service (labels mapped from its resource attributes via
  ``settings.label_map``) during the span: every capture window that overlaps the span and no neighbouring one,
  found from the stamps of the service's profiles (``SelectSeries``) under its stamp convention (start for most
  SDKs, end for ``@pyroscope/nodejs``, from ``pyroscope_spy``; always start in the store). When the asked profile
  type holds nothing for the service, a type it uploads with the same sample type and unit answers (Node's CPU is
  ``process_cpu:cpu:nanoseconds:wall:nanoseconds``), and the reason says so.
- ``none``: the span is unknown, or nothing in the window either: an empty flame graph whose root says why.

Every non-linked answer is relabelled on the root bar (``total — <reason>``) so Grafana shows how it was found.

The decisions are pure functions in the modules beside this one: ``bridge.resolution`` (``clean_span_ids``,
``carried_traces``, the ``Resolution`` built by keyword, ``measure_of``), ``bridge.timewindow`` (``labels_of``,
``window_of``, ``stamp_of``, ``cpu_equivalents``, ``stamp_window``) and ``bridge.reasons`` (the ``*_reason`` texts);
``Resolver.resolve`` is the one coroutine that does I/O.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from cachetools import TTLCache

from bridge import flamegraph, ids
from bridge._proto import querier_pb2
from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import InvalidArgument, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.profiletype import PROFILE_TYPE_LABEL
from bridge.reasons import (
    answered_from_text,
    empty_window_reason,
    linked_reason,
    local_root_reason,
    no_samples_why,
    not_found_reason,
    stamped_text,
    time_window_reason,
)
from bridge.resolution import Resolution, SpanQuery, Step, carried_traces, clean_span_ids
from bridge.samplers import Samplers
from bridge.sampling import sampling_of
from bridge.selector import merge_selector
from bridge.sources import PeriodSource, ProfileSource, TraceSource
from bridge.spancache import SpanCache
from bridge.spans import SERVICE_NAME, SearchHit, Span, Trace
from bridge.timewindow import (
    SPY_LABEL,
    STEP_MS,
    Stamp,
    covered_by,
    cpu_equivalents,
    labels_of,
    stamp_free_window,
    stamp_of,
    stamp_window,
    typical_window_ms,
)

log = logging.getLogger("bridge.resolve")

LOOKUP_CACHE: Final = "span_lookups"
# when a caller gives no time range, search this far back (Tempo allows up to 168 h per search)
DEFAULT_SEARCH_SPAN_S: Final = 24 * 3600
# the time-window step reads profile stamps this far around a span (at least four configured capture windows)
LOOKAROUND_MS: Final = 300_000
TYPES_BUCKET_MS: Final = 900_000
TYPES_CACHE_SIZE: Final = 4096
TYPES_CACHE_TTL_S: Final = 300.0


def span_from_hit(hit: SearchHit) -> Span:
    """A span known only from a search hit (its trace could not be fetched): enough for a time window."""
    resource = ((SERVICE_NAME, hit.service),) if hit.service else ()
    return Span(
        hit.trace_id, hit.span_id, "", hit.name, 0, hit.service, hit.start_ns, hit.start_ns + hit.duration_ns, resource
    )


# --------------------------------------------------------------------------------------------- the orchestration


@dataclass(frozen=True, slots=True)
class WindowAnswer:
    """What the time-window step found: the range asked, the capture window length it assumed, what to add to the
    reason (another profile type answered, a non-start stamp convention) and the flame graph (None: nothing)."""

    window: tuple[int, int]
    length_s: float
    note: str
    flamegraph: querier_pb2.FlameGraph | None
    covered: tuple[int, int] | None = None  # the capture windows the samples were taken in (``covered_by``)
    type_id: str = ""  # the profile type that answered


@dataclass(frozen=True, slots=True)
class Found:
    """A looked-up span with its trace and its local root (None when the tree does not say)."""

    span: Span
    trace: Trace
    local_root: Span | None


class Resolver:
    """One per app. Lookups are cached per tenant; concurrent identical lookups share one upstream call."""

    def __init__(
        self,
        traces: TraceSource,
        profiles: ProfileSource,
        span_cache: SpanCache,
        settings: Settings,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        periods: PeriodSource | None = None,
    ) -> None:
        self.traces = traces
        self.profiles = profiles
        self.samplers = Samplers(profiles, periods)  # how a service's profiles were sampled (``bridge.samplers``)
        self.span_cache = span_cache
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._lookups: TTLCache[tuple[str, str], Found] = TTLCache(
            maxsize=settings.lookup_cache_size, ttl=settings.lookup_cache_ttl
        )
        self._inflight: dict[tuple[str, str], asyncio.Future[Found | None]] = {}
        self._trace_fetches: dict[tuple[str, str], asyncio.Future[Trace | None]] = {}
        # what each service uploads (types and spies): bounded, short-lived
        self._types: TTLCache[tuple[str, str, int], dict[str, frozenset[str]]] = TTLCache(
            maxsize=TYPES_CACHE_SIZE, ttl=TYPES_CACHE_TTL_S
        )

    # ------------------------------------------------------------------------------------------- resolve

    async def resolve(self, query: SpanQuery, ctx: CallContext) -> Resolution:
        span_ids = clean_span_ids(query.span_ids)
        resolution = await self._resolve(span_ids, query, ctx, carried_traces(query.span_ids))
        if resolution.step is not Step.NONE:
            resolution = await self._sampled(resolution, query, ctx)
        self.metrics.resolutions.labels(resolution.step.value).inc()
        return resolution

    async def _sampled(self, res: Resolution, query: SpanQuery, ctx: CallContext) -> Resolution:
        """The answer's total as a count of samples (``bridge.sampling``), from what its profiles say: the SDK that
        uploaded them (``otel.scope.name`` / ``pyroscope_spy``) and, where kept, each profile's period."""
        type_id = res.answered_type or query.profile_type
        window = res.covered_ms or res.window_ms or (query.start_ms, query.end_ms)
        sdks, periods = await self.samplers.facts(type_id, res.label_selector or "{}", window, ctx)
        if res.step is Step.LINKED and res.span is None and len(res.span_ids) == 1:  # its wall time, if cached
            cached = self._from_span_cache(ctx.cache_scope, res.span_ids[0])
            res = replace(res, span=cached.span, local_root=cached.local_root) if cached is not None else res
        return replace(res, sampling=sampling_of(res.flamegraph, type_id, sdks, periods))

    async def _resolve(
        self, span_ids: tuple[str, ...], query: SpanQuery, ctx: CallContext, carried: Mapping[str, str]
    ) -> Resolution:
        selector = query.label_selector or "{}"
        fg = await self._linked(span_ids, query, ctx)
        if fg is not None and not flamegraph.is_empty(fg):
            return Resolution(
                step=Step.LINKED,
                reason=linked_reason(span_ids),
                flamegraph=fg,
                label_selector=selector,
                span_ids=span_ids,
            )

        found = await self._first_found(span_ids, query, ctx, carried)
        if found is None:
            start_s, end_s = self._search_range(query.start_ms, query.end_ms)
            reason = not_found_reason(span_ids, start_s * 1000, end_s * 1000)
            empty = flamegraph.empty(flamegraph.root_label(reason))
            return Resolution(step=Step.NONE, reason=reason, flamegraph=empty, label_selector=selector)

        span, root = found.span, found.local_root
        if root is not None and root.span_id not in span_ids:
            fg = await self._linked((root.span_id,), query, ctx)
            if fg is not None and not flamegraph.is_empty(fg):
                reason = local_root_reason(span, root)
                relabelled = flamegraph.relabel_root(fg, flamegraph.root_label(reason))
                return Resolution(
                    step=Step.LOCAL_ROOT,
                    reason=reason,
                    flamegraph=relabelled,
                    span=span,
                    local_root=root,
                    label_selector=selector,
                    span_ids=(root.span_id,),
                )

        used = merge_selector(selector, labels_of(span, self.settings.label_map))
        found_in = await self._time_window(span, query, used, ctx)
        window, fg = found_in.window, found_in.flamegraph
        if fg is not None:
            reason = time_window_reason(span, found_in.length_s, no_samples_why(span, root)) + found_in.note
            relabelled = flamegraph.relabel_root(fg, flamegraph.root_label(reason))
            return Resolution(
                step=Step.TIME_WINDOW,
                reason=reason,
                flamegraph=relabelled,
                span=span,
                local_root=root,
                window_ms=window,
                label_selector=used,
                covered_ms=found_in.covered,
                answered_type=found_in.type_id,
            )
        reason = empty_window_reason(span, root, used, window)
        empty = flamegraph.empty(flamegraph.root_label(reason))
        return Resolution(
            step=Step.NONE,
            reason=reason,
            flamegraph=empty,
            span=span,
            local_root=root,
            window_ms=window,
            label_selector=used,
        )

    async def _linked(
        self, span_ids: tuple[str, ...], query: SpanQuery, ctx: CallContext
    ) -> querier_pb2.FlameGraph | None:
        # SelectMergeSpanProfile, not SelectMergeStacktraces + span_selector: every Pyroscope version filters with
        # it, while one older than v2.2 ignores SelectMergeStacktraces' span_selector and answers unfiltered.
        req = querier_pb2.SelectMergeSpanProfileRequest(
            profile_typeID=query.profile_type,
            label_selector=query.label_selector or "{}",
            span_selector=list(span_ids),
            start=query.start_ms,
            end=query.end_ms,
            format=querier_pb2.PROFILE_FORMAT_FLAMEGRAPH,
        )
        if query.max_nodes:
            req.max_nodes = query.max_nodes
        answer = await self.profiles.select_merge_span_profile(req, ctx)
        return answer.flamegraph if answer.HasField("flamegraph") else None

    async def _time_window(self, span: Span, query: SpanQuery, selector: str, ctx: CallContext) -> WindowAnswer:
        """The span's service during the span: for each profile type that may answer (``cpu_equivalents``), the
        stamps of its profiles around the span (``SelectSeries``) give the capture windows overlapping the span under
        the service's stamp convention, and those windows are merged. The first type with samples answers."""
        settings = self.settings
        skew_ms = int(round(settings.clock_skew * 1000))
        fallback_ms = int(round(settings.capture_window * 1000))
        span_ms = (span.start_ns // 1_000_000, -(-span.end_ns // 1_000_000))
        around = max(LOOKAROUND_MS, 4 * fallback_ms)
        # on the STEP_MS grid: a stamp on it (an SDK's windows start on whole seconds) comes back exactly, whether the
        # store floors a profile's time to a point or Pyroscope ceils it (its v2 read path: the step ending at it)
        look = (max(0, span_ms[0] - around) // STEP_MS * STEP_MS, span_ms[1] + around)
        types = await self._service_types(selector, look, ctx)
        first: WindowAnswer | None = None
        for type_id in cpu_equivalents(query.profile_type, types):
            spies = types.get(type_id, frozenset())
            stamp = Stamp.START if self.profiles.stamps_window_start else stamp_of(spies)
            try:
                series = await self.profiles.select_series(
                    querier_pb2.SelectSeriesRequest(
                        profile_typeID=type_id,
                        label_selector=selector,
                        start=look[0],
                        end=look[1],
                        step=STEP_MS / 1000,
                    ),
                    ctx,
                )
            except (UpstreamTimeout, UpstreamUnavailable):
                raise
            except UpstreamError as exc:  # e.g. a Pyroscope that does not serve it: the widening without stamps
                log.info("time window for %s: no profile stamps (%s)", span.span_id, exc)
                series = querier_pb2.SelectSeriesResponse()
            stamps = sorted({p.timestamp for s in series.series for p in s.points if p.value > 0})
            length_ms = typical_window_ms(stamps, fallback_ms)
            window = stamp_window(span_ms, stamps, stamp, length_ms, skew_ms) if stamps else None
            if window is None:
                window = stamp_free_window(span, stamp, settings.capture_window, settings.clock_skew)
            note = ""
            if type_id != query.profile_type:
                note += "; " + answered_from_text(type_id, span.service)
            if stamp is not Stamp.START:
                note += "; " + stamped_text(stamp, spies)
            answer = WindowAnswer(window, length_ms / 1000, note, None, covered_by(window, stamps, stamp, length_ms))
            if first is None:
                first = answer
            if not stamps and type_id != query.profile_type:
                continue  # nothing of this type near the span: no need to ask for its flame graph
            req = querier_pb2.SelectMergeStacktracesRequest(
                profile_typeID=type_id,
                label_selector=selector,
                start=window[0],
                end=window[1],
                format=querier_pb2.PROFILE_FORMAT_FLAMEGRAPH,
            )
            if query.max_nodes:
                req.max_nodes = query.max_nodes
            merged = await self.profiles.select_merge_stacktraces(req, ctx)
            fg = merged.flamegraph if merged.HasField("flamegraph") else None
            if fg is not None and not flamegraph.is_empty(fg):
                return WindowAnswer(window, answer.length_s, note, fg, answer.covered, type_id)
        assert first is not None  # cpu_equivalents always names at least the asked type
        return first

    async def _service_types(self, selector: str, look: tuple[int, int], ctx: CallContext) -> dict[str, frozenset[str]]:
        """The profile types the span's service uploads around the span, each with its ``pyroscope_spy`` values
        (Pyroscope's ``Series``). Cached per tenant, selector and quarter hour; an empty answer is not cached."""
        key = (ctx.cache_scope, selector, look[0] // TYPES_BUCKET_MS)
        cached = self._types.get(key)
        if cached is not None:
            return cached
        try:
            answer = await self.profiles.series(
                querier_pb2.SeriesRequest(
                    matchers=[selector],
                    label_names=[PROFILE_TYPE_LABEL, SPY_LABEL],
                    start=look[0],
                    end=look[1],
                ),
                ctx,
            )
        except (UpstreamTimeout, UpstreamUnavailable):
            raise
        except UpstreamError as exc:  # a Pyroscope without Series: every type it holds, stamps unknown
            log.info("profile types of %s: Series failed (%s), trying every profile type", selector, exc)
            every = await self.profiles.profile_types(querier_pb2.ProfileTypesRequest(start=look[0], end=look[1]), ctx)
            return {t.ID: frozenset({"unknown"}) for t in every.profile_types}
        found: dict[str, set[str]] = {}
        for labels in answer.labels_set:
            pairs = {pair.name: pair.value for pair in labels.labels}
            type_id = pairs.get(PROFILE_TYPE_LABEL)
            if type_id:
                found.setdefault(type_id, set()).add(pairs.get(SPY_LABEL, ""))
        types = {type_id: frozenset(spies) for type_id, spies in found.items()}
        if types:
            self._types[key] = types
        return types

    async def _first_found(
        self, span_ids: tuple[str, ...], query: SpanQuery, ctx: CallContext, carried: Mapping[str, str]
    ) -> Found | None:
        for sid in span_ids:
            trace_id = query.trace_id or carried.get(sid)
            found = await self._lookup(sid, ctx, trace_id, query.start_ms, query.end_ms)
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------------------------------------- lookups

    async def lookup_span(
        self,
        span_id: str,
        ctx: CallContext,
        *,
        trace_id: str | None = None,
        start_ms: int | None = None,
        end_ms: int | None = None,
    ) -> tuple[Span, Trace] | None:
        parsed = ids.selector_entry(span_id)
        if parsed is None:
            raise InvalidArgument(f"span id {span_id!r} is not 16 hex characters")
        sid, carried = parsed
        found = await self._lookup(sid, ctx, trace_id or carried, start_ms, end_ms)
        return (found.span, found.trace) if found is not None else None

    async def _lookup(
        self, span_id: str, ctx: CallContext, trace_id: str | None, start_ms: int | None, end_ms: int | None
    ) -> Found | None:
        tenant = ctx.cache_scope
        cached = self._from_span_cache(tenant, span_id)
        if cached is not None and cached.local_root is not None:
            self.metrics.cache_hits.labels("spans").inc()
            return cached
        if cached is not None:
            # the span is remembered but its local root is gone from the cache: its trace by ID (no search) says
            trace_id = cached.span.trace_id
        else:
            self.metrics.cache_misses.labels("spans").inc()
        key = (tenant, span_id)
        hit = self._lookups.get(key)
        if hit is not None:
            self.metrics.cache_hits.labels(LOOKUP_CACHE).inc()
            return hit
        self.metrics.cache_misses.labels(LOOKUP_CACHE).inc()
        while (pending := self._inflight.get(key)) is not None:
            # an identical lookup is on its way: share its answer, within this request's own budget
            try:
                return await asyncio.wait_for(asyncio.shield(pending), timeout=ctx.deadline.remaining())
            except TimeoutError as exc:
                raise UpstreamTimeout(
                    "tempo", f"span {span_id}: lookup did not finish within the request's budget"
                ) from exc
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and (task is None or not task.cancelling()):
                    continue  # the request that led the lookup went away; lead it ourselves
                raise
        future: asyncio.Future[Found | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            found = await self._fetch(span_id, ctx, trace_id, start_ms, end_ms) or cached
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(found)
        if found is not None:
            self._lookups[key] = found
            self.metrics.cache_entries.labels(LOOKUP_CACHE).set(len(self._lookups))
        return found

    def _from_span_cache(self, tenant: str, span_id: str) -> Found | None:
        entry = self.span_cache.get(tenant, span_id)
        if entry is None:
            return None
        trace = self.span_cache.get_trace(tenant, entry.span.trace_id)
        if trace is None or trace.get(span_id) is None:
            trace = Trace.from_spans([entry.span], entry.span.trace_id)
        if entry.is_local_root:
            return Found(entry.span, trace, entry.span)
        root = trace.get(entry.local_root_id)
        if root is None:
            root_entry = self.span_cache.get(tenant, entry.local_root_id)
            root = root_entry.span if root_entry is not None else None
        return Found(entry.span, trace, root)

    async def _fetch(
        self, span_id: str, ctx: CallContext, trace_id: str | None, start_ms: int | None, end_ms: int | None
    ) -> Found | None:
        start_s, end_s = self._search_range(start_ms, end_ms)
        hit: SearchHit | None = None
        if trace_id is None:  # else known (carried in the selector, or given): by ID, no search
            hit = await self.traces.find_span(span_id, start_s, end_s, ctx)
            if hit is None:
                return None
            trace_id = hit.trace_id
        trace = await self._trace(trace_id, ctx, start_s, end_s)
        span = trace.get(span_id) if trace is not None else None
        if trace is not None and span is not None:
            return Found(span, trace, trace.local_root(span_id))
        if hit is None:
            return None
        log.info("span %s: search found it but its trace %s could not be fetched", span_id, trace_id)
        span = span_from_hit(hit)
        return Found(span, Trace.from_spans([span], trace_id), None)

    async def _trace(self, trace_id: str, ctx: CallContext, start_s: int, end_s: int) -> Trace | None:
        """A trace by ID: from the span cache (a big trace the Tempo mount served is parsed now, in a thread), else
        from Tempo — fetched once however many clicks ask for its spans at the same time, and remembered in the
        span cache: the next click on any of its spans in this process asks nobody. The fetch itself puts it there
        (``_load_or_fetch``), before its waiters are told: a click that comes between the fetch finishing and the
        waiters resuming finds it cached instead of starting a second fetch."""
        held = self.span_cache.get_trace(ctx.cache_scope, trace_id)
        if held is not None:
            return held
        key = (ctx.cache_scope, trace_id)
        pending = self._trace_fetches.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load_or_fetch(trace_id, ctx, start_s, end_s))
            self._trace_fetches[key] = pending
            pending.add_done_callback(lambda done: self._fetched(key, done))
        try:
            trace = await asyncio.wait_for(asyncio.shield(pending), timeout=ctx.deadline.remaining())
        except TimeoutError as exc:
            raise UpstreamTimeout("tempo", f"trace {trace_id}: not fetched within the request's budget") from exc
        return trace

    async def _load_or_fetch(self, trace_id: str, ctx: CallContext, start_s: int, end_s: int) -> Trace | None:
        trace: Trace | None = None
        load = self.span_cache.pending(ctx.cache_scope, trace_id)
        if load is not None:
            try:
                trace = await asyncio.to_thread(load)
            except Exception as exc:  # noqa: BLE001 - the held bytes did not parse: Tempo answers instead
                log.warning("trace %s: the span cache's copy could not be read (%s); asking Tempo", trace_id, exc)
        if trace is None:
            trace = await self.traces.trace_by_id(trace_id, ctx, start_s, end_s)
        if trace is not None and len(trace):
            self.span_cache.put_trace(ctx.cache_scope, trace)
        return trace

    def _fetched(self, key: tuple[str, str], done: asyncio.Future[Trace | None]) -> None:
        self._trace_fetches.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: a failure every waiter gave up on is not reported again as unretrieved

    def _search_range(self, start_ms: int | None, end_ms: int | None) -> tuple[int, int]:
        if start_ms and end_ms and end_ms >= start_ms:
            return start_ms // 1000, math.ceil(end_ms / 1000)
        now = int(self.clock())
        return now - DEFAULT_SEARCH_SPAN_S, now + 60
