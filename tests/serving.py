"""Bridges as real processes for tests: ``python -m bridge serve`` on a free loopback port, its log read as it comes,
stopped with SIGTERM (its exit code returned)."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


async def wait_healthy(
    session: aiohttp.ClientSession, base: str, gone: Callable[[], str | None], seconds: float
) -> None:
    """Until ``GET {base}/healthz`` answers 200, asked every 50 ms. ``gone`` says why the process will never answer
    (it exited: what it logged), None while it runs; that, or ``seconds`` passing first, fails the test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            async with session.get(f"{base}/healthz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        if (why := gone()) is not None:
            raise AssertionError(f"the bridge exited: {why}")
        if loop.time() > deadline:
            raise AssertionError(f"{base}/healthz did not answer 200 within {seconds:g} s")
        await asyncio.sleep(0.05)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(x) for x in text.split()}


class Bridge:
    def __init__(self, proc: asyncio.subprocess.Process, port: int, lines: list[str]) -> None:
        self.proc = proc
        self.port = port
        self.lines = lines
        self.base = f"http://127.0.0.1:{port}"
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace"))

    async def wait_for_line(self, text: str, limit: float = 60.0) -> None:
        for _ in range(int(limit / 0.05)):
            if any(text in line for line in self.lines):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no log line with {text!r}:\n{''.join(self.lines)}")

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 90)
        await self._reader
        return code


async def start_bridge(*args: str, env: dict[str, str] | None = None) -> Bridge:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "serve",
        "--listen",
        "127.0.0.1:0",
        *args,
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false", **(env or {})},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(proc.stderr.readline(), 90)
        if not raw:
            await proc.wait()
            raise AssertionError(f"bridge exited with {proc.returncode}:\n{''.join(lines)}")
        line = raw.decode(errors="replace")
        lines.append(line)
        if (m := LISTENING.search(line)) is not None:
            return Bridge(proc, int(m.group(1)), lines)


class BridgeProcess:
    """``python -m bridge serve`` for a module-scoped fixture (no event loop of its own): standalone on its own data
    directory, its log read by a thread; ``stop()`` sends SIGTERM and waits (killing it after 30 s)."""

    def __init__(self, data_dir: Path) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        stderr = self.proc.stderr
        threading.Thread(target=lambda: self.lines.extend(stderr), daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if (m := LISTENING.search(line)) is not None:
                    self.base = f"http://127.0.0.1:{m.group(1)}"
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError("the bridge did not start:\n" + "".join(self.lines))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
