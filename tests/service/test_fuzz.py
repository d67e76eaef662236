"""Every field of every route, fuzzed (issue 19, goal 5): the short deterministic pass of ``tests/fuzzing.py`` — a
few hostile values per field of every RPC the bridge decodes and per query parameter of every route — against a
standalone bridge holding the shop capture and a proxy bridge in front of the doubles. No answer may be a 5xx
(``unavailable`` aside: it is what a store that cannot take writes answers), none may hang. The long pass, every
value of every field: ``scripts/fuzz.py``. Measured on main: ``SelectSeries`` with ``"step": 1e308`` answered 500
with a traceback in the log."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.config import Settings
from bridge.state import RUNTIME
from bridge.wire.pyroscope import SPAN_RPCS
from tests import fuzzing
from tests.doubles.shop import capture_now
from tests.span_stack import start_stack, start_standalone

# the doubles answer in this test's own event loop: on a loaded machine one can take seconds, which the bridge would
# rightly answer with 504 (deadline_exceeded) — not what is fuzzed here
SLOW_MACHINE = {"upstream_timeout": 60.0, "max_request_timeout": 60.0}
PER_FIELD = 1  # hostile values per field and per query key in this pass (all of them: scripts/fuzz.py)


def cases_for(app: Any, rpcs: dict[str, Any], *, seed: int, per: int | None, proxy: bool) -> list[fuzzing.Case]:
    rng = random.Random(seed)
    gets, posts = fuzzing.routes_of(app)
    cases: list[fuzzing.Case] = []
    routes = fuzzing.rpc_routes(rpcs)
    if proxy:  # no ingest routes in proxy mode
        routes = {path: entry for path, entry in routes.items() if path.startswith(fuzzing.QUERIER)}
    else:
        fuzzing.check_coverage(posts, rpcs)
    for path, (ctype, cls) in sorted(routes.items()):
        cases.extend(fuzzing.rpc_cases(path, ctype, cls, per_field=per, rng=rng))
    keys = fuzzing.query_keys()
    for template, params in gets:
        cases.extend(fuzzing.get_cases(template, params, keys, per_key=per, rng=rng))
    if not proxy:  # in proxy mode the mount relays to Tempo: its answers are Tempo's
        cases.extend(fuzzing.tempo_cases(keys, per_key=per, rng=rng))
    for path in sorted(fuzzing.RAW_POSTS & posts):
        for key in keys:
            for value in rng.sample(fuzzing.HOSTILE_TEXT, per or len(fuzzing.HOSTILE_TEXT)):
                from urllib.parse import quote

                cases.append(
                    fuzzing.Case(f"POST {path}", "POST", f"{path}?{key}={quote(value, safe='')}", key, b"a;b 1\n")
                )
    return cases


def _report(mode: str, tally: fuzzing.Tally) -> None:
    print(f"\n{mode}: " + "\n".join(tally.lines()))


@pytest.mark.slow  # about a thousand requests; the store's data meets an injected clock: date-safe
async def test_fuzz_standalone_every_field_of_every_route(tmp_path: Path, aiohttp_client: Any) -> None:
    client, _ = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    backends = client.app[RUNTIME].backends
    rpcs = {method: cls for method, (cls, _) in backends.pyroscope.table.items()}
    cases = cases_for(client.app, rpcs, seed=19, per=PER_FIELD, proxy=False)
    tally = await fuzzing.run(client, cases)
    _report("standalone", tally)
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert sum(tally.by_route.values()) == len(cases) > 500
    for method in rpcs:  # every RPC the store answers was fuzzed
        assert tally.by_route[f"POST {fuzzing.QUERIER}{method}"] > 0


@pytest.mark.slow  # hundreds of calls; nothing is read against the clock: date-safe
async def test_fuzz_otlp_grpc_every_field_of_both_services(tmp_path: Path, aiohttp_client: Any) -> None:
    """The OTLP gRPC receiver decodes what it is sent (standalone: traces and profiles into the store): every field,
    one hostile value each; no call may end INTERNAL, UNKNOWN or DATA_LOSS."""
    settings = Settings.for_tests(
        mode="standalone", data_dir=str(tmp_path / "data"), otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0)
    )
    client = await aiohttp_client(create_app(settings, wall_clock=capture_now))
    grpc = client.app[RUNTIME].backends.grpc
    assert grpc is not None
    rng = random.Random(21)
    cases = [
        case
        for method, cls in sorted(fuzzing.GRPC_METHODS.items())
        for case in fuzzing.grpc_cases(method, cls, per_field=PER_FIELD, rng=rng)
    ]
    tally = await fuzzing.run_grpc(f"127.0.0.1:{grpc.port}", cases)
    _report("OTLP gRPC", tally)
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert set(tally.by_route) == {f"gRPC {method}" for method in fuzzing.GRPC_METHODS}


@pytest.mark.slow  # hundreds of requests; the doubles' data meets an injected clock: date-safe
async def test_fuzz_proxy_every_field_of_the_rpcs_the_bridge_resolves(aiohttp_server: Any, aiohttp_client: Any) -> None:
    stack = await start_stack(aiohttp_server, aiohttp_client, **SLOW_MACHINE)
    rpcs = {method: request for method, (request, _) in SPAN_RPCS.items()}
    cases = cases_for(stack.http.app, rpcs, seed=20, per=PER_FIELD, proxy=True)
    tally = await fuzzing.run(stack.http, cases, timeout=120.0)
    _report("proxy", tally)
    assert not tally.failures, "\n".join(tally.failures[:20])


@pytest.mark.parametrize("step", [1e308, -1e308, float("inf"), float("nan"), 1e-300, 0.0])
async def test_select_series_with_an_absurd_step_is_400_or_one_point(
    tmp_path: Path, aiohttp_client: Any, step: float
) -> None:
    """The fuzz finding on main: ``"step": 1e308`` overflowed (500 with a traceback)."""
    client, _ = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    req = qpb.SelectSeriesRequest(
        profile_typeID=fuzzing.CPU, label_selector="{}", start=fuzzing.START_MS, end=fuzzing.END_MS, step=step
    )
    resp = await client.post(
        f"{fuzzing.QUERIER}SelectSeries", data=req.SerializeToString(), headers={"Content-Type": "application/proto"}
    )
    if step == 1e308:
        assert resp.status == 200, await resp.text()
        series = qpb.SelectSeriesResponse.FromString(await resp.read()).series
        # one step longer than the window: one point, at start, summing the step that ends there (Pyroscope's v2
        # read path) — none of the window's profiles
        assert all(p.timestamp == fuzzing.START_MS for s in series for p in s.points)
    else:
        assert resp.status == 400, await resp.text()


@pytest.mark.parametrize("step", [1e308, -1e308, float("inf"), float("nan"), 1e17])
async def test_select_heatmap_with_an_absurd_step_is_400(tmp_path: Path, aiohttp_client: Any, step: float) -> None:
    """The fuzz finding in SelectHeatmap (added on main after this file's first pass): int() of an infinite step, a
    500. Pyroscope's int64() gives math.MinInt64 on amd64 for what does not fit, which its own check refuses."""
    client, _ = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    req = qpb.SelectHeatmapRequest(
        profile_typeID=fuzzing.CPU,
        label_selector="{}",
        start=fuzzing.START_MS,
        end=fuzzing.END_MS,
        step=step,
        query_type=qpb.HEATMAP_QUERY_TYPE_INDIVIDUAL,
    )
    resp = await client.post(
        f"{fuzzing.QUERIER}SelectHeatmap", data=req.SerializeToString(), headers={"Content-Type": "application/proto"}
    )
    assert resp.status == 400, await resp.text()
    assert "step must be >= 1ms" in (await resp.json())["message"]
