"""Zero loss across a SIGHUP reload (issue 19, goal 5): ``serve --workers 2`` under keep-alive load from two real
clients — Debian's ``wrk`` and an aiohttp ``ClientSession`` with a connection pool — while the master replaces every
worker, slot 0 (which holds the OTLP gRPC receiver) included. Measured on main: 41 of 50,829 wrk requests and 22 of
23,062 aiohttp requests failed per reload (a stopping worker closed keep-alive connections under requests their
clients were sending, and slot 0 had no worker while its successor started). Every request must succeed, and the
gRPC port must serve again after the reload.

The load goes through the bridge to the doubles (relayed calls, whose successes the bridge logs at debug: the test
reads its log for the reload's end). Counts are asserted, never time."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from collections import Counter
from typing import Any

import aiohttp
import pytest

from bridge._proto import querier_pb2 as qpb
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.tempo import TempoDouble
from tests.serving import children, closed_port, start_bridge
from tests.tools import require_tool

PROFILE_TYPES = "/pyroscope/querier.v1.QuerierService/ProfileTypes"
CLIENTS = 16  # aiohttp: requests in flight at once, over a pool of as many keep-alive connections
WRK_CONNECTIONS = 32


async def _wait_children(pid: int, count: int, exclude: set[int]) -> set[int]:
    for _ in range(2400):
        now = children(pid)
        if len(now) == count and not now & exclude:
            return now
        await asyncio.sleep(0.05)
    raise AssertionError(f"master {pid} has children {children(pid)}, wanted {count} new ones")


def _wrk_failures(text: str) -> tuple[int, int]:
    """(requests, failed) from wrk's summary: socket errors (connect, read, write, timeout) and non-2xx/3xx answers."""
    requests = int(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    failed = 0
    if errors := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        failed += sum(int(n) for n in errors.groups())
    if bad := re.search(r"Non-2xx or 3xx responses: (\d+)", text):
        failed += int(bad.group(1))
    return requests, failed


async def _grpc_port_serves(port: int) -> bool:
    for _ in range(600):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.slow  # two bridge processes' worth of workers and wrk for seconds; no date is read: date-safe
async def test_sighup_under_keep_alive_load_loses_no_request(aiohttp_server: Any) -> None:
    wrk_path = require_tool("wrk", package="wrk", purpose="load the bridge with keep-alive connections across a reload")
    tempo, pyroscope = TempoDouble(), PyroscopeDouble(profiles=[])
    tempo_url = str((await aiohttp_server(tempo.app)).make_url("")).rstrip("/")
    pyroscope_url = str((await aiohttp_server(pyroscope.app)).make_url("")).rstrip("/")
    grpc_port = closed_port()
    bridge = await start_bridge(
        *("--proxy", "--workers", "2", "--tempo-url", tempo_url, "--pyroscope-url", pyroscope_url),
        *("--otlp-grpc-listen", f"127.0.0.1:{grpc_port}"),
        env={"PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "true"},
    )
    outcomes: Counter[str] = Counter()
    stop = asyncio.Event()
    try:
        old = await _wait_children(bridge.proc.pid, 2, set())
        wrk = await asyncio.create_subprocess_exec(
            *(wrk_path, "-t2", f"-c{WRK_CONNECTIONS}", "-d600s", "--timeout", "60s", f"{bridge.base}/tempo/api/echo"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        body = qpb.ProfileTypesRequest().SerializeToString()
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS), timeout=timeout) as session:

            async def client() -> None:
                while not stop.is_set():
                    try:
                        async with session.post(
                            bridge.base + PROFILE_TYPES, data=body, headers={"Content-Type": "application/proto"}
                        ) as resp:
                            await resp.read()
                            outcomes["ok" if resp.status == 200 else f"status {resp.status}"] += 1
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        outcomes[type(exc).__name__] += 1

            async def more(n: int) -> None:
                goal = sum(outcomes.values()) + n
                while sum(outcomes.values()) < goal:
                    await asyncio.sleep(0.02)

            tasks = [asyncio.create_task(client()) for _ in range(CLIENTS)]
            await more(200)
            bridge.proc.send_signal(signal.SIGHUP)
            await bridge.wait_for_line("SIGHUP: every worker replaced", limit=240)
            new = await _wait_children(bridge.proc.pid, 2, old)
            await more(200)
            stop.set()
            await asyncio.gather(*tasks)
        wrk.send_signal(signal.SIGINT)
        wrk_out = (await asyncio.wait_for(wrk.communicate(), 60))[0].decode()
        assert await _grpc_port_serves(grpc_port), "the OTLP gRPC port is not served after the reload"
    finally:
        stop.set()
        assert await bridge.stop() == 0
    requests, failed = _wrk_failures(wrk_out)
    total = sum(outcomes.values())
    print(f"\nwrk: {failed} of {requests:,} failed; aiohttp: {total - outcomes['ok']} of {total:,} failed {outcomes}")
    assert not new & old
    assert requests > 500 and failed == 0, wrk_out
    assert total > 400 and outcomes == Counter(ok=total), outcomes
