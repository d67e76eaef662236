"""Every answer the bridge reads whole is capped (issue 11, item 6): a chunked answer of hundreds of MB from Tempo or
Pyroscope costs at most ``PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES`` before the bridge stops reading and answers a
clear error; pass-through answers stay streams, of any size."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.app import create_app
from bridge.config import Settings

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Server = Callable[..., Awaitable[TestServer]]

MiB = 1024**2
CHUNK = b"\x00" * MiB
TRACE_ID = "0123456789abcdef0123456789abcdef"
SPAN_ID = "0123456789abcdef"


class Flood:
    """A test double upstream (Tempo and Pyroscope at once) answering every request with ``size`` bytes, chunked
    (no Content-Length), made as they are sent: it costs its own process one chunk, whatever the size."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent: list[int] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent = 0
        try:
            while sent < self.size:
                await resp.write(CHUNK)
                sent += len(CHUNK)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the bridge stopped reading: what this test wants
        self.sent.append(sent)
        return resp


def peak_rss_reset() -> None:
    """Reset this process's peak RSS (VmHWM), so the next reading is the peak since now."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    match = re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())
    assert match is not None
    return int(match.group(1)) * 1024


async def test_four_huge_answers_at_once_cost_the_cap_not_their_size(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    """The issue's four 200 MB answers at once (1.03 GiB), scaled: four 300 MB answers — a trace by ID and the
    resolver's Pyroscope queries — with an 8 MiB cap raise the peak RSS by far less than one answer."""
    flood = Flood(300 * MiB)
    upstream = await aiohttp_server(flood.app)
    url = str(upstream.make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", tempo_url=url, pyroscope_url=url, max_upstream_answer_bytes=8 * MiB)
    client = await aiohttp_client(create_app(settings))

    async def trace() -> tuple[int, str]:
        resp = await client.get(f"/tempo/api/v2/traces/{TRACE_ID}")
        return resp.status, await resp.text()

    async def profile() -> tuple[int, str]:
        resp = await client.get(f"/api/v1/spans/{TRACE_ID}/{SPAN_ID}/profile")
        return resp.status, await resp.text()

    await trace()  # warm: sessions, imports, first-use allocations
    peak_rss_reset()
    base = peak_rss()
    answers = await asyncio.gather(trace(), trace(), profile(), profile())
    growth = peak_rss() - base

    for status, text in answers:
        assert status == 502, text
        assert "PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES" in text and "8388608" in text
    assert growth < 64 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"
    assert all(sent < 300 * MiB for sent in flood.sent)  # the bridge hung up early


async def test_pass_through_answers_stream_whatever_their_size(aiohttp_server: Server, aiohttp_client: Client) -> None:
    flood = Flood(32 * MiB)
    upstream = await aiohttp_server(flood.app)
    url = str(upstream.make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", tempo_url=url, pyroscope_url=url, max_upstream_answer_bytes=MiB)
    client = await aiohttp_client(create_app(settings))
    for path in ("/tempo/api/search?q={}", "/pyroscope/querier.v1.QuerierService/SelectMergeProfile"):
        resp = await (
            client.get(path)
            if path.startswith("/tempo")
            else client.post(path, data=b"", headers={"Content-Type": "application/proto"})
        )
        assert resp.status == 200
        received = 0
        async for chunk in resp.content.iter_chunked(MiB):
            received += len(chunk)
        assert received == 32 * MiB


@pytest.mark.parametrize("value", ["64MiB", "1GiB"])
def test_the_cap_is_a_setting(value: str) -> None:
    settings = Settings.from_env({"PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES": value})
    assert settings.max_upstream_answer_bytes == {"64MiB": 64 * MiB, "1GiB": 1024 * MiB}[value]
    assert Settings().max_upstream_answer_bytes == 64 * MiB
