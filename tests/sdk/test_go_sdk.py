"""The real Go SDKs end to end (issue 23 §1): ``tests/sdk/go`` is a small Go service built by this test with
``github.com/grafana/pyroscope-go`` (pprof to ``/ingest``, ``spyName=gospy``, every 2 s), the OpenTelemetry Go SDK
(OTLP/gRPC against the standalone bridge, OTLP/HTTP into the recorder for the proxy run) and
``github.com/grafana/otel-profiling-go``, which labels every CPU sample of a request with its LOCAL ROOT span's id
(``otelpyroscope.go``: ``spanIDScope`` defaults to ``ScopeRootSpan``) and puts ``pyroscope.profile.id`` on that root.
This is Grafana's documented Go setup, so what its README promises must hold:

- the uploads are accepted, under the profile types Pyroscope gives a Go service (``process_cpu:…``,
  ``memory:alloc_objects:…``, …);
- a ``GET /cpu`` root span is ``linked`` — its own samples, ``cpuHotFunction`` on top;
- its child ``checksum`` is ``local-root``: the SDK recorded its CPU under the root's id, and the answer says the
  total is the request's;
- the I/O-bound child ``query-db`` is never passed off as having CPU of its own: not ``linked``, and its answer says
  whose cost it shows;
- the Grafana path, ``SelectMergeSpanProfile`` with the root's ``pyroscope.profile.id``, answers the flame graph.

Marked ``slow`` (a Go build, then a service that runs ~6 s). It is date-safe: the bridge's clock is the Go process's
own (``go_sdk.go_clock``: Go reads the time without libc, so libfaketime never shifts it), so the SDKs' stamps and the
bridge agree on any date and under faketime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.call import CallContext, Deadline
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from bridge.state import RUNTIME
from bridge.store import Store
from tests.doubles.pyroscope import PyroscopeDouble
from tests.node_sdk import tempo_holding
from tests.sdk.go_sdk import SERVICE, build_service, go_clock, record, run_service

pytestmark = pytest.mark.slow

Server = Callable[..., Awaitable[TestServer]]
Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Spans = dict[str, dict[str, str]]

HOT: Final = "main.cpuHotFunction"
# what Pyroscope names a Go service's uploads: pprof sample types under gospy (checked against a real Pyroscope by
# scripts/differential.py)
GO_TYPES: Final = {
    "process_cpu:samples:count:cpu:nanoseconds",
    DEFAULT_PROFILE_TYPE,
    "memory:alloc_objects:count:space:bytes",
    "memory:alloc_space:bytes:space:bytes",
    "memory:inuse_objects:count:space:bytes",
    "memory:inuse_space:bytes:space:bytes",
}


@pytest.fixture(scope="module")
def go_service(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_service(tmp_path_factory.mktemp("go"))


async def span_answer(client: TestClient[Any, Any], span: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """The bridge's API on the default profile type: its headers and the collapsed stacks."""
    resp = await client.get(
        f"/api/v1/spans/{span['trace_id']}/{span['span_id']}/profile", params={"format": "collapsed"}
    )
    text = await resp.text()
    assert resp.status == 200, text[:500]
    stacks: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, value = line.rpartition(" ")
        stacks[stack] = stacks.get(stack, 0) + int(value)
    return dict(resp.headers), stacks


def hot_share(stacks: dict[str, int]) -> float:
    total = sum(stacks.values())
    return sum(v for stack, v in stacks.items() if HOT in stack) / total if total else 0.0


async def grafana_click(
    client: TestClient[Any, Any], span: dict[str, str], clock: Callable[[], float]
) -> qpb.FlameGraph:
    """What Grafana's trace view sends for "Profiles for this span": the root's pyroscope.profile.id as the span
    selector, the last hour, Connect protobuf."""
    now_ms = int(clock() * 1000)
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{SERVICE}"}}',
        span_selector=[span["span_id"]],
        start=now_ms - 3600_000,
        end=now_ms,
    )
    resp = await client.post(
        "/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile",
        data=req.SerializeToString(),
        headers={"Content-Type": "application/proto", "Connect-Protocol-Version": "1"},
    )
    body = await resp.read()
    assert resp.status == 200, body[:500]
    assert resp.headers["X-Profile-Bridge-Resolution"] == "linked"
    return qpb.SelectMergeSpanProfileResponse.FromString(body).flamegraph


async def check_go_spans(client: TestClient[Any, Any], spans: Spans, clock: Callable[[], float]) -> None:
    headers, stacks = await span_answer(client, spans["cpu-root"])
    assert headers["X-Profile-Bridge-Resolution"] == "linked", headers["X-Profile-Bridge-Reason"]
    assert headers["X-Profile-Bridge-Attribution"] == "span"
    assert hot_share(stacks) >= 0.5, stacks

    headers, stacks = await span_answer(client, spans["cpu-child"])
    assert headers["X-Profile-Bridge-Resolution"] == "local-root", headers["X-Profile-Bridge-Reason"]
    assert spans["cpu-root"]["span_id"] in headers["X-Profile-Bridge-Reason"]  # says whose samples it shows
    assert headers["X-Profile-Bridge-Attribution"] == "request"
    assert hot_share(stacks) >= 0.5, stacks

    headers, stacks = await span_answer(client, spans["io-child"])
    mode, attribution = headers["X-Profile-Bridge-Resolution"], headers["X-Profile-Bridge-Attribution"]
    assert mode in ("local-root", "time-window", "none"), headers["X-Profile-Bridge-Reason"]
    assert attribution != "span"  # a sleeping span is never shown as having burned CPU itself
    assert {"local-root": "request", "time-window": "service", "none": "nothing"}[mode] == attribution

    names = {name for name in grafana_names(await grafana_click(client, spans["cpu-root"], clock))}
    assert HOT in names, sorted(names)[:40]


def grafana_names(fg: qpb.FlameGraph) -> list[str]:
    return list(fg.names)


# --------------------------------------------------------------------------------------------- standalone


async def test_go_sdks_against_a_standalone_bridge(
    go_service: Path, aiohttp_server: Server, aiohttp_client: Client, tmp_path: Path
) -> None:
    clock = await go_clock(go_service)
    settings = Settings.for_tests(
        mode="standalone", data_dir=str(tmp_path / "data"), otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0)
    )
    # as `profile-bridge serve` runs it: bodies arrive as sent and handlers undo gzip themselves
    client = await aiohttp_client(await aiohttp_server(create_app(settings, wall_clock=clock), auto_decompress=False))
    backends = client.server.app[RUNTIME].backends
    assert backends.grpc is not None
    spans = await run_service(
        go_service, str(client.make_url("")).rstrip("/"), otlp="grpc", grpc=f"127.0.0.1:{backends.grpc.port}"
    )
    store = backends.profiles
    assert isinstance(store, Store)
    types = {
        t.ID
        for t in (
            await store.profile_types(qpb.ProfileTypesRequest(), CallContext(Deadline.start(None, 10.0)))
        ).profile_types
    }
    assert types == GO_TYPES
    await check_go_spans(client, spans, clock)


# --------------------------------------------------------------------------------------------- proxy


async def test_go_sdks_through_the_doubles_in_proxy_mode(
    go_service: Path, aiohttp_server: Server, aiohttp_client: Client
) -> None:
    clock = await go_clock(go_service)
    capture = await record(go_service)
    assert capture.traces() and all(u.content_type.startswith("application/x-protobuf") for u in capture.traces())
    pyro = PyroscopeDouble(profiles=[])
    pyro.url = str((await aiohttp_server(pyro.app)).make_url("")).rstrip("/")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        for upload in capture.ingests():
            assert "spyName=gospy" in upload.query and upload.content_type.startswith("multipart/form-data; boundary=")
            async with session.post(
                f"{pyro.url}/ingest?{upload.query}", data=upload.body, headers={"Content-Type": upload.content_type}
            ) as resp:
                assert resp.status == 200, await resp.text()
    assert {p.type_id for p in pyro.profiles} == GO_TYPES  # the double names them as Pyroscope does
    tempo = tempo_holding(capture)
    tempo.url = str((await aiohttp_server(tempo.app)).make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", pyroscope_url=pyro.url, tempo_url=tempo.url)
    client = await aiohttp_client(await aiohttp_server(create_app(settings, wall_clock=clock)))
    await check_go_spans(client, capture.spans, clock)
