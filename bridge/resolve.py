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

The decisions are pure functions (``clean_span_ids``, ``parse_selector``, ``merge_selector``, ``window_of``,
``labels_of``, ``stamp_of``, ``cpu_equivalents``, ``stamp_window``, the ``*_reason`` texts); ``Resolver.resolve``
is the one coroutine that does I/O.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from cachetools import TTLCache

from bridge import flamegraph, ids
from bridge._proto import querier_pb2
from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import InvalidArgument, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.profiletype import PROFILE_TYPE_LABEL, BadProfileType, ProfileType
from bridge.samplers import Samplers
from bridge.sampling import Sampling, quantity_of, sampling_of
from bridge.selector import merge_selector
from bridge.sources import PeriodSource, ProfileSource, TraceSource
from bridge.spancache import SpanCache
from bridge.spans import SERVICE_NAME, SearchHit, Span, Trace

log = logging.getLogger("bridge.resolve")

GRAFANA_UNRESOLVED_HINT: Final = '${__span.tags["pyroscope.profile.id"]}'
LOOKUP_CACHE: Final = "span_lookups"
# when a caller gives no time range, search this far back (Tempo allows up to 168 h per search)
DEFAULT_SEARCH_SPAN_S: Final = 24 * 3600
# the time-window step reads profile stamps this far around a span (at least four configured capture windows)
LOOKAROUND_MS: Final = 300_000
TYPES_BUCKET_MS: Final = 900_000
TYPES_CACHE_SIZE: Final = 4096
TYPES_CACHE_TTL_S: Final = 300.0


class Mode(enum.StrEnum):
    LINKED = "linked"
    LOCAL_ROOT = "local-root"
    TIME_WINDOW = "time-window"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class SpanQuery:
    span_ids: tuple[str, ...]  # raw selector entries as received (the resolver cleans them)
    profile_type: str
    label_selector: str  # e.g. '{service_name="shop-backend"}' or '{}'
    start_ms: int
    end_ms: int
    max_nodes: int | None = None
    trace_id: str | None = None  # when the caller knows it (API/pages): skips the search


@dataclass(frozen=True, slots=True)
class Resolution:
    mode: Mode
    reason: str  # human text, also the root bar suffix; header gets an ASCII form
    flamegraph: querier_pb2.FlameGraph  # final answer, root already relabelled for non-linked modes
    span: Span | None  # the span, when found
    local_root: Span | None  # its local root, when found
    window_ms: tuple[int, int] | None  # the time window queried (time-window mode)
    label_selector: str  # the selector actually used for the answer
    span_ids: tuple[str, ...]  # the span ids whose samples answered (linked/local-root)
    # the wall-clock time the answer's samples were taken in (whole capture windows; time-window mode)
    covered_ms: tuple[int, int] | None = None
    # the total as a count of samples, and what the samples measure (``bridge.sampling``); None for ``none``
    sampling: Sampling | None = None
    answered_type: str = ""  # the profile type that answered, when not the asked one (a CPU equivalent)

    @property
    def reason_header(self) -> str:
        return ascii_header(self.reason)


# --------------------------------------------------------------------------------------------- pure decisions


def clean_span_ids(raw: Iterable[str]) -> tuple[str, ...]:
    """Keep entries that are 16 hex characters, or the Tempo mount's ``<span id>:<trace id>`` (``bridge.ids``), as
    span ids (lower-cased, first occurrence wins): what goes on to Pyroscope is 16 hex only. Nothing valid left →
    ``InvalidArgument`` saying what to fix; an empty selector is never sent on (Pyroscope would match everything)."""
    seen: dict[str, None] = {}
    dropped: list[str] = []
    for entry in raw:
        parsed = ids.selector_entry(entry)
        if parsed is None:
            dropped.append(entry)
        else:
            seen.setdefault(parsed[0], None)
    if seen:
        return tuple(seen)
    if any("${" in d or "__span" in d for d in dropped):
        raise InvalidArgument(
            f"span selector {dropped!r} holds an unresolved Grafana variable: the span has no "
            f"pyroscope.profile.id attribute, so Grafana sent {GRAFANA_UNRESOLVED_HINT} literally. Point Grafana's "
            "Tempo data source at the bridge's /tempo mount (it adds the attribute to every span), or send the "
            "span's 16-hex-character id"
        )
    if dropped:
        raise InvalidArgument(
            f"span selector {dropped!r} has no valid span id: each entry must be 16 hex characters, "
            f"e.g. 7f80395fd15dcdc9, or the bridge's SPAN:TRACE form (Grafana sends {GRAFANA_UNRESOLVED_HINT} "
            "unresolved for a span without that "
            "attribute: point its Tempo data source at the bridge's /tempo mount)"
        )
    raise InvalidArgument(
        "span selector is empty: give at least one 16-hex-character span id (an empty selector would match "
        "every sample)"
    )


def carried_traces(raw: Iterable[str]) -> dict[str, str]:
    """Span id → trace id for the selector entries that carry their trace (``<span id>:<trace id>``, what the Tempo
    mount writes into ``pyroscope.profile.id``); the first one wins."""
    out: dict[str, str] = {}
    for entry in raw:
        parsed = ids.selector_entry(entry)
        if parsed is not None and parsed[1] is not None:
            out.setdefault(parsed[0], parsed[1])
    return out


def labels_of(span: Span, label_map: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Profile labels for ``span``'s resource attributes, via ``label_map`` (attribute → label)."""
    out: list[tuple[str, str]] = []
    for attr, label in label_map:
        value = span.resource_value(attr)
        if value is None and attr == SERVICE_NAME:
            value = span.service or None
        if value:
            out.append((label, value))
    return out


def window_of(span: Span, capture_window: float, clock_skew: float) -> tuple[int, int]:
    """``[span start − capture window − skew, span end + skew]`` in ms: every profile whose capture window
    overlaps the span is stamped inside it (a profile's one timestamp is the start of its window)."""
    start_ms = span.start_ns // 1_000_000 - int(round((capture_window + clock_skew) * 1000))
    end_ms = -(-span.end_ns // 1_000_000) + int(round(clock_skew * 1000))
    return max(0, start_ms), end_ms


class Stamp(enum.StrEnum):
    """Where a service's profiles carry their one timestamp within their capture window."""

    START = "start"  # pyroscope-io, the Go SDK, OTLP, Push, the bridge's own store
    END = "end"  # @pyroscope/nodejs (@datadog/pprof stamps a profile when it serialises it)
    EITHER = "either"  # not known: look on both sides


SPY_LABEL: Final = "pyroscope_spy"
# pyroscope_spy (the /ingest spyName) → where that SDK stamps its profiles (docs/contracts/pyroscope-ingest.md)
SPY_STAMPS: Final[Mapping[str, Stamp]] = {
    "nodespy": Stamp.END,
    "gospy": Stamp.START,
    "pyspy": Stamp.START,
    "rbspy": Stamp.START,
    "phpspy": Stamp.START,
    "dotnetspy": Stamp.START,
    "javaspy": Stamp.START,
    "grafana-agent.java": Stamp.START,
    "pyroscope-rs": Stamp.START,
    "ebpfspy": Stamp.START,
}
STAMP_WORDS: Final[Mapping[Stamp, str]] = {
    Stamp.START: "at the start of their capture windows",
    Stamp.END: "at the end of their capture windows",
    Stamp.EITHER: "at the start or the end of their capture windows",
}
STEP_MS: Final = 100  # resolution of the profile stamps the time-window step reads (SelectSeries step)


def stamp_of(spies: Iterable[str]) -> Stamp:
    """Where a service's profiles are stamped, from its ``pyroscope_spy`` values. No value at all (Push, OTLP)
    means start; an unknown spy, or spies that disagree, mean either."""
    stamps = {SPY_STAMPS.get(spy, Stamp.EITHER) for spy in spies if spy}
    if not stamps:
        return Stamp.START
    return stamps.pop() if len(stamps) == 1 else Stamp.EITHER


def cpu_equivalents(asked: str, available: Iterable[str]) -> tuple[str, ...]:
    """The profile types to answer ``asked`` from, best first: ``asked`` itself when the service has it, then every
    type it has with the same sample type and unit (``process_cpu:cpu:nanoseconds:wall:nanoseconds`` holds the same CPU
    nanoseconds as ``process_cpu:cpu:nanoseconds:cpu:nanoseconds``) — same name first, then same period, then by
    id. Nothing known about the service → just ``asked``."""
    have = set(available)
    if not have:
        return (asked,)
    try:
        want = ProfileType.parse(asked)
    except BadProfileType:
        return (asked,)
    ranked: list[tuple[int, int, str]] = []
    for type_id in have - {asked}:
        try:
            other = ProfileType.parse(type_id)
        except BadProfileType:
            continue
        if (other.sample_type, other.sample_unit) != (want.sample_type, want.sample_unit):
            continue
        same_period = (other.period_type, other.period_unit) == (want.period_type, want.period_unit)
        ranked.append((other.name != want.name, not same_period, type_id))
    head = (asked,) if asked in have or not ranked else ()
    return head + tuple(type_id for *_, type_id in sorted(ranked))


def typical_window_ms(stamps_ms: Sequence[int], fallback_ms: int) -> int:
    """A service's capture window length, from the spacing of its profile stamps (the median gap); one stamp or
    none → ``fallback_ms`` (the configured capture window)."""
    gaps = sorted(b - a for a, b in zip(stamps_ms, stamps_ms[1:], strict=False) if b > a)
    return gaps[len(gaps) // 2] if gaps else fallback_ms


def overlapping_stamps(
    span_ms: tuple[int, int],
    stamps_ms: Sequence[int],
    stamp: Stamp,
    length_ms: int,
    skew_ms: int,
    step_ms: int = STEP_MS,
) -> list[int]:
    """The stamps (step starts, sorted) of the capture windows that overlap the span. A start stamp ``t`` covers
    ``[t, t + len]``, an end stamp ``[t − len, t]``, ``len`` being the gap to the neighbouring stamp but at most
    ``length_ms``; a stamp is known to ``step_ms``."""
    start, end = span_ms[0] - skew_ms, span_ms[1] + skew_ms
    out: list[int] = []
    for i, t in enumerate(stamps_ms):
        hit = False
        if stamp in (Stamp.START, Stamp.EITHER):
            after = stamps_ms[i + 1] - t if i + 1 < len(stamps_ms) else length_ms
            hit = t <= end and t + step_ms + min(after, length_ms) >= start
        if stamp in (Stamp.END, Stamp.EITHER) and not hit:
            before = t - stamps_ms[i - 1] if i > 0 else length_ms
            hit = t + step_ms >= start and t - min(before, length_ms) <= end
        if hit:
            out.append(t)
    return out


def stamp_window(
    span_ms: tuple[int, int],
    stamps_ms: Sequence[int],
    stamp: Stamp,
    length_ms: int,
    skew_ms: int,
    step_ms: int = STEP_MS,
) -> tuple[int, int] | None:
    """The query range ``[start, end]`` (ms, inclusive, as Pyroscope selects by stamp) that takes every capture window
    overlapping the span and no neighbouring one: from the first overlapping stamp to the last, widened by the
    skew but never onto the stamp before or after. None when no window overlaps."""
    hits = overlapping_stamps(span_ms, stamps_ms, stamp, length_ms, skew_ms, step_ms)
    if not hits:
        return None
    first, last = hits[0], hits[-1]
    pad = skew_ms + step_ms
    before = [t for t in stamps_ms if t < first]
    after = [t for t in stamps_ms if t > last]
    lo = max(first - pad, before[-1] + step_ms if before else first - pad)
    hi = min(last + step_ms + pad, after[0] - 1 if after else last + step_ms + pad)
    return max(0, min(lo, first)), max(hi, last + step_ms - 1)


def covered_by(window: tuple[int, int], stamps_ms: Sequence[int], stamp: Stamp, length_ms: int) -> tuple[int, int]:
    """Pure: the wall-clock time the samples of the profiles stamped in ``window`` were taken in — their whole capture
    windows (a start stamp ``t`` covers ``[t, t + len]``, an end stamp ``[t − len, t]``). With no stamps to go by,
    every stamp the window may hold."""
    inside = [t for t in stamps_ms if window[0] <= t <= window[1]] or [window[0], window[1]]
    lo, hi = min(inside), max(inside)
    if stamp is Stamp.START:
        return lo, hi + length_ms
    if stamp is Stamp.END:
        return max(0, lo - length_ms), hi
    return max(0, lo - length_ms), hi + length_ms


def stamp_free_window(span: Span, stamp: Stamp, capture_window: float, clock_skew: float) -> tuple[int, int]:
    """With no stamps to go by: ``window_of`` for start stamps, its mirror image for end stamps, both for either."""
    start_ms, end_ms = window_of(span, capture_window, clock_skew)
    if stamp is Stamp.START:
        return start_ms, end_ms
    widen = int(round(capture_window * 1000))
    return (start_ms + widen if stamp is Stamp.END else start_ms), end_ms + widen


def answered_from_text(type_id: str, service: str) -> str:
    return f"answered from {type_id}, the CPU type {service or 'the service'} uploads"


def stamped_text(stamp: Stamp, spies: Iterable[str]) -> str:
    named = ", ".join(sorted(s for s in spies if s and s != "unknown"))
    return f"{named or 'its SDK'} stamps profiles {STAMP_WORDS[stamp]}"


def clock_text(ns: int, with_ms: bool = True) -> str:
    t = datetime.fromtimestamp(ns / 1e9, UTC)
    return t.strftime("%H:%M:%S.%f")[:-3] if with_ms else t.strftime("%H:%M:%S")


def linked_reason(span_ids: Sequence[str]) -> str:
    return f"samples linked to span {', '.join(span_ids)}"


def local_root_reason(span: Span, root: Span) -> str:
    return f"local root {root.name} ({span.name}'s CPU is recorded under its local root span {root.span_id})"


def time_window_reason(span: Span, capture_window: float, why: str) -> str:
    return (
        f"time-window fallback: {why} ({span.name}, {span.service or 'unknown service'}, "
        f"{clock_text(span.start_ns)}–{clock_text(span.end_ns)} UTC, {capture_window:g} s capture windows)"
    )


def no_samples_why(span: Span, root: Span | None) -> str:
    if root is not None and root.span_id != span.span_id:
        return f"no samples linked to span {span.span_id} or its local root {root.span_id}"
    return f"no samples linked to span {span.span_id}"


def range_text(start_ms: int, end_ms: int) -> str:
    """``12:00:00 and 12:02:00 UTC``; with dates when the range is longer than a few hours."""
    if end_ms - start_ms <= 6 * 3600 * 1000:
        return f"{clock_text(start_ms * 1_000_000, False)} and {clock_text(end_ms * 1_000_000, False)} UTC"
    fmt = "%Y-%m-%d %H:%M:%S"
    start, end = (datetime.fromtimestamp(ms / 1000, UTC).strftime(fmt) for ms in (start_ms, end_ms))
    return f"{start} and {end} UTC"


def not_found_reason(span_ids: Sequence[str], start_ms: int, end_ms: int) -> str:
    return (
        f"span {', '.join(span_ids)} not found in Tempo between {range_text(start_ms, end_ms)}, and no samples "
        "are linked to it"
    )


def empty_window_reason(span: Span, root: Span | None, selector: str, window: tuple[int, int]) -> str:
    return (
        f"{no_samples_why(span, root)}, and no {selector} samples between "
        f"{clock_text(window[0] * 1_000_000)} and {clock_text(window[1] * 1_000_000)} UTC either"
    )


# --------------------------------------------------------------------------------------------- what a number measures

# modes whose samples belong to the span's request (its own process's local root), not to the whole service
REQUEST_MODES: Final = frozenset({Mode.LINKED, Mode.LOCAL_ROOT})


class Attribution(enum.StrEnum):
    """Whose cost a resolution's number is."""

    SPAN = "span"  # samples linked to the span itself
    REQUEST = "request"  # samples linked to its local root: the whole request in that process, children included
    SERVICE = "service"  # the service's samples during a time window: every request it served then
    NOTHING = "nothing"  # no samples


@dataclass(frozen=True, slots=True)
class Measure:
    """What the number of an answer is, said plainly: the headline of the page, the API and ``resolve``."""

    attribution: Attribution
    text: str  # e.g. "shop-frontend CPU during the 19 s window around this span, not this span's own"

    @property
    def own(self) -> bool:
        """True when the number is this span's own cost."""
        return self.attribution is Attribution.SPAN


def seconds_text(ms: int) -> str:
    seconds = ms / 1000
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def measure_of(res: Resolution, profile_type: str) -> Measure:
    """Pure: what ``res``'s flame graph total measures. Only ``linked`` is the span's own cost; ``local-root`` is its
    whole request in that process; ``time-window`` is its service's cost during a window, every request included.
    The quantity is what the SDK's samples are (``bridge.sampling``: "sampled on-GIL time"), else the type's."""
    what = res.sampling.measure if res.sampling is not None else quantity_of(profile_type)
    span, root = res.span, res.local_root
    service = (span.service if span is not None else "") or "its service"
    if res.mode is Mode.LINKED:
        target = "this span" if len(res.span_ids) <= 1 else "spans " + ", ".join(res.span_ids)
        return Measure(Attribution.SPAN, f"{what} linked to {target}")
    if res.mode is Mode.LOCAL_ROOT:
        name = f" {root.name}" if root is not None and root.name else ""
        return Measure(
            Attribution.REQUEST, f"{service} {what} of the whole request{name} (its local root), not this span's own"
        )
    covered = res.covered_ms or res.window_ms
    if res.mode is Mode.TIME_WINDOW and covered is not None:
        start, end = covered
        return Measure(
            Attribution.SERVICE,
            f"{service} {what} during the {seconds_text(end - start)} window around "
            f"this span ({clock_text(start * 1_000_000, False)}–"
            f"{clock_text(end * 1_000_000, False)} UTC), not this span's own",
        )
    return Measure(Attribution.NOTHING, f"no {what} samples")


# the headers every span answer carries (the /pyroscope mount and the API), all ASCII
RESOLUTION_HEADER: Final = "X-Profile-Bridge-Resolution"  # the mode
REASON_HEADER: Final = "X-Profile-Bridge-Reason"  # how it was found
ATTRIBUTION_HEADER: Final = "X-Profile-Bridge-Attribution"  # whose cost the total is: span, request, service, nothing
MEASURE_HEADER: Final = "X-Profile-Bridge-Measure"  # that in words
MAX_HEADER_TEXT: Final = 400


def answer_headers(res: Resolution, measure: Measure) -> dict[str, str]:
    return {
        RESOLUTION_HEADER: res.mode.value,
        REASON_HEADER: res.reason_header[:MAX_HEADER_TEXT],
        ATTRIBUTION_HEADER: measure.attribution.value,
        MEASURE_HEADER: ascii_header(measure.text)[:MAX_HEADER_TEXT],
    }


_ASCII: Final = str.maketrans({"—": "-", "–": "-", "…": "...", "’": "'", "‘": "'", "“": '"', "”": '"'})


def ascii_header(text: str) -> str:
    """A header-safe form of ``text``: ASCII, no control characters."""
    out = text.translate(_ASCII).encode("ascii", "replace").decode("ascii")
    return "".join(c if 32 <= ord(c) < 127 else " " for c in out)


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
        if resolution.mode is not Mode.NONE:
            resolution = await self._sampled(resolution, query, ctx)
        self.metrics.resolutions.labels(resolution.mode.value).inc()
        return resolution

    async def _sampled(self, res: Resolution, query: SpanQuery, ctx: CallContext) -> Resolution:
        """The answer's total as a count of samples (``bridge.sampling``), from what its profiles say: the SDK that
        uploaded them (``otel.scope.name`` / ``pyroscope_spy``) and, where kept, each profile's period."""
        type_id = res.answered_type or query.profile_type
        window = res.covered_ms or res.window_ms or (query.start_ms, query.end_ms)
        sdks, periods = await self.samplers.facts(type_id, res.label_selector or "{}", window, ctx)
        return replace(res, sampling=sampling_of(res.flamegraph, type_id, sdks, periods))

    async def _resolve(
        self, span_ids: tuple[str, ...], query: SpanQuery, ctx: CallContext, carried: Mapping[str, str]
    ) -> Resolution:
        selector = query.label_selector or "{}"
        fg = await self._linked(span_ids, query, ctx)
        if fg is not None and not flamegraph.is_empty(fg):
            return Resolution(Mode.LINKED, linked_reason(span_ids), fg, None, None, None, selector, span_ids)

        found = await self._first_found(span_ids, query, ctx, carried)
        if found is None:
            start_s, end_s = self._search_range(query.start_ms, query.end_ms)
            reason = not_found_reason(span_ids, start_s * 1000, end_s * 1000)
            empty = flamegraph.empty(flamegraph.root_label(reason))
            return Resolution(Mode.NONE, reason, empty, None, None, None, selector, ())

        span, root = found.span, found.local_root
        if root is not None and root.span_id not in span_ids:
            fg = await self._linked((root.span_id,), query, ctx)
            if fg is not None and not flamegraph.is_empty(fg):
                reason = local_root_reason(span, root)
                relabelled = flamegraph.relabel_root(fg, flamegraph.root_label(reason))
                return Resolution(Mode.LOCAL_ROOT, reason, relabelled, span, root, None, selector, (root.span_id,))

        used = merge_selector(selector, labels_of(span, self.settings.label_map))
        found_in = await self._time_window(span, query, used, ctx)
        window, fg = found_in.window, found_in.flamegraph
        if fg is not None:
            reason = time_window_reason(span, found_in.length_s, no_samples_why(span, root)) + found_in.note
            relabelled = flamegraph.relabel_root(fg, flamegraph.root_label(reason))
            return Resolution(
                Mode.TIME_WINDOW,
                reason,
                relabelled,
                span,
                root,
                window,
                used,
                (),
                found_in.covered,
                None,
                found_in.type_id,
            )
        reason = empty_window_reason(span, root, used, window)
        empty = flamegraph.empty(flamegraph.root_label(reason))
        return Resolution(Mode.NONE, reason, empty, span, root, window, used, ())

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
        look = (max(0, span_ms[0] - around), span_ms[1] + around)
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


__all__: Final = [
    "ATTRIBUTION_HEADER",
    "MEASURE_HEADER",
    "REASON_HEADER",
    "RESOLUTION_HEADER",
    "Attribution",
    "Found",
    "Measure",
    "Mode",
    "Resolution",
    "Resolver",
    "SpanQuery",
    "Stamp",
    "WindowAnswer",
    "answer_headers",
    "cpu_equivalents",
    "stamp_of",
    "stamp_window",
    "carried_traces",
    "clean_span_ids",
    "covered_by",
    "labels_of",
    "measure_of",
    "quantity_of",
    "window_of",
]
