"""Every label of every metric is a closed set (issue 11, item 1): junk RPC names, random paths, random tenants and
an upstream answering odd statuses add no series, and ``/metrics`` stays the same size however much junk arrives."""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.app import create_app
from bridge.config import Settings
from bridge.metrics import Metrics

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Server = Callable[..., Awaitable[TestServer]]


class OddStatuses:
    """A test double upstream (Tempo and Pyroscope at once) answering whatever status the path's last segment
    names, including ones no HTTP registry lists."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        last = next((seg for seg in reversed(request.path.split("/")) if seg.isdigit()), "")
        status = int(last) if last.isdigit() and 200 <= int(last) <= 599 else 200
        return web.Response(status=status, text="odd\n")


def series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


async def junk_round(client: TestClient[Any, Any], n: int) -> None:
    for i in range(n):
        name = secrets.token_hex(8)
        await client.post(
            f"/pyroscope/querier.v1.QuerierService/{name}",
            data=b"",
            headers={"Content-Type": "application/proto", "X-Scope-OrgID": name},
        )
        await client.get(f"/no/such/{name}")
        await client.get(f"/tempo/api/search/tag/{200 + i % 400}/values", headers={"X-Scope-OrgID": name})
        await client.post(f"/pyroscope/anything/{200 + i % 400}")


@pytest.mark.slow  # 1,600 junk requests; compares the /metrics series sets, which hold no time: date-safe
async def test_junk_adds_no_series_and_metrics_stay_small(aiohttp_server: Server, aiohttp_client: Client) -> None:
    upstream = await aiohttp_server(OddStatuses().app)
    url = str(upstream.make_url("")).rstrip("/")
    app = create_app(Settings.for_tests(mode="proxy", tempo_url=url, pyroscope_url=url))
    client = await aiohttp_client(app)

    await client.get("/metrics")  # its own series exist from here on
    await junk_round(client, 400)  # every status from 200 to 599 once
    first = (await (await client.get("/metrics")).read()).decode()
    await junk_round(client, 400)  # the 50,505 junk RPCs, scaled down: 1,600 more requests
    second = (await (await client.get("/metrics")).read()).decode()

    # the same series after 1,600 more junk requests: only the numbers moved
    assert len(series(second)) == len(series(first))
    names = {re.sub(r" [^ ]+$", "", line) for line in series(second)}
    assert names == {re.sub(r" [^ ]+$", "", line) for line in series(first)}
    # a bound fixed by the code, not by the traffic: without closed sets the odd statuses alone made 15,000 lines
    assert len(series(second)) < 600 and len(second) < 64 * 1024, (len(series(second)), len(second))
    # an odd status is recorded as "other"; a junk RPC name is refused, counted under /pyroscope/*
    assert 'code="403",route="/pyroscope/*"' in second
    assert re.search(r'profile_bridge_requests_total\{code="other",route="/tempo/\*"\} \d', second)
    assert re.search(r'profile_bridge_metric_labels_clamped_total\{label="code"\} \d', second)
    for value in re.findall(r'="([^"]*)"', second):
        assert len(value) < 80  # no label value is a caller's string


async def test_metrics_render_off_the_event_loop(tmp_path: Path, aiohttp_client: Client) -> None:
    app = create_app(Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data")))
    client = await aiohttp_client(app)
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert "profile_bridge_requests_total" in await resp.text()


def test_every_labelled_metric_clamps_values_outside_its_vocabulary() -> None:
    from bridge.metrics import OTHER, VOCABULARY

    metrics = Metrics()
    metrics.upstream_seconds.labels("tempo", "not-a-call", "777").observe(0.1)
    metrics.requests.labels("/made/up", "999").inc()
    metrics.ingest_rejected.labels("/x" * 100).inc()
    metrics.resolutions.labels("linked").inc()
    text = metrics.render().decode()
    assert 'profile_bridge_upstream_seconds_count{call="other",outcome="other",upstream="tempo"} 1.0' in text
    assert 'profile_bridge_requests_total{code="other",route="other"} 1.0' in text
    assert 'profile_bridge_ingest_rejected_total{route="other"} 1.0' in text
    assert 'profile_bridge_resolutions_total{mode="linked"} 1.0' in text
    assert 'profile_bridge_metric_labels_clamped_total{label="code"} 1.0' in text
    # every label name of every metric has a vocabulary
    for metric in vars(metrics).values():
        for name in getattr(metric, "_labelnames", ()):
            assert name in VOCABULARY
    assert OTHER not in VOCABULARY["route"]


class CountingProfiles:
    """A profile source double that names one service for every tenant."""

    name = "pyroscope"

    def __init__(self) -> None:
        self.asked = 0

    async def label_values(self, req: Any, ctx: Any) -> Any:
        from bridge._proto import types_pb2 as tpb

        self.asked += 1
        return tpb.LabelValuesResponse(names=["shop"])


async def test_profiled_services_remember_a_bounded_number_of_tenants() -> None:
    """The tenant is whatever the caller's header says: 5,000 made-up tenants keep at most ``max_tenants``."""
    from bridge.call import CallContext, Deadline
    from bridge.services import ProfiledServices

    known = ProfiledServices(CountingProfiles(), "service_name", 60.0, max_tenants=100)  # type: ignore[arg-type]
    for n in range(5_000):
        ctx = CallContext(deadline=Deadline.start(None, 5.0), tenant=f"junk-{n}")
        assert await known.get(ctx) == frozenset({"shop"})
    assert len(known._entries) <= 100 and len(known._locks) <= 100
