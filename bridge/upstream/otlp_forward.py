"""Forward linked OTLP profiles to Pyroscope's OTLP receiver (proxy mode).

- HTTP (default): ``POST <pyroscope_url>/v1development/profiles`` with an ``application/x-protobuf`` body.
- gRPC (``PROFILE_BRIDGE_PROFILES_FORWARD=grpc``): ``ProfilesService/Export`` on ``pyroscope_grpc_target``.

Both carry the caller's tenant and credentials (``X-Scope-OrgID``, ``Authorization``; gRPC metadata in lower case),
both get an explicit timeout — what remains of the request's budget, at most ``upstream_timeout`` — and both map
failures here, once: an upstream error becomes an ``UpstreamError`` with the matching code and the upstream's own
words, so the receiver answers its client with the same OTLP error.
"""

from __future__ import annotations

import json
from typing import Final, Protocol

import aiohttp
import grpc
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

from bridge.body import PROTOBUF_TYPES, media_type
from bridge.call import CallContext
from bridge.config import ConfigError, Settings
from bridge.errors import CODE_TO_GRPC_NUMBER, Code, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.upstream.guard import exchange_timeout, time_left, upstream_call

OTLP_PATH: Final = "/v1development/profiles"
PROTOBUF: Final = "application/x-protobuf"
UPSTREAM: Final = "pyroscope"
MAX_ANSWER_BYTES: Final = 4 * 1024**2

# OTLP/HTTP status → code (the OTLP spec: 400 bad data, 429/502/503/504 retryable, the rest by meaning)
OTLP_HTTP_TO_CODE: Final[dict[int, Code]] = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.UNIMPLEMENTED,
    405: Code.UNIMPLEMENTED,
    408: Code.DEADLINE_EXCEEDED,
    413: Code.RESOURCE_EXHAUSTED,
    415: Code.INVALID_ARGUMENT,
    429: Code.RESOURCE_EXHAUSTED,
    499: Code.CANCELED,
    500: Code.INTERNAL,
    501: Code.UNIMPLEMENTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}

GRPC_TO_CODE: Final[dict[grpc.StatusCode, Code]] = {
    sc: code for code, number in CODE_TO_GRPC_NUMBER.items() for sc in grpc.StatusCode if sc.value[0] == number
}


class ProfilesForwarder(Protocol):
    name: str

    async def export(self, body: bytes, ctx: CallContext) -> svc.ExportProfilesServiceResponse: ...

    async def close(self) -> None: ...


def http_status_error(status: int, content_type: str, body: bytes) -> UpstreamError:
    """Pure: Pyroscope's non-200 answer → the error our client sees, with Pyroscope's words."""
    code = OTLP_HTTP_TO_CODE.get(status, Code.UNKNOWN)
    message = _error_text(content_type, body)
    cls = UpstreamUnavailable if code is Code.UNAVAILABLE else UpstreamError
    return cls(UPSTREAM, f"pyroscope rejected the profiles with HTTP {status}: {message or '(no body)'}", code=code)


def _error_text(content_type: str, body: bytes) -> str:
    base = media_type(content_type)
    if base in PROTOBUF_TYPES and body:
        try:
            return str(status_pb2.Status.FromString(body).message)
        except DecodeError:
            pass
    if base == "application/json":
        try:
            doc = json.loads(body)
            if isinstance(doc, dict) and isinstance(doc.get("message"), str):
                return str(doc["message"])
        except ValueError:
            pass
    return body[:300].decode("utf-8", "replace").strip()


def _decode_response(body: bytes) -> svc.ExportProfilesServiceResponse:
    try:
        return svc.ExportProfilesServiceResponse.FromString(body)
    except DecodeError as exc:
        raise UpstreamError(
            UPSTREAM,
            f"pyroscope answered the export with something that is not an ExportProfilesServiceResponse ({exc})",
        ) from exc


class HttpProfilesForwarder:
    """``POST <base_url>/v1development/profiles``, protobuf."""

    name = "http"

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, settings: Settings, metrics: Metrics | None = None
    ) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + OTLP_PATH
        self.settings = settings
        self.metrics = metrics

    async def export(self, body: bytes, ctx: CallContext) -> svc.ExportProfilesServiceResponse:
        timeout = exchange_timeout(self.settings, ctx, UPSTREAM, "forward profiles to pyroscope")
        headers = ctx.headers()
        headers["Content-Type"] = PROTOBUF
        async with upstream_call(self.metrics, UPSTREAM, "otlp_export", timeout):
            async with self.session.post(
                self.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as resp:
                answer = await resp.content.read(MAX_ANSWER_BYTES)
                if resp.status != 200:
                    raise http_status_error(resp.status, resp.headers.get("Content-Type", ""), answer)
                return _decode_response(answer) if answer else svc.ExportProfilesServiceResponse()

    async def close(self) -> None:
        return None


class GrpcProfilesForwarder:
    """``ProfilesService/Export`` over one grpc.aio channel (insecure: the bridge sits beside Pyroscope)."""

    name = "grpc"

    def __init__(self, target: str, settings: Settings, metrics: Metrics | None = None) -> None:
        if not target or ":" not in target:
            raise ConfigError(
                "PROFILE_BRIDGE_PYROSCOPE_GRPC_TARGET", target, "forwarding profiles over gRPC needs a HOST:PORT target"
            )
        self.target = target
        self.settings = settings
        self.metrics = metrics
        self.channel = grpc.aio.insecure_channel(
            target,
            options=[
                ("grpc.max_send_message_length", settings.max_body_bytes),
                ("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
            ],
        )
        self.export_rpc = self.channel.unary_unary(
            "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
            request_serializer=None,  # the body is already serialised
            response_deserializer=svc.ExportProfilesServiceResponse.FromString,
        )

    async def export(self, body: bytes, ctx: CallContext) -> svc.ExportProfilesServiceResponse:
        left = time_left(self.settings, ctx, UPSTREAM, "forward profiles to pyroscope")
        metadata = tuple((k.lower(), v) for k, v in ctx.headers().items())
        async with upstream_call(self.metrics, UPSTREAM, "otlp_export", left):
            try:
                answer: svc.ExportProfilesServiceResponse = await self.export_rpc(body, timeout=left, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                raise grpc_error(exc.code(), exc.details() or "", left) from exc
            return answer

    async def close(self) -> None:
        await self.channel.close()


def grpc_error(status: grpc.StatusCode, details: str, budget: float) -> UpstreamError:
    """Pure: a gRPC failure talking to Pyroscope → UpstreamError with the same code and its words."""
    code = GRPC_TO_CODE.get(status, Code.UNKNOWN)
    if code is Code.DEADLINE_EXCEEDED:
        return UpstreamTimeout(UPSTREAM, f"pyroscope did not answer the profiles export within {budget:.3g} s")
    cls = UpstreamUnavailable if code is Code.UNAVAILABLE else UpstreamError
    return cls(
        UPSTREAM, f"pyroscope rejected the profiles over gRPC ({status.name}): {details or '(no details)'}", code=code
    )
