"""The load loop: drives the frontend so the stack always has fresh traces and profiles."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Final

from aiohttp import ClientError, ClientSession, ClientTimeout

log = logging.getLogger("demo.load")

# one round: two checkouts (CPU in both services), a very short span, an I/O-bound span
ROUND: Final = ("/checkout", "/checkout", "/health", "/slow-io")
_TRACERESPONSE: Final = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")

SpanSeen = Callable[[str, str, str], None]  # (path, trace id, span id) of an answered request


def parse_traceresponse(value: str | None) -> tuple[str, str] | None:
    """W3C ``traceresponse: 00-<trace id>-<span id>-<flags>`` → (trace id, span id); None when absent or malformed."""
    match = _TRACERESPONSE.match((value or "").strip().lower())
    return (match.group(1), match.group(2)) if match else None


async def wait_ready(session: ClientSession, urls: list[str], stop: asyncio.Event, timeout: float = 60.0) -> bool:
    """Wait until every service answers ``GET /health``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = list(urls)
    while pending and not stop.is_set() and loop.time() < deadline:
        try:
            async with session.get(pending[0] + "/health") as resp:
                if resp.status == 200:
                    pending.pop(0)
                    continue
        except (ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.25)
    return not pending


async def run_load(
    frontend_url: str,
    backend_url: str,
    interval: float,
    stop: asyncio.Event,
    rounds: int | None = None,
    on_span: SpanSeen | None = None,
) -> int:
    """Request ``ROUND`` until ``stop`` is set (or ``rounds`` rounds are done); returns the requests sent.
    ``on_span`` hears of every answered request's SERVER span (from its ``traceresponse`` header)."""
    sent = 0
    async with ClientSession(timeout=ClientTimeout(total=10, connect=2)) as session:
        if not await wait_ready(session, [backend_url, frontend_url], stop):
            log.warning("the demo services never became ready")
            return sent
        done = 0
        while not stop.is_set() and (rounds is None or done < rounds):
            for path in ROUND:
                try:
                    async with session.get(frontend_url + path) as resp:
                        await resp.read()
                        if resp.status != 200:
                            log.warning("GET %s: HTTP %d", path, resp.status)
                        ids = parse_traceresponse(resp.headers.get("traceresponse"))
                        if on_span is not None and ids is not None:
                            on_span(path, *ids)
                except (ClientError, TimeoutError) as exc:
                    log.warning("GET %s failed: %s", path, exc)
                sent += 1
            done += 1
            if done % 100 == 0:
                log.info("load: %d rounds, %d requests", done, sent)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
    return sent
