"""What every bench script shares: a free loopback port for the servers it starts, the machine's load average for
its report lines, percentiles of the times it measured, two calls timed alternately as one ratio line (``pair``),
waiting for the children it starts and stopping them."""

from __future__ import annotations

import asyncio
import socket
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp


def free_port() -> int:
    """A loopback port nothing listens on now (the benches start their own servers on 127.0.0.1 only)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def loadavg() -> str:
    """``/proc/loadavg`` as printed beside every ratio line ("unknown" where there is none)."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def wait_up(
    session: aiohttp.ClientSession,
    url: str,
    proc: subprocess.Popen[bytes],
    *,
    post: bytes | None = None,
    tries: int = 600,
    headers: dict[str, str] | None = None,
) -> None:
    """Until ``url`` answers 200 (a GET, or a protobuf POST of ``post``; with ``headers`` besides), every 50 ms;
    ``SystemExit`` when ``proc`` exits first or it never does."""
    for _ in range(tries):
        if proc.poll() is not None:
            raise SystemExit(f"the child for {url} exited with {proc.returncode}")
        try:
            if post is None:
                request = session.get(url, headers=headers)
            else:
                request = session.post(url, data=post, headers={"Content-Type": "application/proto", **(headers or {})})
            async with request as resp:
                await resp.read()
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


def stop_children(procs: Iterable[subprocess.Popen[bytes] | None], timeout: float = 40) -> None:
    """Terminate the children (the last started first), wait for each, kill one that does not stop in ``timeout``."""
    started = [proc for proc in procs if proc is not None]
    for proc in reversed(started):
        proc.terminate()
    for proc in started:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


async def pair(
    label: str,
    a_name: str,
    a: Callable[[], Awaitable[Any]],
    b_name: str,
    b: Callable[[], Awaitable[Any]],
    reps: int,
    target: str = "",
) -> tuple[Any, Any]:
    t_a: list[float] = []
    t_b: list[float] = []
    got_a = got_b = None
    for _ in range(reps):
        started = time.perf_counter()
        got_a = await a()
        t_a.append(time.perf_counter() - started)
        started = time.perf_counter()
        got_b = await b()
        t_b.append(time.perf_counter() - started)
    med_a, med_b = statistics.median(t_a), statistics.median(t_b)
    p99_a, p99_b = pct(t_a, 0.99), pct(t_b, 0.99)
    print(
        f"{label:<34} {a_name}: median {med_a * 1000:8.1f} ms p99 {p99_a * 1000:8.1f} ms | {b_name}: median "
        f"{med_b * 1000:8.1f} ms p99 {p99_b * 1000:8.1f} ms | ratio median {med_a / med_b:5.2f} p99 "
        f"{p99_a / p99_b:5.2f}{'  (target ' + target + ')' if target else ''}",
        flush=True,
    )
    return got_a, got_b
