"""The store's SQLite schema as numbered migrations, applied in order inside one transaction each.

``schema_version`` holds one row: the number of migrations applied. A database written by an older bridge is brought
up to date when it is opened; one written by a newer bridge is refused (its schema is unknown here).

Layout (ids are integers; span ids are stored as signed 64-bit integers, trace ids as 16-byte blobs):

- traces: ``resources`` / ``scopes`` hold each distinct OTLP Resource / InstrumentationScope (with its schema URL) as
  the original protobuf bytes; ``spans`` holds each span's original protobuf bytes plus the columns queries need
  (since 6, its trace and span id indexes lead with the span's 10-minute bucket: lookups probe the buckets that
  hold spans).
  ``tags`` remembers attribute keys and values (typed since 10) and intrinsic values for the tag endpoints.
- profiles: ``functions`` (de-duplicated names), ``stacks`` (de-duplicated sequences of function ids, root first,
  packed as little-endian int32), ``series`` (one per tenant + label set, profile type included as labels),
  ``profiles`` (one per series and capture window: start, duration, total), ``samples`` (stack, value, span id,
  trace id per row), ``profile_stacks`` (each profile's total per stack, for merges without a span selector),
  ``stack_functions`` (which stacks hold which function: the function → spans index, ``store/functions.py``).
- what keeps a query's cost with its answer rather than with the history (6): ``span_profiles`` / ``trace_profiles``
  name, per 10 minutes of capture start, the profiles holding samples of a span or trace (their keys lead with that
  bucket, so
  ingest writes into the newest part of the index instead of at random places all over it); ``rollups`` hold each
  series' per-stack totals per minute, 10 minutes, hour and 6 hours (``rollup``), compacted in the background;
  ``store_state`` holds the rollups' watermarks and the time before which retention dropped everything;
  ``present_buckets`` (7) lists the 10-minute buckets that hold spans (kind 0) and linked profiles (kind 1).
- ``tenant_settings`` (8): Pyroscope's ``settings.v1.SettingsService`` per tenant (name, value, modified at, in ms),
  which Profiles Drilldown keeps its plugin settings in (``store/settings.py``).
- ``profiles.period`` (9): what one sample adds to the profile's values (0: not known), so a total is also a count
  of samples.
- per-span rollups (11): ``span_totals`` holds each span's linked value per series and minute, ``span_minutes`` per
  series and minute the spans that need no other row (``store/span_totals.py``); ``profiles``' series and time
  index carries the total, so time series and timelines read the index alone.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from array import array
from collections.abc import Sequence
from typing import Final


def _frame_id(hexed: str) -> str:
    """SQL: the function id of a frame from ``hex()`` of its 4 ``stacks.frames`` bytes (little-endian int32)."""
    digit = "(instr('0123456789ABCDEF', substr({h}, {k}, 1)) - 1)"
    return " + ".join(
        f"({digit.format(h=hexed, k=2 * j + 1)} * 16 + {digit.format(h=hexed, k=2 * j + 2)}) * {256**j}"
        for j in range(4)
    )


# The per-span rollups (``bridge/store/span_totals.py``) from the samples: each span's value per series and minute,
# crossing when the span has another row within a minute either side (a window over the span's rows by minute), and
# per series and minute the count and value of the others. Migration 11 runs it, and ``store repair`` after salvage.
SPAN_TOTALS_FILL: Final = (
    """
    INSERT INTO span_totals (bucket, span_id, series_id, value, trace_id, crossing)
        SELECT bucket, span_id, series_id, value, trace_id,
            count(*) OVER (PARTITION BY span_id ORDER BY bucket RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING) > 1
        FROM (SELECT p.time_ns / 60000000000 AS bucket, s.span_id, p.series_id, sum(s.value) AS value,
                max(s.trace_id) AS trace_id
            FROM samples AS s JOIN profiles AS p ON p.id = s.profile_id WHERE s.span_id IS NOT NULL GROUP BY 1, 2, 3)
    """,
    """
    INSERT INTO span_minutes (series_id, bucket, solo, solo_value)
        SELECT series_id, bucket, count(*), sum(value) FROM span_totals WHERE crossing = 0 GROUP BY 1, 2
    """,
)

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: traces and profiles
    """
    CREATE TABLE resources (id INTEGER PRIMARY KEY, body BLOB NOT NULL UNIQUE);
    CREATE TABLE scopes (id INTEGER PRIMARY KEY, body BLOB NOT NULL UNIQUE);
    CREATE TABLE spans (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        trace_id BLOB NOT NULL,
        span_id INTEGER NOT NULL,
        parent_span_id INTEGER,
        service TEXT NOT NULL,
        name TEXT NOT NULL,
        start_ns INTEGER NOT NULL,
        end_ns INTEGER NOT NULL,
        resource_id INTEGER NOT NULL REFERENCES resources(id),
        scope_id INTEGER NOT NULL REFERENCES scopes(id),
        body BLOB NOT NULL
    );
    CREATE UNIQUE INDEX spans_trace ON spans (tenant, trace_id, span_id);
    CREATE INDEX spans_span ON spans (span_id);
    CREATE INDEX spans_service_time ON spans (tenant, service, start_ns);
    CREATE INDEX spans_time ON spans (start_ns);

    CREATE TABLE functions (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
    CREATE TABLE stacks (id INTEGER PRIMARY KEY, frames BLOB NOT NULL UNIQUE);
    CREATE TABLE series (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        labels TEXT NOT NULL,
        service TEXT NOT NULL,
        profile_type TEXT NOT NULL,
        UNIQUE (tenant, labels)
    );
    CREATE INDEX series_service ON series (tenant, service);
    CREATE TABLE profiles (
        id INTEGER PRIMARY KEY,
        series_id INTEGER NOT NULL REFERENCES series(id),
        time_ns INTEGER NOT NULL,
        duration_ns INTEGER NOT NULL,
        total INTEGER NOT NULL
    );
    CREATE INDEX profiles_series_time ON profiles (series_id, time_ns);
    CREATE INDEX profiles_time ON profiles (time_ns);
    CREATE TABLE samples (
        profile_id INTEGER NOT NULL REFERENCES profiles(id),
        series_id INTEGER NOT NULL,
        stack_id INTEGER NOT NULL REFERENCES stacks(id),
        value INTEGER NOT NULL,
        span_id INTEGER,
        trace_id BLOB
    );
    CREATE INDEX samples_profile ON samples (profile_id);
    CREATE INDEX samples_span ON samples (span_id) WHERE span_id IS NOT NULL;
    """,
    # 2: trace-id lookups for profiles (trace_id_selector), tag values for the Tempo search endpoints
    """
    CREATE INDEX samples_trace ON samples (trace_id) WHERE trace_id IS NOT NULL;
    CREATE TABLE tags (
        tenant TEXT NOT NULL,
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        last_ns INTEGER NOT NULL,
        PRIMARY KEY (tenant, scope, key, value)
    ) WITHOUT ROWID;
    """,
    # 3: merges read (profile, stack, value) from one covering index instead of visiting every sample row
    """
    CREATE INDEX samples_profile_stack ON samples (profile_id, stack_id, value);
    DROP INDEX samples_profile;
    """,
    # 4: per-profile stack totals (span and trace ids summed away): what merges without a span or trace selector
    # read — one row per distinct stack and profile instead of one per sample
    """
    CREATE TABLE profile_stacks (
        profile_id INTEGER NOT NULL,
        stack_id INTEGER NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY (profile_id, stack_id)
    ) WITHOUT ROWID;
    INSERT INTO profile_stacks (profile_id, stack_id, value)
        SELECT profile_id, stack_id, SUM(value) FROM samples GROUP BY profile_id, stack_id;
    CREATE INDEX samples_profile ON samples (profile_id);
    DROP INDEX samples_profile_stack;
    """,
    # 5: which stacks hold which function (the function → spans query); existing stacks indexed here, new ones at
    # ingest (store/functions.py)
    """
    CREATE TABLE stack_functions (
        function_id INTEGER NOT NULL,
        stack_id INTEGER NOT NULL,
        PRIMARY KEY (function_id, stack_id)
    ) WITHOUT ROWID;
    INSERT INTO stack_functions (function_id, stack_id)
        WITH RECURSIVE frame(stack_id, frames, n, i) AS (
            SELECT id, frames, length(frames) / 4, 0 FROM stacks WHERE length(frames) >= 4
            UNION ALL SELECT stack_id, frames, n, i + 1 FROM frame WHERE i + 1 < n
        ), hexed(stack_id, h) AS (SELECT stack_id, hex(substr(frames, 4 * i + 1, 4)) FROM frame)
        SELECT DISTINCT """
    + _frame_id("h")
    + """, stack_id FROM hexed;
    """,
    # 6: span and trace lookups through per-10-minute profile lists instead of an index over every sample row (random
    # keys made ingest slower as history grew, and took 45 % of the file); per-stack rollups for long-range merges;
    # spans over a minute indexed by their end, and every span's end beside its start, so a search's time window
    # bounds its scan from both sides; span lookups by trace or span id through keys that lead with the span's
    # 10-minute bucket (SPAN_BUCKET_SQL), for the same reason as the profile lists: random keys all over a big index
    # made span ingest slower as history grew (0.36x of the empty-store rate at 2 h)
    """
    CREATE TABLE span_profiles (
        bucket INTEGER NOT NULL,
        span_id INTEGER NOT NULL,
        profile_id INTEGER NOT NULL,
        PRIMARY KEY (bucket, span_id, profile_id)
    ) WITHOUT ROWID;
    CREATE TABLE trace_profiles (
        bucket INTEGER NOT NULL,
        trace_id BLOB NOT NULL,
        profile_id INTEGER NOT NULL,
        PRIMARY KEY (bucket, trace_id, profile_id)
    ) WITHOUT ROWID;
    INSERT INTO span_profiles (bucket, span_id, profile_id)
        SELECT DISTINCT p.time_ns / 600000000000, s.span_id, s.profile_id
        FROM samples AS s JOIN profiles AS p ON p.id = s.profile_id WHERE s.span_id IS NOT NULL;
    INSERT INTO trace_profiles (bucket, trace_id, profile_id)
        SELECT DISTINCT p.time_ns / 600000000000, s.trace_id, s.profile_id
        FROM samples AS s JOIN profiles AS p ON p.id = s.profile_id WHERE s.trace_id IS NOT NULL;
    DROP INDEX samples_span;
    DROP INDEX samples_trace;
    CREATE TABLE rollups (
        level INTEGER NOT NULL,
        series_id INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        stack_id INTEGER NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY (level, series_id, bucket, stack_id)
    ) WITHOUT ROWID;
    CREATE TABLE store_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    CREATE INDEX spans_long ON spans (end_ns) WHERE end_ns - start_ns > 60000000000;
    DROP INDEX spans_time;
    CREATE INDEX spans_time ON spans (start_ns, end_ns);
    DROP INDEX spans_trace;
    DROP INDEX spans_span;
    CREATE UNIQUE INDEX spans_trace ON spans (tenant, start_ns / 600000000000, trace_id, span_id);
    CREATE INDEX spans_span ON spans (start_ns / 600000000000, span_id);
    """,
    # 7: which 10-minute buckets hold spans (kind 0, by start) and linked profiles (kind 1, span_profiles /
    # trace_profiles), so a lookup probes those buckets only: listing every bucket between the first and the last
    # stored one cost one probe per 10 minutes of the gap (a span stamped in 2199 beside today's made each trace
    # lookup list millions of buckets)
    """
    CREATE TABLE present_buckets (
        kind INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        PRIMARY KEY (kind, bucket)
    ) WITHOUT ROWID;
    INSERT INTO present_buckets (kind, bucket) SELECT DISTINCT 0, start_ns / 600000000000 FROM spans;
    INSERT OR IGNORE INTO present_buckets (kind, bucket) SELECT DISTINCT 1, bucket FROM span_profiles;
    INSERT OR IGNORE INTO present_buckets (kind, bucket) SELECT DISTINCT 1, bucket FROM trace_profiles;
    """,
    # 8: settings.v1.SettingsService, per tenant (grafana/pyroscope pkg/settings/bucket.go keeps the same
    # tenant → name → {name, value, modifiedAt} map in one object-store file)
    """
    CREATE TABLE tenant_settings (
        tenant TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        modified_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, name)
    ) WITHOUT ROWID;
    """,
    # 9: what one sample adds to each profile's values, in its sample unit (the pprof period, the /ingest sampleRate
    # as nanoseconds, OTLP's period, a JFR upload's 1e9 // sampleRate; 0 unknown, as for every profile stored
    # before): how a span's total becomes a number of samples, and so its sampling uncertainty (bridge/sampling.py)
    """
    ALTER TABLE profiles ADD COLUMN period INTEGER NOT NULL DEFAULT 0;
    """,
    # 10: tags typed, in every scope Tempo lists (resource, span, event, link, instrumentation, and the intrinsics read
    # from columns: store/tag_rows.py); the string values stored before are kept as strings
    """
    CREATE TABLE tags_typed (
        tenant TEXT NOT NULL,
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        type TEXT NOT NULL,
        value TEXT NOT NULL,
        last_ns INTEGER NOT NULL,
        PRIMARY KEY (tenant, scope, key, type, value)
    ) WITHOUT ROWID;
    INSERT INTO tags_typed (tenant, scope, key, type, value, last_ns)
        SELECT tenant, scope, key, 'string', value, last_ns FROM tags;
    DROP TABLE tags;
    ALTER TABLE tags_typed RENAME TO tags;
    """,
    # 11: per-span rollups, so function → spans ranks a long range's spans without reading their samples (the key
    # leads with the minute, as span_profiles' does: ingest writes the newest part of the index); the profiles'
    # series/time index with the total in it, for time series and timelines
    """
    CREATE TABLE span_totals (
        bucket INTEGER NOT NULL,
        span_id INTEGER NOT NULL,
        series_id INTEGER NOT NULL,
        value INTEGER NOT NULL,
        trace_id BLOB,
        crossing INTEGER NOT NULL,
        PRIMARY KEY (bucket, span_id, series_id)
    ) WITHOUT ROWID;
    CREATE INDEX span_totals_rank ON span_totals (series_id, crossing, bucket, value);
    CREATE TABLE span_minutes (
        series_id INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        solo INTEGER NOT NULL,
        solo_value INTEGER NOT NULL,
        PRIMARY KEY (series_id, bucket)
    ) WITHOUT ROWID;
    """
    + ";".join(SPAN_TOTALS_FILL)
    + """;
    CREATE INDEX profiles_series_time_total ON profiles (series_id, time_ns, total);
    DROP INDEX profiles_series_time;
    """,
)

LATEST: Final = len(MIGRATIONS)

SPAN_BUCKET_NS: Final = 600_000_000_000
SPAN_BUCKET_SQL: Final = "start_ns / 600000000000"  # exactly as in the spans_trace and spans_span indexes
SPAN_BUCKETS: Final = 0  # present_buckets.kind: buckets of span start times
LINK_BUCKETS: Final = 1  # present_buckets.kind: buckets of span_profiles / trace_profiles


def mark_buckets(conn: sqlite3.Connection, kind: int, buckets: set[int]) -> None:
    """Ingest: these buckets of ``kind`` hold data now."""
    conn.executemany("INSERT OR IGNORE INTO present_buckets (kind, bucket) VALUES (?, ?)", [(kind, b) for b in buckets])


def present_buckets(conn: sqlite3.Connection, kind: int, first: int, last: int) -> str:
    """The buckets of ``kind`` in ``[first, last]`` that hold data, as a JSON list (for ``IN (SELECT value FROM
    json_each(?))``): a lookup probes only those, whatever the gaps between them."""
    return json.dumps(
        [
            b
            for (b,) in conn.execute(
                "SELECT bucket FROM present_buckets WHERE kind = ? AND bucket >= ? AND bucket <= ?", (kind, first, last)
            )
        ]
    )


def drop_buckets_before(conn: sqlite3.Connection, kind: int, bucket: int) -> None:
    """Retention: buckets of ``kind`` that end before what it kept (every row in them is gone)."""
    conn.execute("DELETE FROM present_buckets WHERE kind = ? AND bucket < ?", (kind, bucket))


class SchemaError(RuntimeError):
    """The database cannot be used by this bridge (written by a newer version)."""


def current_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
    if row is None:
        return 0
    version = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(version[0]) if version else 0


def migrate(conn: sqlite3.Connection, target: int = LATEST) -> int:
    """Apply the migrations after the database's version up to ``target``; return the version reached."""
    version = current_version(conn)
    if version > LATEST:
        raise SchemaError(
            f"the store's schema is version {version}, newer than this bridge understands ({LATEST}); "
            "use a newer profile-bridge or another data directory"
        )
    if target <= version:
        return version
    # every pending migration in one transaction: the store is at the old version or the new one, never between, and a
    # new store costs one commit (one fsync under synchronous=FULL) instead of one per migration
    conn.execute("BEGIN IMMEDIATE")
    try:
        for number in range(version + 1, target + 1):
            for statement in _statements(MIGRATIONS[number - 1]):
                conn.execute(statement)
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return target


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


_BIG_ENDIAN: Final = sys.byteorder == "big"


def pack_frames(function_ids: Sequence[int]) -> bytes:
    """``stacks.frames``: function ids, root first, as little-endian int32."""
    arr = array("i", function_ids)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tobytes()


def unpack_frames(blob: bytes) -> array[int]:
    """The function ids of a ``stacks.frames`` blob, root first."""
    arr = array("i")
    arr.frombytes(blob)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr
