"""A real JVM end to end: Debian's JDK compiles and runs ``tests/java/JfrShop.java`` (CPU-hot and allocation-heavy
requests on four threads, each an OpenTelemetry span it sends itself as OTLP/HTTP JSON with the JDK's HttpClient)
under ``-XX:StartFlightRecording`` with execution and allocation sampling; the recording is uploaded to a standalone
bridge as Pyroscope's Java SDK uploads it (``PyroscopeExporter``: multipart ``jfr`` part, gzipped, the SDK's query).
Then Grafana's questions: the Java profile types, the hot method's share of the flame graph against the share the
JDK's own ``jfr`` tool counts in the same recording, a request span resolved by time window to the hot method, and
its span page. One JVM run, shared by the module.

Slow (javac, a JVM, a bridge process, the JDK's jfr tool: 30–50 s on a shared machine) and date-safe: the program,
the bridge and the test all use the real clock of this run — spans, the recording and the upload's from/until are
made now, and nothing is compared with a fixed date; the faketime runs skip it all the same."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from tests.paths import ROOT
from tests.serving import BridgeProcess
from tests.tools import require_tool

pytestmark = pytest.mark.slow

PROGRAM = ROOT / "tests" / "java" / "JfrShop.java"
SECONDS = 5.0
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
TLAB_BYTES = "memory:alloc_in_new_tlab_bytes:bytes:space:bytes"
HOT = "JfrShop.hotPrimes"
ALLOC = "JfrShop.allocHeavy"
TIMEOUT = aiohttp.ClientTimeout(total=60)
# what the run records: CPU samples every 10 ms and every allocation sample, with stacks (as Pyroscope's pyroscope.jfc)
JFC = """<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="profile-bridge test">
  <event name="jdk.ExecutionSample"><setting name="enabled">true</setting><setting name="period">10 ms</setting></event>
  <event name="jdk.ObjectAllocationInNewTLAB"><setting name="enabled">true</setting>
    <setting name="stackTrace">true</setting></event>
  <event name="jdk.ObjectAllocationOutsideTLAB"><setting name="enabled">true</setting>
    <setting name="stackTrace">true</setting></event>
</configuration>
"""


@dataclass
class JvmRun:
    base: str
    spans: list[dict[str, Any]]
    window: tuple[int, int]  # from, until (epoch seconds)
    recording: Path
    jfr_tool: str


async def _upload_as_the_java_sdk(base: str, recording: bytes, window: tuple[int, int]) -> None:
    """PyroscopeExporter.uploadSnapshot for an ALLOC/CPU snapshot of the JDK profiler: POST /ingest with the
    application name and labels, units, aggregationType, from/until (epoch seconds), spyName=javaspy, sampleRate
    (the 10 ms interval in hertz), format=jfr; multipart/form-data with the gzipped recording as part ``jfr``
    (filename ``jfr``); no labels part (the JDK's recorder carries no context ids, so the SDK's snapshot is empty)."""
    query = {
        "name": "java-shop{env=jvm-test}",
        "units": "samples",
        "aggregationType": "sum",
        "from": str(window[0]),
        "until": str(window[1]),
        "spyName": "javaspy",
        "sampleRate": "100",
        "format": "jfr",
    }
    form = aiohttp.FormData()
    form.add_field("jfr", gzip.compress(recording, 1), filename="jfr", content_type="application/octet-stream")
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.post(f"{base}/ingest?{urlencode(query)}", data=form) as resp:
            assert resp.status == 200, await resp.text()


@pytest.fixture(scope="module")
def jvm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    purpose = "run the JFR ingest test on a real JVM"
    java = require_tool("java", package="openjdk-17-jdk-headless", purpose=purpose)
    javac = require_tool("javac", package="openjdk-17-jdk-headless", purpose=purpose)
    jfr_tool = require_tool("jfr", package="openjdk-17-jdk-headless", purpose=purpose)
    tmp = tmp_path_factory.mktemp("jvm")
    subprocess.run([javac, "-d", str(tmp), str(PROGRAM)], check=True, timeout=120)
    (tmp / "shop.jfc").write_text(JFC)
    bridge = BridgeProcess(tmp / "data")
    try:
        recording = tmp / "shop.jfr"
        run = subprocess.run(
            [java, f"-XX:StartFlightRecording=filename={recording},settings={tmp / 'shop.jfc'}", "-cp", str(tmp)]
            + ["JfrShop", bridge.base, str(SECONDS)],
            capture_output=True,
            text=True,
            timeout=180,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        assert run.returncode == 0, run.stderr
        docs = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        window = (docs[-1]["from"], docs[-1]["until"])
        asyncio.run(_upload_as_the_java_sdk(bridge.base, recording.read_bytes(), window))
        yield JvmRun(bridge.base, docs[:-1], window, recording, jfr_tool)
    finally:
        bridge.stop()


async def connect(base: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        url = f"{base}/pyroscope/querier.v1.QuerierService/{method}"
        async with http.post(url, json=body) as resp:
            assert resp.status == 200, await resp.text()
            doc: dict[str, Any] = await resp.json()
            return doc


def node_totals(flamegraph: dict[str, Any]) -> dict[str, int]:
    """A Pyroscope flame graph (levels of [offset, total, self, name] quadruples) → total per function name, each
    node counted once (the programs here have no recursion)."""
    names = flamegraph["names"]
    out: dict[str, int] = {}
    for level in flamegraph["levels"]:
        values = [int(v) for v in level.get("values", [])]
        for i in range(0, len(values), 4):
            name = names[values[i + 3]]
            out[name] = out.get(name, 0) + values[i + 1]
    return out


def node_selves(flamegraph: dict[str, Any]) -> dict[str, int]:
    names = flamegraph["names"]
    out: dict[str, int] = {}
    for level in flamegraph["levels"]:
        values = [int(v) for v in level.get("values", [])]
        for i in range(0, len(values), 4):
            out[names[values[i + 3]]] = out.get(names[values[i + 3]], 0) + values[i + 2]
    return out


def jfr_counts(run: JvmRun) -> tuple[int, int, int, int]:
    """From the JDK's own ``jfr print``: (execution samples, those in the hot method, TLAB bytes, those allocated in
    allocHeavy) — counted by the JDK's parser, not the bridge's."""
    out = subprocess.run(
        [run.jfr_tool, "print", "--json", "--stack-depth", "64"]
        + ["--events", "jdk.ExecutionSample,jdk.ObjectAllocationInNewTLAB", str(run.recording)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    samples = hot = tlab = tlab_alloc = 0
    for event in json.loads(out)["recording"]["events"]:
        if not event["values"]["stackTrace"] or not event["values"]["stackTrace"]["frames"]:
            # no stack (jfr-parser drops it: StacktraceNotFound), or one without a frame (the JVM's own threads
            # allocate so): a flame graph has nowhere to put it, and the store keeps no frameless sample
            continue
        frames = event["values"]["stackTrace"]["frames"]
        names = {f"{f['method']['type']['name']}.{f['method']['name']}" for f in frames}
        if event["type"] == "jdk.ExecutionSample":
            samples += 1
            hot += "JfrShop.hotPrimes" in names
        else:
            size = int(event["values"]["tlabSize"])
            tlab += size
            tlab_alloc += size if "JfrShop.allocHeavy" in names else 0
    return samples, hot, tlab, tlab_alloc


async def test_profile_types_list_the_java_types(jvm: JvmRun) -> None:
    doc = await connect(jvm.base, "ProfileTypes", {})
    ids = {t["ID"] for t in doc["profileTypes"]}
    assert {
        CPU,
        "memory:alloc_in_new_tlab_objects:count:space:bytes",
        TLAB_BYTES,
        "memory:alloc_outside_tlab_objects:count:space:bytes",
        "memory:alloc_outside_tlab_bytes:bytes:space:bytes",
    } <= ids


async def test_the_hot_method_has_the_share_the_jdk_counts(jvm: JvmRun) -> None:
    samples, hot, tlab, tlab_alloc = jfr_counts(jvm)
    assert samples > 20 and hot > 0  # the run sampled enough to mean something
    span = {"start": (jvm.window[0] - 1) * 1000, "end": (jvm.window[1] + 1) * 1000}
    selector = '{service_name="java-shop", env="jvm-test", pyroscope_spy="javaspy"}'
    cpu = await connect(jvm.base, "SelectMergeStacktraces", {"profile_typeID": CPU, "label_selector": selector, **span})
    totals = node_totals(cpu["flamegraph"])
    total = int(cpu["flamegraph"]["total"])
    assert total == samples * 10_000_000  # every execution sample, 1e9 / sampleRate ns each
    assert totals[HOT] * samples == hot * total  # the same share, exactly
    # three of the four threads spin in it: it leads the flame graph's leaves (its share of all samples depends on how
    # much CPU this machine gave the JVM's start-up and its other threads)
    selves = node_selves(cpu["flamegraph"])
    assert max(selves, key=lambda k: selves[k]) == HOT
    # frames as jfr-parser names them: the JVM's internal class names; JDK 17 names its lambda classes
    # ``Outer$$Lambda$<n>+0x<address>/<hash>``, a form jfr-parser's merge does not match, so the name stays whole
    assert "java/lang/Thread.run" in totals
    lambdas = [k for k in totals if k.startswith("JfrShop$$Lambda")]
    assert lambdas and all(re.fullmatch(r"JfrShop\$\$Lambda\$\d+\+0x[0-9a-f]+/\d+\.run", k) for k in lambdas), lambdas
    alloc = await connect(
        jvm.base, "SelectMergeStacktraces", {"profile_typeID": TLAB_BYTES, "label_selector": selector, **span}
    )
    a_totals = node_totals(alloc["flamegraph"])
    assert int(alloc["flamegraph"]["total"]) == tlab
    assert a_totals[ALLOC] == tlab_alloc and tlab_alloc * 2 > tlab


async def test_a_request_span_resolves_by_time_window_to_the_hot_method(jvm: JvmRun) -> None:
    work = [s for s in jvm.spans if s["name"] == "GET /work"]
    span = work[len(work) // 2]
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.get(f"{jvm.base}/api/v1/spans/{span['traceId']}/{span['spanId']}/profile") as resp:
            doc = await resp.json()
            assert resp.status == 200, doc
        assert doc["mode"] == "time-window", doc["reason"]
        assert doc["span"]["service"] == "java-shop"
        totals = node_totals(doc["flamegraph"])
        assert totals[HOT] > totals.get(ALLOC, 0)  # the window's CPU went mostly to the hot method
        async with http.get(f"{jvm.base}/spans/{span['traceId']}/{span['spanId']}") as resp:
            page = await resp.text()
            assert resp.status == 200
        assert "time-window" in page and "hotPrimes" in page and "GET /work" in page
