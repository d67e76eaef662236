"""A full disk under the standalone store, as an episode: from the first write refused with ``StorageFull`` until
writes succeed again (or the file system has room again).

- Every ingest path (HTTP, gRPC, the link gateway) writes through ``WatchedSink``, which reports each outcome here.
- The episode's start is logged once at ERROR (not once per refused request), its end at INFO with how many writes
  were refused; ``profile_bridge_store_disk_full`` is 1 during it and ``profile_bridge_store_disk_full_refusals``
  counts the refused writes.
- ``/readyz`` reports not ready with the reason while it lasts. It also ends the episode itself once the file system
  under the data directory has ``FREE_TO_RECOVER`` bytes free again and the ``Retry-After`` has passed, so a bridge
  that a load balancer stopped sending to becomes ready again without a write having to succeed first.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_profiles_svc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge.errors import StorageFull
from bridge.metrics import Metrics
from bridge.store.decode import ProfileRecord
from bridge.store.decode_spans import SpanBatch

T = TypeVar("T")

log = logging.getLogger("bridge.store")

FREE_TO_RECOVER: Final = 64 * 1024**2


@dataclass(slots=True)
class Episode:
    since: float  # wall-clock time of the first refused write
    last: float  # monotonic time of the latest refused write
    refused: int
    reason: str


class DiskFull:
    """The store's disk-full state. One per standalone app."""

    def __init__(
        self,
        data_dir: str,
        metrics: Metrics | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        free_bytes: Callable[[str], int] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.free_bytes = free_bytes or _free_bytes
        self.episode: Episode | None = None

    def refused(self, exc: StorageFull) -> None:
        if self.metrics is not None:
            self.metrics.store_full_refusals.inc()
            self.metrics.store_disk_full.set(1)
        if self.episode is not None:
            self.episode.last = self.monotonic()
            self.episode.refused += 1
            return
        self.episode = Episode(self.wall_clock(), self.monotonic(), 1, exc.message)
        log.error(
            "store: the disk under %s is full: ingest is refused (HTTP 503 with Retry-After: %d, gRPC "
            "UNAVAILABLE; SDKs and exporters retry) until space is freed — by retention "
            "(PROFILE_BRIDGE_RETENTION_BYTES, PROFILE_BRIDGE_RETENTION_AGE) or by you; /readyz says not ready "
            "meanwhile (%s)",
            self.data_dir,
            exc.RETRY_AFTER_S,
            exc.message,
        )

    def wrote(self) -> None:
        if self.episode is not None:
            self._end("a write succeeded")

    def problem(self) -> str | None:
        """Why the store cannot take writes now (for ``/readyz``), or None."""
        episode = self.episode
        if episode is None:
            return None
        quiet = self.monotonic() - episode.last
        if quiet >= StorageFull.RETRY_AFTER_S and self.free_bytes(self.data_dir) >= FREE_TO_RECOVER:
            self._end("the file system has room again")
            return None
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(episode.since))
        return (
            f"the disk under {self.data_dir} is full since {since}: {episode.refused} writes refused; free "
            "space (or lower PROFILE_BRIDGE_RETENTION_BYTES) and it recovers on its own"
        )

    def _end(self, why: str) -> None:
        assert self.episode is not None
        log.info(
            "store: writes are accepted again (%s) after %d refused while the disk under %s was full",
            why,
            self.episode.refused,
            self.data_dir,
        )
        self.episode = None
        if self.metrics is not None:
            self.metrics.store_disk_full.set(0)


def _free_bytes(path: str) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


class StoreSink(Protocol):
    """The store's ingest side: what SDK ingest and the link gateway write to."""

    async def ingest_profiles(self, records: list[ProfileRecord], tenant: str | None) -> int: ...

    async def ingest_spans(self, batch: SpanBatch, tenant: str | None) -> int: ...

    async def ingest_otlp_profiles(
        self, req: otlp_profiles_svc.ExportProfilesServiceRequest, tenant: str | None
    ) -> otlp_profiles_svc.ExportProfilesServiceResponse: ...

    async def ingest_otlp_traces(
        self, req: otlp_trace_svc.ExportTraceServiceRequest, tenant: str | None
    ) -> tuple[int, str]: ...


class WatchedSink:
    """The store's ingest side (``IngestSink``, the gateway's profile and trace sinks) reporting each write's outcome
    to ``DiskFull``."""

    def __init__(self, store: StoreSink, disk: DiskFull) -> None:
        self.store = store
        self.disk = disk

    async def _watched(self, write: Awaitable[T]) -> T:
        """One write's outcome to ``DiskFull``: refused for a full disk (then raised on), or done."""
        try:
            result = await write
        except StorageFull as exc:
            self.disk.refused(exc)
            raise
        self.disk.wrote()
        return result

    async def ingest_profiles(self, records: list[ProfileRecord], tenant: str | None) -> int:
        return await self._watched(self.store.ingest_profiles(records, tenant))

    async def ingest_spans(self, batch: SpanBatch, tenant: str | None) -> int:
        return await self._watched(self.store.ingest_spans(batch, tenant))

    async def ingest_otlp_profiles(
        self, req: otlp_profiles_svc.ExportProfilesServiceRequest, tenant: str | None
    ) -> otlp_profiles_svc.ExportProfilesServiceResponse:
        return await self._watched(self.store.ingest_otlp_profiles(req, tenant))

    async def ingest_otlp_traces(
        self, req: otlp_trace_svc.ExportTraceServiceRequest, tenant: str | None
    ) -> tuple[int, str]:
        return await self._watched(self.store.ingest_otlp_traces(req, tenant))
