"""``GET /api/v1/requests/slowest``: the index page's list as JSON with each request's resolution mode, in proxy mode
(the Tempo and Pyroscope doubles holding the shop capture) and standalone mode (the store fed by the capture's SDK
requests), on the capture's clock; parameter errors; a failing backend; the resolver's concurrency bound."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from bridge import flamegraph, recent
from bridge.call import CallContext, Deadline
from bridge.config import Settings
from bridge.errors import Code
from bridge.recent import RESOLVE_CONCURRENCY, resolve_rows
from bridge.resolution import Resolution, SpanQuery, Step
from bridge.spancache import SpanCache
from tests.doubles.pyroscope import Faults as PyroscopeFaults
from tests.doubles.shop import load_shop
from tests.doubles.tempo import Faults as TempoFaults
from tests.paths import ROOT
from tests.span_stack import CPU, Stack, linked_total, start_standalone

URL = "/api/v1/requests/slowest"


def requests_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for s in doc["services"] for r in s["requests"]]


async def test_lists_the_index_pages_requests_with_their_resolution_mode(stack: Stack) -> None:
    resp = await stack.http.get(URL)
    assert resp.status == 200 and resp.content_type == "application/json"
    doc = await resp.json()
    assert doc["mode"] == "proxy" and doc["since"] == "1h" and doc["sinceSeconds"] == 3600
    assert doc["profileType"] == CPU and doc["traces"] > 0
    assert [s["service"] for s in doc["services"]] == ["shop-backend", "shop-frontend"]
    # the same requests, in the same order, as the HTML index page lists
    page = await (await stack.http.get("/")).text()
    listed = re.findall(r'<a href="(/spans/[0-9a-f]{32}/[0-9a-f]{16})">', page)
    assert [r["links"]["span"] for r in requests_of(doc)] == listed
    modes = set()
    for service in doc["services"]:
        durations = [int(r["durationNanos"]) for r in service["requests"]]
        assert durations == sorted(durations, reverse=True) and len(durations) <= 10
        for req in service["requests"]:
            span = stack.shop.span(req["spanId"])
            assert (req["traceId"], req["service"], req["name"]) == (span.trace_id, span.service, span.name)
            assert req["service"] == service["service"]
            assert req["links"] == {
                "span": f"/spans/{span.trace_id}/{span.span_id}",
                "request": f"/spans/{span.trace_id}/{span.span_id}?scope=request",
            }
            res = req["resolution"]
            modes.add(res["mode"])
            # each row is a local root: linked exactly when the capture's samples carry its id, with their total
            truth = linked_total(span.span_id)
            if truth:
                sampling = res.pop("sampling")
                assert res == {"mode": "linked", "reason": f"samples linked to span {span.span_id}", "total": truth}
                assert sampling["samples"] == truth // 10_000_000  # pyroscope-io's 10 ms samples
                assert sampling["measure"] == "sampled on-GIL time"
            else:
                assert res["mode"] in ("time-window", "none") and res["reason"]
            assert "error" not in req
    assert "linked" in modes
    search = stack.tempo.search_calls[-1]
    assert int(search.query["end"]) - int(search.query["start"]) == 3600 + 1


async def test_the_mode_is_the_one_the_span_page_shows(stack: Stack) -> None:
    doc = await (await stack.http.get(URL, params={"per_service": "2"})).json()
    rows = requests_of(doc)
    assert all(len(s["requests"]) <= 2 for s in doc["services"]) and rows
    for req in rows:
        api = await stack.http.get(f"/api/v1/spans/{req['traceId']}/{req['spanId']}/profile")
        assert api.headers["X-Profile-Bridge-Resolution"] == req["resolution"]["mode"]


async def test_the_window_and_the_profile_type_are_honoured(stack: Stack) -> None:
    # the clock stands a minute after the capture: 15 s holds no trace
    doc = await (await stack.http.get(URL, params={"since": "15s"})).json()
    assert doc["services"] == [] and doc["traces"] == 0
    memory = "memory:alloc_space:bytes:space:bytes"
    doc = await (await stack.http.get(URL, params={"profile_type": memory})).json()
    assert doc["profileType"] == memory
    assert {r["resolution"]["mode"] for r in requests_of(doc)} == {"none"}  # the capture has CPU samples only


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"since": "soon"}, "since 'soon'"),
        ({"since": "8d"}, "longer than 7 days"),
        ({"per_service": "0"}, "per_service '0'"),
        ({"per_service": "51"}, "1..50"),
        ({"per_service": "-3"}, "per_service '-3'"),
        ({"profile_type": "cpu"}, "cpu"),
    ],
)
async def test_bad_parameters_are_a_clear_400_and_ask_nothing_upstream(
    stack: Stack, params: dict[str, str], needle: str
) -> None:
    resp = await stack.http.get(URL, params=params)
    doc = await resp.json()
    assert resp.status == 400 and doc["error"]["code"] == Code.INVALID_ARGUMENT.value
    assert needle in doc["error"]["message"]
    assert not stack.tempo.search_calls and not stack.pyroscope.requests


async def test_a_failing_profile_backend_marks_the_rows_not_the_list(stack: Stack) -> None:
    stack.pyroscope.faults = PyroscopeFaults(code=Code.UNAVAILABLE, message="ingesters are down")
    resp = await stack.http.get(URL)
    assert resp.status == 200
    rows = requests_of(await resp.json())
    assert rows
    for req in rows:
        assert req["resolution"] is None
        assert req["error"]["code"] == Code.UNAVAILABLE.value and "ingesters are down" in req["error"]["message"]


async def test_a_failing_trace_search_fails_the_list_naming_tempo(stack: Stack) -> None:
    stack.tempo.faults = TempoFaults(status=503, body="tempo is restarting")
    resp = await stack.http.get(URL)
    doc = await resp.json()
    assert resp.status == 503 and doc["error"]["code"] == Code.UNAVAILABLE.value
    assert "tempo" in doc["error"]["message"].lower()


async def test_standalone_mode_lists_and_resolves_from_the_store(aiohttp_client: Any, tmp_path: Any) -> None:
    client, shop = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    resp = await client.get(URL)
    doc = await resp.json()
    assert resp.status == 200, doc
    assert doc["mode"] == "standalone"
    assert [s["service"] for s in doc["services"]] == ["shop-backend", "shop-frontend"]
    rows = requests_of(doc)
    for req in rows:
        span = shop.span(req["spanId"])
        assert req["traceId"] == span.trace_id and req["durationNanos"] == str(span.duration_ns)
        api = await client.get(f"/api/v1/spans/{req['traceId']}/{req['spanId']}/profile")
        assert api.headers["X-Profile-Bridge-Resolution"] == req["resolution"]["mode"]
        if linked_total(span.span_id):
            assert req["resolution"]["mode"] == "linked"
    assert any(r["resolution"]["mode"] == "linked" for r in rows)


# --------------------------------------------------------------------------------------------- the concurrency bound


class GatedResolver:
    """Stands in for the resolver in ``resolve_rows``: every resolve waits at a gate, and the most resolves under way
    at once is recorded. Lookups answer from the span cache that ``resolve_rows`` fills."""

    def __init__(self) -> None:
        self.span_cache = SpanCache(1000, 10_000_000, 60.0)
        self.gate = asyncio.Event()
        self.running = 0
        self.most = 0

    async def lookup_span(self, span_id: str, ctx: CallContext, *, trace_id: str | None = None) -> Any:
        entry = self.span_cache.get(ctx.cache_scope, span_id)
        assert entry is not None, "resolve_rows did not put the traces into the span cache"
        trace = self.span_cache.get_trace(ctx.cache_scope, entry.span.trace_id)
        return entry.span, trace

    async def resolve(self, query: SpanQuery, ctx: CallContext) -> Resolution:
        self.running += 1
        self.most = max(self.most, self.running)
        await self.gate.wait()
        self.running -= 1
        fg = flamegraph.empty("total")
        return Resolution(step=Step.NONE, reason="nothing", flamegraph=fg, label_selector="{}")


async def test_rows_are_resolved_a_few_at_a_time() -> None:
    shop = load_shop()
    traces = [shop.trace(t) for t in shop.trace_ids()]
    roots = [s for t in traces for s in t.spans.values() if t.is_local_root(s)]
    assert len(roots) > 3 * RESOLVE_CONCURRENCY
    resolver = GatedResolver()
    ctx = CallContext(deadline=Deadline.start(None, 30.0))
    task = asyncio.ensure_future(
        resolve_rows(
            resolver,
            traces,
            roots,
            profile_type=CPU,  # type: ignore[arg-type]
            settings=Settings.for_tests(),
            ctx=ctx,
        )
    )
    while resolver.running < RESOLVE_CONCURRENCY:
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert resolver.running == resolver.most == RESOLVE_CONCURRENCY
    resolver.gate.set()
    rows = await task
    assert len(rows) == len(roots) and {r.step for r in rows} == {Step.NONE}
    assert resolver.most == RESOLVE_CONCURRENCY


def test_the_page_and_the_api_share_one_list() -> None:
    from bridge.routes import pages

    assert pages.slowest_local_roots is recent.slowest_local_roots and pages.recent_traces is recent.recent_traces


# --------------------------------------------------------------------------------------------- the plugin's fixtures

PLUGIN_FIXTURES = ROOT / "grafana" / "profile-bridge-app" / "tests" / "fixtures"


@pytest.mark.parametrize("name", ["slowest.json", "readyz.json"])
async def test_the_plugins_fixtures_are_what_the_bridge_serves(
    aiohttp_client: Any, tmp_path: Any, name: str, update_golden: bool
) -> None:
    """The Grafana app plugin's jsdom tests render the bridge's answers from ``tests/fixtures``: they are this
    bridge's own answers (standalone mode, the shop capture, the capture's clock), so the plugin is tested against
    what the bridge really sends. ``--update-golden`` rewrites them."""
    client, _ = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    resp = await client.get(URL if name == "slowest.json" else "/readyz")
    assert resp.status == 200
    served = await resp.json()
    if name == "readyz.json":
        for upstream in served["upstreams"].values():
            upstream["detail"] = re.sub(r"/\S+", "/…", upstream["detail"])  # the store's path is the test's tmp dir
    path = PLUGIN_FIXTURES / name
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(served, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert json.loads(path.read_text(encoding="utf-8")) == served
