"""The OTLP gRPC receiver (grpc.aio, on ``settings.otlp_grpc_listen``, default ``0.0.0.0:4317``).

- ``opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`` → the link gateway.
- ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` → the trace sink (the store), registered only when
  the standalone store provides one.

Requests arrive as bytes and are decoded here, so a malformed body is ``INVALID_ARGUMENT`` with a message (grpc's
own deserialiser would say ``INTERNAL``). The tenant is the ``x-scope-orgid`` metadata entry, credentials
``authorization``; with authentication on (``bridge.auth``) the caller's token (``x-profile-bridge-token`` or
``authorization``) must allow ``ingest`` and fixes the tenant. The call's deadline (if the client set one) caps the
budget. ``BridgeError`` codes map one to one
onto gRPC status codes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as psvc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tsvc

from bridge.auth import Auth, grpc_grant
from bridge.call import CallContext, Deadline
from bridge.config import Settings
from bridge.errors import CODE_TO_GRPC_NUMBER, BridgeError, InvalidArgument
from bridge.otlp.gateway import Gateway

log = logging.getLogger("bridge.otlp.grpc")
_GRPC_STATUS: Final = {sc.value[0]: sc for sc in grpc.StatusCode}

PROFILES_SERVICE: Final = "opentelemetry.proto.collector.profiles.v1development.ProfilesService"
TRACE_SERVICE: Final = "opentelemetry.proto.collector.trace.v1.TraceService"

M = TypeVar("M", bound=Message)
BIND_RETRY_S: Final = 0.05  # how often a receiver waiting for its port tries it again


class TraceSink(Protocol):
    async def ingest_otlp_traces(self, req: tsvc.ExportTraceServiceRequest, tenant: str | None) -> tuple[int, str]: ...


@dataclass(slots=True)
class GrpcServer:
    server: grpc.aio.Server | None  # None while it waits for its port (``start_grpc_server``'s ``wait_for_port``)
    host: str
    port: int  # the bound port (useful when the setting asked for port 0)
    waiting: asyncio.Task[None] | None = None

    async def stop(self, grace: float = 2.0) -> None:
        """Stop serving (new calls refused, calls under way get ``grace`` seconds); a second call does nothing."""
        if self.waiting is not None:
            self.waiting.cancel()
            await asyncio.gather(self.waiting, return_exceptions=True)
            self.waiting = None
        server, self.server = self.server, None
        if server is not None:
            await server.stop(grace)


def call_context(context: grpc.aio.ServicerContext, settings: Settings, auth: Auth | None = None) -> CallContext:
    """The call's budget, tenant and credentials; with ``auth`` the caller's token must allow ingest (and the tenant
    is the one bound to it): ``Unauthenticated`` / ``PermissionDenied`` otherwise."""
    metadata = {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    tenant, authorization = grpc_grant(auth, metadata)
    remaining = context.time_remaining()
    return CallContext(
        deadline=Deadline.start(remaining, settings.max_request_timeout),
        tenant=tenant,
        authorization=authorization,
    )


def decode(cls: type[M], body: bytes) -> M:
    msg = cls()
    try:
        msg.ParseFromString(body)
    except DecodeError as exc:
        raise InvalidArgument(f"request is not a valid {cls.DESCRIPTOR.full_name} protobuf message ({exc})") from exc
    return msg


Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[Message]]


def status_details(code: grpc.StatusCode, exc: BridgeError) -> tuple[tuple[str, bytes], ...]:
    """For a temporary failure (a full disk), ``RetryInfo`` in ``grpc-status-details-bin``, as the OTLP spec asks of
    a server that wants the exporter to come back after a delay; nothing otherwise."""
    if exc.retry_after is None:
        return ()
    info = any_pb2.Any()
    info.Pack(error_details_pb2.RetryInfo(retry_delay=Duration(seconds=exc.retry_after)))
    status = status_pb2.Status(code=code.value[0], message=exc.message, details=[info])
    return (("grpc-status-details-bin", status.SerializeToString()),)


def _guarded(name: str, fn: Handler) -> Handler:
    """Map errors once: BridgeError → its gRPC code and message; anything else → logged, INTERNAL."""

    async def handler(body: bytes, context: grpc.aio.ServicerContext) -> Message:
        try:
            return await fn(body, context)
        except BridgeError as exc:
            log.info("%s failed: %s (%s)", name, exc.message, exc.code.value)
            code = _GRPC_STATUS.get(CODE_TO_GRPC_NUMBER[exc.code], grpc.StatusCode.UNKNOWN)
            await context.abort(code, exc.message, trailing_metadata=status_details(code, exc))
        except Exception:
            log.exception("unhandled error in %s", name)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in profile-bridge (see its log)")
        raise AssertionError("unreachable: context.abort raises")

    return handler


def build_handlers(settings: Settings, gateway: Gateway, trace_sink: TraceSink | None) -> list[Any]:
    auth = Auth.from_settings(settings)

    async def export_profiles(body: bytes, context: grpc.aio.ServicerContext) -> Message:
        ctx = call_context(context, settings, auth)  # the caller first: nothing is decoded for a stranger
        req = decode(psvc.ExportProfilesServiceRequest, body)
        return await gateway.export(req, ctx, route="otlp_grpc_profiles", wire=body)

    handlers: list[Any] = [
        grpc.method_handlers_generic_handler(
            PROFILES_SERVICE,
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    _guarded("ProfilesService/Export", export_profiles),
                    request_deserializer=None,
                    response_serializer=psvc.ExportProfilesServiceResponse.SerializeToString,
                ),
            },
        )
    ]
    if trace_sink is not None:
        sink = trace_sink

        async def export_traces(body: bytes, context: grpc.aio.ServicerContext) -> Message:
            ctx = call_context(context, settings, auth)
            req = decode(tsvc.ExportTraceServiceRequest, body)
            rejected, message = await sink.ingest_otlp_traces(req, ctx.tenant)
            resp = tsvc.ExportTraceServiceResponse()
            if rejected or message:
                resp.partial_success.rejected_spans = rejected
                resp.partial_success.error_message = message
            return resp

        handlers.append(
            grpc.method_handlers_generic_handler(
                TRACE_SERVICE,
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        _guarded("TraceService/Export", export_traces),
                        request_deserializer=None,
                        response_serializer=tsvc.ExportTraceServiceResponse.SerializeToString,
                    ),
                },
            )
        )
    return handlers


async def start_grpc_server(settings: Settings, gateway: Gateway, trace_sink: TraceSink | None = None) -> GrpcServer:
    """Bind and start. A port that cannot be bound raises ``OSError`` naming the address — unless
    ``settings.otlp_grpc_wait`` is set (a worker replacing the one that holds the port, ``bridge.workers``): then the
    receiver binds in the background as soon as the port is free, for up to that many seconds."""
    host, port = settings.otlp_grpc_listen
    try:
        return await _bind_and_start(settings, gateway, trace_sink)
    except OSError as exc:
        if settings.otlp_grpc_wait <= 0:
            raise
        log.info(
            "OTLP gRPC port %s:%d still taken (%s): binding it once the worker this one replaces lets go",
            host,
            port,
            exc,
        )
    server = GrpcServer(None, host, port)
    server.waiting = asyncio.create_task(_bind_when_free(server, settings, gateway, trace_sink))
    return server


async def _bind_and_start(settings: Settings, gateway: Gateway, trace_sink: TraceSink | None) -> GrpcServer:
    host, port = settings.otlp_grpc_listen
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers(build_handlers(settings, gateway, trace_sink))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen for OTLP gRPC on {address} ({exc})") from exc
    if bound == 0:
        raise OSError(f"cannot listen for OTLP gRPC on {address}")
    await server.start()
    services = "profiles" + (" and traces" if trace_sink is not None else "")
    log.info("OTLP gRPC receiver for %s on %s:%d", services, host, bound)
    return GrpcServer(server, host, bound)


async def _bind_when_free(
    holder: GrpcServer, settings: Settings, gateway: Gateway, trace_sink: TraceSink | None
) -> None:
    deadline = time.monotonic() + settings.otlp_grpc_wait
    while True:
        await asyncio.sleep(BIND_RETRY_S)
        try:
            started = await _bind_and_start(settings, gateway, trace_sink)
        except OSError as exc:
            if time.monotonic() < deadline:
                continue
            log.error("OTLP gRPC receiver not started: %s after %.0f s", exc, settings.otlp_grpc_wait)
            return
        holder.server, holder.port = started.server, started.port
        return
