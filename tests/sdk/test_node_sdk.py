"""The real Node.js SDKs end to end (issue 10 §2): ``@pyroscope/nodejs`` 0.6 (wall profiler with CPU time, raw
pprof to ``/ingest``, ``spyName=nodespy``, stamped at the END of each capture window by ``@datadog/pprof``) and
OpenTelemetry JS (OTLP/HTTP, protobuf and JSON) — see ``tests/node/service.js``.

The stock Node SDK labels no sample with a span id (only ``wrapWithLabels`` could), so every span of it resolves by
``time-window``; these tests say so and check what that answer must be on Grafana's DEFAULT profile type
(``process_cpu:cpu:nanoseconds:cpu:nanoseconds``), which Node never uploads (its CPU is
``process_cpu:cpu:nanoseconds:wall:nanoseconds``, its wall profile's CPU as Pyroscope relabels it):

- the CPU-heavy span gets its service's samples of the capture window it ran in, its hot function on top, answered
  from Node's CPU type and saying so;
- the I/O span in that same window gets the same window, labelled ``time-window`` (the service's CPU while it
  waited, not its own);
- the I/O span alone in the next window does not get the hot function: the earlier window is not counted again.

Live runs (node against a standalone bridge; node against a recorder whose uploads are then fed to the Pyroscope
and Tempo doubles for a bridge in proxy mode) and replays of the committed recording
(``tests/fixtures/node-capture/``, no node needed, clock injected).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from bridge.state import RUNTIME
from bridge.store import Store
from tests.doubles.pyroscope import PyroscopeDouble
from tests.node_sdk import SERVICE, Capture, load_capture, record, require_node, run_service, tempo_holding

Server = Callable[..., Awaitable[TestServer]]
Client = Callable[..., Awaitable[TestClient[Any, Any]]]

# the "cpu" sample type of Node's "wall" profile, renamed by Pyroscope's default ingestion relabeling
# (pkg/validation/relabeling.go): the store and the double name it the same way
NODE_CPU: Final = "process_cpu:cpu:nanoseconds:wall:nanoseconds"
HOT: Final = "nodeHotFunction"
# the service's profiler and tracer share one process clock: a small skew keeps the windows apart
SKEW_S: Final = 0.25
ANSWERED_FROM: Final = f"answered from {NODE_CPU}, the CPU type {SERVICE} uploads"


# --------------------------------------------------------------------------------------------- what must hold


async def span_answer(client: TestClient[Any, Any], span: dict[str, str]) -> tuple[str, str, dict[str, int]]:
    """The bridge's own API on the default profile type: (mode, reason header, collapsed stacks)."""
    resp = await client.get(
        f"/api/v1/spans/{span['trace_id']}/{span['span_id']}/profile", params={"format": "collapsed"}
    )
    text = await resp.text()
    assert resp.status == 200, text[:500]
    stacks: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, value = line.rpartition(" ")
        stacks[stack] = stacks.get(stack, 0) + int(value)
    return resp.headers["X-Profile-Bridge-Resolution"], resp.headers["X-Profile-Bridge-Reason"], stacks


def hot_share(stacks: dict[str, int]) -> float:
    total = sum(stacks.values())
    return sum(v for stack, v in stacks.items() if HOT in stack) / total if total else 0.0


async def check_node_spans(client: TestClient[Any, Any], spans: dict[str, dict[str, str]], *, end_stamps: bool) -> None:
    mode, reason, stacks = await span_answer(client, spans["cpu-heavy"])
    assert mode == "time-window", reason  # no span ids from the stock Node SDK: the honest answer is the window
    assert reason.startswith("time-window fallback: no samples linked to span " + spans["cpu-heavy"]["span_id"])
    assert ANSWERED_FROM in reason
    assert hot_share(stacks) >= 0.5, stacks  # the span's own hot function dominates its window
    if end_stamps:  # Pyroscope keeps @datadog/pprof's end stamp; the bridge says it read it that way
        assert "nodespy stamps profiles at the end of their capture windows" in reason

    mode, reason, stacks = await span_answer(client, spans["io-wait"])
    assert mode == "time-window" and reason.startswith("time-window fallback: no samples linked to span"), reason

    mode, reason, stacks = await span_answer(client, spans["io-only"])
    assert mode in ("time-window", "none"), reason
    assert not any(HOT in stack for stack in stacks), stacks  # the earlier window is not this span's


# --------------------------------------------------------------------------------------------- the two modes


async def standalone(
    aiohttp_server: Server, aiohttp_client: Client, tmp_path: Path, clock: Callable[[], float] | None = None
) -> TestClient[Any, Any]:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), clock_skew=SKEW_S)
    app = create_app(settings, wall_clock=clock) if clock else create_app(settings)
    # as `profile-bridge serve` runs it: bodies arrive as sent and handlers undo gzip themselves
    return await aiohttp_client(await aiohttp_server(app, auto_decompress=False))


async def proxy_fed_with(
    capture: Capture, aiohttp_server: Server, aiohttp_client: Client, clock: Callable[[], float] | None = None
) -> tuple[TestClient[Any, Any], PyroscopeDouble]:
    """Pyroscope and Tempo doubles holding what the SDKs sent (profiles through the double's own /ingest), and a
    bridge in proxy mode in front of them."""
    pyro = PyroscopeDouble(profiles=[])
    pserver = await aiohttp_server(pyro.app)
    pyro.url = str(pserver.make_url("")).rstrip("/")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        for upload in capture.ingests():
            async with session.post(
                f"{pyro.url}/ingest?{upload.query}", data=upload.body, headers={"Content-Type": upload.content_type}
            ) as resp:
                assert resp.status == 200, await resp.text()
    tempo = tempo_holding(capture)
    tserver = await aiohttp_server(tempo.app)
    tempo.url = str(tserver.make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", pyroscope_url=pyro.url, tempo_url=tempo.url, clock_skew=SKEW_S)
    app = create_app(settings, wall_clock=clock) if clock else create_app(settings)
    return await aiohttp_client(await aiohttp_server(app)), pyro


async def replay_into_standalone(client: TestClient[Any, Any], capture: Capture) -> None:
    for upload in capture.uploads:
        url = upload.path + (f"?{upload.query}" if upload.query else "")
        resp = await client.post(url, data=upload.body, headers={"Content-Type": upload.content_type})
        assert resp.status == 200, await resp.text()


def capture_clock(capture: Capture) -> Callable[[], float]:
    until = max(int(parse_qs(u.query)["until"][0]) for u in capture.ingests())
    return lambda: until + 60.0


# --------------------------------------------------------------------------------------------- live


async def test_live_node_sdks_against_a_standalone_bridge(
    aiohttp_server: Server, aiohttp_client: Client, tmp_path: Path
) -> None:
    node = require_node()
    client = await standalone(aiohttp_server, aiohttp_client, tmp_path)
    spans = await run_service(node, str(client.make_url("")).rstrip("/"), "proto")
    store = client.server.app[RUNTIME].backends.profiles
    assert isinstance(store, Store)
    types = {t.ID for t in (await store.profile_types(qpb.ProfileTypesRequest(), _ctx())).profile_types}
    assert types == {NODE_CPU, "wall:wall:nanoseconds:wall:nanoseconds", "wall:samples:count:wall:nanoseconds"}
    assert DEFAULT_PROFILE_TYPE not in types  # Node never uploads the default type: the fallback is what answers
    await check_node_spans(client, spans, end_stamps=False)  # the store keeps true window starts


async def test_live_node_sdks_through_the_pyroscope_double_in_proxy_mode(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    node = require_node()
    capture = await record(node, "json")  # OTLP/HTTP JSON this time
    assert [u.content_type for u in capture.traces()] and all(
        u.content_type == "application/json" for u in capture.traces()
    )
    client, pyro = await proxy_fed_with(capture, aiohttp_server, aiohttp_client)
    assert {p.type_id for p in pyro.profiles} >= {NODE_CPU}  # the double named them as Pyroscope does
    await check_node_spans(client, capture.spans, end_stamps=True)
    asked = [list(r.message.label_names) for r in pyro.calls("Series")]  # type: ignore[union-attr]
    # two questions only: which profile type the service has (the fallback's pick) and which SDK sampled it
    # (bridge.samplers: what the answer's number measures)
    assert ["__profile_type__", "pyroscope_spy"] in asked and ["otel.scope.name", "pyroscope_spy"] in asked
    assert all(
        names in (["__profile_type__", "pyroscope_spy"], ["otel.scope.name", "pyroscope_spy"]) for names in asked
    )


# --------------------------------------------------------------------------------------------- the recording


async def test_recorded_node_uploads_resolve_in_standalone(
    aiohttp_server: Server, aiohttp_client: Client, tmp_path: Path
) -> None:
    capture = load_capture()
    client = await standalone(aiohttp_server, aiohttp_client, tmp_path, capture_clock(capture))
    await replay_into_standalone(client, capture)
    await check_node_spans(client, capture.spans, end_stamps=False)


async def test_recorded_node_uploads_resolve_in_proxy_mode(aiohttp_server: Server, aiohttp_client: Client) -> None:
    capture = load_capture()
    client, _ = await proxy_fed_with(capture, aiohttp_server, aiohttp_client, capture_clock(capture))
    await check_node_spans(client, capture.spans, end_stamps=True)


async def test_without_series_every_type_is_tried_and_both_stamp_sides(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    """A Pyroscope that does not serve Series: the service's types are not known, so every CPU-equivalent type
    Pyroscope holds is tried, with stamps read on both sides; the CPU-heavy span still gets its hot function."""
    from bridge.errors import Code

    capture = load_capture()
    client, pyro = await proxy_fed_with(capture, aiohttp_server, aiohttp_client, capture_clock(capture))
    pyro.faults.paths, pyro.faults.code = "/querier.v1.QuerierService/Series", Code.UNIMPLEMENTED
    mode, reason, stacks = await span_answer(client, capture.spans["cpu-heavy"])
    assert mode == "time-window" and ANSWERED_FROM in reason and hot_share(stacks) >= 0.5
    assert "its SDK stamps profiles at the start or the end of their capture windows" in reason
    assert pyro.calls("ProfileTypes")


async def test_asking_for_nodes_own_type_needs_no_fallback(
    aiohttp_server: Server, aiohttp_client: Client, tmp_path: Path
) -> None:
    capture = load_capture()
    client = await standalone(aiohttp_server, aiohttp_client, tmp_path, capture_clock(capture))
    await replay_into_standalone(client, capture)
    span = capture.spans["cpu-heavy"]
    resp = await client.get(
        f"/api/v1/spans/{span['trace_id']}/{span['span_id']}/profile",
        params={"format": "collapsed", "profile_type": NODE_CPU},
    )
    assert resp.status == 200
    assert "answered from" not in resp.headers["X-Profile-Bridge-Reason"]
    assert HOT in await resp.text()


def _ctx() -> Any:
    from tests.store.test_store import ctx

    return ctx()
