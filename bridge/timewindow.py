"""The time-window step's pure geometry: which series a span's samples are in (``labels_of``), where each SDK
stamps its profiles (``Stamp``, from ``pyroscope_spy``), which capture windows overlap a span and what they cover,
and which profile types stand in for an asked CPU type the service does not upload (``cpu_equivalents``)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from bridge.profiletype import BadProfileType, ProfileType
from bridge.spans import SERVICE_NAME, Span


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
