"""Optional pull: scrape ``/debug/pprof/profile?seconds=N`` targets (``PROFILE_BRIDGE_PPROF_TARGETS``) every
``PROFILE_BRIDGE_PPROF_INTERVAL``, convert each pprof to OTLP (``pprof_convert``) and send it through the link
gateway exactly like received data.

One background task per target (``bridge.tasks.spawn``), so a slow target never delays another. Each scrape has an
explicit timeout: the profile's own ``seconds`` plus ``upstream_timeout``. A failed scrape (refused, timed out, not
a pprof, rejected upstream) is logged and counted (``profile_bridge_pprof_scrapes_total{target,outcome}``) and the
loop goes on.

The service name is the URL's fragment when it has one (``http://shop:6060/debug/pprof/profile?seconds=10#shop``),
otherwise the target's host name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
from yarl import URL

from bridge.call import CallContext, Deadline
from bridge.compression import Budget
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.metrics import Metrics
from bridge.otlp.gateway import Gateway
from bridge.otlp.link import LinkStats
from bridge.otlp.pprof_convert import pprof_to_otlp
from bridge.pprof import decode_pprof
from bridge.tasks import cancel_all, spawn
from bridge.upstream.faults import map_client_error

log = logging.getLogger("bridge.otlp.pull")

DEFAULT_SECONDS: Final = 30.0  # what Go's /debug/pprof/profile records when ?seconds= is absent


def service_name(target: str) -> str:
    url = URL(target)
    return url.fragment or url.host or target


def scrape_seconds(target: str) -> float:
    value = URL(target).query.get("seconds")
    try:
        return max(0.0, float(value)) if value is not None else DEFAULT_SECONDS
    except ValueError:
        return DEFAULT_SECONDS


@dataclass(slots=True)
class TargetState:
    scrapes: int = 0
    failures: int = 0
    last_error: str = ""
    last_stats: LinkStats | None = None


@dataclass
class Puller:
    settings: Settings
    session: aiohttp.ClientSession
    gateway: Gateway
    metrics: Metrics
    wall_clock: Callable[[], float] = time.time
    state: dict[str, TargetState] = field(default_factory=dict)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    async def fetch(self, target: str) -> bytes:
        budget = scrape_seconds(target) + self.settings.upstream_timeout
        timeout = aiohttp.ClientTimeout(total=budget, connect=min(self.settings.connect_timeout, budget))
        try:
            async with self.session.get(
                URL(target).with_fragment(None), timeout=timeout, allow_redirects=False
            ) as resp:
                body = await resp.content.read(self.settings.max_body_bytes + 1)
                if resp.status != 200:
                    text = body[:200].decode("utf-8", "replace").strip()
                    raise BridgeError(f"{target} answered HTTP {resp.status}: {text or '(no body)'}")
                if len(body) > self.settings.max_body_bytes:
                    raise BridgeError(f"{target} answered more than {self.settings.max_body_bytes} bytes")
                return body
        except BridgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - the one boundary where client failures are mapped
            raise map_client_error(target, exc, budget) from exc

    async def scrape_once(self, target: str) -> LinkStats:
        """Fetch, convert, link and deliver one profile. Raises ``BridgeError`` saying what went wrong."""
        started_ns = int(self.wall_clock() * 1e9)
        raw = await self.fetch(target)
        profile = decode_pprof(raw, budget=Budget.for_body_limit(self.settings.max_body_bytes))
        if not profile.time_nanos:
            profile.time_nanos = started_ns
        req = pprof_to_otlp(profile, service_name(target))
        ctx = CallContext(deadline=Deadline.start(None, self.settings.max_request_timeout))
        stats = await self.gateway.link(req)
        self.gateway.count(stats)
        await self.gateway.deliver(req, ctx)
        return stats

    async def run(self, target: str) -> None:
        state = self.state.setdefault(target, TargetState())
        interval = self.settings.pprof_interval
        while True:
            started = time.monotonic()
            state.scrapes += 1
            try:
                state.last_stats = await self.scrape_once(target)
            except asyncio.CancelledError:
                raise
            except BridgeError as exc:
                self._failed(target, state, exc.message)
            except Exception as exc:  # noqa: BLE001 - never let one bad scrape end the loop
                log.exception("pprof scrape of %s failed unexpectedly", target)
                self._failed(target, state, f"{type(exc).__name__}: {exc}")
            else:
                self.metrics.pprof_scrapes.labels(target, "ok").inc()
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    def _failed(self, target: str, state: TargetState, message: str) -> None:
        state.failures += 1
        state.last_error = message
        self.metrics.pprof_scrapes.labels(target, "error").inc()
        log.warning("pprof scrape of %s failed: %s", target, message)

    def start(self) -> None:
        for target in self.settings.pprof_targets:
            self.tasks.append(spawn(self.run(target), f"pprof-pull {target}"))

    async def stop(self) -> None:
        await cancel_all(self.tasks)
        self.tasks.clear()
