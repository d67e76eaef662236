"""TempoClient and PyroscopeClient (bridge/upstream/http.py) against the doubles: answers, errors, budgets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext, Deadline
from bridge.config import Settings
from bridge.errors import Code, InvalidArgument, UpstreamError, UpstreamTimeout
from bridge.metrics import Metrics
from bridge.upstream.http import PyroscopeClient, TempoClient, open_clients
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.shop import load_shop
from tests.doubles.tempo import TempoDouble, refused_url

Server = Callable[..., Awaitable[TestServer]]


class Env:
    def __init__(
        self,
        pyro: PyroscopeDouble,
        tempo: TempoDouble,
        profiles: PyroscopeClient,
        traces: TempoClient,
        metrics: Metrics,
    ) -> None:
        self.pyro, self.tempo, self.profiles, self.traces, self.metrics = pyro, tempo, profiles, traces, metrics


@pytest.fixture
async def env(aiohttp_server: Server) -> AsyncIterator[Env]:
    pyro = PyroscopeDouble()
    pserver = await aiohttp_server(pyro.app)
    tempo = TempoDouble()
    tempo.add_shop()
    tserver = await aiohttp_server(tempo.app)
    settings = Settings.for_tests(
        mode="proxy", pyroscope_url=str(pserver.make_url("")), tempo_url=str(tserver.make_url("")), upstream_timeout=2.0
    )
    metrics = Metrics()
    async with open_clients(settings, metrics) as (traces, profiles):
        yield Env(pyro, tempo, profiles, traces, metrics)


def ctx(budget: float = 5.0, tenant: str | None = "team-a") -> CallContext:
    return CallContext(Deadline.start(budget, 30.0), tenant=tenant, authorization="Bearer t")


async def test_ready_both(env: Env) -> None:
    assert await env.traces.ready(ctx()) == "ready"
    assert await env.profiles.ready(ctx()) == "ready"


async def test_rpcs_are_connect_binary_with_tenant_auth_and_the_remaining_budget(env: Env) -> None:
    answer = await env.profiles.profile_types(qpb.ProfileTypesRequest(), ctx(budget=1.5))
    assert [t.ID for t in answer.profile_types] == ["process_cpu:cpu:nanoseconds:cpu:nanoseconds"]
    values = await env.profiles.label_values(tpb.LabelValuesRequest(name="service_name"), ctx())
    assert list(values.names) == ["shop-backend", "shop-frontend"]
    first = env.pyro.calls("ProfileTypes")[0]
    assert first.codec == "application/proto"
    assert first.headers["X-Scope-OrgID"] == "team-a" and first.headers["Authorization"] == "Bearer t"
    assert first.headers["Connect-Protocol-Version"] == "1"
    assert 0 < int(first.headers["Connect-Timeout-Ms"]) <= 1500  # what remained of the budget
    text = env.metrics.render().decode()
    assert 'profile_bridge_upstream_seconds_count{call="ProfileTypes",outcome="ok",upstream="pyroscope"} 1.0' in text


async def test_an_empty_span_selector_is_never_sent(env: Env) -> None:
    with pytest.raises(InvalidArgument):
        await env.profiles.select_merge_span_profile(qpb.SelectMergeSpanProfileRequest(), ctx())
    assert env.pyro.requests == []


@pytest.mark.parametrize(
    ("code", "status"), [(Code.RESOURCE_EXHAUSTED, 429), (Code.INVALID_ARGUMENT, 400), (Code.UNAVAILABLE, 503)]
)
async def test_pyroscope_connect_errors_keep_their_code(env: Env, code: Code, status: int) -> None:
    env.pyro.faults.code = code
    env.pyro.faults.message = "limit reached"
    with pytest.raises(UpstreamError) as info:
        await env.profiles.profile_types(qpb.ProfileTypesRequest(), ctx())
    assert info.value.code is code and info.value.message == "pyroscope: limit reached"
    assert info.value.http_status == status


async def test_no_budget_left_means_no_call(env: Env) -> None:
    with pytest.raises(UpstreamTimeout):
        await env.profiles.profile_types(qpb.ProfileTypesRequest(), ctx(budget=0.0))
    assert env.pyro.requests == []


async def test_trace_by_id_and_find_span(env: Env) -> None:
    shop = load_shop()
    child = shop.span(shop.pick("backend-child").span_id)
    start_s, end_s = child.start_ns // 10**9 - 60, child.end_ns // 10**9 + 60
    hit = await env.traces.find_span(child.span_id, start_s, end_s, ctx())
    assert hit is not None and (hit.trace_id, hit.name, hit.service) == (child.trace_id, "countPrimes", "shop-backend")
    [search] = env.tempo.search_calls
    assert search.query["start"] == str(start_s) and search.query["end"] == str(end_s)
    trace = await env.traces.trace_by_id(child.trace_id, ctx(), start_s, end_s)
    assert trace is not None and trace.get(child.span_id) == child
    assert await env.traces.find_span("00000000deadbeef", start_s, end_s, ctx()) is None
    assert await env.traces.trace_by_id("0" * 31 + "7", ctx()) is None  # v2: 200 with an empty trace


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, Code.UNAVAILABLE), (429, Code.UNAVAILABLE), (500, Code.UNKNOWN), (401, Code.UNAUTHENTICATED)],
)
async def test_tempo_error_statuses_map_through_the_table(env: Env, status: int, code: Code) -> None:
    env.tempo.faults.status = status
    with pytest.raises(UpstreamError) as info:
        await env.traces.search("{}", 0, 10, 5, ctx())
    assert info.value.code is code
    assert f"HTTP {status}" in info.value.message and "too many outstanding requests" in info.value.message


async def test_tempo_garbage_and_refusal(env: Env, aiohttp_server: Server) -> None:
    shop = load_shop()
    env.tempo.faults.garbage = True
    with pytest.raises(UpstreamError) as info:
        await env.traces.trace_by_id(shop.trace_ids()[0], ctx())
    assert info.value.code is Code.INTERNAL and "not a trace" in info.value.message
    settings = Settings.for_tests(mode="proxy", tempo_url=refused_url(), pyroscope_url=refused_url())
    async with open_clients(settings) as (traces, profiles):
        for source in (traces, profiles):
            with pytest.raises(UpstreamError) as info:
                await source.ready(ctx())
            assert info.value.code is Code.UNAVAILABLE and "cannot connect" in info.value.message


async def test_readyz_reports_each_upstream(aiohttp_client: Callable[..., Awaitable[Any]], env: Env) -> None:
    from bridge.app import create_app

    app = create_app(Settings.for_tests(mode="proxy", pyroscope_url=env.profiles.base_url, tempo_url=refused_url()))
    client = await aiohttp_client(app)
    resp = await client.get("/readyz")
    doc = await resp.json()
    assert resp.status == 503
    assert doc["upstreams"]["pyroscope"]["status"] == "ready"
    assert doc["upstreams"]["tempo"]["status"] == "unavailable"
