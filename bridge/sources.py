"""What the resolver, the pages and the mounts need from the backends, whoever serves them: Tempo and Pyroscope over
HTTP (proxy mode, ``bridge.upstream.http``'s ``TempoClient`` / ``PyroscopeClient``) or the embedded store (standalone
mode, ``bridge.store``). Protocols only: both modes implement them, neither is imported here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.functions import FunctionHits, FunctionQuery
from bridge.spans import SearchHit, Trace


class TraceSource(Protocol):
    """Tempo, or the store, seen from the resolver, the pages and doctor."""

    name: str

    async def trace_by_id(
        self, trace_id: str, ctx: CallContext, start_s: int | None = None, end_s: int | None = None
    ) -> Trace | None:
        """The whole trace, or None when it is not found (v1 404, v2 empty trace)."""
        ...

    async def find_span(self, span_id: str, start_s: int, end_s: int, ctx: CallContext) -> SearchHit | None:
        """TraceQL ``{ span:id = "…" }`` within ``[start_s, end_s]``; None when not found."""
        ...

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        """A TraceQL search; one hit per matched span."""
        ...

    async def ready(self, ctx: CallContext) -> str:
        """Raise an UpstreamError when the backend does not answer; return a short status text otherwise."""
        ...


class ProfileSource(Protocol):
    """Pyroscope, or the store, seen from the resolver, the pages and doctor."""

    name: str
    # True when every stored profile is stamped at the START of its capture window, whatever the SDK did (the
    # store normalises at ingest); False when stamps are the SDKs' own (Pyroscope keeps pprof ``time_nanos``)
    stamps_window_start: bool

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse: ...

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse: ...

    async def profile_types(self, req: qpb.ProfileTypesRequest, ctx: CallContext) -> qpb.ProfileTypesResponse: ...

    async def label_values(self, req: tpb.LabelValuesRequest, ctx: CallContext) -> tpb.LabelValuesResponse: ...

    async def series(self, req: qpb.SeriesRequest, ctx: CallContext) -> qpb.SeriesResponse:
        """Label sets of the series matching ``matchers`` in ``[start, end]``, reduced to ``label_names``."""
        ...

    async def select_series(self, req: qpb.SelectSeriesRequest, ctx: CallContext) -> qpb.SelectSeriesResponse:
        """Per point (``start`` + k·step, up to ``end``), the summed values of the matching profiles stamped in the
        step that ends at it, the first point taking those from one step before ``start`` (Pyroscope's v2 read path;
        points without any profile are left out)."""
        ...

    async def ready(self, ctx: CallContext) -> str: ...


class PeriodSource(Protocol):
    """What one sample adds to a profile's values, as the store kept it from each upload (``profiles.period``).
    Pyroscope's query API does not say: its merged pprof carries a period guessed from the profile type
    (``pkg/pprof/pprof.go`` ``SetProfileMetadata``), so proxy mode goes without (``bridge.sampling``)."""

    async def sample_periods(
        self, profile_type: str, selector: str, start_ms: int, end_ms: int, ctx: CallContext
    ) -> Mapping[int, int]:
        """Each period (0: not known) of the matching profiles in ``[start_ms, end_ms]``, with how many had it."""
        ...


class FunctionIndex(Protocol):
    """Which spans burn a function (``bridge.functions``): the store's own index of per-sample span ids, or
    Pyroscope's span exemplars."""

    name: str

    async def function_spans(self, query: FunctionQuery, selector: str, ctx: CallContext) -> FunctionHits:
        """The spans whose linked samples in ``[query.start_ms, query.end_ms]`` of the profiles ``selector`` matches
        hold the function, most value through it first, at most ``query.limit``. ``Unimplemented`` when the backend
        cannot answer the question at all."""
        ...
