"""Rollups: each series' per-stack totals per minute, 10 minutes, hour and 6 hours, so a merge over a long window reads
a few pre-added rows per stack instead of every profile's.

- Compaction (``compact_step``) runs in the background on the writer thread. Per level it keeps a watermark: every
  bucket of that level that ends at or before it holds the exact sum of every profile whose capture start lies in the
  bucket. The minute level adds up ``profile_stacks``; each coarser level adds up the level below. A watermark
  advances to whole buckets that ended ``GRACE_NS`` ago by the store's clock, a bounded slice per transaction.
- A profile that arrives for a bucket already compacted (``add_late``) is added to that bucket in the same transaction
  that stores it, so a bucket below its watermark is always complete.
- Retention drops everything before a time and records it (``retained_from``); a bucket that starts before it is
  dropped whole, and a query never reads one (``plan`` only uses buckets that lie wholly inside its window, which
  starts at ``retained_from`` at the earliest).
- ``plan`` covers a query window with the coarsest buckets that fit wholly inside it and below their watermark, and
  raw profiles for the rest: the answer is exactly the sum over the profiles, read from far fewer rows.

Sums saturate at ±(2^63 − 1) instead of overflowing SQLite's int64 ``SUM`` (a merge that reaches the bound is refused
with a clear error in ``profiles``, never a wrong number); stored values are bounded at ingest
(``decode.MAX_SAMPLE_VALUE``), so only over a thousand profiles at the bound can reach it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from bridge.store.schema import LINK_BUCKETS, present_buckets

NANOS: Final = 1_000_000_000
LEVELS: Final = (60, 600, 3600, 21600)  # bucket widths in seconds, finest first; each divides the next
GRACE_NS: Final = 60 * NANOS  # a bucket is compacted once it ended this long ago (most late uploads are in by then)
SLICE_NS: Final = {60: 5 * 60 * NANOS, 600: 60 * 60 * NANOS, 3600: 6 * 3600 * NANOS, 21600: 24 * 3600 * NANOS}
INT64_MAX: Final = 2**63 - 1
LINK_BUCKET_NS: Final = 600 * NANOS  # span_profiles / trace_profiles bucket: 10 minutes

SATURATING_ADD: Final = (
    "value = CASE "
    f"WHEN excluded.value > 0 AND value > {INT64_MAX} - excluded.value THEN {INT64_MAX} "
    f"WHEN excluded.value < 0 AND value < -{INT64_MAX} - excluded.value THEN -{INT64_MAX} "
    "ELSE value + excluded.value END"
)
UPSERT: Final = (
    "INSERT INTO rollups (level, series_id, bucket, stack_id, value) VALUES (?, ?, ?, ?, ?) "
    f"ON CONFLICT (level, series_id, bucket, stack_id) DO UPDATE SET {SATURATING_ADD}"
)


def link_bucket(time_ns: int) -> int:
    """The ``bucket`` column of ``span_profiles`` / ``trace_profiles``: SQLite's integer division (toward zero)."""
    return time_ns // LINK_BUCKET_NS if time_ns >= 0 else -((-time_ns) // LINK_BUCKET_NS)


def link_buckets(conn: sqlite3.Connection, lo: int, hi: int) -> str:
    """The ``span_profiles`` / ``trace_profiles`` buckets that hold profiles captured in ``[lo, hi)``, as a JSON
    list (``present_buckets``: only those, whatever the gaps between them)."""
    return present_buckets(conn, LINK_BUCKETS, link_bucket(max(0, lo)), link_bucket(max(1, hi) - 1))


def bucket_of(time_ns: int, level: int) -> int:
    size = level * NANOS
    return time_ns - time_ns % size


def watermark_key(level: int) -> str:
    return f"rollup_until_{level}"


RETAINED_FROM: Final = "retained_from"


def read_state(conn: sqlite3.Connection) -> dict[str, int]:
    return {key: int(value) for key, value in conn.execute("SELECT key, value FROM store_state")}


def write_state(conn: sqlite3.Connection, key: str, value: int) -> None:
    conn.execute(
        "INSERT INTO store_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def watermarks(state: Mapping[str, int]) -> dict[int, int]:
    return {level: state.get(watermark_key(level), 0) for level in LEVELS}


# --------------------------------------------------------------------------------------------- planning (pure)


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of a query window: raw profiles (``level`` 0) with capture start in ``[start, end)``, or the rollup
    buckets of ``level`` seconds starting in ``[start, end)``."""

    level: int
    start: int
    end: int


def plan(lo: int, hi: int, marks: Mapping[int, int], retained_from: int = 0) -> list[Segment]:
    """Cover ``[lo, hi)`` (ns) exactly: at each level, from the coarsest down, the run of whole buckets inside the
    window that start at or after ``retained_from`` and ended at or before the level's watermark; the rest with
    finer levels, and raw profiles last."""
    out: list[Segment] = []

    def cover(a: int, b: int, index: int) -> None:
        if a >= b:
            return
        if index < 0:
            out.append(Segment(0, a, b))
            return
        level = LEVELS[index]
        size = level * NANOS
        first = -(-max(a, retained_from) // size) * size  # first usable bucket start at or after a
        last = (min(b, marks.get(level, 0)) // size) * size  # end of the last whole, compacted bucket
        if first >= last:
            cover(a, b, index - 1)
            return
        cover(a, first, index - 1)
        out.append(Segment(level, first, last))
        cover(last, b, index - 1)

    cover(lo, hi, len(LEVELS) - 1)
    return out


def merge_rows(conn: sqlite3.Connection, series_json: str, window: tuple[int, int]) -> tuple[str, list[object]]:
    """SQL (and its parameters) for (stack_id, value) rows whose sum per stack is the merge of ``window`` for the
    series in ``series_json``: rollup buckets where they fit whole (``plan``), per-profile stack totals at the
    edges."""
    state = read_state(conn)
    arms: list[str] = []
    params: list[object] = []
    for seg in plan(window[0], window[1], watermarks(state), state.get(RETAINED_FROM, 0)):
        if seg.level == 0:
            arms.append(
                "SELECT stack_id, value FROM profile_stacks WHERE profile_id IN (SELECT id FROM profiles "
                "WHERE series_id IN (SELECT value FROM json_each(?)) AND time_ns >= ? AND time_ns < ?)"
            )
            params.extend((series_json, seg.start, seg.end))
        else:
            arms.append(
                "SELECT stack_id, value FROM rollups WHERE level = ? AND series_id IN (SELECT value FROM "
                "json_each(?)) AND bucket >= ? AND bucket < ?"
            )
            params.extend((seg.level, series_json, seg.start, seg.end))
    if not arms:
        return "SELECT 0 AS stack_id, 0 AS value WHERE false", []
    return " UNION ALL ".join(arms), params


# --------------------------------------------------------------------------------------------- writes (writer thread)


def _is_overflow(exc: sqlite3.Error) -> bool:
    return "integer overflow" in str(exc)


def _saturate(value: int) -> int:
    return max(-INT64_MAX, min(INT64_MAX, value))


def _insert_sums(conn: sqlite3.Connection, keys: str, value: str, source: str, params: tuple[object, ...]) -> None:
    """``SELECT keys, SUM(value) FROM source GROUP BY keys`` added into ``rollups`` (``keys``: level, series id,
    bucket, stack id). Where SQLite's ``SUM`` overflows, the same rows are added up here instead, saturating."""
    try:
        conn.execute(
            "INSERT INTO rollups (level, series_id, bucket, stack_id, value) "
            f"SELECT {keys}, SUM({value}) FROM {source} GROUP BY 1, 2, 3, 4 "
            f"ON CONFLICT (level, series_id, bucket, stack_id) DO UPDATE SET {SATURATING_ADD}",
            params,
        )
    except sqlite3.OperationalError as exc:
        if not _is_overflow(exc):
            raise
        sums: dict[tuple[int, int, int, int], int] = {}
        for level, series_id, bucket, stack_id, v in conn.execute(f"SELECT {keys}, {value} FROM {source}", params):
            key = (level, series_id, bucket, stack_id)
            sums[key] = sums.get(key, 0) + v
        conn.executemany(UPSERT, [(*key, _saturate(v)) for key, v in sums.items()])


def _fill(conn: sqlite3.Connection, level: int, start: int, end: int) -> None:
    """Add the buckets of ``level`` in ``[start, end)`` (whole buckets) from the level below."""
    size = level * NANOS
    index = LEVELS.index(level)
    if index == 0:
        _insert_sums(
            conn,
            f"{level}, p.series_id, p.time_ns - p.time_ns % {size}, ps.stack_id",
            "ps.value",
            "profiles AS p JOIN profile_stacks AS ps ON ps.profile_id = p.id WHERE p.time_ns >= ? AND p.time_ns < ?",
            (start, end),
        )
    else:
        _insert_sums(
            conn,
            f"{level}, series_id, bucket - bucket % {size}, stack_id",
            "value",
            "rollups WHERE level = ? AND series_id IN (SELECT id FROM series) AND bucket >= ? AND bucket < ?",
            (LEVELS[index - 1], start, end),
        )


def _next_data(conn: sqlite3.Connection, after: int) -> int | None:
    row = conn.execute("SELECT min(time_ns) FROM profiles WHERE time_ns >= ?", (after,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def compact_step(conn: sqlite3.Connection, now_ns: int, marks: dict[int, int]) -> bool:
    """One slice of compaction (inside the caller's transaction): the lowest level that is behind advances by up to
    ``SLICE_NS``. Updates ``marks`` and ``store_state``; returns False when every level is caught up."""
    for index, level in enumerate(LEVELS):
        size = level * NANOS
        limit = ((now_ns - GRACE_NS) // size) * size
        if index > 0:
            below = LEVELS[index - 1]
            limit = min(limit, (marks[below] // size) * size)
        mark = marks[level]
        if mark >= limit:
            continue
        start = mark
        first = _next_data(conn, start)
        if first is None or first >= limit:
            end = limit  # nothing stored in between: jump
        else:
            start = max(start, (first // size) * size)
            end = min(limit, start + max(SLICE_NS[level], size))
            _fill(conn, level, start, end)
        write_state(conn, watermark_key(level), end)
        marks[level] = end
        return True
    return False


def add_late(
    conn: sqlite3.Connection, marks: Mapping[int, int], series_id: int, time_ns: int, per_stack: Mapping[int, int]
) -> None:
    """A profile stored for time already compacted at some levels: add its stack totals to those levels' buckets."""
    for level in LEVELS:
        if time_ns >= marks.get(level, 0):
            break  # coarser levels have lower watermarks
        bucket = bucket_of(time_ns, level)
        conn.executemany(UPSERT, [(level, series_id, bucket, stack, value) for stack, value in per_stack.items()])


def drop_before(conn: sqlite3.Connection, cutoff_ns: int) -> None:
    """Retention: every bucket that starts before ``cutoff_ns`` (it held data that is gone); remember the cutoff."""
    for level in LEVELS:
        conn.execute(
            "DELETE FROM rollups WHERE level = ? AND series_id IN (SELECT id FROM series) AND bucket < ?",
            (level, cutoff_ns),
        )
    state = read_state(conn)
    if cutoff_ns > state.get(RETAINED_FROM, 0):
        write_state(conn, RETAINED_FROM, cutoff_ns)
