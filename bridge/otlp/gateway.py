"""The link gateway's one path, shared by the gRPC receiver, the HTTP receiver and the pprof puller:
link (pure, ``bridge.otlp.link``), count, then forward to Pyroscope (proxy mode) or hand to the standalone store's
profile sink, and answer with OTLP partial success when some samples carried invalid ids.

With the native linker built (``bridge.otlp.fastlink.NATIVE``) linking works on the wire bytes — the receivers hand
in the body they parsed — and the linked bytes are what is forwarded; without it ``link_request`` links the
message in place."""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import BridgeError, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.otlp import fastlink
from bridge.otlp.link import LinkStats, link_request
from bridge.upstream.otlp_forward import ProfilesForwarder

# requests larger than this are linked in a worker thread so the event loop keeps serving while they are linked
THREAD_BYTES: Final = 256 * 1024


class ProfileSink(Protocol):
    """Stores profiles; answers with its own partial success (profiles it refused), or None."""

    async def ingest_otlp_profiles(
        self, req: svc.ExportProfilesServiceRequest, tenant: str | None
    ) -> svc.ExportProfilesServiceResponse | None: ...


class Gateway:
    """Link, then deliver. Exactly one of ``forwarder`` / ``sink`` is normally set; with neither, exports fail
    with ``unavailable`` naming what is missing."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        *,
        forwarder: ProfilesForwarder | None = None,
        sink: ProfileSink | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.forwarder = forwarder
        self.sink = sink
        self.link_keys = settings.link_keys

    @property
    def destination(self) -> str:
        if self.sink is not None:
            return "standalone store"
        if self.forwarder is not None:
            return f"pyroscope ({self.forwarder.name})"
        return "nowhere"

    async def link(self, req: svc.ExportProfilesServiceRequest) -> LinkStats:
        """Link ``req`` in place."""
        stats, _ = await self.link_wire(req, None, keep_message=True)
        return stats

    async def link_wire(
        self, req: svc.ExportProfilesServiceRequest, wire: bytes | None, *, keep_message: bool
    ) -> tuple[LinkStats, bytes | None]:
        """Link ``req`` whose serialized form is ``wire`` (when the caller has it): the stats and the linked bytes
        (None from the pure path, which links ``req`` in place). ``keep_message``: leave ``req`` linked too."""
        size = len(wire) if wire is not None else req.ByteSize()
        if size > THREAD_BYTES:
            return await asyncio.to_thread(self._link_now, req, wire, keep_message)
        return self._link_now(req, wire, keep_message)

    def _link_now(
        self, req: svc.ExportProfilesServiceRequest, wire: bytes | None, keep_message: bool
    ) -> tuple[LinkStats, bytes | None]:
        if not fastlink.NATIVE:
            return link_request(req, self.link_keys), None
        data = wire if wire is not None else req.SerializeToString()
        out, stats = fastlink.link_wire(data, req.dictionary, self.link_keys)
        if keep_message:
            req.ParseFromString(out)
        return stats, out

    async def export(
        self, req: svc.ExportProfilesServiceRequest, ctx: CallContext, *, route: str = "otlp", wire: bytes | None = None
    ) -> svc.ExportProfilesServiceResponse:
        """Link ``req`` (``wire``: the protobuf body it was parsed from, if any) and deliver it. ``InvalidArgument``
        (out-of-range indices) means nothing was delivered; upstream failures arrive as ``UpstreamError`` with the
        upstream's code and words."""
        try:
            stats, linked = await self.link_wire(req, wire, keep_message=self.sink is not None)
        except BridgeError:
            self.metrics.ingest_rejected.labels(route).inc()
            raise
        self.count(stats)
        return merge_response(await self.deliver(req, ctx, linked), stats)

    async def deliver(
        self, req: svc.ExportProfilesServiceRequest, ctx: CallContext, linked: bytes | None = None
    ) -> svc.ExportProfilesServiceResponse:
        """Send an already linked request on: into the store, or to Pyroscope (``linked``: its bytes, if known)."""
        if self.sink is not None:
            upstream = await self.sink.ingest_otlp_profiles(req, ctx.tenant) or svc.ExportProfilesServiceResponse()
        elif self.forwarder is not None:
            upstream = await self.forwarder.export(linked if linked is not None else req.SerializeToString(), ctx)
        else:
            raise UpstreamUnavailable(
                "pyroscope",
                "the link gateway has nowhere to send profiles: standalone mode "
                "without a store, or no Pyroscope configured",
            )
        return upstream

    def count(self, stats: LinkStats) -> None:
        links = self.metrics.links
        unlinked = stats.samples - stats.linked - stats.invalid - stats.already_linked
        for outcome, n in (
            ("linked", stats.linked),
            ("invalid", stats.invalid),
            ("already_linked", stats.already_linked),
            ("no_link_attributes", unlinked),
        ):
            if n:
                links.labels(outcome).inc(n)


def merge_response(upstream: svc.ExportProfilesServiceResponse, stats: LinkStats) -> svc.ExportProfilesServiceResponse:
    """Pure: our partial success (invalid ids: nothing rejected, a message) joined with the upstream's own."""
    ours = stats.partial_success_message()
    if not ours:
        return upstream
    out = svc.ExportProfilesServiceResponse()
    out.CopyFrom(upstream)
    theirs = upstream.partial_success.error_message
    out.partial_success.error_message = f"{ours}; pyroscope: {theirs}" if theirs else ours
    return out
