"""The ground floor of the app: its typed state, what the mode gives the routes, the clock, and each request's call
context. Everything that serves a request imports this module; it imports nothing that serves one.

- ``SETTINGS``, ``METRICS``, ``CLOCK``, ``SPAN_CACHE``: set by ``create_app``, read by everyone.
- ``Backends``: what the mode (proxy or standalone, chosen once at start, ``bridge.mode``) hands the routes, pages,
  resolver and gateway — the same record filled the same way by both modes. Routes ask their backend, never the
  mode. It exists once the app has started: ``backends_of(app)``.
- ``call_context(request)``: one budget per incoming request, and the caller's tenant and credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from google.protobuf.message import Message

from bridge.auth import Grant
from bridge.call import CallContext, Deadline
from bridge.config import Settings
from bridge.connect import Codec
from bridge.diskfull import DiskFull
from bridge.metrics import Metrics
from bridge.otlp.gateway import Gateway
from bridge.otlp.grpc_server import GrpcServer
from bridge.otlp.pull import Puller
from bridge.resolve import Resolver
from bridge.services import ProfiledServices
from bridge.sources import FunctionIndex, ProfileSource, TraceSource
from bridge.spancache import SpanCache
from bridge.store.decode import ProfileRecord
from bridge.store.decode_spans import SpanBatch
from bridge.wire.tempo import TempoAnswer

SETTINGS = web.AppKey("settings", Settings)
# set by the token gate (bridge.gate), with tokens on: what the caller's token allows; and, on the open routes
# (/healthz, /readyz), that the caller showed no accepted token (such answers leave out their details)
GRANT = web.RequestKey("grant", Grant)
TOKENLESS = web.RequestKey("tokenless", bool)
METRICS = web.AppKey("metrics", Metrics)
SPAN_CACHE = web.AppKey("span_cache", SpanCache)


@dataclass(frozen=True, slots=True)
class Clock:
    """Wall-clock time (``time.time``), injectable so tests never depend on the real clock."""

    now: Callable[[], float] = time.time


CLOCK = web.AppKey("clock", Clock)


# --------------------------------------------------------------------------------------------- what the mounts ask


class PyroscopeMount(Protocol):
    """How the ``/pyroscope`` mount answers what the resolver does not: Pyroscope itself (streamed, never decoded
    unless the bridge must) or the embedded store."""

    def must_decode(self, method: str | None, content_type: str | None) -> bool:
        """Whether the bridge reads this request (``method``: the querier RPC, None for other paths): span RPCs it
        may resolve, and everything the store answers. Anything else is passed on as it comes."""
        ...

    async def pass_on(
        self, request: web.Request, ctx: CallContext, body: bytes | None = None, encoding: str | None = None
    ) -> web.StreamResponse:
        """Answer ``request`` without decoding it (``body``: when it was read already, in ``encoding``)."""
        ...

    async def call(self, method: str, data: bytes, codec: Codec, ctx: CallContext) -> Message | None:
        """Answer a decoded querier RPC here; None: it is to be passed on (``pass_on``) instead."""
        ...


class TempoMount(Protocol):
    """How the ``/tempo`` mount reaches traces: Tempo itself or the embedded store."""

    async def trace_by_id(self, request: web.Request, path: str, ctx: CallContext) -> TempoAnswer:
        """The whole trace-by-ID answer for ``path`` (``api/v2/traces/<id>`` …), to be enriched."""
        ...

    async def pass_on(self, request: web.Request, path: str, ctx: CallContext) -> web.StreamResponse:
        """Everything else under the mount."""
        ...


class IngestSink(Protocol):
    """Where SDK ingest lands (standalone mode: the store). Each call commits before it returns."""

    async def ingest_profiles(self, records: list[ProfileRecord], tenant: str | None) -> int: ...

    async def ingest_spans(self, batch: SpanBatch, tenant: str | None) -> int: ...


@dataclass(frozen=True, slots=True)
class Backends:
    """What the mode gives everything that serves a request, filled the same way by both modes."""

    name: str  # "proxy" or "standalone", for /readyz and the pages' words; nothing decides on it
    traces: TraceSource
    profiles: ProfileSource
    resolver: Resolver
    pyroscope: PyroscopeMount
    tempo: TempoMount
    profiled_services: ProfiledServices
    gateway: Gateway
    functions: FunctionIndex  # which spans burn a function: the store, or Pyroscope's span exemplars
    ingest: IngestSink | None = None  # None: this bridge keeps no data (SDKs send to Tempo and Pyroscope)
    grpc: GrpcServer | None = None  # the OTLP gRPC receiver, when it runs
    puller: Puller | None = None  # the pprof scraper, when targets are set
    disk_full: DiskFull | None = None  # the store's disk-full episodes (standalone mode)


class Runtime:
    """Holds the backends while the app runs (an aiohttp app's own state is frozen by the time they exist), and
    whether it is draining: a stopping worker's responses end their connections (``bridge.drain``)."""

    __slots__ = ("backends", "draining")

    def __init__(self) -> None:
        self.backends: Backends | None = None
        self.draining = False


RUNTIME = web.AppKey("runtime", Runtime)


def backends_of(app: web.Application) -> Backends:
    backends = app[RUNTIME].backends
    if backends is None:
        raise RuntimeError("the app has not started: no backends yet")
    return backends


def call_context(
    request: web.Request, *, requested_timeout: float | None = None, cap: float | None = None
) -> CallContext:
    """One budget per incoming request (``requested_timeout``, e.g. from ``Connect-Timeout-Ms``, capped by
    ``PROFILE_BRIDGE_MAX_REQUEST_TIMEOUT`` or ``cap``) and the caller's tenant and credentials, carried to every
    upstream call made on its behalf."""
    settings = request.app[SETTINGS]
    return CallContext(
        deadline=Deadline.start(requested_timeout, cap if cap is not None else settings.max_request_timeout),
        tenant=request.headers.get("X-Scope-OrgID") or None,
        authorization=request.headers.get("Authorization") or None,
    )
