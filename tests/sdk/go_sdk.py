"""Driving the real Go SDKs (``tests/sdk/go``: ``github.com/grafana/pyroscope-go``,
``github.com/grafana/otel-profiling-go`` and the OpenTelemetry Go SDK with its OTLP/HTTP and OTLP/gRPC exporters,
pinned by its ``go.mod``/``go.sum``).

- ``build_service(directory)``: ``go build`` of the service (modules from the Go module proxy the first time, then
  Go's caches), or skip (fail under ``CI``) saying how to get Go.
- ``go_clock(binary)``: the service's own wall clock. Go reads the clock through the vDSO, not libc, so libfaketime
  never moves it: a test gives the bridge this clock (``create_app(wall_clock=…)``) and the SDKs' stamps meet a
  bridge that agrees with them whatever date the suite runs on.
- ``run_service(binary, url, ...)``: runs it until it exits; its spans by role (``cpu-root``, ``cpu-child``,
  ``io-root``, ``io-child``).
- ``record(binary)``: runs it against a recorder (a test double, not a backend) that keeps every request as it
  arrived — the full ``Content-Type`` with its multipart boundary — to replay into the Pyroscope and Tempo doubles.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aiohttp import web

from tests.node_sdk import Capture, Upload
from tests.paths import ROOT
from tests.tools import require_go

GO_DIR: Final = ROOT / "tests" / "sdk" / "go"
SERVICE: Final = "shop-go"
ROLES: Final = ("cpu-root", "cpu-child", "io-root", "io-child")
BUILD_TIMEOUT_S: Final = 480.0
RUN_TIMEOUT_S: Final = 90.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYROSCOPE_", "LD_PRELOAD", "FAKETIME"))}
    return env


async def _run(*argv: str, cwd: Path, timeout: float) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=str(cwd), env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{argv[0]} did not finish within {timeout:g} s") from None
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def build_service(directory: Path) -> Path:
    go = require_go("build the Go SDK service (tests/sdk/go)")
    binary = directory / "shop-go"
    try:
        done = subprocess.run(
            [go, "build", "-o", str(binary), "."],
            cwd=GO_DIR,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"go build in {GO_DIR} did not finish within {BUILD_TIMEOUT_S:g} s") from None
    assert done.returncode == 0, f"go build in {GO_DIR} failed:\n{done.stderr[-3000:]}"
    return binary


async def go_clock(binary: Path) -> Callable[[], float]:
    """A wall clock in step with the service's: its ``time.Now()`` against ours, once; then ours plus that offset."""
    before = time.time()
    code, out, err = await _run(str(binary), "-now", cwd=GO_DIR, timeout=30.0)
    assert code == 0, err
    offset = int(out.strip()) / 1e9 - (before + time.time()) / 2
    return lambda: time.time() + offset


async def run_service(
    binary: Path, url: str, *, otlp: str = "http", grpc: str = "", rounds: int = 3
) -> dict[str, dict[str, str]]:
    """Run the service against ``url`` until it exits; its spans by role. The SDK's upload errors are on stderr
    (``pyroscope error: …``): any makes this fail."""
    argv = [str(binary), "-url", url, "-otlp", otlp, "-rounds", str(rounds), "-service", SERVICE]
    if grpc:
        argv += ["-grpc", grpc]
    code, out, err = await _run(*argv, cwd=GO_DIR, timeout=RUN_TIMEOUT_S)
    assert code == 0, err[-3000:]
    assert "pyroscope error" not in err, err[-3000:]
    spans = {doc["role"]: doc for doc in map(json.loads, out.splitlines()) if "role" in doc}
    assert set(spans) == set(ROLES), out[-2000:]
    return spans


RECORDED = web.AppKey("recorded", Capture)


async def _keep(request: web.Request) -> web.Response:
    request.app[RECORDED].uploads.append(
        Upload(request.path, request.query_string, request.headers.get("Content-Type", ""), await request.read())
    )
    if request.path == "/v1/traces":  # an empty ExportTraceServiceResponse
        return web.Response(body=b"", content_type="application/x-protobuf")
    return web.Response(status=200)


async def record(binary: Path) -> Capture:
    """Run the service against a recorder of OTLP/HTTP traces and /ingest uploads; what it sent, and its spans."""
    app = web.Application(client_max_size=64 * 1024**2)
    app[RECORDED] = Capture()
    app.router.add_post("/v1/traces", _keep)
    app.router.add_post("/ingest", _keep)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        spans = await run_service(binary, f"http://127.0.0.1:{runner.addresses[0][1]}", otlp="http")
    finally:
        await runner.cleanup()
    capture = app[RECORDED]
    capture.spans = spans
    return capture
