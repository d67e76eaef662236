"""The one wrapper every upstream call goes through (proxy mode): its timeout, its metric, its error mapping.

- **Timeout**: what remains of the request's one budget (``CallContext.deadline``). An exchange read whole
  (``exchange_timeout``) gets at most ``settings.upstream_timeout`` in total; a relayed answer streamed to the client
  (``relay_timeout``) may take the whole budget, each read bounded by ``upstream_timeout``. Connecting is bounded by
  ``settings.connect_timeout`` either way. No time left is ``UpstreamTimeout`` before anything is sent.
- **Metric**: ``profile_bridge_upstream_seconds{upstream, call, outcome}``, outcome ``ok``, the upstream's HTTP
  status when it is 400 or more, or the error code of the failure.
- **Errors**: a foreign exception (aiohttp, asyncio, OS) becomes the bridge's ``UpstreamError`` tree here, once
  (``faults.map_client_error``), and is raised ``from`` the original; the bridge's own errors pass as they are.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp

from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import UpstreamError, UpstreamTimeout
from bridge.metrics import Metrics
from bridge.upstream.faults import map_client_error

LEAST_S = 0.001  # less than this left of the budget: not worth sending


def time_left(settings: Settings, ctx: CallContext, upstream: str, what: str) -> float:
    """Seconds this call may take, at most ``upstream_timeout``; ``UpstreamTimeout`` when nothing is left."""
    left = min(ctx.deadline.remaining(), settings.upstream_timeout)
    if left <= LEAST_S:
        raise UpstreamTimeout(upstream, f"no time left in the request's budget to {what}")
    return left


def exchange_timeout(settings: Settings, ctx: CallContext, upstream: str, what: str) -> aiohttp.ClientTimeout:
    """An exchange whose answer is read whole: the whole of it within ``time_left``."""
    left = time_left(settings, ctx, upstream, what)
    return aiohttp.ClientTimeout(total=left, connect=min(settings.connect_timeout, left))


def relay_timeout(settings: Settings, ctx: CallContext) -> aiohttp.ClientTimeout:
    """A relayed answer, streamed as it arrives: the rest of the budget in total, each read and the connection
    bounded by the settings."""
    left = max(LEAST_S, ctx.deadline.remaining())
    return aiohttp.ClientTimeout(
        total=left, connect=min(settings.connect_timeout, left), sock_read=min(settings.upstream_timeout, left)
    )


@dataclass(slots=True)
class Outcome:
    """What one call came to, for its metric; ``fail`` maps a foreign exception and records it."""

    upstream: str
    timeout: aiohttp.ClientTimeout | float | None
    value: str = "ok"

    def status(self, status: int) -> None:
        self.value = "ok" if status < 400 else str(status)

    def fail(self, exc: BaseException) -> UpstreamError:
        err = map_client_error(self.upstream, exc, self.timeout)
        self.value = err.code.value
        return err


@asynccontextmanager
async def upstream_call(
    metrics: Metrics | None,
    upstream: str,
    call: str,
    timeout: aiohttp.ClientTimeout | float | None,
    *,
    map_errors: bool = True,
) -> AsyncIterator[Outcome]:
    """Time one call and record its outcome; map what fails inside (``map_errors=False`` for a relay whose answer
    is already on its way to the client: there the caller maps the request phase itself with ``Outcome.fail``)."""
    outcome = Outcome(upstream, timeout)
    started = time.perf_counter()
    try:
        yield outcome
    except UpstreamError as exc:
        outcome.value = exc.code.value
        raise
    except Exception as exc:  # noqa: BLE001 - the one boundary where client failures are mapped
        if not map_errors:
            raise
        raise outcome.fail(exc) from exc
    finally:
        if metrics is not None:
            metrics.upstream_seconds.labels(upstream, call, outcome.value).observe(time.perf_counter() - started)
