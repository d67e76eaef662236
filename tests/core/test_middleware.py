from __future__ import annotations

import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from bridge.errors import InvalidArgument, NotFound, UpstreamTimeout
from bridge.metrics import Metrics
from bridge.middleware import make_middleware

METRICS = web.AppKey("metrics", Metrics)


async def _invalid(request: web.Request) -> web.Response:
    raise InvalidArgument("span selector holds no 16-hex span id")


async def _timeout(request: web.Request) -> web.Response:
    raise UpstreamTimeout("tempo", "tempo did not answer within 1.0 s")


async def _not_found(request: web.Request) -> web.Response:
    raise NotFound("trace 00ff not found")


async def _boom(request: web.Request) -> web.Response:
    raise RuntimeError("secret internals")


@pytest.fixture
async def client(aiohttp_client) -> TestClient:  # type: ignore[no-untyped-def]
    metrics = Metrics()
    app = web.Application(middlewares=[make_middleware(metrics)])
    app.router.add_post("/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile", _invalid)
    app.router.add_get("/tempo/api/v2/traces/{id}", _timeout)
    app.router.add_get("/api/v1/spans/{t}/{s}/profile", _not_found)
    app.router.add_get("/api/v1/boom", _boom)
    app.router.add_post("/pyroscope/boom", _boom)
    app[METRICS] = metrics
    metrics.allow_routes(app)  # create_app does this once its routes are set up
    return await aiohttp_client(app)  # type: ignore[no-any-return]


async def test_connect_errors_on_rpc_paths(client: TestClient) -> None:
    resp = await client.post("/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile", data=b"")
    assert resp.status == 400
    assert resp.headers["Content-Type"] == "application/json"
    assert await resp.json() == {
        "code": "invalid_argument",
        "message": "span selector holds no 16-hex span id",
        "details": [],
    }


async def test_plain_text_under_tempo(client: TestClient) -> None:
    resp = await client.get("/tempo/api/v2/traces/abc")
    assert resp.status == 504
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert await resp.text() == "tempo did not answer within 1.0 s\n"


async def test_problem_json_under_api(client: TestClient) -> None:
    resp = await client.get("/api/v1/spans/a/b/profile")
    assert resp.status == 404
    assert await resp.json() == {"error": {"code": "not_found", "message": "trace 00ff not found"}}


@pytest.mark.parametrize("path", ["/api/v1/boom", "/pyroscope/boom"])
async def test_unexpected_errors_never_leak_a_stack_trace(
    client: TestClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="bridge.http"):
        resp = await (client.get(path) if path.startswith("/api/") else client.post(path, data=b""))
    assert resp.status == 500
    body = await resp.text()
    assert "secret internals" not in body and "Traceback" not in body
    assert "internal" in body
    assert any("secret internals" in (r.exc_text or "") or r.exc_info for r in caplog.records)


async def test_requests_are_counted_by_route_and_code(client: TestClient) -> None:
    await client.get("/api/v1/spans/a/b/profile")
    await client.get("/no/such/route")
    text = client.app[METRICS].render().decode()
    assert 'profile_bridge_requests_total{code="404",route="/api/v1/spans/{t}/{s}/profile"} 1.0' in text
    assert 'profile_bridge_requests_total{code="404",route="unmatched"} 1.0' in text
