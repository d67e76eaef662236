"""The command line. ``main(argv) -> int``; nothing else parses argv or reads ``os.environ``.

Exit codes: 0 success; 1 a check or the service failed at run time; 2 bad usage or a bad setting (one line on
stderr naming the setting and its value).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bridge.config import ConfigError, Settings, load_toml, settings_help
from bridge.errors import BridgeError
from bridge.provisioning.settings import provision_help

log = logging.getLogger("bridge.cli")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="profile-bridge", description="From a slow trace span to its CPU profile, every time.")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (keys: setting names, lower case)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser(
        "serve",
        help="run the bridge",
        description="Run the bridge: Grafana's Tempo and Pyroscope data sources point at it. Proxy mode when a "
        "backend URL is configured, standalone (embedded store) otherwise.",
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--listen", metavar="HOST:PORT", help="PROFILE_BRIDGE_LISTEN (default 0.0.0.0:4041)")
    serve.add_argument("--pyroscope-url", metavar="URL", help="PROFILE_BRIDGE_PYROSCOPE_URL")
    serve.add_argument("--tempo-url", metavar="URL", help="PROFILE_BRIDGE_TEMPO_URL")
    serve.add_argument("--data-dir", metavar="DIR", help="PROFILE_BRIDGE_DATA_DIR (standalone store)")
    serve.add_argument("--otlp-grpc-listen", metavar="HOST:PORT", help="PROFILE_BRIDGE_OTLP_GRPC_LISTEN")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--standalone", action="store_true", help="force standalone mode (embedded store)")
    mode.add_argument("--proxy", action="store_true", help="force proxy mode (Tempo and Pyroscope)")

    prov = sub.add_parser(
        "provision",
        help="render Grafana provisioning files",
        description="Render Grafana provisioning for this bridge: data sources, dashboards provider, dashboards.",
        epilog=provision_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prov.add_argument("--out", metavar="DIR", required=True, help="directory to write into (created)")

    res = sub.add_parser("resolve", help="resolve one span to its profile and print the top frames")
    res.add_argument("trace_id", metavar="TRACE_ID")
    res.add_argument("span_id", metavar="SPAN_ID")
    res.add_argument("--scope", choices=("span", "request"), default="span")
    res.add_argument("--top", type=int, default=20, metavar="N")
    res.add_argument("--profile-type", metavar="ID", help="default: PROFILE_BRIDGE_PROFILE_TYPE")

    doc = sub.add_parser("doctor", help="check every hop from the application to the flame graph")
    doc.add_argument("--trace-id", metavar="T")
    doc.add_argument("--span-id", metavar="S")
    doc.add_argument("--expect-function", metavar="NAME")
    doc.add_argument("--profile-type", metavar="ID", help="default: PROFILE_BRIDGE_PROFILE_TYPE")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for attr, key in (
        ("listen", "LISTEN"),
        ("pyroscope_url", "PYROSCOPE_URL"),
        ("tempo_url", "TEMPO_URL"),
        ("data_dir", "DATA_DIR"),
        ("otlp_grpc_listen", "OTLP_GRPC_LISTEN"),
    ):
        value = getattr(args, attr, None)
        if value is not None:
            out["PROFILE_BRIDGE_" + key] = value
    if getattr(args, "standalone", False):
        out["PROFILE_BRIDGE_MODE"] = "standalone"
    if getattr(args, "proxy", False):
        out["PROFILE_BRIDGE_MODE"] = "proxy"
    return out


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    try:
        args = build_parser().parse_args(argv)
        file_values = load_toml(args.config) if args.config else None
        settings = Settings.from_env(env, file_values=file_values, overrides=_overrides(args))
    except _UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"profile-bridge: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from bridge.logs import configure

    configure(settings.log_level, settings.log_format)
    try:
        if args.command == "serve":
            return asyncio.run(serve(settings))
        if args.command == "provision":
            from bridge.provisioning.render import run_provision

            return int(run_provision(settings, Path(args.out), env))
        if args.command == "resolve":
            from bridge.report import run_resolve

            return int(run_resolve(
                settings, args.trace_id, args.span_id, scope=args.scope, top=args.top,
                profile_type=args.profile_type or settings.profile_type, out=sys.stdout,
            ))
        if args.command == "doctor":
            from bridge.doctor import run_doctor

            return int(run_doctor(
                settings, trace_id=args.trace_id, span_id=args.span_id, expect_function=args.expect_function,
                profile_type=args.profile_type or settings.profile_type, out=sys.stdout,
            ))
    except ConfigError as exc:
        print(f"profile-bridge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse's choices make this unreachable


async def serve(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM. A listen failure is one line and exit code 1."""
    from aiohttp import web

    from bridge.app import create_app

    app = create_app(settings)
    # auto_decompress=False: request bodies arrive as sent; pass-through streams them untouched and handlers undo
    # Content-Encoding themselves with a size limit (connect.decompress / upstream.proxy.read_body)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, auto_decompress=False)
    try:
        await runner.setup()
    except (OSError, BridgeError, ConfigError) as exc:
        print(f"profile-bridge: cannot start ({settings.mode} mode): {_one_line(exc)}", file=sys.stderr)
        await _quiet_cleanup(runner)
        return EXIT_FAILED
    site = web.TCPSite(runner, settings.listen_host, settings.listen_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        print(
            f"profile-bridge: cannot listen on {settings.listen_host}:{settings.listen_port}: {exc.strerror}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    log.info(
        "profile-bridge listening on http://%s:%d (%s mode)", settings.listen_host, settings.listen_port,
        settings.mode,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("profile-bridge stopping")
        await runner.cleanup()
    return EXIT_OK


async def _quiet_cleanup(runner: object) -> None:
    """Close whatever a failed start had opened (earlier cleanup contexts), without a second error report."""
    try:
        await runner.cleanup()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - the start already failed; say so once, in one line
        log.debug("cleanup after a failed start: %r", exc)


def _one_line(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, OSError) and exc.filename:
        text = f"{exc.filename}: {text}"
    return " ".join(text.split()) or type(exc).__name__
