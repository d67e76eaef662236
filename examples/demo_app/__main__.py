"""``python -m examples.demo_app --frontend-port 8080 --backend-port 8081 [--load]``.

Starts ``shop-backend`` and ``shop-frontend`` as two processes (``--role`` runs just one), optionally drives them with
the load loop, and stops both on SIGTERM/SIGINT. Endpoints come from the environment: ``OTEL_EXPORTER_OTLP_ENDPOINT``
(OTLP/HTTP, default http://localhost:4318) and ``PYROSCOPE_SERVER_ADDRESS`` (default http://localhost:4040).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("demo")

STOP_SECONDS = 15.0  # how long the services get to flush and exit after SIGTERM


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m examples.demo_app", description=__doc__.split("\n\n")[0])
    parser.add_argument("--frontend-port", type=int, default=8080)
    parser.add_argument("--backend-port", type=int, default=8081)
    parser.add_argument("--host", default="127.0.0.1", help="address both services listen on (0.0.0.0 in a container)")
    parser.add_argument("--role", choices=("both", "frontend", "backend"), default="both")
    parser.add_argument("--backend-url", help="where the frontend finds the backend (default: 127.0.0.1:BACKEND_PORT)")
    parser.add_argument("--load", action="store_true", help="drive the frontend with the load loop")
    parser.add_argument("--load-interval", type=float, default=0.25, metavar="SECONDS", help="pause between rounds")
    return parser


def _child(role: str, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "examples.demo_app", "--role", role, "--host", args.host,
           "--frontend-port", str(args.frontend_port), "--backend-port", str(args.backend_port)]
    if args.backend_url:
        cmd += ["--backend-url", args.backend_url]
    return subprocess.Popen(cmd, env=env)


async def _supervise(args: argparse.Namespace) -> int:
    from examples.demo_app.load import run_load

    children = [_child("backend", args), _child("frontend", args)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def watch() -> None:
        while not stop.is_set():
            if any(child.poll() is not None for child in children):
                log.error("a demo service exited; stopping")
                stop.set()
            await asyncio.sleep(0.2)

    tasks: list[asyncio.Task[object]] = [asyncio.create_task(watch())]
    if args.load:
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        frontend, backend = f"http://{host}:{args.frontend_port}", f"http://{host}:{args.backend_port}"
        tasks.append(asyncio.create_task(run_load(frontend, args.backend_url or backend, args.load_interval, stop)))
    await stop.wait()
    for task in tasks:
        await task
    failed = any(child.poll() not in (None, 0) for child in children)
    for child in children:
        if child.poll() is None:
            child.terminate()
    # wait on the event loop, not in a blocking Popen.wait(timeout): the services flush spans and profiles on the way
    deadline = loop.time() + STOP_SECONDS
    while any(child.poll() is None for child in children) and loop.time() < deadline:
        await asyncio.sleep(0.1)
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    if args.role == "both":
        return asyncio.run(_supervise(args))
    from examples.demo_app.service import BACKEND, FRONTEND, run_service

    service = FRONTEND if args.role == "frontend" else BACKEND
    port = args.frontend_port if args.role == "frontend" else args.backend_port
    backend_url = args.backend_url or f"http://127.0.0.1:{args.backend_port}"
    run_service(service, args.host, port, backend_url, os.environ)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
