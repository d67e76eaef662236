"""Pure: the times the bridge accepts from callers, and the size past which ingest decodes off the event loop.

Every time it keeps or computes with must fit a signed 64-bit count of nanoseconds since 1970 (SQLite's INTEGER,
protobuf's int64, Go's ``time.Time`` in Tempo and Pyroscope); anything from 1970 up to ``LATEST`` (2200-01-01) does,
with room to widen windows around it. A time outside is a clear 400, never a 500."""

from __future__ import annotations

from typing import Final

NANOS: Final = 1_000_000_000
LATEST_S: Final = 7_258_118_400  # 2200-01-01T00:00:00Z
LATEST_NS: Final = LATEST_S * NANOS
LATEST_MS: Final = LATEST_S * 1000
RANGE_TEXT: Final = "between 1970 and 2200"
# an ingest body (or a request decoded from it) at least this large is decoded on a worker thread, so one upload
# does not stall every other request on the event loop
DECODE_IN_THREAD_BYTES: Final = 256 * 1024


def unix_ns_ok(value: int) -> bool:
    return 0 <= value < LATEST_NS


def unix_ms_ok(value: int) -> bool:
    return 0 <= value < LATEST_MS


def time_range_problem(start_ms: int, end_ms: int, what: str = "start and end") -> str | None:
    """Why a query's ``[start_ms, end_ms]`` (Unix milliseconds) cannot be used, or None when it can."""
    if not (unix_ms_ok(start_ms) and unix_ms_ok(end_ms)):
        return f"{what} ({start_ms}, {end_ms}) must be Unix times in milliseconds {RANGE_TEXT}"
    if start_ms > end_ms:
        return f"{what} ({start_ms}, {end_ms}): start is after end"
    return None
