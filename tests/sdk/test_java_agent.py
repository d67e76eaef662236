"""The real Pyroscope Java agent end to end (issue 23 §2): ``tests/java/agent`` is a small Java service with the
OpenTelemetry Java SDK (OTLP/HTTP protobuf, configured by its autoconfigure module) and Pyroscope's Java clients
from Maven Central, pinned in its ``pom.xml`` (``tests/sdk/java_agent.py`` builds and drives it):

- ``io.pyroscope:otel`` 0.10.1.11 — Grafana's documented Java span-profile setup (grafana/otel-profiling-java): its
  autoconfigure provider starts the Pyroscope agent the jar ships and adds ``PyroscopeOtelSpanProcessor``, which
  gives every local root span ``pyroscope.profile.id`` and labels its samples with ``profile_id`` (its span id) and
  ``span_name`` through async-profiler's context id, sent in the upload's ``labels`` part. So:

  - the agent's JFR uploads (multipart ``jfr`` + ``labels``, gzipped, ``spyName=javaspy``) are accepted;
  - ``ProfileTypes`` lists the Java types as Pyroscope names them;
  - a ``GET /cpu`` root span is ``linked`` — its own samples, ``hotPrimes`` on top; its child ``checksum`` is
    ``local-root`` (the processor marks root spans only); the I/O child ``query-db`` is never passed off as having
    CPU of its own; Grafana's ``SelectMergeSpanProfile`` answers the flame graph;
  - the same through the doubles in proxy mode, the Pyroscope double converting the uploads as Pyroscope does, with
    grafana/jfr-parser (``tests/doubles/pyroscope_jfr.py``).

- ``io.pyroscope:agent`` 2.1.2 as ``-javaagent`` on its own (no span processor can pair with it here, see the pom):
  its uploads are accepted and a request span resolves by time window to the hot method.

One JVM run per flavour, shared by the module. Marked ``slow`` (Maven, javac, two JVMs, a bridge process and the
double's Go converter: tens of seconds). Date-safe: the JVMs, the bridge and the test all read the real clock of this
run — the agent stamps its uploads and the SDK its spans now, and nothing is compared with a fixed date; the faketime
runs skip it all the same.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Awaitable, Callable, Iterator
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from bridge._proto import jfr_labels_pb2
from bridge.app import create_app
from bridge.config import Settings
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.pyroscope_jfr import jfrparse_binary
from tests.node_sdk import Upload, resource_spans_of, tempo_holding
from tests.sdk.java_agent import SERVICE, Shop, ShopRun, build_shop, run_shop
from tests.serving import BridgeProcess

pytestmark = pytest.mark.slow

Server = Callable[..., Awaitable[TestServer]]

HOT: Final = "shop/AgentShop.hotPrimes"
CPU: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
# what Pyroscope names the uploads of an agent recording itimer CPU and allocations (jfr-parser pprof/parser.go);
# outside-TLAB allocations appear only when the JVM made one while a sample was due
JAVA_TYPES: Final = {
    CPU,
    "memory:alloc_in_new_tlab_objects:count:space:bytes",
    "memory:alloc_in_new_tlab_bytes:bytes:space:bytes",
}
MAYBE: Final = {
    "memory:alloc_outside_tlab_objects:count:space:bytes",
    "memory:alloc_outside_tlab_bytes:bytes:space:bytes",
}
TIMEOUT: Final = aiohttp.ClientTimeout(total=60)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Shop:
    return build_shop(tmp_path_factory.mktemp("agent-shop"))


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    process = BridgeProcess(tmp_path_factory.mktemp("bridge") / "data")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def otel_run(shop: Shop, bridge: BridgeProcess) -> ShopRun:
    return asyncio.run(run_shop(shop, "otel", bridge.base))


@pytest.fixture(scope="module")
def agent_run(shop: Shop, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ShopRun, str]]:
    process = BridgeProcess(tmp_path_factory.mktemp("bridge-agent") / "data")
    try:
        yield asyncio.run(run_shop(shop, "agent", process.base)), process.base
    finally:
        process.stop()


# --------------------------------------------------------------------------------------------- the bridge's answers


async def connect(base: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        async with http.post(f"{base}/pyroscope/querier.v1.QuerierService/{method}", json=body) as resp:
            assert resp.status == 200, await resp.text()
            doc: dict[str, Any] = await resp.json()
            return doc


async def span_answer(base: str, span: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """The bridge's API on the default profile type (CPU): its headers and the collapsed stacks."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        url = f"{base}/api/v1/spans/{span['trace_id']}/{span['span_id']}/profile"
        async with http.get(url, params={"format": "collapsed"}) as resp:
            text = await resp.text()
            assert resp.status == 200, text[:500]
            headers = dict(resp.headers)
    stacks: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, value = line.rpartition(" ")
        stacks[stack] = stacks.get(stack, 0) + int(value)
    return headers, stacks


def hot_share(stacks: dict[str, int]) -> float:
    total = sum(stacks.values())
    return sum(v for stack, v in stacks.items() if HOT in stack) / total if total else 0.0


async def check_spans(base: str, spans: dict[str, dict[str, str]]) -> None:
    """A request's root span linked, its child local-root, the I/O child honest, and Grafana's span click."""
    headers, stacks = await span_answer(base, spans["cpu-root"])
    assert headers["X-Profile-Bridge-Resolution"] == "linked", headers["X-Profile-Bridge-Reason"]
    assert headers["X-Profile-Bridge-Attribution"] == "span"
    assert hot_share(stacks) >= 0.5, stacks

    headers, stacks = await span_answer(base, spans["cpu-child"])
    assert headers["X-Profile-Bridge-Resolution"] == "local-root", headers["X-Profile-Bridge-Reason"]
    assert spans["cpu-root"]["span_id"] in headers["X-Profile-Bridge-Reason"]  # says whose samples it shows
    assert headers["X-Profile-Bridge-Attribution"] == "request"
    assert hot_share(stacks) >= 0.5, stacks

    headers, _ = await span_answer(base, spans["io-child"])
    mode, attribution = headers["X-Profile-Bridge-Resolution"], headers["X-Profile-Bridge-Attribution"]
    assert mode in ("local-root", "time-window", "none"), headers["X-Profile-Bridge-Reason"]
    assert attribution != "span"  # a sleeping span is never shown as having burned CPU itself
    assert {"local-root": "request", "time-window": "service", "none": "nothing"}[mode] == attribution

    # what Grafana's trace view sends for "Profiles for this span": the root's pyroscope.profile.id, the last hour
    now_ms = int(time.time() * 1000)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        body = {
            "profile_typeID": CPU,
            "label_selector": f'{{service_name="{SERVICE}"}}',
            "span_selector": [spans["cpu-root"]["span_id"]],
            "start": str(now_ms - 3600_000),
            "end": str(now_ms),
        }
        url = f"{base}/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile"
        async with http.post(url, json=body) as resp:
            doc = await resp.json()
            assert resp.status == 200, doc
            assert resp.headers["X-Profile-Bridge-Resolution"] == "linked"
    assert HOT in doc["flamegraph"]["names"], doc["flamegraph"]["names"][:40]


# --------------------------------------------------------------------------------------------- the uploads


def parts(upload: Upload) -> dict[str, bytes]:
    """The multipart parts of an upload, read with the standard library's email parser."""
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + upload.content_type.encode() + b"\r\n\r\n" + upload.body
    )
    out: dict[str, bytes] = {}
    for part in message.iter_parts():
        payload = part.get_payload(decode=True)
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and isinstance(payload, bytes):
            out[name] = payload
    return out


def span_ids_in_labels(run: ShopRun) -> set[str]:
    """The ``profile_id`` values of every upload's ``labels`` part (gzipped ``LabelsSnapshot``s)."""
    ids: set[str] = set()
    for upload in run.capture.ingests():
        raw = parts(upload).get("labels")
        if raw is None:
            continue
        assert raw[:2] == b"\x1f\x8b"  # gzipped without a Content-Encoding, as the agent sends it
        snapshot = jfr_labels_pb2.LabelsSnapshot.FromString(gzip.decompress(raw))
        # a context may name a string its snapshot lacks: the agent's dump (pyroscope-java v0.13.0
        # Pyroscope.LabelsWrapper.dump) copies the strings, then the contexts, while requests open new ones; Pyroscope
        # reads a missing string as "" (jfr-parser pprof/profile_builder.go), and so does the bridge
        strings = dict(snapshot.strings)
        for ctx in snapshot.contexts.values():
            ids |= {strings.get(v, "") for k, v in ctx.labels.items() if strings.get(k) == "profile_id"}
    return ids - {""}


def check_uploads(run: ShopRun, *, labels: bool) -> None:
    assert "Error uploading" not in run.stderr and "ERROR" not in run.stderr, run.stderr[-3000:]
    assert run.capture.ingests() and run.capture.traces()
    assert all(status == 200 for _, status, _ in run.answers), [a for a in run.answers if a[1] != 200]
    for upload in run.capture.ingests():
        query = {k: v[0] for k, v in parse_qs(upload.query).items()}
        assert query["format"] == "jfr" and query["spyName"] == "javaspy", query
        assert query["name"] == f"{SERVICE}{{region=test}}" and query["sampleRate"] == "100", query
        assert upload.content_type.startswith("multipart/form-data; boundary=")
        assert parts(upload)["jfr"][:2] == b"\x1f\x8b"
    root = run.spans["cpu-root"]["span_id"]
    if labels:
        assert root in span_ids_in_labels(run)
        # the processor put the id Grafana's "Profiles for this span" sends on the root span itself
        assert profile_ids_on_spans(run)[root] == root
    else:
        assert not span_ids_in_labels(run) and not profile_ids_on_spans(run)


def profile_ids_on_spans(run: ShopRun) -> dict[str, str]:
    """span id → its ``pyroscope.profile.id`` attribute, from the OTLP exports as sent."""
    out: dict[str, str] = {}
    for upload in run.capture.traces():
        for rs in resource_spans_of(upload):
            for span in (span for ss in rs.scope_spans for span in ss.spans):
                for kv in span.attributes:
                    if kv.key == "pyroscope.profile.id":
                        out[span.span_id.hex()] = kv.value.string_value
    return out


async def profile_types(base: str) -> set[str]:
    return {t["ID"] for t in (await connect(base, "ProfileTypes", {}))["profileTypes"]}


# --------------------------------------------------------------------------------------------- io.pyroscope:otel


async def test_the_agents_jfr_and_labels_uploads_are_accepted(otel_run: ShopRun, bridge: BridgeProcess) -> None:
    check_uploads(otel_run, labels=True)
    types = await profile_types(bridge.base)
    assert JAVA_TYPES <= types <= JAVA_TYPES | MAYBE, types


async def test_spans_resolve_against_a_standalone_bridge(otel_run: ShopRun, bridge: BridgeProcess) -> None:
    await check_spans(bridge.base, otel_run.spans)


@pytest.fixture(scope="module")
def jfrparse() -> Path:
    return jfrparse_binary()  # the double's JFR converter, built before any upload's timeout runs


async def replayed(run: ShopRun, aiohttp_server: Server) -> PyroscopeDouble:
    """The Pyroscope double after the agent's uploads, replayed exactly as the agent sent them."""
    pyro = PyroscopeDouble(profiles=[])
    pyro.url = str((await aiohttp_server(pyro.app)).make_url("")).rstrip("/")
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        for upload in run.capture.ingests():
            async with http.post(
                f"{pyro.url}/ingest?{upload.query}", data=upload.body, headers={"Content-Type": upload.content_type}
            ) as resp:
                assert resp.status == 200, await resp.text()
    return pyro


async def check_totals_as_pyroscope_reads_them(base: str, pyro: PyroscopeDouble) -> None:
    """Each profile type's total and the hot method's, in the bridge's store and in the double, which converted the
    recordings with Pyroscope's own converter (grafana/jfr-parser): equal, so the bridge's reader dropped nothing of
    the agent's JFR and read it as Pyroscope does."""
    types = {p.type_id for p in pyro.profiles}
    assert JAVA_TYPES <= types <= JAVA_TYPES | MAYBE, types
    assert types == await profile_types(base)
    for type_id in types:
        stacks = pyro.select(type_id, f'{{service_name="{SERVICE}"}}', 0, 2**62, None)
        doc = await connect(
            base,
            "SelectMergeStacktraces",
            {"profile_typeID": type_id, "label_selector": f'{{service_name="{SERVICE}"}}', "start": "0"}
            | {"end": str(2**62)},
        )
        fg = doc["flamegraph"]
        assert int(fg["total"]) == sum(v for _, v in stacks), type_id
        if type_id == CPU:
            hot = sum(v for frames, v in stacks if HOT in frames)
            assert hot and node_totals(fg).get(HOT) == hot


def node_totals(flamegraph: dict[str, Any]) -> dict[str, int]:
    """A Pyroscope flame graph (levels of [offset, total, self, name] quadruples) → total per function name (no
    recursion in this service)."""
    out: dict[str, int] = {}
    for level in flamegraph["levels"]:
        values = [int(v) for v in level.get("values", [])]
        for i in range(0, len(values), 4):
            name = flamegraph["names"][values[i + 3]]
            out[name] = out.get(name, 0) + values[i + 1]
    return out


async def test_spans_resolve_through_the_doubles_in_proxy_mode(
    otel_run: ShopRun, bridge: BridgeProcess, jfrparse: Path, aiohttp_server: Server
) -> None:
    pyro = await replayed(otel_run, aiohttp_server)
    await check_totals_as_pyroscope_reads_them(bridge.base, pyro)
    tempo = tempo_holding(otel_run.capture)
    tempo.url = str((await aiohttp_server(tempo.app)).make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", pyroscope_url=pyro.url, tempo_url=tempo.url)
    server = await aiohttp_server(create_app(settings))
    await check_spans(str(server.make_url("")).rstrip("/"), otel_run.spans)


# --------------------------------------------------------------------------------------------- io.pyroscope:agent


async def test_the_plain_agent_resolves_by_time_window(
    agent_run: tuple[ShopRun, str], jfrparse: Path, aiohttp_server: Server
) -> None:
    run, base = agent_run
    check_uploads(run, labels=False)
    await check_totals_as_pyroscope_reads_them(base, await replayed(run, aiohttp_server))
    headers, stacks = await span_answer(base, run.spans["cpu-root"])
    assert headers["X-Profile-Bridge-Resolution"] == "time-window", headers["X-Profile-Bridge-Reason"]
    assert headers["X-Profile-Bridge-Attribution"] == "service"
    assert HOT in "\n".join(stacks), sorted(stacks)[:20]
