"""The lean relay (``bridge.upstream.relay``) against upstreams that answer byte by byte as written here: framing
(chunked split anywhere, Content-Length, until close), 1xx heads, HEAD and 204, keep-alive reuse and its limits,
a stale kept-alive connection, and garbage. Each answer is read through ``Exchange`` as the pass-through does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bridge.errors import UpstreamError, UpstreamUnavailable
from bridge.upstream import relay

Answer = Callable[[bytes], list[bytes]]  # the request head → the pieces to write, in order


class RawUpstream:
    """Answers each request with the pieces ``answer`` gives (a pause between pieces), keeps the connection open
    unless told otherwise, and counts connections."""

    def __init__(self, answer: Answer, close_after: bool = False) -> None:
        self.answer = answer
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                for piece in self.answer(head):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.001)
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[RawUpstream], asyncio.Future[relay.Pool]]]:
    servers: list[asyncio.Server] = []

    async def start(upstream: RawUpstream) -> relay.Pool:
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        servers.append(server)
        return relay.Pool("127.0.0.1", server.sockets[0].getsockname()[1])

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()
        await server.wait_closed()


async def exchange(
    pool: relay.Pool, method: str = "GET", body: bytes = b""
) -> tuple[int, list[tuple[str, str]], bytes]:
    ex = relay.Exchange(pool, "upstream")
    fields = [("Content-Length", str(len(body)))] if body else []
    head = relay.request_head(method, "/x?y=1", f"{pool.host}:{pool.port}", fields)
    try:
        conn = await ex.start(head, body, head_only=method == "HEAD", connect_timeout=2, total=5)
        parts = []
        while chunk := await conn.read():
            parts.append(chunk)
        return conn.status, conn.fields, b"".join(parts)
    finally:
        ex.finish()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nX-Trailer: t\r\n\r\n"


@pytest.mark.parametrize("split", [1, 3, 7, 1000])
async def test_chunked_answers_are_decoded_wherever_the_bytes_are_split(serve: Any, split: int) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"hello ", b"chunked " * 50, b"world")
    upstream = RawUpstream(lambda _: [raw[i : i + split] for i in range(0, len(raw), split)])
    pool = await serve(upstream)
    for _ in range(2):  # and the connection is reused for the next one
        status, _, body = await exchange(pool)
        assert status == 200 and body == b"hello " + b"chunked " * 50 + b"world"
    assert upstream.connections == 1


async def test_informational_heads_are_skipped_and_head_and_204_have_no_body(serve: Any) -> None:
    def answer(head: bytes) -> list[bytes]:
        if head.startswith(b"HEAD"):
            return [b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"]
        if b"/x" in head and len(upstream.requests) == 2:
            return [b"HTTP/1.1 204 No Content\r\n\r\n"]
        return [b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"]

    upstream = RawUpstream(answer)
    pool = await serve(upstream)
    assert (await exchange(pool))[::2] == (200, b"abc")
    assert (await exchange(pool))[::2] == (204, b"")
    status, fields, body = await exchange(pool, "HEAD")
    assert (status, body) == (200, b"") and ("Content-Length", "5000") in fields
    assert upstream.connections == 1


async def test_connection_close_and_bodies_until_close_are_not_reused(serve: Any) -> None:
    upstream = RawUpstream(lambda _: [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end"], close_after=True)
    pool = await serve(upstream)
    assert (await exchange(pool))[2] == b"to the end"
    assert (await exchange(pool))[2] == b"to the end"
    assert upstream.connections == 2


async def test_a_kept_alive_connection_the_upstream_closed_is_replaced_for_a_get(serve: Any) -> None:
    upstream = RawUpstream(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], close_after=True)
    pool = await serve(upstream)
    # the upstream closes after each answer without saying so: the pooled connection is stale
    assert (await exchange(pool))[2] == b"ok"
    await asyncio.sleep(0.05)
    assert (await exchange(pool))[2] == b"ok"
    assert upstream.connections == 2


async def test_the_request_goes_up_in_one_piece_with_its_body(serve: Any) -> None:
    upstream = RawUpstream(lambda _: [b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"])
    pool = await serve(upstream)
    status, _, _ = await exchange(pool, "POST", b"\x00\x01binary")
    assert status == 201
    assert upstream.requests == [
        b"POST /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 8\r\n\r\n\x00\x01binary" % pool.port
    ]


@pytest.mark.parametrize(
    "raw",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    ],
)
async def test_garbage_is_not_valid_http(serve: Any, raw: bytes) -> None:
    pool = await serve(RawUpstream(lambda _: [raw]))
    with pytest.raises(UpstreamError, match="not valid HTTP"):
        await exchange(pool)


async def test_a_body_cut_short_fails_the_read(serve: Any) -> None:
    pool = await serve(
        RawUpstream(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"], close_after=True)
    )
    with pytest.raises(relay._Closed):
        await exchange(pool)


async def test_nothing_listening_is_unavailable() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamUnavailable, match="cannot connect to upstream \\(connection refused\\)"):
        await exchange(relay.Pool("127.0.0.1", port))


def test_parse_head_table() -> None:
    assert relay.parse_head(b"HTTP/1.1 404 Not Found\r\nA: b\r\nC:d ") == (
        404,
        "Not Found",
        [("A", "b"), ("C", "d")],
        True,
    )
    assert relay.parse_head(b"HTTP/1.0 200 ")[::3] == (200, False)
