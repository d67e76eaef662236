"""``serve --workers N``: one port shared by worker processes, graceful restart and stop, metrics summed over the
workers, standalone mode in one process. The bridges run as real processes (``python -m bridge serve``) against the
doubles; nothing here measures time (liveness loops have generous bounds and only say something never happened)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge import workers
from bridge._proto import querier_pb2 as qpb
from bridge.config import ConfigError, Settings
from tests.doubles.pyroscope import PyroscopeDouble
from tests.serving import ROOT, children, closed_port, start_bridge

PROFILE_TYPES = "/pyroscope/querier.v1.QuerierService/ProfileTypes"


@pytest.fixture
async def pyroscope(aiohttp_server: Any) -> AsyncIterator[PyroscopeDouble]:
    double = PyroscopeDouble(profiles=[])
    server = await aiohttp_server(double.app)
    double.url = str(server.make_url("")).rstrip("/")
    yield double


def proxy_args(pyroscope: PyroscopeDouble) -> list[str]:
    return ["--proxy", "--pyroscope-url", pyroscope.url, "--tempo-url", f"http://127.0.0.1:{closed_port()}"]


async def profile_types(base: str, *, fresh: bool = True) -> int:
    """One ProfileTypes call on a new connection (so the kernel picks a worker each time); the status."""
    connector = aiohttp.TCPConnector(force_close=fresh)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.post(
            base + PROFILE_TYPES,
            data=qpb.ProfileTypesRequest().SerializeToString(),
            headers={"Content-Type": "application/proto"},
        ) as resp,
    ):
        await resp.read()
        return resp.status


async def served(base: str, route: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(base + "/metrics") as resp:
        text = await resp.text()
    pattern = re.compile(r'^profile_bridge_requests_total\{code="200",route="' + re.escape(route) + r'"\} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(text))


async def wait_children(pid: int, count: int, exclude: set[int] = frozenset()) -> set[int]:  # type: ignore[assignment]
    for _ in range(1200):
        now = children(pid)
        if len(now) == count and not now & exclude:
            return now
        await asyncio.sleep(0.05)
    raise AssertionError(f"master {pid} has children {children(pid)}, wanted {count} new ones")


# --------------------------------------------------------------------------------------------- processes


async def test_workers_share_the_port_and_metrics_count_every_worker(pyroscope: PyroscopeDouble) -> None:
    bridge = await start_bridge(*proxy_args(pyroscope), "--workers", "2")
    try:
        pids = await wait_children(bridge.proc.pid, 2)
        statuses = [await profile_types(bridge.base) for _ in range(40)]
        assert statuses == [200] * 40
        # every scrape, whichever worker answers it, sees the sum over both workers
        for _ in range(6):
            assert await served(bridge.base, "/pyroscope/ProfileTypes") == 40
        assert children(bridge.proc.pid) == pids
        assert len(pyroscope.calls("ProfileTypes")) == 40
        assert any("2 worker processes" in line for line in bridge.lines)
    finally:
        assert await bridge.stop() == 0
    assert not children(bridge.proc.pid)


@pytest.mark.slow  # worker processes replaced under load; statuses only: date-safe
async def test_sighup_replaces_every_worker_while_requests_keep_succeeding(pyroscope: PyroscopeDouble) -> None:
    bridge = await start_bridge(*proxy_args(pyroscope), "--workers", "2")
    try:
        old = await wait_children(bridge.proc.pid, 2)
        statuses: list[int] = []
        stop = asyncio.Event()

        async def load() -> None:
            while not stop.is_set():
                statuses.append(await profile_types(bridge.base, fresh=len(statuses) % 2 == 0))

        loader = asyncio.create_task(load())

        async def served_more(n: int) -> None:
            goal = len(statuses) + n
            while len(statuses) < goal:
                if loader.done():
                    loader.result()  # its failure, raised here
                await asyncio.sleep(0.01)

        await served_more(10)
        bridge.proc.send_signal(signal.SIGHUP)
        await bridge.wait_for_line("every worker replaced")
        new = await wait_children(bridge.proc.pid, 2, exclude=old)
        await served_more(10)
        stop.set()
        await loader
        assert not new & old
        assert set(statuses) == {200}, statuses
        # the old workers' counts survive them: the total counts every request made
        assert await served(bridge.base, "/pyroscope/ProfileTypes") == len(statuses)
    finally:
        assert await bridge.stop() == 0


@pytest.mark.slow  # a killed worker process restarted; statuses only: date-safe
async def test_a_worker_that_dies_is_started_again(pyroscope: PyroscopeDouble) -> None:
    bridge = await start_bridge(*proxy_args(pyroscope), "--workers", "2")
    try:
        pids = await wait_children(bridge.proc.pid, 2)
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        await bridge.wait_for_line("starting it again")
        await wait_children(bridge.proc.pid, 2, exclude={victim})
        assert [await profile_types(bridge.base) for _ in range(10)] == [200] * 10
    finally:
        assert await bridge.stop() == 0


@pytest.mark.slow  # process lifetimes only: date-safe
async def test_workers_stop_by_themselves_when_the_master_is_killed(pyroscope: PyroscopeDouble) -> None:
    bridge = await start_bridge(*proxy_args(pyroscope), "--workers", "2")
    pids = await wait_children(bridge.proc.pid, 2)
    bridge.proc.send_signal(signal.SIGKILL)
    await bridge.proc.wait()
    for _ in range(600):
        if not any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"workers {pids} outlived their master")
    await bridge.stop()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"


async def test_standalone_runs_one_process_and_says_why(tmp_path: Path) -> None:
    bridge = await start_bridge("--standalone", "--workers", "3", "--data-dir", str(tmp_path))
    try:
        assert any("standalone mode runs one process" in line for line in bridge.lines)
        assert not children(bridge.proc.pid)
        async with aiohttp.ClientSession() as session, session.get(bridge.base + "/readyz") as resp:
            assert (await resp.json())["mode"] == "standalone"
    finally:
        assert await bridge.stop() == 0


async def test_a_port_in_use_is_refused_in_one_line_even_with_reuseport() -> None:
    with socket.socket() as sock:  # a listener that itself allows SO_REUSEPORT: a plain bind still fails
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bridge",
            "serve",
            "--proxy",
            "--workers",
            "2",
            "--listen",
            f"127.0.0.1:{port}",
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false"},
        )
        _, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 1
    errors = [line for line in err.decode().splitlines() if line.startswith("profile-bridge")]
    assert errors == [
        f"profile-bridge: cannot listen on 127.0.0.1:{port}: Address already in use: --listen "
        "HOST:PORT (PROFILE_BRIDGE_LISTEN) moves the bridge's HTTP port"
    ]


# --------------------------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("mode", "asked", "expected", "says"),
    [
        ("proxy", 3, 3, False),
        ("proxy", None, workers.default_count(), False),
        ("proxy", 0, workers.default_count(), False),
        ("standalone", None, 1, False),
        ("standalone", 1, 1, False),
        ("standalone", 4, 1, True),
    ],
)
def test_how_many_workers_run(mode: str, asked: int | None, expected: int, says: bool) -> None:
    count, note = workers.effective_count(Settings.for_tests(mode=mode), asked)
    assert count == expected
    assert bool(note) is says


@pytest.mark.parametrize(("text", "expected"), [("auto", 0), ("0", 0), ("4", 4), (" 2 ", 2)])
def test_workers_setting_parses(text: str, expected: int) -> None:
    assert Settings.from_env({"PROFILE_BRIDGE_WORKERS": text}).workers == expected


@pytest.mark.parametrize("text", ["-1", "two", "1000"])
def test_bad_workers_setting_names_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match="PROFILE_BRIDGE_WORKERS"):
        Settings.from_env({"PROFILE_BRIDGE_WORKERS": text})


def test_sockets_share_one_port_picked_by_the_first() -> None:
    socks = workers.bind_sockets("127.0.0.1", 0, 3)
    try:
        ports = {s.getsockname()[1] for s in socks}
        assert len(ports) == 1 and 0 not in ports
        assert workers.in_use_by_another("127.0.0.1", ports.pop()) is not None
    finally:
        for s in socks:
            s.close()


def test_things_that_run_once_run_in_slot_zero_only() -> None:
    settings = Settings.for_tests(otlp_grpc_enabled=True, pprof_targets=("http://127.0.0.1:9/debug/pprof/profile",))
    assert workers.slot_settings(settings, 0) == settings
    other = workers.slot_settings(settings, 1)
    assert not other.otlp_grpc_enabled and other.pprof_targets == ()
