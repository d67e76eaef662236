"""``Store``: standalone mode's backend, one object that is the trace source, the profile source, the rest of
Pyroscope's querier and the ingest sinks — composed of the store's parts, each in its own module:

- ``database.Database`` (``store.db``): the SQLite file, its writer thread (group commit) and reader pool;
- ``ingest.Ingest`` (``store.ingest``): decoded profiles and spans into tables, the OTLP sinks;
- ``retention``: the age and size budgets; ``rollup``: per-stack totals per minute … 6 hours, compacted in the
  background (``compact``);
- ``traces.Traces`` (``store.traces``): trace by id, span lookup, TraceQL search and metrics, tags;
- ``profiles.Profiles`` (``store.profiles``): merged stacks, the querier RPCs, series, profile types, labels;
- ``functions.FunctionSpans`` (``store.functions``): which spans burn a function;
- ``overview.Overview`` (``store.overview``): ``GetProfileStats``, ``AnalyzeQuery``, ``SelectHeatmap``, ``Diff``;
- ``settings.TenantSettings`` (``store.settings``): Pyroscope's settings service, per tenant.

``Store`` only forwards (its methods are the public API the app, the routes and the tests use) and answers what
belongs to the whole store: ``ready``, ``counts``, ``used_bytes``, ``compact``, ``analyze``, ``close``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_profiles_svc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import profile_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.functions import FunctionHits, FunctionQuery
from bridge.metrics import Metrics
from bridge.spans import SearchHit, Trace
from bridge.store import decode, decode_spans, retention, rollup
from bridge.store.database import DB_FILE, Database, StoreError
from bridge.store.functions import FunctionSpans
from bridge.store.ingest import Ingest
from bridge.store.integrity import header_problem
from bridge.store.metrics import MetricsOutcome
from bridge.store.overview import Overview
from bridge.store.profiles import ProfileRow, Profiles
from bridge.store.retention import RetentionResult
from bridge.store.search import Outcome
from bridge.store.settings import TenantSettings
from bridge.store.traces import Traces
from bridge.traceql.timeseries import QueryRange


@dataclass(frozen=True, slots=True)
class Counts:
    """What the store holds (for tests and tools)."""

    spans: int
    traces: int
    profiles: int
    uploads: int  # distinct capture windows
    samples: int
    sample_value: int
    samples_with_span: int
    distinct_span_ids: int
    series: int


class Store:
    """The standalone store. Implements ``TraceSource``, ``ProfileSource`` and ``FunctionIndex``, plus the rest of
    Pyroscope's querier and the ingest sinks."""

    name = "store"
    stamps_window_start = True  # ingest stores every profile at the start of its capture window (decode.upload_window)

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        retention_age: float | None = None,
    ) -> None:
        self.db = db
        self.path = db.path
        self._clock = clock
        self.ingest = Ingest(db, clock=clock, metrics=metrics, retention_age=retention_age)
        self.traces = Traces(db)
        self.profiles = Profiles(db)
        self.functions = FunctionSpans(db)
        self.overview = Overview(db, self.profiles)
        self.settings = TenantSettings(db, clock)

    # ----------------------------------------------------------------------------------------- lifetime

    @classmethod
    async def open(
        cls,
        data_dir: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        readers: int = 3,
        synchronous: str = "FULL",
        metrics: Metrics | None = None,
        retention_age: float | None = None,
    ) -> Store:
        """Open the store under ``data_dir``. With ``retention_age`` (seconds), data older than that is refused at
        ingest (it would be dropped at once)."""
        db = await Database.open(Path(data_dir) / DB_FILE, readers=readers, synchronous=synchronous)
        return cls(db, clock=clock, metrics=metrics, retention_age=retention_age)

    async def close(self) -> None:
        await self.db.close()

    async def ready(self, ctx: CallContext) -> str:
        """``/readyz``: cheap — the file's header and size (``integrity.header_problem``) and one read; a store known
        to be damaged, or found so now, is not ready (``StoreDamaged``)."""
        if self.db.damage is not None:
            raise self.db.damaged_error()

        def check(conn: sqlite3.Connection) -> str | None:
            problem = header_problem(self.path)
            if problem is None:
                conn.execute("SELECT 1 FROM schema_version").fetchone()
            return problem

        try:
            problem = await self.db.read(check)
        except sqlite3.Error as exc:
            raise StoreError(f"the store at {self.path} does not answer: {exc}") from exc
        if problem is not None:
            self.db.mark_damaged(problem)
            raise self.db.damaged_error()
        return f"standalone store at {self.path}"

    # ----------------------------------------------------------------------------------------- ingest

    async def ingest_profiles(self, records: Sequence[decode.ProfileRecord], tenant: str | None) -> int:
        return await self.ingest.ingest_profiles(records, tenant)

    async def ingest_otlp_profiles(
        self, req: otlp_profiles_svc.ExportProfilesServiceRequest, tenant: str | None
    ) -> otlp_profiles_svc.ExportProfilesServiceResponse:
        return await self.ingest.ingest_otlp_profiles(req, tenant)

    async def ingest_spans(self, batch: decode_spans.SpanBatch, tenant: str | None) -> int:
        return await self.ingest.ingest_spans(batch, tenant)

    async def ingest_otlp_traces(
        self, req: otlp_trace_svc.ExportTraceServiceRequest, tenant: str | None
    ) -> tuple[int, str]:
        return await self.ingest.ingest_otlp_traces(req, tenant)

    # ----------------------------------------------------------------------------------------- retention and size

    async def enforce_retention(self, max_age_s: float, max_bytes: int) -> RetentionResult:
        now_ns = int(self._clock() * 1_000_000_000)
        return await retention.enforce_retention(self.db, now_ns - int(max_age_s * 1_000_000_000), max_bytes, now_ns)

    async def used_bytes(self) -> int:
        return await retention.used_bytes(self.db)

    # ----------------------------------------------------------------------------------------- background upkeep

    async def compact(self, max_slices: int = 1_000_000) -> int:
        """Advance the rollups as far as the clock allows, one bounded slice per transaction (ingest interleaves);
        returns the number of slices done."""
        done = 0
        while done < max_slices and await self.db.write(self._compact_slice):
            done += 1
        return done

    def _compact_slice(self, conn: sqlite3.Connection) -> bool:
        now_ns = int(self._clock() * 1_000_000_000)
        marks: dict[int, int] = {}

        def step(c: sqlite3.Connection) -> bool:
            marks.update(self.ingest.load_marks(c))  # inside the write lock: current even if another process wrote
            return rollup.compact_step(c, now_ns, marks)

        advanced = self.db.transaction(step)
        if advanced:
            self.ingest.marks = marks  # only once committed
        return advanced

    async def analyze(self) -> None:
        """Refresh the query planner's statistics (``ANALYZE`` over a bounded sample of each index)."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA analysis_limit = 1000")
            conn.execute("ANALYZE")

        await self.db.write(run)

    async def counts(self, tenant: str | None = None) -> Counts:
        return await self.db.read(_counts, tenant)

    # ----------------------------------------------------------------------------------------- TraceSource

    async def trace_by_id(
        self, trace_id: str, ctx: CallContext, start_s: int | None = None, end_s: int | None = None
    ) -> Trace | None:
        return await self.traces.trace_by_id(trace_id, ctx, start_s, end_s)

    async def find_span(self, span_id: str, start_s: int, end_s: int, ctx: CallContext) -> SearchHit | None:
        return await self.traces.find_span(span_id, start_s, end_s, ctx)

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        return await self.traces.search(query, start_s, end_s, limit, ctx, spss)

    async def trace_resource_spans(self, trace_id: str, tenant: str | None) -> list[otlp_trace.ResourceSpans]:
        return await self.traces.trace_resource_spans(trace_id, tenant)

    async def search_traces(
        self,
        query: str,
        start_s: int,
        end_s: int,
        limit: int,
        spss: int,
        tenant: str | None,
        budget: int | None = None,
    ) -> Outcome:
        return await self.traces.search_traces(query, start_s, end_s, limit, spss, tenant, budget)

    async def query_range(self, q: QueryRange, tenant: str | None, budget: int | None = None) -> MetricsOutcome:
        return await self.traces.query_range(q, tenant, budget)

    def now_ns(self) -> int:
        """The store's clock, in Unix nanoseconds (what "now" means to a query)."""
        return int(self._clock() * 1_000_000_000)

    async def tag_keys(self, tenant: str | None, scopes: Sequence[str], since_ns: int = 0) -> dict[str, list[str]]:
        return await self.traces.tag_keys(tenant, scopes, since_ns)

    async def tag_values(
        self, tenant: str | None, where: Sequence[tuple[str, str]], since_ns: int = 0, limit: int = 1000
    ) -> list[tuple[str, str]]:
        return await self.traces.tag_values(tenant, where, since_ns, limit)

    # ----------------------------------------------------------------------------------------- ProfileSource

    async def merged_stacks(
        self,
        tenant: str | None,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        *,
        span_ids: Sequence[int] | None = None,
        trace_ids: Sequence[bytes] | None = None,
    ) -> list[tuple[tuple[str, ...], int]]:
        return await self.profiles.merged_stacks(
            tenant, profile_type, selector, start_ms, end_ms, span_ids=span_ids, trace_ids=trace_ids
        )

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse:
        return await self.profiles.select_merge_stacktraces(req, ctx)

    async def stacks_of(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> list[tuple[tuple[str, ...], int]]:
        return await self.profiles.stacks_of(req, ctx)

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse:
        return await self.profiles.select_merge_span_profile(req, ctx)

    async def select_merge_profile(self, req: qpb.SelectMergeProfileRequest, ctx: CallContext) -> profile_pb2.Profile:
        return await self.profiles.select_merge_profile(req, ctx)

    async def profile_types(self, req: qpb.ProfileTypesRequest, ctx: CallContext) -> qpb.ProfileTypesResponse:
        return await self.profiles.profile_types(req, ctx)

    async def label_names(self, req: tpb.LabelNamesRequest, ctx: CallContext) -> tpb.LabelNamesResponse:
        return await self.profiles.label_names(req, ctx)

    async def label_values(self, req: tpb.LabelValuesRequest, ctx: CallContext) -> tpb.LabelValuesResponse:
        return await self.profiles.label_values(req, ctx)

    async def series(self, req: qpb.SeriesRequest, ctx: CallContext) -> qpb.SeriesResponse:
        return await self.profiles.series(req, ctx)

    async def select_series(self, req: qpb.SelectSeriesRequest, ctx: CallContext) -> qpb.SelectSeriesResponse:
        return await self.profiles.select_series(req, ctx)

    async def profile_rows(
        self, tenant: str, profile_type: str, selector: str, window: tuple[int, int]
    ) -> list[ProfileRow]:
        return await self.db.read(self.profiles.profile_rows, tenant, profile_type, selector, window)

    async def step_totals(
        self,
        tenant: str,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        step_ms: int,
        by_series: bool = False,
    ) -> list[tuple[dict[str, str], int, int, int]]:
        return await self.db.read(
            self.profiles.step_totals, tenant, profile_type, selector, start_ms, end_ms, step_ms, by_series
        )

    async def select_heatmap(self, req: qpb.SelectHeatmapRequest, ctx: CallContext) -> qpb.SelectHeatmapResponse:
        return await self.overview.select_heatmap(req, ctx)

    async def diff(self, req: qpb.DiffRequest, ctx: CallContext) -> qpb.DiffResponse:
        return await self.overview.diff(req, ctx)

    async def get_profile_stats(self, req: tpb.GetProfileStatsRequest, ctx: CallContext) -> tpb.GetProfileStatsResponse:
        return await self.overview.get_profile_stats(req, ctx)

    async def analyze_query(self, req: qpb.AnalyzeQueryRequest, ctx: CallContext) -> qpb.AnalyzeQueryResponse:
        return await self.overview.analyze_query(req, ctx)

    # ----------------------------------------------------------------------------------------- PeriodSource

    async def sample_periods(
        self, profile_type: str, selector: str, start_ms: int, end_ms: int, ctx: CallContext
    ) -> dict[int, int]:
        return await self.profiles.sample_periods(profile_type, selector, start_ms, end_ms, ctx)

    # ----------------------------------------------------------------------------------------- FunctionIndex

    async def function_spans(self, query: FunctionQuery, selector: str, ctx: CallContext) -> FunctionHits:
        return await self.functions.function_spans(query, selector, ctx)


def _counts(conn: sqlite3.Connection, tenant: str | None) -> Counts:
    t = "" if tenant is None else " WHERE tenant = ?"
    tp: tuple[Any, ...] = () if tenant is None else (tenant,)
    spans, traces = conn.execute(f"SELECT count(*), count(DISTINCT trace_id) FROM spans{t}", tp).fetchone()
    s_filter = "" if tenant is None else " WHERE series_id IN (SELECT id FROM series WHERE tenant = ?)"
    profiles, uploads = conn.execute(f"SELECT count(*), count(DISTINCT time_ns) FROM profiles{s_filter}", tp).fetchone()
    samples, value, with_span, distinct = conn.execute(
        "SELECT count(*), coalesce(sum(value), 0), count(span_id), count(DISTINCT span_id) FROM samples" + s_filter,
        tp,
    ).fetchone()
    series = conn.execute(f"SELECT count(*) FROM series{t}", tp).fetchone()[0]
    return Counts(spans, traces, profiles, uploads, samples, value, with_span, distinct, series)
