"""A recording OTLP profiles receiver (a test double, not Pyroscope): what the link gateway forwards to.

- HTTP: a real aiohttp app with ``POST /v1development/profiles`` (``application/x-protobuf``), decoding every body
  with opentelemetry-proto and recording it with its tenant headers.
- gRPC: a real grpc.aio server with ``ProfilesService/Export`` on 127.0.0.1, port 0, recording request and metadata.
- A sink object with ``ingest_otlp_profiles(req, tenant)`` for the standalone hand-off.

Failures are scripted: ``fail_with = (http status, google.rpc.Status message)`` / ``(grpc code, details)``, and
``delay`` (seconds) makes it slow.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
from aiohttp import web
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc as svc_grpc


@dataclass
class Received:
    request: svc.ExportProfilesServiceRequest
    tenant: str | None
    authorization: str | None


@dataclass
class OtlpRecorder:
    received: list[Received] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    http_fail: tuple[int, str] | None = None  # (status, message) answered instead of success
    grpc_fail: tuple[grpc.StatusCode, str] | None = None
    delay: float = 0.0
    partial_message: str = ""  # an upstream partial-success message to answer with

    def response(self) -> svc.ExportProfilesServiceResponse:
        resp = svc.ExportProfilesServiceResponse()
        if self.partial_message:
            resp.partial_success.error_message = self.partial_message
        return resp


OTLP_RECORDER = web.AppKey("otlp_recorder", OtlpRecorder)


async def _export_http(request: web.Request) -> web.Response:
    rec = request.app[OTLP_RECORDER]
    if rec.delay:
        await asyncio.sleep(rec.delay)
    if request.content_type != "application/x-protobuf":
        rec.rejected.append(f"content type {request.content_type}")
        return web.Response(status=415, text="protobuf only")
    if rec.http_fail is not None:
        status, message = rec.http_fail
        body = status_pb2.Status(code=3 if status == 400 else 14, message=message).SerializeToString()
        return web.Response(status=status, body=body, content_type="application/x-protobuf")
    req = svc.ExportProfilesServiceRequest()
    try:
        req.ParseFromString(await request.read())
    except DecodeError as exc:
        rec.rejected.append(str(exc))
        return web.Response(status=400, text="not an ExportProfilesServiceRequest")
    rec.received.append(Received(req, request.headers.get("X-Scope-OrgID"), request.headers.get("Authorization")))
    return web.Response(body=rec.response().SerializeToString(), content_type="application/x-protobuf")


def build_http_sink(recorder: OtlpRecorder | None = None) -> web.Application:
    app = web.Application()
    app[OTLP_RECORDER] = recorder or OtlpRecorder()
    app.router.add_post("/v1development/profiles", _export_http)
    return app


class _Servicer(svc_grpc.ProfilesServiceServicer):  # type: ignore[misc]
    def __init__(self, recorder: OtlpRecorder) -> None:
        self.recorder = recorder

    async def Export(  # noqa: N802 - the generated servicer's method name
        self, request: svc.ExportProfilesServiceRequest, context: grpc.aio.ServicerContext
    ) -> svc.ExportProfilesServiceResponse:
        rec = self.recorder
        if rec.delay:
            await asyncio.sleep(rec.delay)
        if rec.grpc_fail is not None:
            await context.abort(*rec.grpc_fail)
        metadata = dict(context.invocation_metadata() or ())
        rec.received.append(Received(request, metadata.get("x-scope-orgid"), metadata.get("authorization")))
        return rec.response()


async def start_grpc_sink(recorder: OtlpRecorder) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    svc_grpc.add_ProfilesServiceServicer_to_server(_Servicer(recorder), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@dataclass
class RecordingProfileSink:
    """Stands in for the standalone store's profile sink."""

    received: list[tuple[svc.ExportProfilesServiceRequest, str | None]] = field(default_factory=list)

    async def ingest_otlp_profiles(self, req: svc.ExportProfilesServiceRequest, tenant: str | None) -> None:
        self.received.append((req, tenant))
