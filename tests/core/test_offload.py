"""Big trace answers are enriched in the helper process (``bridge.offload``) and their spans parsed only when a click
needs them. Here every answer takes that path (the size threshold is lowered): the bytes Grafana gets are those of
the in-process path, gzip or not, all four shapes; a click afterwards resolves from the held answer without asking
Tempo again; an answer that cannot be decoded passes through unchanged."""

from __future__ import annotations

import gzip
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge import offload
from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.call import scope_key
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from bridge.enrich import EnrichPolicy, enrich_encoded
from bridge.routes import tempo as tempo_route
from bridge.state import METRICS, SPAN_CACHE
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.shop import load_shop
from tests.doubles.tempo import GARBAGE, TempoDouble

Server = Callable[..., Awaitable[TestServer]]
Client = Callable[..., Awaitable[TestClient[Any, Any]]]
CAPTURE_NOW = 1795945340.0
SHAPES = [
    ("/api/v2/traces/{}", True),
    ("/api/traces/{}", True),
    ("/api/v2/traces/{}", False),
    ("/api/traces/{}", False),
]


async def make(
    aiohttp_server: Server, aiohttp_client: Client, *, gzip_tempo: bool
) -> tuple[TempoDouble, TestClient[Any, Any], web.Application]:
    tempo = TempoDouble()
    tempo.add_shop()
    tempo.gzip = gzip_tempo
    tempo.url = str((await aiohttp_server(tempo.app)).make_url("")).rstrip("/")
    pyro = PyroscopeDouble()
    pyro.url = str((await aiohttp_server(pyro.app, auto_decompress=False)).make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", pyroscope_url=pyro.url, tempo_url=tempo.url)
    app = create_app(settings, wall_clock=lambda: CAPTURE_NOW)
    client = await aiohttp_client(await aiohttp_server(app), auto_decompress=False)
    return tempo, client, app


async def fetch(client: TestClient[Any, Any], path: str, protobuf: bool, gzip_ok: bool) -> tuple[int, bytes, str]:
    headers = {"Accept-Encoding": "gzip" if gzip_ok else "identity"}
    if protobuf:
        headers["Accept"] = "application/protobuf"
    resp = await client.get("/tempo" + path, headers=headers)
    raw = await resp.read()
    encoding = resp.headers.get("Content-Encoding", "")
    return resp.status, gzip.decompress(raw) if encoding == "gzip" else raw, encoding


@pytest.mark.parametrize("gzip_tempo", [True, False], ids=["tempo-gzip", "tempo-plain"])
@pytest.mark.parametrize("gzip_ok", [True, False], ids=["client-gzip", "client-plain"])
async def test_the_helper_process_answers_what_the_event_loop_would(
    aiohttp_server: Server, aiohttp_client: Client, monkeypatch: pytest.MonkeyPatch, gzip_tempo: bool, gzip_ok: bool
) -> None:
    tempo, client, app = await make(aiohttp_server, aiohttp_client, gzip_tempo=gzip_tempo)
    trace_id = load_shop().trace_ids()[0]
    inline = [await fetch(client, path.format(trace_id), protobuf, gzip_ok) for path, protobuf in SHAPES]
    monkeypatch.setattr(tempo_route, "ENRICH_IN_HELPER_BYTES", 0)
    helped = [await fetch(client, path.format(trace_id), protobuf, gzip_ok) for path, protobuf in SHAPES]
    assert helped == inline
    assert all(status == 200 for status, _, _ in helped)
    assert {encoding for _, _, encoding in helped} == ({"gzip"} if gzip_ok else {""})
    assert app[METRICS].registry.get_sample_value("profile_bridge_enriched_spans_total") > 0


async def test_a_click_after_a_big_answer_parses_the_held_answer_instead_of_asking_tempo(
    aiohttp_server: Server, aiohttp_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempo_route, "ENRICH_IN_HELPER_BYTES", 0)
    tempo, client, app = await make(aiohttp_server, aiohttp_client, gzip_tempo=True)
    shop = load_shop()
    child = shop.pick("frontend-child")
    status, _, _ = await fetch(client, f"/api/v2/traces/{child.trace_id}", True, True)
    assert status == 200
    cache = app[SPAN_CACHE]
    scope = scope_key(None)
    assert cache.pending(scope, child.trace_id) is not None and cache.get(scope, child.span_id) is None
    span = shop.trace(child.trace_id).spans[child.span_id]
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{span.service}"}}',
        span_selector=[f"{span.span_id}:{span.trace_id}"],
        start=span.start_ns // 1_000_000 - 60_000,
        end=span.end_ns // 1_000_000 + 60_000,
    )
    resp = await client.post(
        "/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile",
        data=req.SerializeToString(),
        headers={"Content-Type": "application/proto"},
    )
    assert resp.status == 200, await resp.read()
    assert resp.headers["X-Profile-Bridge-Resolution"] in ("local-root", "time-window")
    assert "not found" not in resp.headers["X-Profile-Bridge-Reason"]
    assert len(tempo.calls("/api/")) == 1 and tempo.search_calls == []  # the trace view only
    assert cache.pending(scope, child.trace_id) is None and cache.get(scope, child.span_id) is not None


async def test_an_undecodable_big_answer_passes_through_unchanged(
    aiohttp_server: Server, aiohttp_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempo_route, "ENRICH_IN_HELPER_BYTES", 0)
    tempo, client, app = await make(aiohttp_server, aiohttp_client, gzip_tempo=False)
    tempo.faults.garbage = True
    status, body, _ = await fetch(client, f"/api/v2/traces/{load_shop().trace_ids()[0]}", True, False)
    assert status == 200 and body == GARBAGE
    assert app[METRICS].registry.get_sample_value("profile_bridge_enrich_failures_total", {"reason": "protobuf"}) == 1


def test_an_unchanged_gzipped_answer_is_not_sent_back_across() -> None:
    answer = gzip.compress(b"")  # v2 "not found": an empty TraceByIDResponse
    done = enrich_encoded(
        answer, "gzip", version=2, protobuf=True, policy=EnrichPolicy(), trace_id="1" * 32, gzip_level=1, max_bytes=1024
    )
    assert done.body is None and done.encoding == "gzip" and not done.changed and not done.failure


@pytest.mark.slow  # helper processes dying and being replaced (tens of seconds of process-pool start-up); no clock is
# read: date-safe
async def test_a_helper_that_died_is_replaced() -> None:
    helper = offload.Offload()
    try:
        pid = await helper.run(_pid)
        await helper.run(_exit)  # the pool breaks; the call is tried once more in a new helper, which exits too
    except Exception as exc:  # noqa: BLE001 - a broken pool, raised after the one retry
        assert "terminated abruptly" in str(exc) or "BrokenProcessPool" in type(exc).__name__
    finally:
        assert await helper.run(_pid) != pid
        await helper.close()


def _pid() -> int:
    import os

    return os.getpid()


def _exit() -> None:
    import os

    os._exit(3)
