"""What the store's rollups must hold, added up by the tests from the rows they summarise: used where a store is
rebuilt from what a damaged file still holds (``store repair``), whose rollups are made again, not copied."""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path
from typing import Any

DERIVED = ("rollups", "span_totals", "span_minutes")  # rebuilt from the rows kept after salvage, not copied
MINUTE_NS = 60_000_000_000


def without_watermarks(table: str, rows: collections.Counter[tuple[Any, ...]]) -> collections.Counter[tuple[Any, ...]]:
    """``store_state``'s rows but the stack rollups' watermarks (emptied with the rollups); other tables as they are."""
    if table != "store_state":
        return rows
    return collections.Counter({r: n for r, n in rows.items() if not str(r[0]).startswith("rollup_until_")})


def assert_rollups_agree_with_the_rows_kept(path: Path) -> None:
    """No stack rollup (nor watermark) left to disagree with the profiles kept, and the per-span rollups exactly what
    this adds up from the samples kept: a span's row per series and minute, crossing when the span has another row
    within a minute, the solo rows counted and added up per series and minute."""
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM rollups").fetchone() == (0,)
        assert not conn.execute("SELECT key FROM store_state WHERE key LIKE 'rollup_until_%'").fetchall()
        sums: collections.Counter[tuple[int, int, int]] = collections.Counter()
        for time_ns, span, series, value in conn.execute(
            "SELECT p.time_ns, s.span_id, p.series_id, s.value FROM samples AS s JOIN profiles AS p "
            "ON p.id = s.profile_id WHERE s.span_id IS NOT NULL"
        ):
            sums[(time_ns // MINUTE_NS, span, series)] += value
        assert sums, "the samples kept carry span ids"
        rows = {(b, span, series): (value, bool(c)) for b, span, series, value, c in conn.execute(
            "SELECT bucket, span_id, series_id, value, crossing FROM span_totals")}  # fmt: skip
        solo: collections.Counter[tuple[int, int]] = collections.Counter()
        counts: collections.Counter[tuple[int, int]] = collections.Counter()
        for (b, span, series), value in sums.items():
            crossing = any(k != (b, span, series) and k[1] == span and abs(k[0] - b) <= 1 for k in sums)
            assert rows.pop((b, span, series), None) == (value, crossing), (b, span, series)
            if not crossing:
                solo[(series, b)] += value
                counts[(series, b)] += 1
        assert not rows, f"rows with no samples behind them: {list(rows)[:5]}"
        minutes = {(sid, b): (n, v) for sid, b, n, v in conn.execute("SELECT * FROM span_minutes")}
        assert minutes == {key: (counts[key], value) for key, value in solo.items()}
