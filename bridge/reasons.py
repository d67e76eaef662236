"""The words of a resolution: each step's reason, shown on the flame graph's root bar and in
``X-Profile-Bridge-Reason``. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from bridge.spans import Span
from bridge.timewindow import STAMP_WORDS, Stamp


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
