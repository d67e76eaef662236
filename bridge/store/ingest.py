"""Ingest: decoded profiles and spans written into the store's tables, and the OTLP sinks that decode first.

Every ingest is one group-committed job (``Database.commit``): acknowledged once committed, gone without a trace if it
fails. Rows that repeat (function names, stacks, series, OTLP resources and scopes) are de-duplicated through
get-or-insert id caches kept on the writer thread, bounded in size and forgotten whenever the ids they hold may name
rows that are gone (a rollback, a retention pass).

With a retention age, data older than it is refused, never acknowledged and then silently dropped by the next
retention pass: spans one by one (OTLP partial success: counted in ``SpanBatch.rejected``, named in its message),
OTLP profiles one by one (``partial_success.rejected_profiles``), a Push or ``/ingest`` whole (``InvalidArgument``:
its profiles share one capture window, and Pyroscope refuses a push with a profile too old the same way).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_profiles_svc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge.call import tenant_key
from bridge.errors import InvalidArgument
from bridge.limits import DECODE_IN_THREAD_BYTES
from bridge.metrics import Metrics
from bridge.store import decode, decode_spans, rollup, span_totals
from bridge.store.database import Database
from bridge.store.functions import index_stack
from bridge.store.schema import LINK_BUCKETS, SPAN_BUCKET_NS, SPAN_BUCKETS, mark_buckets, pack_frames

K = TypeVar("K")

ID_CACHE_ENTRIES: Final = 200_000  # per id cache (functions, stacks, series, span bodies): bounded memory


def _intern(
    conn: sqlite3.Connection,
    cache: dict[K, int],
    key: K,
    select: str,
    select_args: Sequence[object],
    insert: str,
    insert_args: Sequence[object],
) -> int:
    """The id of a de-duplicated row: from ``cache``, else the table, else a new row. The cache is dropped whole when
    it reaches ``ID_CACHE_ENTRIES`` (and whenever the database forgets ids), so memory stays bounded."""
    rid = cache.get(key)
    if rid is None:
        row = conn.execute(select, select_args).fetchone()
        rid = int(row[0]) if row is not None else int(conn.execute(insert, insert_args).lastrowid or 0)
        if len(cache) >= ID_CACHE_ENTRIES:
            cache.clear()
        cache[key] = rid
    return rid


class Ingest:
    """The store's ingest sinks: ``ingest_profiles`` / ``ingest_spans`` for decoded rows, ``ingest_otlp_profiles`` /
    ``ingest_otlp_traces`` for OTLP export requests."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        retention_age: float | None = None,
    ) -> None:
        self._db = db
        self._clock = clock
        self._metrics = metrics
        self.retention_age = retention_age
        # the rollups' watermarks (writer thread only): loaded on the first write, advanced by compaction after its
        # transaction commits
        self.marks: dict[int, int] | None = None
        # writer-side id caches, touched on the writer thread only
        self._function_ids: dict[str, int] = {}
        self._stack_ids: dict[tuple[str, ...], int] = {}
        self._series_ids: dict[tuple[str, str], int] = {}
        self._blob_ids: dict[tuple[str, bytes], int] = {}
        db.on_forget_ids(self._forget_ids)

    def _forget_ids(self) -> None:
        self.marks = None  # reloaded from store_state at the next write
        self._function_ids.clear()
        self._stack_ids.clear()
        self._series_ids.clear()
        self._blob_ids.clear()

    def load_marks(self, conn: sqlite3.Connection) -> dict[int, int]:
        if self.marks is None:
            self.marks = rollup.watermarks(rollup.read_state(conn))
        return self.marks

    # ----------------------------------------------------------------------------------------- retention at ingest

    def cutoff_ns(self) -> int | None:
        """Data stamped before this is older than the retention age: refused."""
        if self.retention_age is None:
            return None
        return int(self._clock() * 1_000_000_000) - int(self.retention_age * 1_000_000_000)

    def _too_old(self, what: str, count: int, oldest_ns: int, cutoff: int) -> str:
        assert self.retention_age is not None
        return (
            f"{count} {what} older than the store's retention of {_duration(self.retention_age)} "
            f"(PROFILE_BRIDGE_RETENTION_AGE) refused: stamped from {_iso(oldest_ns)}, before {_iso(cutoff)}; the "
            "store would drop them at once"
        )

    # ----------------------------------------------------------------------------------------- profiles

    async def ingest_profiles(self, records: Sequence[decode.ProfileRecord], tenant: str | None) -> int:
        """Write decoded profiles in one transaction; returns the number of samples stored. Refused whole
        (``InvalidArgument``) when a profile is older than the retention age."""
        if not records:
            return 0
        cutoff = self.cutoff_ns()
        if cutoff is not None:
            old = [r.time_ns for r in records if r.samples and r.time_ns < cutoff]
            if old:
                raise InvalidArgument(
                    self._too_old("profiles", len(old), min(old), cutoff) + "; nothing of this request was stored"
                )
        key = tenant_key(tenant)
        stored = await self._db.commit(lambda conn: self._insert_profiles(conn, key, records))
        if self._metrics is not None:
            self._metrics.ingested.labels("profiles").inc(sum(1 for r in records if r.samples))
            self._metrics.ingested.labels("samples").inc(stored)
        return stored

    async def ingest_otlp_profiles(
        self, req: otlp_profiles_svc.ExportProfilesServiceRequest, tenant: str | None
    ) -> otlp_profiles_svc.ExportProfilesServiceResponse:
        """The profile sink (link gateway in standalone mode). Raises ``InvalidArgument`` on bad content; profiles
        older than the retention age are refused one by one (``partial_success``), the rest stored."""
        answer = otlp_profiles_svc.ExportProfilesServiceResponse()
        now_ns = int(self._clock() * 1_000_000_000)
        cutoff = self.cutoff_ns()
        if cutoff is not None:
            old = [
                p.time_unix_nano
                for rp in req.resource_profiles
                for sp in rp.scope_profiles
                for p in sp.profiles
                if p.time_unix_nano and p.time_unix_nano < cutoff
            ]
            if old:
                answer.partial_success.rejected_profiles = len(old)
                answer.partial_success.error_message = self._too_old("profiles", len(old), min(old), cutoff)
                fresh = otlp_profiles_svc.ExportProfilesServiceRequest()
                fresh.CopyFrom(req)
                for rp in fresh.resource_profiles:
                    for sp in rp.scope_profiles:
                        keep = [p for p in sp.profiles if not (p.time_unix_nano and p.time_unix_nano < cutoff)]
                        del sp.profiles[:]
                        sp.profiles.extend(keep)
                req = fresh
        read = functools.partial(decode.records_from_otlp_profiles, req, now_ns=now_ns)
        try:
            records = await asyncio.to_thread(read) if req.ByteSize() >= DECODE_IN_THREAD_BYTES else read()
        except InvalidArgument:
            if self._metrics is not None:
                self._metrics.ingest_rejected.labels("otlp-profiles").inc()
            raise
        await self.ingest_profiles(records, tenant)
        return answer

    def _function_id(self, conn: sqlite3.Connection, name: str) -> int:
        return _intern(
            conn,
            self._function_ids,
            name,
            "SELECT id FROM functions WHERE name = ?",
            (name,),
            "INSERT INTO functions (name) VALUES (?)",
            (name,),
        )

    def _stack_id(self, conn: sqlite3.Connection, frames: tuple[str, ...]) -> int:
        sid = self._stack_ids.get(frames)
        if sid is not None:
            return sid
        function_ids = [self._function_id(conn, name) for name in frames]
        blob = pack_frames(function_ids)
        sid = _intern(
            conn,
            self._stack_ids,
            frames,
            "SELECT id FROM stacks WHERE frames = ?",
            (blob,),
            "INSERT INTO stacks (frames) VALUES (?)",
            (blob,),
        )
        index_stack(conn, sid, function_ids)  # the function → spans index (store/functions.py)
        return sid

    def _series_id(self, conn: sqlite3.Connection, tenant: str, record: decode.ProfileRecord) -> int:
        labels = json.dumps(dict(record.labels), sort_keys=True, separators=(",", ":"))
        key = (tenant, labels)
        return _intern(
            conn,
            self._series_ids,
            key,
            "SELECT id FROM series WHERE tenant = ? AND labels = ?",
            key,
            "INSERT INTO series (tenant, labels, service, profile_type) VALUES (?, ?, ?, ?)",
            (tenant, labels, record.service, record.profile_type),
        )

    def _insert_profiles(self, conn: sqlite3.Connection, tenant: str, records: Sequence[decode.ProfileRecord]) -> int:
        stored = 0
        marks = self.load_marks(conn)
        for record in records:
            if not record.samples:
                continue
            series_id = self._series_id(conn, tenant, record)
            cur = conn.execute(
                "INSERT INTO profiles (series_id, time_ns, duration_ns, total, period) VALUES (?, ?, ?, ?, ?)",
                (series_id, record.time_ns, record.duration_ns, record.total, record.period),
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
            spans: dict[int, list[Any]] = {}  # span → [its value, a trace id] (the per-span rollups)
            traces: set[bytes] = set()
            for row in rows:
                per_stack[row[2]] = per_stack.get(row[2], 0) + row[3]
                if row[4] is not None:
                    seen = spans.get(row[4])
                    if seen is None:
                        spans[row[4]] = [row[3], row[5]]
                    else:
                        seen[0] += row[3]
                        seen[1] = seen[1] or row[5]
                if row[5] is not None:
                    traces.add(row[5])
            conn.executemany(
                "INSERT INTO profile_stacks (profile_id, stack_id, value) VALUES (?, ?, ?)",
                [(profile_id, stack, value) for stack, value in per_stack.items()],
            )
            bucket = rollup.link_bucket(record.time_ns)
            if spans:
                conn.executemany(
                    "INSERT INTO span_profiles (bucket, span_id, profile_id) VALUES (?, ?, ?)",
                    [(bucket, span, profile_id) for span in spans],
                )
            if traces:
                conn.executemany(
                    "INSERT INTO trace_profiles (bucket, trace_id, profile_id) VALUES (?, ?, ?)",
                    [(bucket, trace, profile_id) for trace in traces],
                )
            if spans or traces:
                mark_buckets(conn, LINK_BUCKETS, {bucket})
            if spans:
                span_totals.add_profile(conn, series_id, record.time_ns, spans)
            if record.time_ns < marks[rollup.LEVELS[0]]:
                rollup.add_late(conn, marks, series_id, record.time_ns, per_stack)
            stored += len(rows)
        return stored

    # ----------------------------------------------------------------------------------------- traces

    async def ingest_spans(self, batch: decode_spans.SpanBatch, tenant: str | None) -> int:
        """Write decoded spans (and their tags) in one transaction; returns the number of spans stored. Spans that
        start before the retention age are left out, counted in ``batch.rejected`` and named in ``batch.message``."""
        cutoff = self.cutoff_ns()
        if cutoff is not None and batch.rows:
            old = [r.start_ns for r in batch.rows if r.start_ns < cutoff]
            if old:
                batch.rows = [r for r in batch.rows if r.start_ns >= cutoff]
                batch.rejected += len(old)
                why = self._too_old("spans", len(old), min(old), cutoff)
                batch.message = f"{batch.message}; {why}" if batch.message else why
        if not batch.rows:
            return 0
        key = tenant_key(tenant)
        stored = await self._db.commit(lambda conn: self._insert_spans(conn, key, batch))
        if self._metrics is not None:
            self._metrics.ingested.labels("spans").inc(stored)
        return stored

    async def ingest_otlp_traces(
        self, req: otlp_trace_svc.ExportTraceServiceRequest, tenant: str | None
    ) -> tuple[int, str]:
        """The trace sink (``/v1/traces`` and gRPC TraceService): returns (rejected spans, message)."""
        batch = (
            await asyncio.to_thread(decode_spans.rows_from_export, req)
            if req.ByteSize() >= DECODE_IN_THREAD_BYTES
            else (decode_spans.rows_from_export(req))
        )
        await self.ingest_spans(batch, tenant)
        return batch.rejected, batch.message

    def _blob_id(self, conn: sqlite3.Connection, table: str, body: bytes) -> int:
        return _intern(
            conn,
            self._blob_ids,
            (table, body),
            f"SELECT id FROM {table} WHERE body = ?",
            (body,),
            f"INSERT INTO {table} (body) VALUES (?)",
            (body,),
        )

    def _insert_spans(self, conn: sqlite3.Connection, tenant: str, batch: decode_spans.SpanBatch) -> int:
        rows = [
            (
                tenant,
                r.trace_id,
                r.span_id,
                r.parent_span_id,
                r.service,
                r.name,
                r.start_ns,
                r.end_ns,
                self._blob_id(conn, "resources", r.resource),
                self._blob_id(conn, "scopes", r.scope),
                r.body,
            )
            for r in batch.rows
        ]
        conn.executemany(
            "INSERT OR REPLACE INTO spans (tenant, trace_id, span_id, parent_span_id, service, name, start_ns, "
            "end_ns, resource_id, scope_id, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        mark_buckets(conn, SPAN_BUCKETS, {r.start_ns // SPAN_BUCKET_NS for r in batch.rows})
        if batch.tags:
            last = max(r.end_ns for r in batch.rows)
            conn.executemany(
                "INSERT INTO tags (tenant, scope, key, type, value, last_ns) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant, scope, key, type, value) DO UPDATE SET last_ns = max(last_ns, excluded.last_ns)",
                [(tenant, scope, key, kind, value, last) for scope, key, kind, value in batch.tags],
            )
        return len(rows)


def _iso(time_ns: int) -> str:
    seconds = max(0, min(time_ns // 1_000_000_000, 253_402_300_799))
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
