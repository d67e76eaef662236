"""What the resolver and the mounts need from the backends, whoever serves them: Tempo and Pyroscope over HTTP
(proxy mode, ``TempoClient`` / ``PyroscopeClient``) or the embedded store (standalone mode)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.connect import Deadline
from bridge.functions import FunctionHits, FunctionQuery
from bridge.spans import SearchHit, Trace

# request headers carried from Grafana to every upstream call made on its behalf
FORWARDED_HEADERS: Final = ("X-Scope-OrgID", "Authorization")


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who asked (tenant, credentials) and how long is left (deadline) for one incoming request."""

    deadline: Deadline
    tenant: str | None = None
    authorization: str | None = None
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        out = dict(self.extra_headers)
        if self.tenant:
            out["X-Scope-OrgID"] = self.tenant
        if self.authorization:
            out["Authorization"] = self.authorization
        return out

    @property
    def tenant_key(self) -> str:
        """The tenant as the store keeps it: no tenant is ``anonymous``, as in Pyroscope without multi-tenancy."""
        return self.tenant or "anonymous"

    @property
    def cache_scope(self) -> str:
        """What the bridge's caches are keyed by (``scope_key``): an answer fetched for one caller is reused only for
        a caller who sent the same tenant header and the same credentials."""
        return scope_key(self.tenant, self.authorization)


def scope_key(tenant: str | None, authorization: str | None = None) -> str:
    """Pure: the cache scope of a caller. The tenant exactly as sent — no header is not ``anonymous`` nor any other
    value — and a digest of the credentials when there are any: a caller without them (or with others) is never
    shown what the upstream answered someone else."""
    key = "-" if tenant is None else "t:" + tenant
    if authorization:
        key += "|" + hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return key


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
        """Per ``step``, the summed values of the matching profiles stamped in that step (steps without any
        profile have no point)."""
        ...

    async def ready(self, ctx: CallContext) -> str: ...


class FunctionIndex(Protocol):
    """Which spans burn a function (``bridge.functions``): the store's own index of per-sample span ids, or
    Pyroscope's span exemplars."""

    name: str

    async def function_spans(self, query: FunctionQuery, selector: str, ctx: CallContext) -> FunctionHits:
        """The spans whose linked samples in ``[query.start_ms, query.end_ms]`` of the profiles ``selector`` matches
        hold the function, most value through it first, at most ``query.limit``. ``Unimplemented`` when the backend
        cannot answer the question at all."""
        ...
