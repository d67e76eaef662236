"""What ``doctor``'s checks talk to, whichever mode (``Hops``), how it is wired per mode (``open_hops``), and the
timing every check shares: how far back "recent" reaches and when a span's samples can be expected.

- **proxy mode**: Tempo and Pyroscope directly (``PROFILE_BRIDGE_TEMPO_URL``, ``PROFILE_BRIDGE_PYROSCOPE_URL``) with
  the clients and the resolver the service itself uses; no bridge needs to be running.
- **standalone mode**: the data lives in the running bridge's store, so it goes through that bridge at
  ``PROFILE_BRIDGE_LISTEN``: ``/readyz`` for reachability, the ``/tempo`` mount for traces, the ``/pyroscope`` mount
  for profile types, and the span API for the answer (the mounts' own span-selector answers are already resolved,
  so only the API tells which mode answered). The bridge's token goes to that bridge only, never to Tempo or
  Pyroscope.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from bridge.answer import Scope
from bridge.call import CallContext, Deadline
from bridge.commands.resolve import answer_direct, bridge_headers, bridge_url, client_timeout, fetch_from_bridge
from bridge.config import Settings
from bridge.errors import UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.sources import ProfileSource, TraceSource
from bridge.spans import Span
from bridge.upstream.http import open_clients

RECENT_S: Final = 3600  # where "a recent root span" is looked for
# Seconds from the end of a capture window to its samples being queryable: the SDK uploads when the window closes
# (pyroscope-io, the Go and Java SDKs: at the window boundary), then one HTTP request and the ingester's or the store's
# write. A few seconds on a healthy pipeline; 5 s leaves room for a busy one.
UPLOAD_LAG_S: Final = 5.0


def settle_seconds(settings: Settings) -> float:
    """How long after a span ends its CPU samples can be expected: the capture window that holds its end closes at
    most ``PROFILE_BRIDGE_CAPTURE_WINDOW`` later, and its upload takes ``UPLOAD_LAG_S`` more."""
    return settings.capture_window + UPLOAD_LAG_S


def settled(span: Span, now: float, settle: float) -> bool:
    """Did ``span`` end long enough ago for its profile to have arrived?"""
    return span.end_ns <= (now - settle) * 1e9


Answerer = Callable[[str, str, Scope, str], Awaitable[dict[str, Any]]]


@dataclass(slots=True)
class Hops:
    """What the checks talk to, whichever mode: a trace source, a profile source, two readiness probes and the
    resolver's answer (the API document) for a span."""

    traces: TraceSource
    profiles: ProfileSource
    tempo_ready: Callable[[], Awaitable[str]]
    pyroscope_ready: Callable[[], Awaitable[str]]
    answer: Answerer
    tempo_where: str
    pyroscope_where: str


def call_context(settings: Settings) -> CallContext:
    # standalone: the mounts are the running bridge's, which may want its token; never sent to Tempo or Pyroscope
    extra = bridge_headers(settings) if settings.is_standalone else {}
    return CallContext(deadline=Deadline.start(None, settings.max_request_timeout), extra_headers=extra)


@asynccontextmanager
async def open_hops(settings: Settings) -> AsyncIterator[Hops]:

    if not settings.is_standalone:
        async with open_clients(settings, Metrics()) as (tempo, pyroscope):

            async def answer(trace_id: str, span_id: str, scope: Scope, profile_type: str) -> dict[str, Any]:
                return await answer_direct(settings, trace_id, span_id, scope=scope, profile_type=profile_type)

            yield Hops(
                tempo,
                pyroscope,
                lambda: tempo.ready(call_context(settings)),
                lambda: pyroscope.ready(call_context(settings)),
                answer,
                settings.tempo_url,
                settings.pyroscope_url,
            )
        return

    base = bridge_url(settings)
    via = dataclasses.replace(settings, mode="proxy", tempo_url=f"{base}/tempo", pyroscope_url=f"{base}/pyroscope")
    async with (
        open_clients(via, Metrics()) as (tempo, pyroscope),
        aiohttp.ClientSession(timeout=client_timeout(settings)) as session,
    ):

        async def readyz(upstream: str) -> str:
            return await _bridge_ready(session, base, upstream)

        async def answer(trace_id: str, span_id: str, scope: Scope, profile_type: str) -> dict[str, Any]:
            return await fetch_from_bridge(settings, trace_id, span_id, scope=scope, profile_type=profile_type)

        yield Hops(
            tempo,
            pyroscope,
            lambda: readyz("tempo"),
            lambda: readyz("pyroscope"),
            answer,
            f"the bridge's store at {base} (standalone)",
            f"the bridge's store at {base} (standalone)",
        )


async def _bridge_ready(session: aiohttp.ClientSession, base: str, upstream: str) -> str:
    try:
        async with session.get(f"{base}/readyz") as resp:
            doc = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise UpstreamUnavailable(
            "bridge", f"no bridge answered at {base}/readyz ({type(exc).__name__}: {exc})"
        ) from exc
    detail = (doc.get("upstreams") or {}).get(upstream) or {}
    if detail.get("status") != "ready":
        raise UpstreamUnavailable(
            "bridge",
            f"the bridge at {base} says {upstream} is "
            f"{detail.get('status', 'unknown')}: {detail.get('message', '')}".rstrip(),
        )
    return str(detail.get("detail", "ready"))
