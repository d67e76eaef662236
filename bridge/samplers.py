"""How a service's profiles were sampled, looked up once and kept a while: the SDKs that uploaded them (their
``otel.scope.name`` and ``pyroscope_spy`` series labels, through ``Series``) and, where each upload's period is kept
(the store: ``PeriodSource``), those periods. ``bridge.sampling`` turns them, with an answer's values, into a count
of samples and what the samples measure.

A backend that cannot say (an old Pyroscope without ``Series``, a selector it refuses) leaves them unknown, and the
answer is not failed for it: the count then comes from the values alone (``sampling.tally_of``). Unknown answers are
not cached, so the next click asks again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from cachetools import TTLCache

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.errors import BridgeError
from bridge.function_diff import Counting, counting
from bridge.profiletype import PROFILE_TYPE_LABEL, ProfileType
from bridge.sampling import FACT_LABELS, Sampling, sampler_of, sdks_of
from bridge.selector import merge_selector
from bridge.sources import PeriodSource, ProfileSource

log = logging.getLogger("bridge.samplers")

CACHE_SIZE: Final = 4096
CACHE_TTL_S: Final = 300.0
BUCKET_MS: Final = 900_000  # facts are kept per quarter hour of the window's start

Facts = tuple[frozenset[str], dict[int, int]]  # (SDKs, period → profiles)


class Samplers:
    """One per resolver: ``facts`` per tenant, profile type, selector and quarter hour, bounded and short-lived."""

    def __init__(self, profiles: ProfileSource, periods: PeriodSource | None = None) -> None:
        self.profiles = profiles
        self.periods = periods
        self._cache: TTLCache[tuple[str, str, str, int], Facts] = TTLCache(maxsize=CACHE_SIZE, ttl=CACHE_TTL_S)

    async def facts(self, type_id: str, selector: str, window: tuple[int, int], ctx: CallContext) -> Facts:
        """The SDKs and stored periods of the ``type_id`` profiles ``selector`` matches in ``window`` (ms), asked
        at the same time."""
        key = (ctx.cache_scope, type_id, selector, window[0] // BUCKET_MS)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        sdks, stored = await asyncio.gather(
            self._sdks(type_id, selector, window, ctx), self._periods(type_id, selector, window, ctx)
        )
        facts = (sdks or frozenset(), stored or {})
        if sdks is not None and stored is not None:
            self._cache[key] = facts
        return facts

    async def counting(
        self,
        sides: tuple[flamegraph.Node, flamegraph.Node, int],
        known: Sampling | None,
        type_id: str,
        selector: str,
        window: tuple[int, int],
        ctx: CallContext,
    ) -> Counting:
        """Compare's two sides (here, every usual request together, how many) as counts of samples
        (``function_diff.counting``), sampled as ``known`` says (the answer's own), else as the selector's SDK does."""
        sdks, periods = await self.facts(type_id, selector, window, ctx)
        sampler = known.sampler if known is not None else sampler_of(type_id, sdks)
        here, usual, requests = sides
        return counting(here, usual, requests, ProfileType.parse(type_id).sample_unit, sampler, periods)

    async def _sdks(
        self, type_id: str, selector: str, window: tuple[int, int], ctx: CallContext
    ) -> frozenset[str] | None:
        try:
            req = qpb.SeriesRequest(
                matchers=[merge_selector(selector, [(PROFILE_TYPE_LABEL, type_id)])],
                label_names=list(FACT_LABELS),
                start=window[0],
                end=window[1],
            )
            answer = await self.profiles.series(req, ctx)
        except BridgeError as exc:
            log.info("sampling of %s %s: Series failed (%s)", selector, type_id, exc)
            return None
        return sdks_of(pair.value for labels in answer.labels_set for pair in labels.labels)

    async def _periods(
        self, type_id: str, selector: str, window: tuple[int, int], ctx: CallContext
    ) -> dict[int, int] | None:
        if self.periods is None:
            return {}
        try:
            return dict(await self.periods.sample_periods(type_id, selector, window[0], window[1], ctx))
        except BridgeError as exc:
            log.info("sampling of %s %s: periods unknown (%s)", selector, type_id, exc)
            return None
