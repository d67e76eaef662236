"""Proxy mode's side of the ``/pyroscope`` and ``/tempo`` mounts: Pyroscope and Tempo themselves, reached over the
same sessions as their clients (``bridge.upstream.http``).

- ``PyroscopeForward``: everything the resolver does not answer goes to Pyroscope as it came, streamed; only span
  RPCs in a Connect codec the bridge decodes are read first (they may be resolved).
- ``TempoForward``: trace-by-ID answers are fetched whole (still in their Content-Encoding, at most
  ``PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES``) for enrichment;
  everything else under the mount is streamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp import web
from google.protobuf.message import Message
from multidict import CIMultiDict

from bridge.body import HOP_BY_HOP, end_to_end
from bridge.call import CallContext
from bridge.config import Settings
from bridge.connect import Codec, codec_for
from bridge.errors import InvalidArgument
from bridge.metrics import Metrics
from bridge.upstream.bounded import read_capped
from bridge.upstream.guard import relay_timeout, upstream_call
from bridge.upstream.proxy import OWN_HEADERS, stream_through, target_url
from bridge.wire.pyroscope import SPAN_RPCS
from bridge.wire.tempo import TempoAnswer

PYROSCOPE_MOUNT: Final = "/pyroscope"
TEMPO_MOUNT: Final = "/tempo"
# request headers not forwarded when the bridge fetches a trace itself (it asks for gzip on its own; a browser's
# cookies never go up)
_TRACE_REQUEST_DROP: Final = (
    HOP_BY_HOP | OWN_HEADERS | {"host", "accept-encoding", "content-length", "expect", "cookie"}
)


def is_connect(content_type: str | None) -> bool:
    """A Connect unary request the bridge can decode (``application/proto`` or ``application/json``)."""
    try:
        codec_for(content_type)
    except InvalidArgument:
        return False
    return True


@dataclass(frozen=True, slots=True)
class PyroscopeForward:
    session: aiohttp.ClientSession
    base_url: str
    settings: Settings
    metrics: Metrics | None = None

    def must_decode(self, method: str | None, content_type: str | None) -> bool:
        return method in SPAN_RPCS and is_connect(content_type)

    async def pass_on(
        self, request: web.Request, ctx: CallContext, body: bytes | None = None, encoding: str | None = None
    ) -> web.StreamResponse:
        url = target_url(self.base_url, request, PYROSCOPE_MOUNT)
        return await stream_through(
            request,
            self.session,
            url,
            upstream="pyroscope",
            timeout=relay_timeout(self.settings, ctx),
            body=body,
            body_encoding=encoding,
            metrics=self.metrics,
        )

    async def call(self, method: str, data: bytes, codec: Codec, ctx: CallContext) -> Message | None:
        return None  # Pyroscope answers it: passed on


@dataclass(frozen=True, slots=True)
class TempoForward:
    session: aiohttp.ClientSession
    base_url: str
    settings: Settings
    metrics: Metrics | None = None

    async def pass_on(self, request: web.Request, path: str, ctx: CallContext) -> web.StreamResponse:
        url = target_url(self.base_url, request, TEMPO_MOUNT)
        return await stream_through(
            request,
            self.session,
            url,
            upstream="tempo",
            timeout=relay_timeout(self.settings, ctx),
            metrics=self.metrics,
        )

    async def trace_by_id(self, request: web.Request, path: str, ctx: CallContext) -> TempoAnswer:
        """The answer from Tempo, whole, still in its Content-Encoding (the bridge asks for gzip)."""
        url = target_url(self.base_url, request, TEMPO_MOUNT)
        headers = end_to_end(request.headers, _TRACE_REQUEST_DROP)
        headers["Accept-Encoding"] = "gzip"
        timeout = relay_timeout(self.settings, ctx)
        async with upstream_call(self.metrics, "tempo", "trace_by_id", timeout) as outcome:
            async with self.session.get(
                url, headers=headers, timeout=timeout, allow_redirects=False, auto_decompress=False
            ) as resp:
                body = await read_capped(resp, self.settings.max_upstream_answer_bytes, "tempo", "a trace")
                outcome.status(resp.status)
                return TempoAnswer(resp.status, CIMultiDict(resp.headers), body)
