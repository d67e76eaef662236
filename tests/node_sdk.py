"""Driving the real Node.js SDKs (``tests/node``: ``@pyroscope/nodejs`` 0.6 + OpenTelemetry JS, pinned by its
``package-lock.json``, installed by ``npm ci --prefix tests/node``) and keeping what they sent.

- ``require_node()``: node and the installed packages, or skip (fail under ``CI``) saying how to get them.
- ``run_service(node, url, encoding)``: runs ``tests/node/service.js`` against ``url`` (OTLP/HTTP traces in
  ``proto`` or ``json``, profiles to ``/ingest``) until it exits; returns its spans by role (``cpu-heavy``,
  ``io-wait``, ``io-only``).
- ``UploadRecorder``: an aiohttp app (a test double, not a backend) that accepts what the service sends and keeps
  every request exactly as it arrived, to replay into the Pyroscope and Tempo doubles.
- ``load_capture()``: the committed recording under ``tests/fixtures/node-capture/`` (no node needed).

Record a new capture: ``.venv/bin/python -m tests.node_sdk tests/fixtures/node-capture``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.doubles.tempo import TempoDouble
from tests.faketime import both_clocks_ahead
from tests.paths import FIXTURES, ROOT

NODE_DIR: Final = ROOT / "tests" / "node"
NODE_CAPTURE: Final = FIXTURES / "node-capture"
SERVICE: Final = "shop-node"
RUN_TIMEOUT_S: Final = 90.0
ROLES: Final = ("cpu-heavy", "io-wait", "io-only")


def require_node() -> str:
    """The node binary, with tests/node's packages installed; otherwise skip (fail under CI) with what to run."""
    node = shutil.which("node")
    if node is None:
        reason = "node is not installed (Node.js 20, apt-get install -y nodejs npm); needed to run the Node SDKs"
    elif not (NODE_DIR / "node_modules" / "@pyroscope" / "nodejs" / "package.json").is_file():
        reason = "the Node SDKs are not installed: run `npm ci --prefix tests/node` (.ci/run does)"
    else:
        return node
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this test must run")
    pytest.skip(reason)


async def run_service(node: str, url: str, encoding: str) -> dict[str, dict[str, str]]:
    """Run the instrumented Node service against ``url`` until it exits (it flushes on its own explicit stops, not on
    SDK timers); its spans by role: ``{"trace_id", "span_id"}``."""
    # libfaketime with a real monotonic clock leaves V8's CPU profiler sampling nothing (tests/faketime.py)
    env = both_clocks_ahead(
        {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYROSCOPE_", "NODE_OPTIONS"))}
    )
    proc = await asyncio.create_subprocess_exec(
        node,
        str(NODE_DIR / "service.js"),
        url,
        encoding,
        SERVICE,
        cwd=str(NODE_DIR),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    spans = {doc["role"]: doc for doc in map(json.loads, out.decode().splitlines()) if "role" in doc}
    assert set(spans) == set(ROLES), out.decode()[-2000:]
    return spans


@dataclass(frozen=True, slots=True)
class Upload:
    """One request as the SDK sent it."""

    path: str
    query: str  # the raw query string
    content_type: str
    body: bytes


@dataclass(slots=True)
class Capture:
    uploads: list[Upload] = field(default_factory=list)
    spans: dict[str, dict[str, str]] = field(default_factory=dict)

    def ingests(self) -> list[Upload]:
        return [u for u in self.uploads if u.path == "/ingest"]

    def traces(self) -> list[Upload]:
        return [u for u in self.uploads if u.path == "/v1/traces"]


UPLOADS = web.AppKey("uploads", Capture)


async def _keep(request: web.Request) -> web.Response:
    capture = request.app[UPLOADS]
    capture.uploads.append(Upload(request.path, request.query_string, request.content_type, await request.read()))
    if request.path == "/v1/traces":  # an empty ExportTraceServiceResponse, in the request's encoding
        if request.content_type == "application/json":
            return web.json_response({})
        return web.Response(body=b"", content_type="application/x-protobuf")
    return web.Response(status=200)


def upload_recorder() -> web.Application:
    """Accepts OTLP/HTTP traces and Pyroscope ``/ingest`` and keeps each request (gzip already undone by aiohttp)."""
    app = web.Application(client_max_size=64 * 1024**2)
    app[UPLOADS] = Capture()
    app.router.add_post("/v1/traces", _keep)
    app.router.add_post("/ingest", _keep)
    return app


def resource_spans_of(upload: Upload) -> list[Any]:
    """The ResourceSpans of a recorded OTLP/HTTP trace export, protobuf or JSON (hex ids, read here on their own)."""
    req = trace_service_pb2.ExportTraceServiceRequest()
    if upload.content_type == "application/json":
        doc = json.loads(upload.body)

        def b64(node: Any) -> Any:
            if isinstance(node, dict):
                return {
                    k: base64.b64encode(bytes.fromhex(v)).decode()
                    if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                    else b64(v)
                    for k, v in node.items()
                }
            return [b64(v) for v in node] if isinstance(node, list) else node

        json_format.ParseDict(b64(doc), req, ignore_unknown_fields=True)
    else:
        req.ParseFromString(upload.body)
    return list(req.resource_spans)


def save_capture(capture: Capture, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for n, upload in enumerate(capture.uploads, 1):
        name = f"{n:03d}{upload.path.replace('/', '_')}.bin"
        (directory / name).write_bytes(upload.body)
        lines.append(
            json.dumps({"file": name, "path": upload.path, "query": upload.query, "content_type": upload.content_type})
        )
    (directory / "index.jsonl").write_text("\n".join(lines) + "\n")
    (directory / "spans.json").write_text(json.dumps(capture.spans, indent=1, sort_keys=True) + "\n")


def load_capture(directory: Path = NODE_CAPTURE) -> Capture:
    capture = Capture(spans=json.loads((directory / "spans.json").read_text()))
    for line in (directory / "index.jsonl").read_text().splitlines():
        entry = json.loads(line)
        capture.uploads.append(
            Upload(entry["path"], entry["query"], entry["content_type"], (directory / entry["file"]).read_bytes())
        )
    return capture


async def record(node: str, encoding: str) -> Capture:
    """Run the service against an upload recorder; what it sent, and its spans."""
    app = upload_recorder()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        spans = await run_service(node, f"http://127.0.0.1:{runner.addresses[0][1]}", encoding)
    finally:
        await runner.cleanup()
    capture = app[UPLOADS]
    capture.spans = spans
    return capture


if __name__ == "__main__":
    node_bin = shutil.which("node")
    if node_bin is None or len(sys.argv) != 2:
        raise SystemExit("usage (node on PATH): python -m tests.node_sdk <directory>")
    save_capture(asyncio.run(record(node_bin, "proto")), Path(sys.argv[1]))


def tempo_holding(capture: Capture) -> TempoDouble:
    """A Tempo double holding every trace the service exported, each trace's spans under their resource."""
    tempo = TempoDouble()
    by_trace: dict[str, list[Any]] = {}
    for upload in capture.traces():
        for rs in resource_spans_of(upload):
            for trace_id in {span.trace_id.hex() for ss in rs.scope_spans for span in ss.spans}:
                one = type(rs)()
                one.CopyFrom(rs)
                for ss in one.scope_spans:
                    keep = [s for s in ss.spans if s.trace_id.hex() == trace_id]
                    del ss.spans[:]
                    ss.spans.extend(keep)
                by_trace.setdefault(trace_id, []).append(one)
    for trace_id, resource_spans in by_trace.items():
        tempo.add_trace(trace_id, resource_spans)
    return tempo
