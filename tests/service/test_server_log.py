"""Requests aiohttp cannot parse (issue 11, item 10): an oversize header made aiohttp log a full ERROR traceback per
request (7,718 in one fuzz run). Now: one WARNING line, at most one per interval, saying how many were dropped."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from bridge.app import create_app
from bridge.config import Settings
from bridge.logs import SERVER_LOGGER, MalformedRequests


async def send_raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read(4096)
    writer.close()
    await writer.wait_closed()
    return answer


async def test_oversize_headers_are_one_rate_limited_line_not_a_traceback_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    server = TestServer(create_app(Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "d"))))
    await server.start_server()
    [limiter] = [f for f in logging.getLogger(SERVER_LOGGER).filters if isinstance(f, MalformedRequests)]
    limiter.clock, limiter.last, limiter.dropped = (lambda: now[0]), None, 0
    try:
        with caplog.at_level(logging.DEBUG):
            for n in range(30):
                if n == 20:
                    now[0] += MalformedRequests.INTERVAL_S  # a later burst: one more line, counting the dropped
                big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
                answer = await send_raw(server.port or 0, big)
                assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400")
            bad_line = await send_raw(server.port or 0, b"\x00\x01 not http\r\n\r\n")
            assert b" 400 " in bad_line.split(b"\r\n")[0]
    finally:
        await server.close()
    server_records = [r for r in caplog.records if r.name in (SERVER_LOGGER, "aiohttp.server")]
    assert [r.levelname for r in server_records] == ["WARNING", "WARNING"]
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in server_records)
    assert "Got more than 8190 bytes" in server_records[0].getMessage()
    assert "(19 more like it in the last 10 s)" in server_records[1].getMessage()
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)
