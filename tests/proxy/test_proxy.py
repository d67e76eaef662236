"""The streaming pass-through (bridge/upstream/proxy.py) against a real upstream app on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.body import end_to_end
from bridge.errors import Code, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.middleware import make_middleware
from bridge.upstream import relay
from bridge.upstream.faults import map_client_error
from bridge.upstream.proxy import stream_through, target_url

BIG = os.urandom(3 * 1024 * 1024 + 17)
HUGE = os.urandom(12 * 1024 * 1024 + 5)


class Upstream:
    """A test double upstream: echoes what it was asked and can misbehave on purpose."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.app = web.Application(client_max_size=64 * 1024**2)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            {"method": request.method, "raw_path": request.raw_path, "headers": request.headers.copy(), "body": body}
        )
        fault = request.headers.get("X-Fault", "")
        if fault == "slow":
            await asyncio.sleep(5)
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
            await asyncio.sleep(0.1)
        if fault == "garbage":
            assert request.transport is not None
            request.transport.write(b"\x00\x01 this is not HTTP at all\r\n\r\n")
            request.transport.close()
            await asyncio.sleep(0.1)
        if fault == "big":
            resp = web.StreamResponse(headers={"Content-Type": "application/proto"})
            await resp.prepare(request)
            for i in range(0, len(BIG), 65536):
                await resp.write(BIG[i : i + 65536])
            await resp.write_eof()
            return resp
        if fault == "cut":
            resp = web.StreamResponse(headers={"Content-Type": "application/proto"})
            resp.content_length = len(BIG)
            await resp.prepare(request)
            await resp.write(BIG[:100_000])
            assert request.transport is not None
            request.transport.abort()
            return resp
        if fault == "framed":
            return web.Response(body=HUGE, headers={"Content-Type": "application/proto"})
        if fault == "gzip":
            return web.Response(
                body=gzip.compress(b"hello " * 1000),
                headers={"Content-Encoding": "gzip", "Content-Type": "text/plain", "X-Upstream": "yes"},
            )
        return web.Response(
            status=201,
            body=body[::-1],
            headers={
                "Content-Type": "application/proto",
                "X-Upstream": "yes",
                "Keep-Alive": "timeout=5",
                "Connection": "keep-alive, X-Private",
                "X-Private": "hop",
            },
        )


# every test runs twice: through the lean relay (what create_app sets up) and through aiohttp's client (what an app
# without it, or a request that does not suit it, uses)
LEAN = [True]


@pytest.fixture(autouse=True, params=[True, False], ids=["lean", "aiohttp"])
def lean(request: pytest.FixtureRequest) -> bool:
    LEAN[0] = bool(request.param)
    return LEAN[0]


def bridge_app(
    upstream_url: str, session_box: dict[str, aiohttp.ClientSession], timeout: float = 2.0
) -> web.Application:
    # as create_app does: the server never undoes Content-Encoding, whatever the runner is asked
    app = web.Application(middlewares=[make_middleware(Metrics())], handler_args={"auto_decompress": False})
    if LEAN[0]:
        relay.setup(app)

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=timeout, connect=1)
        ) as session:
            session_box["s"] = session
            yield

    async def forward(request: web.Request) -> web.StreamResponse:
        url = target_url(upstream_url, request, "/mnt")
        return await stream_through(
            request, session_box["s"], url, upstream="upstream", timeout=aiohttp.ClientTimeout(total=timeout, connect=1)
        )

    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/mnt/{tail:.*}", forward)
    return app


Factory = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def upstream(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> tuple[Upstream, str]:
    up = Upstream()
    server = await aiohttp_server(up.app, auto_decompress=False)  # records bodies exactly as they arrive
    return up, str(server.make_url("")).rstrip("/")


@pytest.fixture
async def client(upstream: tuple[Upstream, str], aiohttp_client: Factory) -> TestClient[Any, Any]:
    return await aiohttp_client(bridge_app(upstream[1] + "/base", {}))


async def test_method_path_query_body_and_end_to_end_headers_are_forwarded(
    upstream: tuple[Upstream, str], client: TestClient[Any, Any]
) -> None:
    up, _ = upstream
    resp = await client.post(
        "/mnt/querier.v1.QuerierService/ProfileTypes%2Fx?a=1&b=%20c",
        data=b"\x0a\x03abc",
        headers={
            "Content-Type": "application/proto",
            "X-Scope-OrgID": "tenant-a",
            "Authorization": "Bearer t0ken",
            "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": "1500",
            "Connection": "keep-alive, X-Secret",
            "X-Secret": "hop only",
            "TE": "trailers",
            "Cookie": "grafana_session=secret; other=1",
        },
    )
    assert resp.status == 201
    assert await resp.read() == b"cba\x03\x0a"
    assert resp.headers["X-Upstream"] == "yes"
    assert "X-Private" not in resp.headers and "Keep-Alive" not in resp.headers
    [seen] = up.requests
    assert seen["method"] == "POST"
    assert seen["raw_path"] == "/base/querier.v1.QuerierService/ProfileTypes%2Fx?a=1&b=%20c"
    assert seen["body"] == b"\x0a\x03abc"
    h = seen["headers"]
    assert h["X-Scope-OrgID"] == "tenant-a"
    assert h["Authorization"] == "Bearer t0ken"
    assert h["Connect-Protocol-Version"] == "1"
    assert h["Connect-Timeout-Ms"] == "1500"
    assert h["Content-Type"] == "application/proto"
    assert "X-Secret" not in h and "TE" not in h
    assert "Cookie" not in h  # a browser's cookies never go up (issue 11, item 9)


async def test_large_bodies_stream_both_ways_byte_for_byte(
    upstream: tuple[Upstream, str], client: TestClient[Any, Any]
) -> None:
    up, _ = upstream
    resp = await client.put("/mnt/upload", data=io.BytesIO(BIG), headers={"Content-Type": "application/octet-stream"})
    assert resp.status == 201
    assert await resp.read() == BIG[::-1]
    assert up.requests[0]["body"] == BIG
    resp = await client.get("/mnt/download", headers={"X-Fault": "big"})
    assert resp.status == 200
    assert await resp.read() == BIG


@pytest.mark.parametrize("runner_asks_to_decompress", [False, True])
async def test_gzip_is_passed_through_both_ways(
    upstream: tuple[Upstream, str],
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    aiohttp_client: Factory,
    runner_asks_to_decompress: bool,
) -> None:
    """gzip bodies go up byte for byte: the app turns aiohttp's ``auto_decompress`` off for every runner (its
    ``handler_args``), also one that asks for aiohttp's default."""
    up, url = upstream
    server = await aiohttp_server(bridge_app(url, {}), auto_decompress=runner_asks_to_decompress)
    client = await aiohttp_client(server)
    payload = gzip.compress(b"request " * 500)
    resp = await client.post(
        "/mnt/x",
        data=payload,
        headers={"Content-Encoding": "gzip", "X-Fault": "gzip", "Accept-Encoding": "gzip"},
        auto_decompress=False,
    )
    assert resp.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(await resp.read()) == b"hello " * 1000
    assert up.requests[0]["headers"]["Content-Encoding"] == "gzip"
    assert up.requests[0]["body"] == payload
    assert up.requests[0]["headers"]["Accept-Encoding"] == "gzip"


async def test_no_accept_encoding_is_invented(upstream: tuple[Upstream, str], client: TestClient[Any, Any]) -> None:
    up, _ = upstream
    await client.get("/mnt/x", skip_auto_headers=["Accept-Encoding", "User-Agent"])
    assert "Accept-Encoding" not in up.requests[0]["headers"]


async def raw_status(client: TestClient[Any, Any], path: str) -> int:
    """Send ``path`` exactly as written (HTTP clients normalise dot segments away)."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


@pytest.mark.parametrize(
    "path",
    [
        "/mnt/a/%2e%2e/%2e%2e/secret",
        "/mnt/a/../../secret",
        "/mnt/%2E%2E/x",
        "/mnt/api/..%2f..%2fready",  # an encoded slash must not hide the dot segments
        "/mnt/api/..%2F..%2Fready",
        "/mnt/api/..%5c..%5cready",
    ],
)
async def test_dot_segments_are_not_forwarded(
    upstream: tuple[Upstream, str], client: TestClient[Any, Any], path: str
) -> None:
    up, _ = upstream
    assert await raw_status(client, path) in (400, 404)
    assert up.requests == []


async def test_a_large_framed_answer_arrives_whole_however_slowly_it_is_read(
    upstream: tuple[Upstream, str], client: TestClient[Any, Any]
) -> None:
    """The lean relay splices a body of known length into the client's connection; a slow reader makes it stop
    reading the upstream and wait for the client, not buffer without bound."""
    for _ in range(2):  # and the upstream connection is reusable afterwards
        resp = await client.get("/mnt/x", headers={"X-Fault": "framed"})
        assert resp.status == 200 and resp.content_length == len(HUGE)
        got = bytearray()
        async for chunk in resp.content.iter_chunked(256 * 1024):
            got += chunk
            if len(got) < 6 * 1024 * 1024:
                await asyncio.sleep(0.005)
        assert bytes(got) == HUGE


async def test_upstream_down_is_unavailable(aiohttp_client: Factory) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = await aiohttp_client(bridge_app(f"http://127.0.0.1:{port}", {}))
    resp = await client.get("/mnt/ready")
    assert resp.status == 503
    doc = await resp.json()
    assert doc["code"] == "unavailable"
    assert "cannot connect to upstream" in doc["message"]


@pytest.mark.parametrize(
    ("fault", "status", "code", "words"),
    [
        ("slow", 504, "deadline_exceeded", "did not answer within 0.3 s"),
        ("reset", 503, "unavailable", "closed the connection"),
        ("garbage", 500, "internal", "not valid HTTP"),
    ],
)
async def test_upstream_faults_before_the_answer_become_connect_errors(
    upstream: tuple[Upstream, str], aiohttp_client: Factory, fault: str, status: int, code: str, words: str
) -> None:
    up, url = upstream
    client = await aiohttp_client(bridge_app(url, {}, timeout=0.3))
    resp = await client.get("/mnt/x", headers={"X-Fault": fault})
    assert resp.status == status
    doc = await resp.json()
    assert doc["code"] == code
    assert words in doc["message"]
    assert "Traceback" not in doc["message"]


async def test_upstream_cut_mid_body_aborts_the_client_connection(
    upstream: tuple[Upstream, str], client: TestClient[Any, Any]
) -> None:
    resp = await client.get("/mnt/x", headers={"X-Fault": "cut"})
    assert resp.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()


@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        ({"X-Scope-OrgID": "a", "Connection": "close"}, {"X-Scope-OrgID": "a"}),
        ({"Connection": "Foo, bar", "Foo": "1", "Bar": "2", "Baz": "3"}, {"Baz": "3"}),
        (
            {"Transfer-Encoding": "chunked", "Keep-Alive": "x", "Upgrade": "h2c", "Content-Type": "t"},
            {"Content-Type": "t"},
        ),
        ({"Proxy-Authorization": "x", "Authorization": "y"}, {"Authorization": "y"}),
    ],
)
def test_end_to_end_headers_table(headers: dict[str, str], kept: dict[str, str]) -> None:
    assert dict(end_to_end(headers)) == kept


@pytest.mark.parametrize(
    ("exc", "cls", "code"),
    [
        (aiohttp.ServerTimeoutError("read"), UpstreamTimeout, Code.DEADLINE_EXCEEDED),
        (TimeoutError(), UpstreamTimeout, Code.DEADLINE_EXCEEDED),
        (aiohttp.ServerDisconnectedError(), UpstreamUnavailable, Code.UNAVAILABLE),
        (aiohttp.ClientPayloadError("cut"), UpstreamUnavailable, Code.UNAVAILABLE),
        (ConnectionResetError(), UpstreamUnavailable, Code.UNAVAILABLE),
        (ValueError("odd"), UpstreamError, Code.INTERNAL),
    ],
)
def test_client_errors_map_most_specific_first(exc: Exception, cls: type[UpstreamError], code: Code) -> None:
    err = map_client_error("pyroscope", exc, 1.5)
    assert type(err) is cls
    assert err.code is code
    assert err.upstream == "pyroscope"
    assert "pyroscope" in err.message


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (aiohttp.ConnectionTimeoutError(), "tempo did not answer: no connection within 2 s"),
        (aiohttp.SocketTimeoutError(), "tempo did not answer: nothing arrived for 3 s"),
        (TimeoutError(), "tempo did not answer within 6 s"),
    ],
)
def test_timeout_messages_name_the_figure_of_the_timeout_that_fired(exc: BaseException, words: str) -> None:
    err = map_client_error("tempo", exc, aiohttp.ClientTimeout(total=6, connect=2, sock_read=3))
    assert isinstance(err, UpstreamTimeout)
    assert err.message == words
