"""``Store``: the embedded SQLite trace and profile store of standalone mode (the thin I/O shell around
``model``, ``selector`` and ``traceql``).

Threads: every write runs on one writer thread (its own connection, explicit ``BEGIN IMMEDIATE`` … ``COMMIT``), so an
ingest is acknowledged only once its transaction has committed and a failed one leaves nothing behind. Reads run on a
small pool of reader threads, each with its own read-only connection; WAL mode lets them read while the writer
writes. The event loop never blocks on SQLite.

Profiles are merged in SQL: ``GROUP BY stack_id`` over the samples of the selected series and window gives one row
per distinct stack; the call tree is built once from those rows.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_profiles_svc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import profile_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.errors import BridgeError, InvalidArgument, StorageFull, Unimplemented
from bridge.metrics import Metrics
from bridge.profiletype import ProfileType
from bridge.selector import Matcher, matches_any, parse_selector, parse_selectors
from bridge.spans import SERVICE_NAME, SearchHit, Trace, spans_from_otlp
from bridge.store import model, traceql
from bridge.store.query import (
    DEFAULT_MAX_NODES,
    FAR_FUTURE_NS,
    TraceMatch,
    bound_attr_value,
    build_pprof,
    encode_stacks,
    filter_call_site,
    parse_span_selector,
    parse_trace_selector,
    search_span,
    window_ns,
)
from bridge.store.schema import migrate
from bridge.upstream.base import CallContext

log = logging.getLogger("bridge.store")

T = TypeVar("T")
K = TypeVar("K")

DB_FILE: Final = "store.sqlite3"
OFFLOAD_BYTES: Final = 256 * 1024  # requests at least this large are decoded on a worker thread
SEARCH_SCAN_LIMIT: Final = 50_000  # candidate spans examined per search
_BIG_ENDIAN: Final = sys.byteorder == "big"



ID_CACHE_ENTRIES: Final = 200_000  # per id cache (functions, stacks, series, span bodies): bounded memory


def _intern(
    conn: sqlite3.Connection, cache: dict[K, int], key: K, select: str, select_args: Sequence[object],
    insert: str, insert_args: Sequence[object],
) -> int:
    """The id of a de-duplicated row: from ``cache``, else the table, else a new row. The cache is dropped whole when
    it reaches ``ID_CACHE_ENTRIES`` (and after any rollback, by the caller), so memory stays bounded."""
    rid = cache.get(key)
    if rid is None:
        row = conn.execute(select, select_args).fetchone()
        rid = int(row[0]) if row is not None else int(conn.execute(insert, insert_args).lastrowid or 0)
        if len(cache) >= ID_CACHE_ENTRIES:
            cache.clear()
        cache[key] = rid
    return rid



def _require_flamegraph_format(rpc: str, fmt: int) -> None:
    """The store answers span and stack-trace queries as flame graphs only (no tree, dot or pprof format)."""
    if fmt not in (qpb.PROFILE_FORMAT_UNSPECIFIED, qpb.PROFILE_FORMAT_FLAMEGRAPH):
        raise Unimplemented(
            f"standalone mode answers {rpc} as a flame graph only, not format {qpb.ProfileFormat.Name(fmt)}"
        )

class StoreError(BridgeError):
    """The store cannot be opened or used (unwritable directory, corrupt database, newer schema)."""


def _disk_full(exc: BaseException | None) -> StorageFull | None:
    """SQLite's ``SQLITE_FULL`` (the disk or the file system quota is full) as the retryable ``StorageFull`` —
    also when it is the cause of what failed next (SQLite rolls the whole transaction back on it, so the job's
    ``ROLLBACK TO`` fails with "no such savepoint")."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_FULL:
            return StorageFull(f"the store cannot write, its disk is full ({exc}): nothing of this request was "
                               "stored; retry later")
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


@dataclass(frozen=True, slots=True)
class Counts:
    spans: int
    traces: int
    profiles: int
    uploads: int  # distinct capture windows
    samples: int
    sample_value: int
    samples_with_span: int
    distinct_span_ids: int
    series: int


@dataclass(slots=True)
class RetentionResult:
    profiles: int = 0
    spans: int = 0
    used_bytes: int = 0


def _pack(ids: Sequence[int]) -> bytes:
    arr = array("i", ids)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tobytes()


def _unpack(blob: bytes) -> array[int]:
    arr = array("i")
    arr.frombytes(blob)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr


class Store:
    """The standalone store. Implements ``TraceSource`` and ``ProfileSource``, plus the rest of Pyroscope's querier
    and the ingest sinks."""

    name = "store"
    stamps_window_start = True  # ingest stores every profile at the start of its capture window (model.upload_window)

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time, readers: int = 3,
                 synchronous: str = "FULL", metrics: Metrics | None = None) -> None:
        self.path = path
        self._metrics = metrics
        self._clock = clock
        self._synchronous = synchronous
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="store-writer")
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="store-reader")
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._wconn: sqlite3.Connection | None = None
        self._closed = False
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any],
                                  asyncio.AbstractEventLoop]] = []
        self._flush_scheduled = False
        # writer-side id caches (cleared on rollback and after retention)
        self._function_ids: dict[str, int] = {}
        self._stack_ids: dict[tuple[str, ...], int] = {}
        self._series_ids: dict[tuple[str, str], int] = {}
        self._blob_ids: dict[tuple[str, bytes], int] = {}
        # reader-side caches of immutable rows
        self._names: dict[int, str] = {}
        # keyed by content, not id: SQLite may hand a deleted row's id to a new row
        self._series_labels: dict[str, dict[str, str]] = {}

    # ----------------------------------------------------------------------------------------- lifetime

    @classmethod
    async def open(cls, data_dir: str | Path, *, clock: Callable[[], float] = time.time, readers: int = 3,
                   synchronous: str = "FULL", metrics: Metrics | None = None) -> Store:
        store = cls(Path(data_dir) / DB_FILE, clock=clock, readers=readers, synchronous=synchronous, metrics=metrics)
        try:
            await store._write(store._open_writer)
        except BaseException:
            store._shutdown_pools()
            raise
        return store

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def _open_writer(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._connect()
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect on a new database only
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA foreign_keys = OFF")
            migrate(conn)
        except (OSError, sqlite3.Error, RuntimeError) as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc
        self._wconn = conn

    async def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            await self._write(self._close_writer)
        finally:
            self._shutdown_pools()
            with self._lock:
                for conn in self._reader_conns:
                    conn.close()
                self._reader_conns.clear()

    def _close_writer(self) -> None:
        if self._wconn is not None:
            try:
                self._wconn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._wconn.close()
                self._wconn = None

    def _shutdown_pools(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._with_reader, fn, args)

    def _with_reader(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._lock:
                self._reader_conns.append(conn)
        return fn(conn, *args)

    def _w(self) -> sqlite3.Connection:
        if self._wconn is None:
            raise StoreError("the store is closed")
        return self._wconn

    def _now_ns(self) -> int:
        return int(self._clock() * 1_000_000_000)

    def _forget_ids(self) -> None:
        self._function_ids.clear()
        self._stack_ids.clear()
        self._series_ids.clear()
        self._blob_ids.clear()

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._w()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            self._forget_ids()  # ids handed out inside the rolled-back transaction no longer exist
            raise
        conn.execute("COMMIT")
        return result

    # ----------------------------------------------------------------------------------------- group commit

    async def _commit(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` in a write transaction and return once that transaction has committed.

        Group commit: jobs that arrive while the writer is busy are written together in the next transaction, each
        inside its own savepoint — one job's failure rolls back only that job, and the commit (one fsync) is
        shared. Each caller is answered only after the shared COMMIT."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._pending.append((job, future, loop))
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            self._writer.submit(self._flush)
        return await future

    def _flush(self) -> None:
        with self._lock:
            jobs, self._pending = self._pending, []
            self._flush_scheduled = False
        if not jobs:
            return
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            conn = self._w()
            conn.execute("BEGIN IMMEDIATE")
            try:
                for n, (job, _, _) in enumerate(jobs):
                    conn.execute(f"SAVEPOINT job{n}")
                    try:
                        outcomes.append((job(conn), None))
                    except Exception as exc:  # noqa: BLE001 - handed to the job's caller below
                        conn.execute(f"ROLLBACK TO job{n}")
                        self._forget_ids()  # ids handed out inside the rolled-back job no longer exist
                        outcomes.append((None, _disk_full(exc) or exc))
                    conn.execute(f"RELEASE job{n}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._forget_ids()
                raise
        except Exception as group_exc:  # noqa: BLE001 - the whole group failed: every caller hears it
            error: BaseException = (
                group_exc if isinstance(group_exc, BridgeError)
                else _disk_full(group_exc) or StoreError(f"the store could not commit: {group_exc}")
            )
            outcomes = [(None, error)] * len(jobs)
        for (_, future, loop), (result, failure) in zip(jobs, outcomes, strict=True):
            try:
                loop.call_soon_threadsafe(_settle, future, result, failure)
            except RuntimeError:  # the caller's event loop has closed: nobody is waiting for this answer
                log.debug("store: an ingest finished after its event loop closed")

    # ----------------------------------------------------------------------------------------- ingest: profiles

    async def ingest_profiles(self, records: Sequence[model.ProfileRecord], tenant: str | None) -> int:
        """Write decoded profiles in one transaction; returns the number of samples stored."""
        if not records:
            return 0
        key = tenant or "anonymous"
        stored = await self._commit(lambda conn: self._insert_profiles(conn, key, records))
        if self._metrics is not None:
            self._metrics.ingested.labels("profiles").inc(sum(1 for r in records if r.samples))
            self._metrics.ingested.labels("samples").inc(stored)
        return stored

    def _function_id(self, conn: sqlite3.Connection, name: str) -> int:
        return _intern(conn, self._function_ids, name, "SELECT id FROM functions WHERE name = ?", (name,),
                       "INSERT INTO functions (name) VALUES (?)", (name,))

    def _stack_id(self, conn: sqlite3.Connection, frames: tuple[str, ...]) -> int:
        sid = self._stack_ids.get(frames)
        if sid is not None:
            return sid
        blob = _pack([self._function_id(conn, name) for name in frames])
        return _intern(conn, self._stack_ids, frames, "SELECT id FROM stacks WHERE frames = ?", (blob,),
                       "INSERT INTO stacks (frames) VALUES (?)", (blob,))

    def _series_id(self, conn: sqlite3.Connection, tenant: str, record: model.ProfileRecord) -> int:
        labels = json.dumps(dict(record.labels), sort_keys=True, separators=(",", ":"))
        key = (tenant, labels)
        return _intern(conn, self._series_ids, key, "SELECT id FROM series WHERE tenant = ? AND labels = ?", key,
                       "INSERT INTO series (tenant, labels, service, profile_type) VALUES (?, ?, ?, ?)",
                       (tenant, labels, record.service, record.profile_type))

    def _insert_profiles(self, conn: sqlite3.Connection, tenant: str, records: Sequence[model.ProfileRecord]) -> int:
        stored = 0
        for record in records:
            if not record.samples:
                continue
            series_id = self._series_id(conn, tenant, record)
            cur = conn.execute(
                "INSERT INTO profiles (series_id, time_ns, duration_ns, total) VALUES (?, ?, ?, ?)",
                (series_id, record.time_ns, record.duration_ns, record.total),
            )
            profile_id = cur.lastrowid
            stack_id = self._stack_id
            rows = [
                (profile_id, series_id, stack_id(conn, frames), value, span, trace)
                for frames, value, span, trace in record.samples
            ]
            conn.executemany(
                "INSERT INTO samples (profile_id, series_id, stack_id, value, span_id, trace_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            per_stack: dict[int, int] = {}
            for row in rows:
                per_stack[row[2]] = per_stack.get(row[2], 0) + row[3]
            conn.executemany(
                "INSERT INTO profile_stacks (profile_id, stack_id, value) VALUES (?, ?, ?)",
                [(profile_id, stack, value) for stack, value in per_stack.items()],
            )
            stored += len(rows)
        return stored

    async def ingest_otlp_profiles(
        self, req: otlp_profiles_svc.ExportProfilesServiceRequest, tenant: str | None
    ) -> None:
        """The profile sink (link gateway in standalone mode). Raises ``InvalidArgument`` on bad content."""
        decode = functools.partial(model.records_from_otlp_profiles, req, now_ns=self._now_ns())
        try:
            records = await asyncio.to_thread(decode) if req.ByteSize() >= OFFLOAD_BYTES else decode()
        except InvalidArgument:
            if self._metrics is not None:
                self._metrics.ingest_rejected.labels("otlp-profiles").inc()
            raise
        await self.ingest_profiles(records, tenant)

    # ----------------------------------------------------------------------------------------- ingest: traces

    async def ingest_spans(self, batch: model.SpanBatch, tenant: str | None) -> int:
        if not batch.rows:
            return 0
        key = tenant or "anonymous"
        stored = await self._commit(lambda conn: self._insert_spans(conn, key, batch))
        if self._metrics is not None:
            self._metrics.ingested.labels("spans").inc(stored)
        return stored

    def _blob_id(self, conn: sqlite3.Connection, table: str, body: bytes) -> int:
        return _intern(conn, self._blob_ids, (table, body), f"SELECT id FROM {table} WHERE body = ?", (body,),
                       f"INSERT INTO {table} (body) VALUES (?)", (body,))

    def _insert_spans(self, conn: sqlite3.Connection, tenant: str, batch: model.SpanBatch) -> int:
        rows = [
            (
                tenant, r.trace_id, r.span_id, r.parent_span_id, r.service, r.name, r.start_ns, r.end_ns,
                self._blob_id(conn, "resources", r.resource), self._blob_id(conn, "scopes", r.scope), r.body,
            )
            for r in batch.rows
        ]
        conn.executemany(
            "INSERT OR REPLACE INTO spans (tenant, trace_id, span_id, parent_span_id, service, name, start_ns, "
            "end_ns, resource_id, scope_id, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        if batch.tags:
            last = max(r.end_ns for r in batch.rows)
            conn.executemany(
                "INSERT INTO tags (tenant, scope, key, value, last_ns) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant, scope, key, value) DO UPDATE SET last_ns = max(last_ns, excluded.last_ns)",
                [(tenant, scope, key, value, last) for scope, key, value in batch.tags],
            )
        return len(rows)

    async def ingest_otlp_traces(
        self, req: otlp_trace_svc.ExportTraceServiceRequest, tenant: str | None
    ) -> tuple[int, str]:
        """The trace sink (``/v1/traces`` and gRPC TraceService): returns (rejected spans, message)."""
        batch = await asyncio.to_thread(model.rows_from_export, req) if req.ByteSize() >= OFFLOAD_BYTES else (
            model.rows_from_export(req)
        )
        await self.ingest_spans(batch, tenant)
        return batch.rejected, batch.message

    # ----------------------------------------------------------------------------------------- retention

    async def enforce_retention(self, max_age_s: float, max_bytes: int) -> RetentionResult:
        cutoff = self._now_ns() - int(max_age_s * 1_000_000_000)
        return await self._write(self._retain, cutoff, max_bytes)

    def _used_bytes(self, conn: sqlite3.Connection) -> int:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * page_size)

    def _delete_before(self, conn: sqlite3.Connection, profiles_before: int, spans_before: int) -> tuple[int, int]:
        for table in ("samples", "profile_stacks"):
            conn.execute(
                f"DELETE FROM {table} WHERE profile_id IN (SELECT id FROM profiles WHERE time_ns < ?)",
                (profiles_before,),
            )
        profiles = conn.execute("DELETE FROM profiles WHERE time_ns < ?", (profiles_before,)).rowcount
        spans = conn.execute("DELETE FROM spans WHERE start_ns < ?", (spans_before,)).rowcount
        conn.execute("DELETE FROM tags WHERE last_ns < ?", (spans_before,))
        return profiles, spans

    def _retain(self, cutoff_ns: int, max_bytes: int) -> RetentionResult:
        conn = self._w()
        result = RetentionResult()

        def by_age(c: sqlite3.Connection) -> None:
            p, s = self._delete_before(c, cutoff_ns, cutoff_ns)
            result.profiles += p
            result.spans += s

        self._transaction(by_age)
        for _ in range(50):
            if self._used_bytes(conn) <= max_bytes:
                break

            def oldest_tenth(c: sqlite3.Connection) -> bool:
                """Drop the oldest tenth of the stored time span, profiles and spans alike."""
                p_lo, p_hi = c.execute("SELECT min(time_ns), max(time_ns) FROM profiles").fetchone()
                s_lo, s_hi = c.execute("SELECT min(start_ns), max(start_ns) FROM spans").fetchone()
                lows = [v for v in (p_lo, s_lo) if v is not None]
                highs = [v for v in (p_hi, s_hi) if v is not None]
                if not lows:
                    return False
                lo, hi = min(lows), max(highs)
                cut = lo + max(1, (hi - lo) // 10)
                p, s = self._delete_before(c, cut, cut)
                result.profiles += p
                result.spans += s
                return bool(p or s)

            if not self._transaction(oldest_tenth):
                break
        if result.profiles or result.spans:
            self._transaction(self._collect_garbage)
            conn.execute("PRAGMA incremental_vacuum")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        result.used_bytes = self._used_bytes(conn)
        return result

    def _collect_garbage(self, conn: sqlite3.Connection) -> None:
        """Drop rows nothing refers to any more: stacks, series, resources, scopes."""
        conn.execute("DELETE FROM stacks WHERE id NOT IN (SELECT DISTINCT stack_id FROM samples)")
        conn.execute("DELETE FROM series WHERE id NOT IN (SELECT DISTINCT series_id FROM profiles)")
        conn.execute("DELETE FROM resources WHERE id NOT IN (SELECT DISTINCT resource_id FROM spans)")
        conn.execute("DELETE FROM scopes WHERE id NOT IN (SELECT DISTINCT scope_id FROM spans)")
        self._forget_ids()

    async def used_bytes(self) -> int:
        return await self._write(lambda: self._used_bytes(self._w()))

    # ----------------------------------------------------------------------------------------- reads: helpers

    def _series(
        self, conn: sqlite3.Connection, tenant: str, selectors: Sequence[Sequence[Matcher]],
        profile_type: str | None = None, window: tuple[int, int] | None = None,
    ) -> dict[int, dict[str, str]]:
        sql = "SELECT id, labels FROM series WHERE tenant = ?"
        params: list[Any] = [tenant]
        if profile_type:
            sql += " AND profile_type = ?"
            params.append(profile_type)
        if window is not None:
            sql += " AND id IN (SELECT DISTINCT series_id FROM profiles WHERE time_ns >= ? AND time_ns < ?)"
            params.extend(window)
        out: dict[int, dict[str, str]] = {}
        for sid, text in conn.execute(sql, params):
            labels = self._series_labels.get(text)
            if labels is None:
                if len(self._series_labels) > 100_000:
                    self._series_labels.clear()
                labels = self._series_labels[text] = json.loads(text)
            if matches_any(selectors, labels):
                out[sid] = labels
        return out

    def _names_of(self, conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, str]:
        names = self._names
        missing = {i for i in ids if i not in names}
        if missing:
            for fid, name in conn.execute(
                "SELECT id, name FROM functions WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(missing)),),
            ):
                names[fid] = name
        return names

    def _merged_stacks(
        self, conn: sqlite3.Connection, series_ids: Sequence[int], window: tuple[int, int],
        span_ids: Sequence[int] | None = None, trace_ids: Sequence[bytes] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        """``GROUP BY stack`` over the selected profiles → (frames root first, summed value) per distinct stack: from
        the per-profile stack totals, or from the samples when span or trace ids select them."""
        if not series_ids:
            return []
        inner = "SELECT stack_id, SUM(value) AS v FROM " + (
            "profile_stacks" if span_ids is None and trace_ids is None else "samples"
        )
        where = [
            "profile_id IN (SELECT id FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
            "AND time_ns >= ? AND time_ns < ?)"
        ]
        params: list[Any] = [json.dumps(list(series_ids)), *window]
        if span_ids is not None:
            if not span_ids:
                return []
            inner += " INDEXED BY samples_span"
            where.append(f"span_id IS NOT NULL AND span_id IN ({','.join('?' * len(span_ids))})")
            params.extend(span_ids)
        elif trace_ids is not None:
            if not trace_ids:
                return []
            inner += " INDEXED BY samples_trace"
            where.append(f"trace_id IS NOT NULL AND trace_id IN ({','.join('?' * len(trace_ids))})")
            params.extend(trace_ids)
        sql = (
            f"SELECT st.frames, agg.v FROM ({inner} WHERE {' AND '.join(where)} GROUP BY stack_id) AS agg "
            "JOIN stacks AS st ON st.id = agg.stack_id"
        )
        rows = [(_unpack(frames), int(v)) for frames, v in conn.execute(sql, params) if v]
        names = self._names_of(conn, {i for ids, _ in rows for i in ids})
        return [(tuple(names.get(i, f"<function {i}>") for i in ids), v) for ids, v in rows]

    def _select_stacks(
        self, conn: sqlite3.Connection, tenant: str, profile_type: str, selector: str, start_ms: int, end_ms: int,
        span_ids: Sequence[int] | None, trace_ids: Sequence[bytes] | None,
    ) -> list[tuple[tuple[str, ...], int]]:
        ProfileType.parse(profile_type)
        window = window_ns(start_ms, end_ms)
        series = self._series(conn, tenant, [parse_selector(selector)], profile_type)
        return self._merged_stacks(conn, list(series), window, span_ids, trace_ids)

    # ----------------------------------------------------------------------------------------- ProfileSource

    async def merged_stacks(
        self, tenant: str | None, profile_type: str, selector: str, start_ms: int, end_ms: int, *,
        span_ids: Sequence[int] | None = None, trace_ids: Sequence[bytes] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        """Merged (frames, value) rows of a query: what every flame-graph answer is built from."""
        return await self._read(
            self._select_stacks, tenant or "anonymous", profile_type, selector, start_ms, end_ms, span_ids, trace_ids
        )

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse:
        _require_flamegraph_format("SelectMergeStacktraces", req.format)
        if req.span_selector and req.trace_id_selector:
            raise InvalidArgument("span_selector and trace_id_selector cannot be combined")
        span_ids = parse_span_selector(req.span_selector) if req.span_selector else None
        trace_ids = parse_trace_selector(req.trace_id_selector) if req.trace_id_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end,
            span_ids=span_ids, trace_ids=trace_ids,
        )
        if req.HasField("stack_trace_selector") and req.stack_trace_selector.call_site:
            stacks = filter_call_site(stacks, [loc.name for loc in req.stack_trace_selector.call_site])
        max_nodes = req.max_nodes if req.HasField("max_nodes") and req.max_nodes > 0 else DEFAULT_MAX_NODES
        return qpb.SelectMergeStacktracesResponse(flamegraph=encode_stacks(stacks, max_nodes))

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse:
        _require_flamegraph_format("SelectMergeSpanProfile", req.format)
        # An empty span selector selects everything, as Pyroscope's v2 read path does.
        span_ids = parse_span_selector(req.span_selector) if req.span_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end, span_ids=span_ids
        )
        max_nodes = req.max_nodes if req.HasField("max_nodes") and req.max_nodes > 0 else DEFAULT_MAX_NODES
        return qpb.SelectMergeSpanProfileResponse(flamegraph=encode_stacks(stacks, max_nodes))

    async def select_merge_profile(self, req: qpb.SelectMergeProfileRequest, ctx: CallContext) -> profile_pb2.Profile:
        ptype = ProfileType.parse(req.profile_typeID)
        trace_ids = parse_trace_selector(req.trace_id_selector) if req.trace_id_selector else None
        stacks = await self.merged_stacks(
            ctx.tenant, req.profile_typeID, req.label_selector, req.start, req.end, trace_ids=trace_ids
        )
        if req.HasField("stack_trace_selector") and req.stack_trace_selector.call_site:
            stacks = filter_call_site(stacks, [loc.name for loc in req.stack_trace_selector.call_site])
        return build_pprof(stacks, ptype, req.start, req.end)

    async def profile_types(self, req: qpb.ProfileTypesRequest, ctx: CallContext) -> qpb.ProfileTypesResponse:
        window = window_ns(req.start, req.end) if req.start or req.end else None

        def read(conn: sqlite3.Connection) -> list[str]:
            sql = "SELECT DISTINCT profile_type FROM series WHERE tenant = ?"
            params: list[Any] = [ctx.tenant_key]
            if window is not None:
                sql += " AND id IN (SELECT DISTINCT series_id FROM profiles WHERE time_ns >= ? AND time_ns < ?)"
                params.extend(window)
            return sorted(row[0] for row in conn.execute(sql, params))

        out = qpb.ProfileTypesResponse()
        for type_id in await self._read(read):
            pt = ProfileType.parse(type_id)
            out.profile_types.add(
                ID=type_id, name=pt.name, sample_type=pt.sample_type, sample_unit=pt.sample_unit,
                period_type=pt.period_type, period_unit=pt.period_unit,
            )
        return out

    async def _matching_series(
        self, tenant: str, matchers: Sequence[str], start_ms: int, end_ms: int
    ) -> dict[int, dict[str, str]]:
        selectors = parse_selectors(matchers)
        window = window_ns(start_ms, end_ms) if start_ms or end_ms else None
        return await self._read(self._series, tenant, selectors, None, window)

    async def label_names(self, req: tpb.LabelNamesRequest, ctx: CallContext) -> tpb.LabelNamesResponse:
        series = await self._matching_series(ctx.tenant_key, req.matchers, req.start, req.end)
        return tpb.LabelNamesResponse(names=sorted({k for labels in series.values() for k in labels}))

    async def label_values(self, req: tpb.LabelValuesRequest, ctx: CallContext) -> tpb.LabelValuesResponse:
        series = await self._matching_series(ctx.tenant_key, req.matchers, req.start, req.end)
        values = {labels[req.name] for labels in series.values() if labels.get(req.name)}
        return tpb.LabelValuesResponse(names=sorted(values))

    async def series(self, req: qpb.SeriesRequest, ctx: CallContext) -> qpb.SeriesResponse:
        series = await self._matching_series(ctx.tenant_key, req.matchers, req.start, req.end)
        wanted = set(req.label_names)
        seen: set[tuple[tuple[str, str], ...]] = set()
        for labels in series.values():
            pairs = tuple(sorted((k, v) for k, v in labels.items() if not wanted or k in wanted))
            seen.add(pairs)
        out = qpb.SeriesResponse()
        for pairs in sorted(seen):
            out.labels_set.add().labels.extend(tpb.LabelPair(name=k, value=v) for k, v in pairs)
        return out

    async def select_series(self, req: qpb.SelectSeriesRequest, ctx: CallContext) -> qpb.SelectSeriesResponse:
        ProfileType.parse(req.profile_typeID)
        step_ms = int(req.step * 1000) if req.step > 0 else 15_000
        if step_ms <= 0:
            raise InvalidArgument(f"step {req.step} must be positive")
        window = window_ns(req.start, req.end)
        selector = parse_selector(req.label_selector)
        average = req.HasField("aggregation") and req.aggregation == tpb.TIME_SERIES_AGGREGATION_TYPE_AVERAGE

        def read(conn: sqlite3.Connection) -> list[tuple[dict[str, str], int, int]]:
            series = self._series(conn, ctx.tenant_key, [selector], req.profile_typeID)
            if not series:
                return []
            rows = conn.execute(
                "SELECT series_id, time_ns, total FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
                "AND time_ns >= ? AND time_ns < ? ORDER BY time_ns",
                (json.dumps(list(series)), *window),
            ).fetchall()
            return [(series[sid], t, total) for sid, t, total in rows]

        rows = await self._read(read)
        group_by = list(req.group_by)
        buckets: dict[tuple[tuple[str, str], ...], dict[int, list[int]]] = {}
        for labels, time_ns, total in rows:
            key = tuple((g, labels[g]) for g in group_by if labels.get(g))
            t_ms = time_ns // 1_000_000
            ts = req.start + ((t_ms - req.start) // step_ms) * step_ms
            buckets.setdefault(key, {}).setdefault(ts, []).append(total)
        ordered = sorted(buckets.items(), key=lambda kv: (-sum(sum(v) for v in kv[1].values()), kv[0]))
        if req.HasField("limit") and req.limit > 0:
            ordered = ordered[: req.limit]
        out = qpb.SelectSeriesResponse()
        for key, points in sorted(ordered):
            s = out.series.add()
            s.labels.extend(tpb.LabelPair(name=k, value=v) for k, v in key)
            for ts in sorted(points):
                values = points[ts]
                value = sum(values) / len(values) if average else float(sum(values))
                s.points.add(value=value, timestamp=ts)
        return out

    async def ready(self, ctx: CallContext) -> str:
        def check(conn: sqlite3.Connection) -> str:
            conn.execute("SELECT 1 FROM schema_version").fetchone()
            return f"standalone store at {self.path}"

        try:
            return await self._read(check)
        except sqlite3.Error as exc:
            raise StoreError(f"the store at {self.path} does not answer: {exc}") from exc

    # ----------------------------------------------------------------------------------------- TraceSource

    def _resource(self, conn: sqlite3.Connection, resource_id: int,
                  cache: dict[int, otlp_trace.ResourceSpans]) -> otlp_trace.ResourceSpans:
        """A resource, decoded once per query (``cache`` lives as long as one read)."""
        rs = cache.get(resource_id)
        if rs is None:
            row = conn.execute("SELECT body FROM resources WHERE id = ?", (resource_id,)).fetchone()
            rs = cache[resource_id] = otlp_trace.ResourceSpans.FromString(row[0] if row else b"")
        return rs

    def _trace_resource_spans(
        self, conn: sqlite3.Connection, tenant: str, trace_id: bytes
    ) -> list[otlp_trace.ResourceSpans]:
        rows = conn.execute(
            "SELECT resource_id, scope_id, body FROM spans WHERE tenant = ? AND trace_id = ? ORDER BY start_ns, id",
            (tenant, trace_id),
        ).fetchall()
        if not rows:
            return []
        scopes: dict[int, bytes] = {}
        for sid, body in conn.execute(
            "SELECT id, body FROM scopes WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted({r[1] for r in rows})),),
        ):
            scopes[sid] = body
        resource_bodies: dict[int, bytes] = dict(conn.execute(
            "SELECT id, body FROM resources WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted({r[0] for r in rows})),),
        ).fetchall())
        grouped: dict[int, dict[int, list[bytes]]] = {}
        for resource_id, scope_id, body in rows:
            grouped.setdefault(resource_id, {}).setdefault(scope_id, []).append(body)
        out: list[otlp_trace.ResourceSpans] = []
        for resource_id, by_scope in grouped.items():
            rs = otlp_trace.ResourceSpans()
            rs.MergeFromString(resource_bodies.get(resource_id, b""))
            for scope_id, bodies in by_scope.items():
                ss = rs.scope_spans.add()
                ss.MergeFromString(scopes.get(scope_id, b""))
                for body in bodies:
                    ss.spans.add().MergeFromString(body)
            out.append(rs)
        return out

    async def trace_resource_spans(self, trace_id: str, tenant: str | None) -> list[otlp_trace.ResourceSpans]:
        """The trace as stored: OTLP ResourceSpans with every field as received (empty when unknown)."""
        from bridge import ids

        norm = ids.trace_id(trace_id)
        if norm is None:
            raise InvalidArgument(f"trace id {trace_id!r} is not up to 32 hex characters")
        return await self._read(self._trace_resource_spans, tenant or "anonymous", bytes.fromhex(norm))

    async def trace_by_id(
        self, trace_id: str, ctx: CallContext, start_s: int | None = None, end_s: int | None = None
    ) -> Trace | None:
        resource_spans = await self.trace_resource_spans(trace_id, ctx.tenant)
        if not resource_spans:
            return None
        spans = spans_from_otlp(resource_spans)
        return Trace.from_spans(spans, trace_id=spans[0].trace_id)

    async def find_span(self, span_id: str, start_s: int, end_s: int, ctx: CallContext) -> SearchHit | None:
        hits = await self.search(
            f'{{ span:id = "{span_id.lower()}" }} | select(span:name, resource.service.name)',
            start_s, end_s, 1, ctx,
        )
        return hits[0] if hits else None

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        matches = await self.search_traces(traceql.parse(query), start_s, end_s, limit, spss, ctx.tenant)
        hits: list[SearchHit] = []
        for m in matches:
            for s in m.spans:
                hits.append(
                    SearchHit(
                        trace_id=m.trace_id,
                        span_id=s["spanID"],
                        name=s["_name"],
                        service=s["_service"],
                        start_ns=int(s["startTimeUnixNano"]),
                        duration_ns=int(s["durationNanos"]),
                        root_service=m.root_service,
                        root_name=m.root_name,
                    )
                )
        return hits

    async def search_traces(
        self, query: traceql.Query, start_s: int, end_s: int, limit: int, spss: int, tenant: str | None
    ) -> list[TraceMatch]:
        return await self._read(self._search, tenant or "anonymous", query, start_s, end_s, limit, spss)

    def _search(
        self, conn: sqlite3.Connection, tenant: str, query: traceql.Query, start_s: int, end_s: int, limit: int,
        spss: int,
    ) -> list[TraceMatch]:
        where = ["tenant = ?"]
        params: list[Any] = [tenant]
        if start_s or end_s:
            where.append("start_ns < ? AND end_ns >= ?")
            params.extend([
                min((end_s + 1) * 1_000_000_000, FAR_FUTURE_NS) if end_s > 0 else FAR_FUTURE_NS,
                min(max(0, start_s) * 1_000_000_000, FAR_FUTURE_NS),
            ])
        python_conds: list[traceql.Cond] = []
        for cond in query.conds:
            a = cond.attr
            if a.scope == "intrinsic" and a.key == "span:id" and cond.op == "=" and isinstance(cond.value, str):
                number = model.span_id_to_int(cond.value.lower().rjust(16, "0"))
                if number is None:
                    return []
                where.append("span_id = ?")
                params.append(number)
            elif a.scope == "intrinsic" and a.key == "trace:id" and cond.op == "=" and isinstance(cond.value, str):
                raw = model.trace_id_to_bytes(cond.value.lower().rjust(32, "0"))
                if raw is None:
                    return []
                where.append("trace_id = ?")
                params.append(raw)
            elif a.scope == "intrinsic" and a.key == "name" and cond.op == "=" and isinstance(cond.value, str):
                where.append("name = ?")
                params.append(cond.value)
            elif a.scope == "resource" and a.key == "service.name" and cond.op == "=" and isinstance(cond.value, str):
                where.append("service = ?")
                params.append(cond.value)
            elif (a.scope == "intrinsic" and a.key == "duration" and isinstance(cond.value, int)
                  and cond.op in ("=", "!=", ">", ">=", "<", "<=")):
                where.append(f"(end_ns - start_ns) {cond.op} ?")
                params.append(cond.value)
            else:
                python_conds.append(cond)
        needs_body = bool(python_conds) or any(
            a.scope != "intrinsic" and not (a.key == SERVICE_NAME and a.scope in ("resource", "any"))
            for a in query.select
        )
        sql = (
            "SELECT trace_id, span_id, service, name, start_ns, end_ns, resource_id, "
            + ("body" if needs_body else "NULL")
            + f" FROM spans WHERE {' AND '.join(where)} ORDER BY start_ns DESC LIMIT {SEARCH_SCAN_LIMIT}"
        )
        traces: dict[bytes, TraceMatch] = {}
        resources: dict[int, otlp_trace.ResourceSpans] = {}
        for trace_id, span_id, service, name, start_ns, end_ns, resource_id, body in conn.execute(sql, params):
            span = otlp_trace.Span.FromString(body) if body is not None else None
            resource = self._resource(conn, resource_id, resources) if needs_body else None

            value_of = functools.partial(
                bound_attr_value, (trace_id, span_id, service, name, start_ns, end_ns, span, resource)
            )
            if not all(traceql.compare(value_of(c.attr), c) for c in python_conds):
                continue
            match = traces.get(trace_id)
            if match is None:
                if len(traces) >= max(limit, 1) * 4 and trace_id not in traces:
                    continue
                match = traces[trace_id] = TraceMatch(trace_id.hex(), "", "", 0, 0)
            match.matched += 1
            if len(match.spans) < max(spss, 1):
                match.spans.append(
                    search_span(query, span_id, service, name, start_ns, end_ns, span, resource, value_of)
                )
        chosen = list(traces.values())
        for m in chosen:
            self._summarise_trace(conn, tenant, m)
        chosen.sort(key=lambda m: m.start_ns, reverse=True)
        return chosen[: max(limit, 1)]

    def _summarise_trace(self, conn: sqlite3.Connection, tenant: str, match: TraceMatch) -> None:
        rows = conn.execute(
            "SELECT service, name, start_ns, end_ns, parent_span_id FROM spans WHERE tenant = ? AND trace_id = ? "
            "ORDER BY start_ns",
            (tenant, bytes.fromhex(match.trace_id)),
        ).fetchall()
        if not rows:
            return
        match.start_ns = min(r[2] for r in rows)
        match.end_ns = max(r[3] for r in rows)
        root = next((r for r in rows if r[4] is None), None)
        if root is None:
            match.root_service, match.root_name = "<root span not yet received>", ""
        else:
            match.root_service, match.root_name = root[0], root[1]

    async def tag_names(self, tenant: str | None) -> dict[str, list[str]]:
        def read(conn: sqlite3.Connection) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {"resource": [], "span": []}
            for scope, key in conn.execute(
                "SELECT DISTINCT scope, key FROM tags WHERE tenant = ? ORDER BY key", (tenant or "anonymous",)
            ):
                out.setdefault(scope, []).append(key)
            return out

        return await self._read(read)

    async def tag_values(self, tenant: str | None, tag: str, limit: int = 1000) -> list[str]:
        key = tenant or "anonymous"
        if tag in ("name", "span:name"):
            sql, params = "SELECT DISTINCT name FROM spans WHERE tenant = ? ORDER BY name LIMIT ?", (key, limit)
        else:
            scoped = tag in traceql.INTRINSICS or tag.startswith(("resource.", "span.", "."))
            attr = traceql.parse_attr(tag) if scoped else traceql.Attr("any", tag)
            if attr.scope == "intrinsic":
                return []
            if attr.scope == "any":
                sql = "SELECT DISTINCT value FROM tags WHERE tenant = ? AND key = ? ORDER BY value LIMIT ?"
                params = (key, attr.key, limit)  # type: ignore[assignment]
            else:
                sql = "SELECT value FROM tags WHERE tenant = ? AND scope = ? AND key = ? ORDER BY value LIMIT ?"
                params = (key, attr.scope, attr.key, limit)  # type: ignore[assignment]

        def read(conn: sqlite3.Connection) -> list[str]:
            return [row[0] for row in conn.execute(sql, params)]

        return await self._read(read)

    # ----------------------------------------------------------------------------------------- tests and tools

    async def counts(self, tenant: str | None = None) -> Counts:
        def read(conn: sqlite3.Connection) -> Counts:
            t = "" if tenant is None else " WHERE tenant = ?"
            tp: tuple[Any, ...] = () if tenant is None else (tenant,)
            spans, traces = conn.execute(f"SELECT count(*), count(DISTINCT trace_id) FROM spans{t}", tp).fetchone()
            s_filter = "" if tenant is None else " WHERE series_id IN (SELECT id FROM series WHERE tenant = ?)"
            profiles, uploads = conn.execute(
                f"SELECT count(*), count(DISTINCT time_ns) FROM profiles{s_filter}", tp
            ).fetchone()
            samples, value, with_span, distinct = conn.execute(
                "SELECT count(*), coalesce(sum(value), 0), count(span_id), count(DISTINCT span_id) FROM samples"
                + s_filter, tp,
            ).fetchone()
            series = conn.execute(f"SELECT count(*) FROM series{t}", tp).fetchone()[0]
            return Counts(spans, traces, profiles, uploads, samples, value, with_span, distinct, series)

        return await self._read(read)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the caller went away (cancelled); its data is committed or rolled back all the same
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
