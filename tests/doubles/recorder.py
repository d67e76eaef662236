"""A recording ingest double (a test double, not Tempo or Pyroscope): a real aiohttp app that accepts what the stock
SDKs send — OTLP/HTTP traces (``POST /v1/traces``, protobuf) and pyroscope-io's Connect push
(``POST /push.v1.PusherService/Push``, ``application/proto``, gzip) — decodes every body for real and records it.

Use: ``app = build_recorder(); server = await aiohttp_server(app); recorder = app[RECORDER]``.
"""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass, field

from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from bridge._proto import push_pb2


@dataclass
class Recorder:
    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    pushes: list[push_pb2.PushRequest] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # what could not be decoded, and why
    encodings: list[str] = field(default_factory=list)  # Content-Encoding of each request, as sent
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, timeout: float) -> bool:
        """Wait until something new arrives (True) or ``timeout`` passes (False)."""
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout)
        except TimeoutError:
            return False
        return True


RECORDER = web.AppKey("recorder", Recorder)


async def _body(request: web.Request) -> bytes:
    """The request body; aiohttp's server has already undone ``Content-Encoding: gzip`` (auto_decompress)."""
    request.app[RECORDER].encodings.append(request.headers.get("Content-Encoding", "identity"))
    raw = await request.read()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


async def export_traces(request: web.Request) -> web.Response:
    recorder = request.app[RECORDER]
    if request.content_type != "application/x-protobuf":
        recorder.rejected.append(f"/v1/traces content type {request.content_type}")
        raise web.HTTPUnsupportedMediaType(text="this double takes application/x-protobuf only")
    message = trace_service_pb2.ExportTraceServiceRequest()
    try:
        message.ParseFromString(await _body(request))
    except DecodeError as exc:
        recorder.rejected.append(f"/v1/traces: {exc}")
        raise web.HTTPBadRequest(text="not an ExportTraceServiceRequest") from exc
    recorder.traces.append(message)
    recorder.arrived.set()
    reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
    return web.Response(body=reply, content_type="application/x-protobuf")


async def push(request: web.Request) -> web.Response:
    recorder = request.app[RECORDER]
    if request.content_type != "application/proto":
        recorder.rejected.append(f"Push content type {request.content_type}")
        return web.json_response({"code": "invalid_argument", "message": "application/proto only"}, status=400)
    message = push_pb2.PushRequest()
    try:
        message.ParseFromString(await _body(request))
    except DecodeError as exc:
        recorder.rejected.append(f"Push: {exc}")
        return web.json_response({"code": "invalid_argument", "message": "not a PushRequest"}, status=400)
    recorder.pushes.append(message)
    recorder.arrived.set()
    return web.Response(body=push_pb2.PushResponse().SerializeToString(), content_type="application/proto")


def build_recorder() -> web.Application:
    app = web.Application(client_max_size=64 * 1024**2)
    app[RECORDER] = Recorder()
    app.router.add_post("/v1/traces", export_traces)
    app.router.add_post("/push.v1.PusherService/Push", push)
    return app
