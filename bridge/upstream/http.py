"""Tempo and Pyroscope over HTTP (proxy mode): one ``ClientSession`` per upstream, one ``async def`` per call.

Every call gets the time left in the request's deadline, capped by ``settings.upstream_timeout``, as an explicit
``ClientTimeout``; records ``metrics.upstream_seconds``; and maps failures once (``bridge.upstream.faults``), most
specific first, ``raise … from exc``. Pyroscope's own Connect errors pass through with their code.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final, TypeVar

import aiohttp
from google.protobuf.message import DecodeError, Message

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.config import Settings
from bridge.connect import PROTO, decode_error
from bridge.errors import (
    Code,
    InvalidArgument,
    UpstreamError,
    UpstreamUnavailable,
    code_for_http_status,
)
from bridge.metrics import Metrics
from bridge.spans import SearchHit, Span, Trace
from bridge.upstream.bounded import read_capped
from bridge.upstream.guard import exchange_timeout, upstream_call
from bridge.wire import pyroscope as pyroscope_wire
from bridge.wire import tempo as tempo_wire

M = TypeVar("M", bound=Message)

CONNECTIONS_PER_UPSTREAM: Final = 256


class _Upstream:
    """What both clients share: the session, the base URL, budgets, metrics and the one error mapping."""

    name = "upstream"

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, settings: Settings, metrics: Metrics | None = None
    ) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.settings = settings
        self.metrics = metrics

    def timeout(self, ctx: CallContext) -> aiohttp.ClientTimeout:
        """The time this call may take: what remains of the request's budget, at most ``upstream_timeout``."""
        return exchange_timeout(self.settings, ctx, self.name, f"ask {self.name}")

    async def call(
        self,
        call: str,
        method: str,
        path: str,
        ctx: CallContext,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[int, str, bytes]:
        """One HTTP exchange: (status, content type, body). Transport failures → ``UpstreamError``."""
        timeout = self.timeout(ctx)
        sent = ctx.headers()
        if headers:
            sent.update(headers)
        async with upstream_call(self.metrics, self.name, call, timeout) as outcome:
            async with self.session.request(
                method,
                self.base_url + path,
                params=params,
                headers=sent,
                data=data,
                timeout=timeout,
                allow_redirects=False,
            ) as resp:
                body = await read_capped(resp, self.settings.max_upstream_answer_bytes, self.name, call)
                outcome.status(resp.status)
                return resp.status, resp.headers.get("Content-Type", ""), body

    def http_error(self, status: int, body: bytes, what: str) -> UpstreamError:
        """Pure: a non-success answer → the error the user sees, naming the upstream and its words."""
        connect = decode_error(status, body)
        if connect is not None:
            code, message = connect
            return UpstreamError(self.name, f"{self.name}: {message}", code=code)
        text = body[:300].decode("utf-8", "replace").strip()
        code = code_for_http_status(status)
        cls = UpstreamUnavailable if code is Code.UNAVAILABLE else UpstreamError
        return cls(self.name, f"{self.name} answered {what} with HTTP {status}: {text or '(no body)'}", code=code)

    async def ready(self, ctx: CallContext) -> str:
        status, _, body = await self.call("ready", "GET", "/ready", ctx)
        text = body[:200].decode("utf-8", "replace").strip()
        if status != 200:
            raise UpstreamUnavailable(self.name, f"{self.name} is not ready (HTTP {status}: {text})")
        return text or "ready"


class TempoClient(_Upstream):
    """Tempo's query API (grafana/tempo ``pkg/api/http.go``: the paths at lines 83–100, v1
    ``/api/traces/{traceID}`` and v2 ``/api/v2/traces/{traceID}``)."""

    name = "tempo"

    async def trace_by_id(
        self, trace_id: str, ctx: CallContext, start_s: int | None = None, end_s: int | None = None
    ) -> Trace | None:
        params = {"start": str(start_s), "end": str(end_s)} if start_s is not None and end_s is not None else None
        accept = {"Accept": tempo_wire.PROTOBUF}
        status, ctype, body = await self.call(
            "trace_by_id", "GET", tempo_wire.trace_path(trace_id, 2), ctx, params=params, headers=accept
        )
        v1 = status == 404
        if v1:  # a Tempo older than v2.6 has no v2 endpoint
            status, ctype, body = await self.call(
                "trace_by_id", "GET", tempo_wire.trace_path(trace_id, 1), ctx, headers=accept
            )
            if status == 404:
                return None
        if status != 200:
            raise self.http_error(status, body, f"trace {trace_id}")
        spans = self._decode_trace(body, ctype, v1, trace_id)
        return Trace.from_spans(spans, trace_id) if spans else None

    def _decode_trace(self, body: bytes, ctype: str, v1: bool, trace_id: str) -> list[Span]:
        try:
            return tempo_wire.decode_trace(body, ctype, 1 if v1 else 2)
        except ValueError as exc:
            raise UpstreamError(self.name, f"tempo answered trace {trace_id} with {exc}") from exc

    async def search(
        self, query: str, start_s: int, end_s: int, limit: int, ctx: CallContext, spss: int = 3
    ) -> list[SearchHit]:
        params = {"q": query, "start": str(start_s), "end": str(end_s), "limit": str(limit), "spss": str(spss)}
        status, _, body = await self.call("search", "GET", tempo_wire.SEARCH_PATH, ctx, params=params)
        if status != 200:
            raise self.http_error(status, body, "a search")
        try:
            return tempo_wire.decode_search(body)
        except ValueError as exc:
            raise UpstreamError(self.name, f"tempo answered a search with {exc}") from exc

    async def find_span(self, span_id: str, start_s: int, end_s: int, ctx: CallContext) -> SearchHit | None:
        query = tempo_wire.span_by_id_query(span_id)
        for hit in await self.search(query, start_s, end_s, 5, ctx, spss=10):
            if hit.span_id == span_id:
                return hit
        return None


class PyroscopeClient(_Upstream):
    """Pyroscope's querier over Connect, binary protobuf (what Grafana itself sends)."""

    name = "pyroscope"
    stamps_window_start = False  # Pyroscope keeps each SDK's own pprof stamp (start or end of the window)

    async def rpc(self, method: str, req: Message, cls: type[M], ctx: CallContext) -> M:
        headers = {
            "Content-Type": PROTO,
            "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": str(max(1, math.floor((self.timeout(ctx).total or 0) * 1000))),
            "Accept-Encoding": "gzip",
        }
        status, _, body = await self.call(
            method, "POST", pyroscope_wire.QUERIER_PATH + method, ctx, headers=headers, data=req.SerializeToString()
        )
        if status != 200:
            raise self.http_error(status, body, method)
        out = cls()
        try:
            out.ParseFromString(body)
        except DecodeError as exc:
            raise UpstreamError(
                self.name,
                f"pyroscope answered {method} with something that is not a {cls.DESCRIPTOR.full_name} ({exc})",
            ) from exc
        return out

    async def select_merge_stacktraces(
        self, req: qpb.SelectMergeStacktracesRequest, ctx: CallContext
    ) -> qpb.SelectMergeStacktracesResponse:
        return await self.rpc("SelectMergeStacktraces", req, qpb.SelectMergeStacktracesResponse, ctx)

    async def select_merge_span_profile(
        self, req: qpb.SelectMergeSpanProfileRequest, ctx: CallContext
    ) -> qpb.SelectMergeSpanProfileResponse:
        if not req.span_selector:  # Pyroscope answers an empty selector with the unfiltered profile
            raise InvalidArgument("an empty span selector is never sent to Pyroscope (it would match every sample)")
        return await self.rpc("SelectMergeSpanProfile", req, qpb.SelectMergeSpanProfileResponse, ctx)

    async def profile_types(self, req: qpb.ProfileTypesRequest, ctx: CallContext) -> qpb.ProfileTypesResponse:
        return await self.rpc("ProfileTypes", req, qpb.ProfileTypesResponse, ctx)

    async def label_values(self, req: tpb.LabelValuesRequest, ctx: CallContext) -> tpb.LabelValuesResponse:
        return await self.rpc("LabelValues", req, tpb.LabelValuesResponse, ctx)

    async def label_names(self, req: tpb.LabelNamesRequest, ctx: CallContext) -> tpb.LabelNamesResponse:
        return await self.rpc("LabelNames", req, tpb.LabelNamesResponse, ctx)

    async def series(self, req: qpb.SeriesRequest, ctx: CallContext) -> qpb.SeriesResponse:
        return await self.rpc("Series", req, qpb.SeriesResponse, ctx)

    async def select_series(self, req: qpb.SelectSeriesRequest, ctx: CallContext) -> qpb.SelectSeriesResponse:
        return await self.rpc("SelectSeries", req, qpb.SelectSeriesResponse, ctx)

    async def select_heatmap(self, req: qpb.SelectHeatmapRequest, ctx: CallContext) -> qpb.SelectHeatmapResponse:
        return await self.rpc("SelectHeatmap", req, qpb.SelectHeatmapResponse, ctx)


def new_session(settings: Settings) -> aiohttp.ClientSession:
    """One session per upstream: pooled keep-alive connections and an explicit default timeout. No cookie jar:
    the session carries many users' requests, so nothing one upstream answer sets may reach another request."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=settings.upstream_timeout, connect=settings.connect_timeout),
        cookie_jar=aiohttp.DummyCookieJar(),
        connector=aiohttp.TCPConnector(limit=CONNECTIONS_PER_UPSTREAM, keepalive_timeout=30),
    )


@asynccontextmanager
async def open_clients(
    settings: Settings, metrics: Metrics | None = None
) -> AsyncIterator[tuple[TempoClient, PyroscopeClient]]:
    """The two upstream clients for the app's lifetime; sessions closed on exit."""
    async with new_session(settings) as tempo_session, new_session(settings) as pyroscope_session:
        yield (
            TempoClient(tempo_session, settings.tempo_url, settings, metrics),
            PyroscopeClient(pyroscope_session, settings.pyroscope_url, settings, metrics),
        )
