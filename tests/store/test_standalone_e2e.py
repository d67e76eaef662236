"""End to end, with real SDKs and nothing else installed: the bridge runs standalone (a real aiohttp server on
127.0.0.1, port 0); a small program instrumented with opentelemetry-sdk + the OTLP/HTTP exporter + pyroscope-io +
pyroscope-otel (``PyroscopeSpanProcessor``) sends its traces and CPU profiles to it; then Grafana's question is
asked through Connect — ``SelectMergeSpanProfile`` for a root span (→ ``linked``, containing the hot function) and
for a child span (→ ``local-root``). A restart in between must not lose anything."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge._proto import tempo_pb2
from bridge.app import create_app
from bridge.config import Settings
from bridge.spans import spans_from_otlp
from bridge.state import RUNTIME
from bridge.store import Store
from bridge.wire.tempo import parse_search_response

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
PROGRAM_SECONDS = 3.0
PROGRAM_TIMEOUT = 60.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=15, connect=2)

PROGRAM = textwrap.dedent(
    """
    import json, sys, time

    import pyroscope
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from pyroscope.otel import PyroscopeSpanProcessor

    url, seconds = sys.argv[1], float(sys.argv[2])
    pyroscope.configure(application_name="e2e-shop", server_address=url, sample_rate=100, tags={"env": "e2e"})
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-shop"}))
    provider.add_span_processor(PyroscopeSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=10)))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("e2e")


    def e2e_hot_function(n):
        total = 0
        for i in range(n):
            total += i * i % 7
        return total


    deadline = time.time() + seconds
    while time.time() < deadline:
        with tracer.start_as_current_span("GET /work", kind=trace.SpanKind.SERVER) as root:
            with tracer.start_as_current_span("compute") as child:
                e2e_hot_function(400_000)
            ctx_root, ctx_child = root.get_span_context(), child.get_span_context()
            print(json.dumps({
                "trace_id": format(ctx_root.trace_id, "032x"),
                "root": format(ctx_root.span_id, "016x"),
                "child": format(ctx_child.span_id, "016x"),
            }), flush=True)
    provider.shutdown()
    pyroscope.shutdown()
    """
)


async def run_program(url: str, tmp_path: Path) -> list[dict[str, str]]:
    script = tmp_path / "instrumented.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYROSCOPE_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        url,
        str(PROGRAM_SECONDS),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), PROGRAM_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]


async def start(settings: Settings) -> tuple[web.AppRunner, str]:
    # as `profile-bridge serve` runs it: bodies arrive still gzip-compressed and handlers undo it with a size limit
    runner = web.AppRunner(create_app(settings), auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def span_profile(url: str, span_id: str, start_ms: int, end_ms: int) -> tuple[str, qpb.FlameGraph]:
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=CPU,
        label_selector='{service_name="e2e-shop"}',
        span_selector=[span_id],
        start=start_ms,
        end=end_ms,
    )
    headers = {"Content-Type": "application/proto", "Connect-Protocol-Version": "1", "Accept-Encoding": "gzip"}
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
        async with session.post(
            f"{url}/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile",
            data=req.SerializeToString(),
            headers=headers,
        ) as resp:
            body = await resp.read()
            assert resp.status == 200, body[:500]
            mode = resp.headers.get("X-Profile-Bridge-Resolution", "")
    return mode, qpb.SelectMergeSpanProfileResponse.FromString(body).flamegraph


def names_in(fg: qpb.FlameGraph) -> set[str]:
    return {name for stack, _ in flamegraph.iter_stacks(flamegraph.decode(fg)) for name in stack}


async def test_real_sdks_to_span_flame_graph_and_back_after_restart(tmp_path: Path) -> None:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"))
    runner, url = await start(settings)
    try:
        spans = await run_program(url, tmp_path)
        assert spans, "the instrumented program made no requests"
        store = runner.app[RUNTIME].backends.profiles
        assert isinstance(store, Store)
        counts = await store.counts()
        assert counts.spans >= 2 * len(spans) and counts.samples > 0
        # the root span with the most CPU is the one to ask about
        by_root: dict[str, int] = {}
        for s in spans:
            req = qpb.SelectMergeStacktracesRequest(
                profile_typeID=CPU, label_selector="{}", span_selector=[s["root"]], start=0, end=2**50
            )
            by_root[s["root"]] = (await store.select_merge_stacktraces(req, _ctx())).flamegraph.total
        best = max(spans, key=lambda s: by_root[s["root"]])
        assert by_root[best["root"]] > 0, "pyroscope-io sent no samples labelled with a root span id"
        trace = await store.trace_by_id(best["trace_id"], _ctx())
        assert trace is not None
        root_span = trace.get(best["root"])
        assert root_span is not None and root_span.profile_id == best["root"]  # pyroscope-otel's attribute
        start_ms = root_span.start_ns // 1_000_000 - 60_000
        end_ms = root_span.end_ns // 1_000_000 + 60_000

        mode, fg = await span_profile(url, best["root"], start_ms, end_ms)
        assert mode == "linked"
        assert "e2e_hot_function" in names_in(fg)
        linked_total = fg.total

        mode, child_fg = await span_profile(url, best["child"], start_ms, end_ms)
        assert mode == "local-root"
        assert "e2e_hot_function" in names_in(child_fg)

        # Grafana's Tempo data source, through the /tempo mount: the trace from the store, every span enriched so
        # the "Profiles for this span" button shows on the child too; search finds the child by id
        async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
            async with session.get(
                f"{url}/tempo/api/v2/traces/{best['trace_id']}", headers={"Accept": "application/protobuf"}
            ) as resp:
                assert resp.status == 200
                answer = tempo_pb2.TraceByIDResponse.FromString(await resp.read())
            q = f'{{ span:id = "{best["child"]}" }} | select(span:name, resource.service.name)'
            async with session.get(f"{url}/tempo/api/search", params={"q": q}) as resp:
                assert resp.status == 200
                hits = parse_search_response(await resp.json())
        spans = {
            s.span_id: s
            for s in spans_from_otlp(otlp_trace.ResourceSpans.FromString(raw) for raw in answer.trace.resource_spans)
        }
        assert spans[best["child"]].name == "compute" and spans[best["child"]].profile_id
        assert [(h.span_id, h.name, h.service) for h in hits] == [(best["child"], "compute", "e2e-shop")]
    finally:
        await runner.cleanup()

    runner, url = await start(settings)
    try:
        mode, fg = await span_profile(url, best["root"], start_ms, end_ms)
        assert mode == "linked" and fg.total == linked_total
    finally:
        await runner.cleanup()


def _ctx() -> Any:
    from tests.store.test_store import ctx

    return ctx()


async def test_acknowledged_ingest_survives_a_killed_bridge(tmp_path: Path) -> None:
    """`profile-bridge serve --standalone` in a child process takes the shop capture over HTTP and is then killed
    with SIGKILL (no shutdown, no checkpoint): everything it acknowledged is in the store when it is reopened."""
    import gzip
    import signal

    from tests.paths import ROOT, SHOP_CAPTURE
    from tests.serving import closed_port, wait_healthy

    port = closed_port()
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROFILE_BRIDGE_")}
    env["PROFILE_BRIDGE_OTLP_GRPC_ENABLED"] = "false"
    # the child runs on the real clock, and the store refuses data older than its retention age: keep the capture's
    env["PROFILE_BRIDGE_RETENTION_AGE"] = "36500d"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "serve",
        "--standalone",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
        cwd=str(ROOT),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
            await wait_healthy(
                session, url, lambda: f"exit code {proc.returncode}" if proc.returncode is not None else None, 30
            )  # a bound on start-up (imports, the store opened), not a speed claim: 10 s was missed on a loaded machine
            for line in (SHOP_CAPTURE / "index.jsonl").read_text().splitlines():
                entry = json.loads(line)
                body = (SHOP_CAPTURE / entry["file"]).read_bytes()
                headers = {"Content-Type": entry["content_type"]}
                if entry["content_encoding"] == "gzip":
                    body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
                async with session.post(url + entry["path"], data=body, headers=headers) as resp:
                    assert resp.status == 200, await resp.text()
    finally:
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)
    store = await Store.open(data_dir)
    try:
        c = await store.counts()
    finally:
        await store.close()
    assert (c.spans, c.traces, c.samples, c.sample_value) == (434, 186, 201, 3_590_000_000)
