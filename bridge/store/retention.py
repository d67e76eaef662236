"""Retention: what the store drops to stay within its age and size budgets, and how much space it uses.

A pass runs on the writer thread: profiles and spans older than the cutoff go first (one transaction); then, while the
database is larger than its byte budget, the oldest tenth of the stored time span, profiles and spans alike (one
transaction each, at most 50). Rollup buckets that start before what was dropped go with it (``rollup.drop_before``).
Rows nothing refers to any more (stacks, series, resources, scopes) are collected after — each collection reads
whole tables, so at most once every ``GC_INTERVAL_NS`` of store time, or at once when the size budget made room —,
cached ids are forgotten, and the freed pages are returned to the file system.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Final

from bridge.store import rollup, span_totals
from bridge.store.database import Database
from bridge.store.functions import collect_garbage as collect_function_index
from bridge.store.schema import LINK_BUCKETS, SPAN_BUCKET_NS, SPAN_BUCKETS, drop_buckets_before

GC_INTERVAL_NS: Final = 3600 * 1_000_000_000
LAST_GC: Final = "last_gc"


@dataclass(slots=True)
class RetentionResult:
    profiles: int = 0
    spans: int = 0
    used_bytes: int = 0


async def enforce_retention(db: Database, cutoff_ns: int, max_bytes: int, now_ns: int) -> RetentionResult:
    """Drop everything stamped before ``cutoff_ns``, then the oldest data until at most ``max_bytes`` are used
    (tenths of the stored time up to ``now_ns``: data stamped in the future does not stretch a tenth)."""
    return await db.write(_retain, db, cutoff_ns, max_bytes, now_ns)


async def used_bytes(db: Database) -> int:
    """Bytes of the database's pages in use (free pages not counted)."""
    return await db.write(_used_bytes)


def _used_bytes(conn: sqlite3.Connection) -> int:
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * page_size)


def _delete_before(conn: sqlite3.Connection, profiles_before: int, spans_before: int) -> tuple[int, int]:
    for table in ("samples", "profile_stacks"):
        conn.execute(
            f"DELETE FROM {table} WHERE profile_id IN (SELECT id FROM profiles WHERE time_ns < ?)",
            (profiles_before,),
        )
    for table in ("span_profiles", "trace_profiles"):
        conn.execute(
            f"DELETE FROM {table} WHERE bucket <= ? AND profile_id IN (SELECT id FROM profiles WHERE time_ns < ?)",
            (rollup.link_bucket(profiles_before), profiles_before),
        )
    rollup.drop_before(conn, profiles_before)
    span_totals.drop_before(conn, profiles_before)
    drop_buckets_before(conn, LINK_BUCKETS, rollup.link_bucket(profiles_before))
    profiles = conn.execute("DELETE FROM profiles WHERE time_ns < ?", (profiles_before,)).rowcount
    spans = conn.execute("DELETE FROM spans WHERE start_ns < ?", (spans_before,)).rowcount
    drop_buckets_before(conn, SPAN_BUCKETS, spans_before // SPAN_BUCKET_NS)
    conn.execute("DELETE FROM tags WHERE last_ns < ?", (spans_before,))
    return profiles, spans


def _retain(conn: sqlite3.Connection, db: Database, cutoff_ns: int, max_bytes: int, now_ns: int) -> RetentionResult:
    result = RetentionResult()
    by_size = False

    def by_age(c: sqlite3.Connection) -> None:
        p, s = _delete_before(c, cutoff_ns, cutoff_ns)
        result.profiles += p
        result.spans += s

    db.transaction(by_age)
    for _ in range(50):
        if _used_bytes(conn) <= max_bytes:
            break

        def oldest_tenth(c: sqlite3.Connection) -> bool:
            """Drop the oldest tenth of the stored time span, profiles and spans alike."""
            p_lo, p_hi = c.execute("SELECT min(time_ns), max(time_ns) FROM profiles").fetchone()
            s_lo, s_hi = c.execute("SELECT min(start_ns), max(start_ns) FROM spans").fetchone()
            lows = [v for v in (p_lo, s_lo) if v is not None]
            highs = [v for v in (p_hi, s_hi) if v is not None]
            if not lows:
                return False
            # up to now: one upload stamped in 2199 would make a tenth decades long, all of today's data
            lo = min(lows)
            hi = max(lo, min(max(highs), now_ns))
            cut = lo + max(1, (hi - lo) // 10)
            p, s = _delete_before(c, cut, cut)
            result.profiles += p
            result.spans += s
            return bool(p or s)

        if not db.transaction(oldest_tenth):
            break
        by_size = True
    if result.profiles or result.spans:
        last_gc = rollup.read_state(conn).get(LAST_GC)
        if by_size or last_gc is None or cutoff_ns - last_gc >= GC_INTERVAL_NS or cutoff_ns < last_gc:

            def collect(c: sqlite3.Connection) -> None:
                _collect_garbage(c)
                rollup.write_state(c, LAST_GC, cutoff_ns)

            db.transaction(collect)
            db.forget_ids()
        # stepped to the end, or it frees one page only (Cursor.execute steps a statement once)
        conn.executescript("PRAGMA incremental_vacuum;")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    result.used_bytes = _used_bytes(conn)
    return result


def _collect_garbage(conn: sqlite3.Connection) -> None:
    """Drop rows nothing refers to any more: stacks, series, resources, scopes."""
    conn.execute(
        "DELETE FROM stacks WHERE id NOT IN (SELECT stack_id FROM profile_stacks UNION SELECT stack_id FROM rollups)"
    )
    collect_function_index(conn)
    conn.execute("DELETE FROM series WHERE id NOT IN (SELECT DISTINCT series_id FROM profiles)")
    conn.execute("DELETE FROM resources WHERE id NOT IN (SELECT DISTINCT resource_id FROM spans)")
    conn.execute("DELETE FROM scopes WHERE id NOT IN (SELECT DISTINCT scope_id FROM spans)")
