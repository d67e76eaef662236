"""Per-span rollups: each span's linked value per series and minute (``span_totals``, schema 11), and per series and
minute the count and value of the spans that need no other row (``span_minutes``) — what lets the function → spans
query rank the spans of a long range without reading their samples (``bridge.store.functions``).

- Ingest (``add_profile``, in the profile's transaction): a profile's span samples summed per span into the row of
  its series and minute (the minute of the capture start, ``time_ns // 60 s``).
- A row is *crossing* when its span has another row within a minute either side (the same minute in another
  series, the minute before or after in any series): such a span's value over a range is the sum of several rows,
  so the query adds its rows up; every other row is the whole of its span within two minutes, and is *solo*:
  counted, and its value added, in ``span_minutes``. A row turns crossing when a neighbour arrives (either order:
  late uploads are checked both ways), and leaves the solo counts then.
- A span with rows more than a minute apart and nothing between (a long span idle for minutes) is two solo rows:
  counted twice in the query's "more spans", and ranked by the parts the query reads — measured whole once it makes
  the list, but missed when each part alone falls below the list's smallest value and only their sum would not.
- Retention (``drop_before``) drops every minute that starts before what it dropped, as the rollups do; a query
  reads the minutes before ``retained_from`` from the samples.
- ``store repair``, when it salvaged a table page by page, fills both tables again from the samples it kept
  (``rebuild``, the statements migration 11 ran): they then agree with the rows the sample pass reads.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bridge.store.schema import SPAN_TOTALS_FILL

MINUTE_NS: Final = 60_000_000_000


def minute_of(time_ns: int) -> int:
    return time_ns // MINUTE_NS


def add_profile(conn: sqlite3.Connection, series_id: int, time_ns: int, per_span: Mapping[int, Sequence[Any]]) -> None:
    """A stored profile's span samples, added up per span (span → (value, a trace id or None)), into the span
    rollups (writer thread)."""
    if not per_span:
        return
    minute = minute_of(time_ns)
    spans = json.dumps(sorted(per_span))
    near: dict[int, list[tuple[int, int, int, int]]] = {}  # span → its rows within a minute: (minute, series, …)
    for b, span, sid, value, crossing in conn.execute(
        # three keys per span: the primary key is searched, not the minutes' every row
        "SELECT bucket, span_id, series_id, value, crossing FROM span_totals WHERE bucket IN (?, ?, ?) "
        "AND span_id IN (SELECT value FROM json_each(?))",
        (minute - 1, minute, minute + 1, spans),
    ):
        near.setdefault(span, []).append((b, sid, value, crossing))
    solo: dict[tuple[int, int], list[int]] = {}  # (series, minute) → [count delta, value delta]

    def count(sid: int, b: int, spans_delta: int, value_delta: int) -> None:
        entry = solo.setdefault((sid, b), [0, 0])
        entry[0] += spans_delta
        entry[1] += value_delta

    added: list[tuple[int, int, int, int, bytes | None, int]] = []
    grown: list[tuple[int, bytes | None, int, int, int]] = []
    crossed: list[tuple[int, int, int]] = []
    for span, (value, trace) in per_span.items():
        rows_near = near.get(span, [])
        own = next((r for r in rows_near if r[0] == minute and r[1] == series_id), None)
        if own is not None:
            grown.append((value, trace, minute, span, series_id))
            if not own[3]:
                count(series_id, minute, 0, value)
            continue
        added.append((minute, span, series_id, value, trace, 1 if rows_near else 0))
        if not rows_near:
            count(series_id, minute, 1, value)
        for b, sid, other_value, other_crossing in rows_near:
            if not other_crossing:
                crossed.append((b, span, sid))
                count(sid, b, -1, -other_value)
    conn.executemany(
        "INSERT INTO span_totals (bucket, span_id, series_id, value, trace_id, crossing) VALUES (?, ?, ?, ?, ?, ?)",
        added,
    )
    conn.executemany(
        "UPDATE span_totals SET value = value + ?, trace_id = coalesce(trace_id, ?) "
        "WHERE bucket = ? AND span_id = ? AND series_id = ?",
        grown,
    )
    conn.executemany("UPDATE span_totals SET crossing = 1 WHERE bucket = ? AND span_id = ? AND series_id = ?", crossed)
    conn.executemany(
        "INSERT INTO span_minutes (series_id, bucket, solo, solo_value) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (series_id, bucket) DO UPDATE SET solo = solo + excluded.solo, "
        "solo_value = solo_value + excluded.solo_value",
        [(sid, b, n, v) for (sid, b), (n, v) in solo.items()],
    )


def drop_before(conn: sqlite3.Connection, cutoff_ns: int) -> None:
    """Retention: every minute that starts before ``cutoff_ns`` (some of its data is gone)."""
    first_kept = -(-cutoff_ns // MINUTE_NS)
    conn.execute("DELETE FROM span_totals WHERE bucket < ?", (first_kept,))
    conn.execute("DELETE FROM span_minutes WHERE bucket < ?", (first_kept,))


def rebuild(conn: sqlite3.Connection) -> None:
    """Both tables again from the samples (``store repair``, after salvage)."""
    conn.execute("DELETE FROM span_totals")
    conn.execute("DELETE FROM span_minutes")
    for statement in SPAN_TOTALS_FILL:
        conn.execute(statement)


# --------------------------------------------------------------------------------------------- reads


def solo_totals(conn: sqlite3.Connection, series: Sequence[int], first: int, last: int) -> tuple[int, int]:
    """(spans, value) of the solo rows of ``series`` in minutes ``[first, last)``."""
    spans, value = conn.execute(
        "SELECT coalesce(sum(solo), 0), coalesce(sum(solo_value), 0) FROM span_minutes "
        "WHERE series_id IN (SELECT value FROM json_each(?)) AND bucket >= ? AND bucket < ?",
        (json.dumps(list(series)), first, last),
    ).fetchone()
    return int(spans), int(value)


def crossing_spans(
    conn: sqlite3.Connection, series: Sequence[int], first: int, last: int
) -> dict[int, tuple[int, bytes | None]]:
    """Span → (value, trace id) over minutes ``[first, last)`` of the spans with crossing rows there."""
    out: dict[int, tuple[int, bytes | None]] = {}
    for sid in series:
        for span, value, trace in conn.execute(
            "SELECT span_id, sum(value), max(trace_id) FROM span_totals INDEXED BY span_totals_rank "
            "WHERE series_id = ? AND crossing = 1 AND bucket >= ? AND bucket < ? GROUP BY span_id",
            (sid, first, last),
        ):
            prev = out.get(span)
            out[span] = (int(value) + (prev[0] if prev else 0), (prev[1] if prev else None) or trace)
    return out


CHUNK: Final = 100  # minutes per statement (SQLite allows 500 terms in a compound select)


def top_solo(
    conn: sqlite3.Connection, series: Sequence[int], first: int, last: int, per_minute: int, at_least: int = 0
) -> list[tuple[int, int]]:
    """The solo rows of each minute in ``[first, last)`` of ``series`` with the largest values: up to
    ``per_minute`` per minute, and of those only values of at least ``at_least`` — (value, span)."""
    out: list[tuple[int, int]] = []
    arm = (
        "SELECT * FROM (SELECT value, span_id FROM span_totals INDEXED BY span_totals_rank "
        "WHERE series_id = ? AND crossing = 0 AND bucket = ? AND value >= ? ORDER BY value DESC LIMIT ?)"
    )
    for sid in series:
        for lo in range(first, last, CHUNK):
            minutes = range(lo, min(last, lo + CHUNK))
            sql = " UNION ALL ".join([arm] * len(minutes))
            params: list[object] = []
            for m in minutes:
                params.extend((sid, m, at_least, per_minute))
            out.extend((int(v), int(span)) for v, span in conn.execute(sql, params))
    return out
