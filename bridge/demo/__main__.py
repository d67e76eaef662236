"""``python -m bridge.demo --role frontend|backend --fd N --traces-to URL --profiles-to URL``: one demo service.

Started by ``bridge.demo.shop.DemoShop`` with its listening socket inherited as file descriptor ``N``; users run
``profile-bridge demo`` or ``profile-bridge serve --demo`` instead. ``--host``/``--port`` listen without a socket from
the parent (for running one service by hand).
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bridge.demo", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--role", choices=("frontend", "backend"), required=True)
    parser.add_argument("--fd", type=int, help="listening socket inherited from the supervisor")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--traces-to", required=True, metavar="URL", help="OTLP/HTTP base URL (…/v1/traces is added)")
    parser.add_argument("--profiles-to", required=True, metavar="URL", help="Pyroscope push API base URL")
    parser.add_argument("--backend-url", default="", help="where the frontend finds shop-backend")
    parser.add_argument("--parent-pid", type=int, default=0, help="stop when this process is gone")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    from bridge.demo.service import BACKEND, FRONTEND, run_service

    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        sock = socket.create_server((args.host, args.port))
    service = FRONTEND if args.role == "frontend" else BACKEND
    run_service(
        service, sock, args.backend_url, args.traces_to.rstrip("/") + "/v1/traces", args.profiles_to, args.parent_pid
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
