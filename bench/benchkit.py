"""What every bench script shares: a free loopback port for the servers it starts, the machine's load average for
its report lines, percentiles of the times it measured, waiting for the children it starts and stopping them."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path

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
) -> None:
    """Until ``url`` answers 200 (a GET, or a protobuf POST of ``post``), every 50 ms; ``SystemExit`` when ``proc``
    exits first or it never does."""
    for _ in range(tries):
        if proc.poll() is not None:
            raise SystemExit(f"the child for {url} exited with {proc.returncode}")
        try:
            if post is None:
                request = session.get(url)
            else:
                request = session.post(url, data=post, headers={"Content-Type": "application/proto"})
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
