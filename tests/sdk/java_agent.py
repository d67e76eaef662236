"""Driving the real Pyroscope Java clients: ``tests/java/agent`` (``shop.AgentShop``, a small service on the JDK's
HttpServer) with the OpenTelemetry Java SDK and either

- ``"otel"``: ``io.pyroscope:otel`` 0.10.1.11 on the class path — its OpenTelemetry autoconfigure provider starts the
  Pyroscope agent the jar ships (io.pyroscope:agent 0.13.0, relocated) and adds ``PyroscopeOtelSpanProcessor``, so
  a local root span's samples carry its id (the upload's ``labels`` part); or
- ``"agent"``: ``io.pyroscope:agent`` 2.1.2 as ``-javaagent``, no span processor (spans are only traced).

Every version is pinned in ``tests/java/agent/pom.xml``; the jars come from Maven's local repository (``.ci/run``
fills it once with ``dependency:go-offline``), Maven runs offline (``-o``).

- ``build_shop(directory)``: the dependencies' class path (``mvn -o dependency:build-classpath``) and ``javac``.
- ``run_shop(shop, flavour, target)``: runs the service with the agent uploading every 2 s through a recorder that
  passes every request on to ``target`` (a bridge) and answers with what ``target`` answered — so the agent and the
  OpenTelemetry exporter talk to the bridge, and the test keeps each request exactly as sent (the full
  ``Content-Type`` with its multipart boundary) to replay into the doubles. Once the service has made its requests
  and flushed its spans, the recorder waits for the agent's first upload of a window ending after them (the agent of
  io.pyroscope:otel 0.10.1.11 has no final upload on exit), then closes the service's standard input (it exits).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web

from tests.node_sdk import Capture, Upload
from tests.paths import ROOT
from tests.tools import require_tool

AGENT_DIR: Final = ROOT / "tests" / "java" / "agent"
SOURCE: Final = AGENT_DIR / "src" / "main" / "java" / "shop" / "AgentShop.java"
SERVICE: Final = "shop-java"
ROLES: Final = ("cpu-root", "cpu-child", "io-root", "io-child")
ROUNDS: Final = 3
BURN_MS: Final = 600
UPLOAD_INTERVAL: Final = "2s"
RUN_TIMEOUT_S: Final = 120.0
GO_OFFLINE: Final = "mvn -B -q -f tests/java/agent/pom.xml dependency:go-offline"
# a short-lived Maven: its JVM without the optimising compiler starts in a third of the time
MAVEN_OPTS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
OTEL_JAR: Final = "/io/pyroscope/otel/0.10.1.11/otel-0.10.1.11.jar"
AGENT_JAR: Final = "/io/pyroscope/agent/2.1.2/agent-2.1.2.jar"


@dataclass(frozen=True, slots=True)
class Shop:
    java: str
    classes: Path
    jars: tuple[str, ...]  # the pom's dependencies, both Pyroscope jars among them

    def jar(self, suffix: str) -> str:
        found = [j for j in self.jars if j.endswith(suffix)]
        assert len(found) == 1, (suffix, self.jars)
        return found[0]


@dataclass(slots=True)
class ShopRun:
    spans: dict[str, dict[str, str]]
    capture: Capture
    answers: list[tuple[str, int, str]] = field(default_factory=list)  # (path, status, body) the target gave
    stderr: str = ""


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "JAVA_HOME", "LANG")}
    return {**keep, **(extra or {})}


def build_shop(directory: Path) -> Shop:
    """The service compiled against the pom's dependencies, resolved offline from Maven's local repository."""
    purpose = "run the Pyroscope Java agent test (tests/java/agent)"
    java = require_tool("java", package="openjdk-17-jdk-headless", purpose=purpose)
    javac = require_tool("javac", package="openjdk-17-jdk-headless", purpose=purpose)
    mvn = require_tool("mvn", package="maven", purpose=purpose)
    cp_file = directory / "classpath.txt"
    done = subprocess.run(
        [mvn, "-B", "-o", "-q", "-f", str(AGENT_DIR / "pom.xml"), "dependency:build-classpath"]
        + [f"-Dmdep.outputFile={cp_file}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env({"MAVEN_OPTS": MAVEN_OPTS}),
        check=False,
    )
    assert done.returncode == 0, (
        f"Maven could not resolve tests/java/agent/pom.xml offline (run `{GO_OFFLINE}` once, as .ci/run does):\n"
        + (done.stdout + done.stderr)[-3000:]
    )
    jars = tuple(p for p in cp_file.read_text().strip().split(os.pathsep) if p)
    classes = directory / "classes"
    compile_cp = os.pathsep.join(j for j in jars if not j.endswith(AGENT_JAR))
    subprocess.run([javac, "-d", str(classes), "-cp", compile_cp, str(SOURCE)], check=True, timeout=300, env=_env())
    return Shop(java, classes, jars)


def shop_command(shop: Shop, flavour: str) -> list[str]:
    """The ``java`` command line of one flavour (see the module docstring). The two Pyroscope jars never share a
    class path: each carries its own async-profiler library under the same resource name."""
    if flavour == "otel":
        cp = [str(shop.classes), *(j for j in shop.jars if not j.endswith(AGENT_JAR))]
        agent: list[str] = []
    elif flavour == "agent":
        cp = [str(shop.classes), *(j for j in shop.jars if not j.endswith((AGENT_JAR, OTEL_JAR)))]
        agent = [f"-javaagent:{shop.jar(AGENT_JAR)}"]
    else:
        raise ValueError(flavour)
    return [shop.java, *agent, "-cp", os.pathsep.join(cp), "shop.AgentShop", str(ROUNDS), str(BURN_MS)]


def shop_env(recorder: str) -> dict[str, str]:
    """The service's configuration, as users give it: the agent's PYROSCOPE_* (pyroscope-java ``Config.java``: read
    from system properties, then the environment) and the OpenTelemetry SDK's OTEL_* (its autoconfigure module)."""
    return _env(
        {
            "PYROSCOPE_APPLICATION_NAME": SERVICE,
            "PYROSCOPE_SERVER_ADDRESS": recorder,
            "PYROSCOPE_FORMAT": "jfr",
            "PYROSCOPE_PROFILER_EVENT": "itimer",
            "PYROSCOPE_PROFILER_ALLOC": "512k",
            "PYROSCOPE_UPLOAD_INTERVAL": UPLOAD_INTERVAL,
            "PYROSCOPE_LABELS": "region=test",
            "PYROSCOPE_LOG_LEVEL": "info",
            "OTEL_SERVICE_NAME": SERVICE,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": recorder,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
    )


RUN: Final = web.AppKey("run", ShopRun)
TARGET: Final = web.AppKey("target", str)
SESSION: Final = web.AppKey("session", aiohttp.ClientSession)


async def _pass_on(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    run = request.app[RUN]
    run.capture.uploads.append(
        Upload(request.path, request.query_string, request.headers.get("Content-Type", ""), body)
    )
    headers = {k: v for k, v in request.headers.items() if k in ("Content-Type", "Content-Encoding")}
    async with request.app[SESSION].post(request.app[TARGET] + request.path_qs, data=body, headers=headers) as resp:
        answer = await resp.read()
        run.answers.append((request.path, resp.status, answer.decode(errors="replace")[:500]))
        return web.Response(
            status=resp.status, body=answer, headers={"Content-Type": resp.headers.get("Content-Type", "text/plain")}
        )


def _uploaded_past(run: ShopRun, done_s: int) -> bool:
    """Whether an upload whose window ends after ``done_s`` was answered (the exporter sends in order)."""
    for upload, (path, _, _) in zip(run.capture.uploads, run.answers, strict=False):
        if path == "/ingest" and int(parse_qs(upload.query).get("until", ["0"])[0]) > done_s:
            return True
    return False


async def _lines(stream: asyncio.StreamReader, into: list[str]) -> None:
    async for raw in stream:
        into.append(raw.decode(errors="replace"))


async def run_shop(shop: Shop, flavour: str, target: str) -> ShopRun:
    """Run the service (see the module docstring); what it sent, what ``target`` answered, its spans and its log."""
    run = ShopRun({}, Capture())
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), auto_decompress=False) as session:
        app = web.Application(client_max_size=64 * 1024**2)
        app[RUN], app[TARGET], app[SESSION] = run, target, session
        app.router.add_post("/v1/traces", _pass_on)
        app.router.add_post("/ingest", _pass_on)
        runner = web.AppRunner(app, auto_decompress=False)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        recorder = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            await asyncio.wait_for(_drive(shop, flavour, recorder, run), RUN_TIMEOUT_S)
        finally:
            await runner.cleanup()
    return run


async def _drive(shop: Shop, flavour: str, recorder: str, run: ShopRun) -> None:
    proc = await asyncio.create_subprocess_exec(
        *shop_command(shop, flavour),
        env=shop_env(recorder),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    out: list[str] = []
    err: list[str] = []
    err_task = asyncio.create_task(_lines(proc.stderr, err))
    try:
        done_s = 0
        async for raw in proc.stdout:
            line = raw.decode(errors="replace")
            out.append(line)
            if line.startswith("{"):
                doc = json.loads(line)
                if "role" in doc:
                    run.spans[doc["role"]] = doc
                elif "done_ms" in doc:
                    done_s = int(doc["done_ms"]) // 1000
                    break
        assert done_s, "the service stopped before its requests were done:\n" + "".join(out + err)[-3000:]
        while not _uploaded_past(run, done_s):
            assert proc.returncode is None, "the service exited:\n" + "".join(err)[-3000:]
            await asyncio.sleep(0.1)
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await err_task
        run.stderr = "".join(err)
    assert set(run.spans) == set(ROLES), "".join(out)[-2000:]
