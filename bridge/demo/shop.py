"""``DemoShop``: start the demo's two services as processes, drive them with the load loop, stop them cleanly.

Used by ``profile-bridge demo`` and ``profile-bridge serve --demo``. The listening sockets are bound here (port 0 picks
free ports) and handed to the services as inherited file descriptors, so the ports are known before the services run
and nothing can take them in between. Stopping sends SIGTERM and waits on the event loop (never a blocking wait)
while the services flush their last spans and profile window — to the bridge, which must still be serving then.
The services run in a session of their own, so a terminal's Ctrl-C reaches only this process, which stops them in
that order; each service also stops on its own when this process disappears.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from bridge.demo.load import run_load

log = logging.getLogger("bridge.demo")

STOP_SECONDS: Final = 15.0  # how long the services get to flush and exit after SIGTERM
WATCH_SECONDS: Final = 0.2
DEFAULT_LOAD_INTERVAL: Final = 0.25
SDK_MODULES: Final = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http", "pyroscope", "pyroscope.otel")
# a faster span export than the SDK's 5 s default, so a newcomer sees spans within a second (the environment wins)
DEMO_ENV_DEFAULTS: Final = {"OTEL_BSP_SCHEDULE_DELAY": "1000"}


class DemoUnavailable(Exception):
    """The demo cannot run here; ``str()`` is the one line to print."""


def missing_sdks() -> list[str]:
    """The SDK modules of the ``demo`` extra that are not installed."""
    missing = []
    for name in SDK_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            missing.append(name)
    return missing


def check_sdks() -> None:
    missing = missing_sdks()
    if missing:
        raise DemoUnavailable(
            f"the demo needs the OpenTelemetry and Pyroscope SDKs ({', '.join(missing)} not installed): "
            "pip install 'profile-bridge[demo]'"
        )


@dataclass(frozen=True, slots=True)
class DemoConfig:
    traces_to: str  # OTLP/HTTP base URL: spans go to <traces_to>/v1/traces
    profiles_to: str  # Pyroscope push API base URL
    host: str = "127.0.0.1"
    frontend_port: int = 0
    backend_port: int = 0
    load: bool = True
    load_interval: float = DEFAULT_LOAD_INTERVAL


def loopback(host: str) -> str:
    """How this machine reaches a service listening on ``host``."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class DemoShop:
    """The running demo: ``await start()``, then ``await stop()`` (idempotent). ``exited`` is set when a service
    process ended by itself."""

    def __init__(self, config: DemoConfig, environ: Mapping[str, str], look_url: str = "") -> None:
        self.config = config
        self.look_url = look_url.rstrip("/")  # a bridge whose pages show the demo's spans, when known
        self.environ = environ
        self.frontend_url = ""
        self.backend_url = ""
        self.exited = asyncio.Event()
        self.first_span: tuple[str, str] | None = None
        self._procs: list[subprocess.Popen[bytes]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[object]] = []

    # ------------------------------------------------------------------------------------------------- lifetime

    async def start(self) -> None:
        check_sdks()
        cfg = self.config
        try:
            backend_sock = socket.create_server((cfg.host, cfg.backend_port))
            frontend_sock = socket.create_server((cfg.host, cfg.frontend_port))
        except OSError as exc:
            raise DemoUnavailable(
                f"the demo shop cannot listen on {cfg.host}: {exc.strerror or exc} "
                "(--frontend-port/--backend-port choose its ports, 0 picks free ones)"
            ) from None
        with backend_sock, frontend_sock:
            self.backend_url = f"http://{loopback(cfg.host)}:{backend_sock.getsockname()[1]}"
            self.frontend_url = f"http://{loopback(cfg.host)}:{frontend_sock.getsockname()[1]}"
            self._procs = [self._spawn("backend", backend_sock), self._spawn("frontend", frontend_sock)]
        log.info(
            "demo shop: shop-frontend %s (GET /checkout, /health, /slow-io), shop-backend %s",
            self.frontend_url,
            self.backend_url,
        )
        log.info(
            "demo shop sends traces to %s/v1/traces (OTLP/HTTP) and CPU profiles to %s (Pyroscope push)",
            cfg.traces_to,
            cfg.profiles_to,
        )
        self._tasks.append(asyncio.create_task(self._watch()))
        if cfg.load:
            log.info("demo load: /checkout twice, /health and /slow-io every %g s", cfg.load_interval)
            self._tasks.append(
                asyncio.create_task(
                    run_load(self.frontend_url, self.backend_url, cfg.load_interval, self._stop, on_span=self._seen)
                )
            )
        if self.look_url:
            log.info(
                "look: %s/ lists the slowest requests per service once the first spans arrive (about a "
                "second); flame graphs fill in as CPU profiles arrive (every 10 s)",
                self.look_url,
            )

    def _spawn(self, role: str, sock: socket.socket) -> subprocess.Popen[bytes]:
        cfg = self.config
        env = {**DEMO_ENV_DEFAULTS, **self.environ}
        cmd = [
            sys.executable,
            "-m",
            "bridge.demo",
            "--role",
            role,
            "--fd",
            str(sock.fileno()),
            "--traces-to",
            cfg.traces_to,
            "--profiles-to",
            cfg.profiles_to,
            "--parent-pid",
            str(os.getpid()),
        ]
        if role == "frontend":
            cmd += ["--backend-url", self.backend_url]
        # a session of their own: Ctrl-C in a terminal (SIGINT to the foreground process group) reaches this process
        # only, which stops the load, then the services (they flush into a bridge that still serves), then itself
        return subprocess.Popen(cmd, env=env, pass_fds=(sock.fileno(),), start_new_session=True)

    async def stop(self) -> int:
        """Stop the load, then the services (SIGTERM; they flush); the highest exit code of a service, 0 if all
        stopped cleanly."""
        self._stop.set()
        for task in self._tasks:
            await task
        self._tasks.clear()
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_SECONDS
        while any(proc.poll() is None for proc in self._procs) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for proc in self._procs:
            if proc.poll() is None:
                log.warning("demo service pid %d did not stop within %g s; killing it", proc.pid, STOP_SECONDS)
                proc.kill()
                proc.wait()
        codes = [proc.returncode or 0 for proc in self._procs]
        return max((c for c in codes if c > 0), default=0)

    async def _watch(self) -> None:
        while not self._stop.is_set():
            ended = [proc for proc in self._procs if proc.poll() is not None]
            if ended:
                log.error("demo service pid %d exited with code %s", ended[0].pid, ended[0].returncode)
                self.exited.set()
                self._stop.set()
                return
            try:
                await asyncio.wait_for(self._stop.wait(), WATCH_SECONDS)
            except TimeoutError:
                pass

    def _seen(self, path: str, trace_id: str, span_id: str) -> None:
        if self.first_span is None and path == "/checkout":
            self.first_span = (trace_id, span_id)
            if self.look_url:
                log.info(
                    "look: %s/spans/%s/%s is the span page of one GET /checkout (refresh it once its profile "
                    "window is uploaded)",
                    self.look_url,
                    trace_id,
                    span_id,
                )
