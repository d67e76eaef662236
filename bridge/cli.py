"""The command line. ``main(argv) -> int``; nothing else parses argv or reads ``os.environ``.

Exit codes: 0 success; 1 a check or the service failed at run time; 2 bad usage or a bad setting (one line on
stderr naming the flag or setting and its value). ``profile-bridge`` without a command prints the usage, exit 2.
``--config FILE`` goes before or after the command.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bridge.config import FIELDS_BY_KEY, PREFIX, ConfigError, Settings, load_toml, parse_url, settings_help
from bridge.errors import BridgeError, StoreDamaged
from bridge.provisioning.settings import provision_help

if TYPE_CHECKING:
    from bridge.demo.shop import DemoShop
    from bridge.workers import WorkerContext

log = logging.getLogger("bridge.cli")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DESCRIPTION: Final = "From a slow trace span to its CPU profile, every time."
CONFIG_HELP: Final = "TOML settings file (keys: setting names in lower case, no prefix); before or after the command"
# serve's flags: argparse attribute -> environment key (the settings table names the flag of each)
SERVE_FLAGS: Final = {
    spec.flag.removeprefix("--").replace("-", "_"): spec.key for spec in FIELDS_BY_KEY.values() if spec.flag
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: {message}")


class _UsageError(Exception):
    pass


def _url(value: str) -> str:
    try:
        return parse_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r}: not a port (0-65535; 0 picks a free one)")
    return port


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{value!r}: not a positive number of seconds")
    return seconds


def _wrap(text: str) -> str:
    """A description for a parser whose epilog keeps its own line breaks (RawDescriptionHelpFormatter)."""
    return textwrap.fill(text, 100)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    # SUPPRESS: without --config after the command, the one given before it (if any) stays
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP)
    parser = _Parser(
        prog="profile-bridge",
        description=DESCRIPTION,
        epilog="Run `profile-bridge COMMAND --help` for a command's flags and settings. Start here: "
        "`profile-bridge serve --demo` runs a standalone bridge with a demo shop sending to it.",
    )
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="run the bridge",
        description=_wrap(
            "Run the bridge: Grafana's Tempo and Pyroscope data sources point at it, SDKs send to it, "
            "its pages show each span's profile. Proxy mode when a backend URL is configured (Tempo and Pyroscope hold "
            "the data), standalone otherwise (an embedded store fed by OTLP and Pyroscope SDK ingest). Flags beat "
            "the environment, which beats the --config file."
        ),
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="PROFILE_BRIDGE_LISTEN (default 127.0.0.1:4041; 0.0.0.0:4041 for every interface)",
    )
    serve.add_argument("--pyroscope-url", metavar="URL", help="PROFILE_BRIDGE_PYROSCOPE_URL")
    serve.add_argument("--tempo-url", metavar="URL", help="PROFILE_BRIDGE_TEMPO_URL")
    serve.add_argument("--data-dir", metavar="DIR", help="PROFILE_BRIDGE_DATA_DIR (standalone store)")
    serve.add_argument(
        "--workers",
        metavar="N",
        help="PROFILE_BRIDGE_WORKERS: processes sharing the port (default auto: one per processor; proxy mode only)",
    )
    serve.add_argument(
        "--otlp-grpc-listen", metavar="HOST:PORT", help="PROFILE_BRIDGE_OTLP_GRPC_LISTEN (default 127.0.0.1:4317)"
    )
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--standalone", action="store_true", help="force standalone mode (embedded store)")
    mode.add_argument("--proxy", action="store_true", help="force proxy mode (Tempo and Pyroscope)")
    serve.add_argument(
        "--demo",
        action="store_true",
        help="also run the demo shop (two services, stock OpenTelemetry and Pyroscope SDKs) with its "
        "load loop, sending to this bridge; standalone mode only",
    )

    prov = sub.add_parser(
        "provision",
        parents=[common],
        help="render Grafana provisioning files",
        description=_wrap(
            "Render Grafana provisioning for this bridge into a directory: data sources (Tempo and "
            "Profiles through the bridge), the dashboards provider and the dashboards. Grafana must reach the bridge "
            "at --bridge-url (or PROFILE_BRIDGE_PROVISION_BRIDGE_URL); --compose renders for docker-compose.yaml's "
            "service names instead. The Grafana app plugin is enabled only with --app-plugin (or --compose)."
        ),
        epilog=provision_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prov.add_argument("--out", metavar="DIR", required=True, help="directory to write into (created)")
    prov.add_argument(
        "--bridge-url",
        metavar="URL",
        type=_url,
        help="the bridge's base URL as Grafana's server reaches it (PROFILE_BRIDGE_PROVISION_BRIDGE_URL)",
    )
    prov.add_argument(
        "--compose",
        action="store_true",
        help="render for the docker compose stack: bridge:4041, tempo:3200, pyroscope:4040, "
        "prometheus:9090 unless set otherwise; enables the app plugin (its Grafana image carries it)",
    )
    prov.add_argument(
        "--app-plugin",
        action="store_true",
        help="also enable the Grafana app plugin (plugins/profile-bridge-app.yaml): only for a Grafana that has it "
        "installed, which otherwise refuses to start; without this flag a plugin file an earlier render wrote "
        "is removed",
    )

    res = sub.add_parser(
        "resolve",
        parents=[common],
        help="resolve one span to its profile and print the top frames",
        description="Resolve one span to its CPU profile (linked, local-root, time-window or none) and print the "
        "mode, the reason and the top functions by self and total time. Proxy mode asks Tempo and Pyroscope; "
        "standalone mode asks the running bridge at PROFILE_BRIDGE_LISTEN. Exit 0 with samples, 1 for mode none "
        "or a backend failure, 2 for a bad argument.",
    )
    res.add_argument("trace_id", metavar="TRACE_ID")
    res.add_argument("span_id", metavar="SPAN_ID")
    res.add_argument(
        "--scope",
        choices=("span", "request"),
        default="span",
        help="request: add what other services did on the span's behalf",
    )
    res.add_argument("--top", type=int, default=20, metavar="N", help="functions listed (default 20)")
    res.add_argument("--profile-type", metavar="ID", help="default: PROFILE_BRIDGE_PROFILE_TYPE")
    res.add_argument(
        "--compare",
        action="store_true",
        help="also compare the span with its endpoint's usual requests: the most unusual functions",
    )
    res.add_argument(
        "--window",
        metavar="DURATION",
        default="1h",
        help="--compare: the usual requests started within this window around the span (default 1h)",
    )

    doc = sub.add_parser(
        "doctor",
        parents=[common],
        help="check every hop from the application to the flame graph",
        description="Check every hop from the application to the flame graph (Tempo, the trace, the span, its "
        "pyroscope.profile.id, Pyroscope, the profile type, linked samples, an expected function) and print the "
        "fix under each failure. Without ids it picks a recent root span whose profile has had time to arrive. "
        "Exit 1 when a check fails.",
    )
    doc.add_argument("--trace-id", metavar="T")
    doc.add_argument("--span-id", metavar="S")
    doc.add_argument("--expect-function", metavar="NAME", help="a function that must be in the span's profile")
    doc.add_argument("--profile-type", metavar="ID", help="default: PROFILE_BRIDGE_PROFILE_TYPE")
    doc.add_argument(
        "--datasources",
        metavar="PATH",
        type=Path,
        help="Grafana's data source provisioning file or directory to check the wiring in (default: "
        "/etc/grafana/provisioning/datasources when it exists)",
    )
    doc.add_argument(
        "--grafana-token-file",
        metavar="FILE",
        type=Path,
        help="a Grafana token that may read data sources, to read them from PROFILE_BRIDGE_GRAFANA_URL",
    )

    from bridge.commands.store import add_parser as add_store_parser

    add_store_parser(sub, common)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the demo shop and send its traces and profiles to a bridge",
        description="Run the demo shop (shop-frontend and shop-backend, instrumented with the stock OpenTelemetry "
        "SDK, pyroscope-io and pyroscope-otel) with a load loop, sending traces (OTLP/HTTP) and CPU profiles "
        "(Pyroscope push) to the running standalone bridge at PROFILE_BRIDGE_LISTEN, or where --to, --traces-to and "
        "--profiles-to say. Every span of the demo resolves one of the four ways: linked, local-root, time-window, "
        "none. Ctrl-C stops it; the services flush their last spans and profile window first.",
    )
    demo.add_argument(
        "--to",
        type=_url,
        metavar="URL",
        help="a standalone bridge that takes both (default: the bridge at PROFILE_BRIDGE_LISTEN)",
    )
    demo.add_argument(
        "--traces-to",
        type=_url,
        metavar="URL",
        help="OTLP/HTTP receiver for the traces, e.g. Tempo's http://tempo:4318 (/v1/traces is added)",
    )
    demo.add_argument(
        "--profiles-to",
        type=_url,
        metavar="URL",
        help="Pyroscope (push API) for the CPU profiles, e.g. http://pyroscope:4040",
    )
    demo.add_argument("--host", default="127.0.0.1", help="address the shop listens on (0.0.0.0 in a container)")
    demo.add_argument("--frontend-port", type=_port, default=0, metavar="PORT", help="default: a free port")
    demo.add_argument("--backend-port", type=_port, default=0, metavar="PORT", help="default: a free port")
    demo.add_argument(
        "--no-load",
        dest="load",
        action="store_false",
        help="no load loop: send requests yourself (curl FRONTEND/checkout)",
    )
    demo.add_argument(
        "--load-interval",
        type=_seconds,
        default=0.25,
        metavar="SECONDS",
        help="pause between load rounds (default 0.25)",
    )
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for attr, key in SERVE_FLAGS.items():
        value = getattr(args, attr, None)
        if value is not None:
            out[key] = value
    if getattr(args, "standalone", False):
        out[PREFIX + "MODE"] = "standalone"
    if getattr(args, "proxy", False):
        out[PREFIX + "MODE"] = "proxy"
    return out


def _flag_error(exc: ConfigError, overrides: Mapping[str, str]) -> str:
    """A bad value that came from a flag is reported under the flag's name (and its setting's)."""
    spec = FIELDS_BY_KEY.get(exc.key)
    if spec is not None and spec.flag and overrides.get(exc.key) == exc.value:
        return f"{spec.flag} has value {exc.value!r}: {exc.reason} (the flag of {exc.key})"
    return str(exc)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    parser = build_parser()
    overrides: dict[str, str] = {}
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        overrides = _overrides(args)
        file_values = load_toml(args.config) if args.config else None
        settings = Settings.from_env(env, file_values=file_values, overrides=overrides)
        if args.command == "serve" and args.demo:
            _check_demo_mode(settings, args)
    except _UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"profile-bridge: {_flag_error(exc, overrides)}", file=sys.stderr)
        return EXIT_USAGE

    from bridge.logs import configure

    configure(settings.log_level, settings.log_format)
    try:
        if args.command == "serve":
            return run_serve(settings, args, env, overrides)
        if args.command == "provision":
            from bridge.provisioning.render import run_provision

            return int(
                run_provision(
                    settings,
                    Path(args.out),
                    env,
                    bridge_url=args.bridge_url,
                    compose=args.compose,
                    app_plugin=args.app_plugin,
                )
            )
        if args.command == "resolve":
            from bridge.commands.resolve import run_resolve

            return int(
                run_resolve(
                    settings,
                    args.trace_id,
                    args.span_id,
                    scope=args.scope,
                    top=args.top,
                    profile_type=args.profile_type or settings.profile_type,
                    out=sys.stdout,
                    compare_window=args.window if args.compare else None,
                )
            )
        if args.command == "doctor":
            from bridge.commands.doctor import run_doctor

            return int(
                run_doctor(
                    settings,
                    trace_id=args.trace_id,
                    span_id=args.span_id,
                    expect_function=args.expect_function,
                    profile_type=args.profile_type or settings.profile_type,
                    out=sys.stdout,
                    datasources=args.datasources,
                    grafana_token_file=args.grafana_token_file,
                )
            )
        if args.command == "demo":
            return run_loop(demo(settings, args, env))
        if args.command == "store":
            from bridge.commands.store import run_store

            return run_store(settings, args.store_action, args.data_dir, sys.stdout, sys.stderr)
    except ConfigError as exc:
        print(f"profile-bridge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse's choices make this unreachable


def _check_demo_mode(settings: Settings, args: argparse.Namespace) -> None:
    """``serve --demo`` feeds the embedded store without credentials: refuse proxy mode (saying what selected it) and
    authentication, in one line."""
    if settings.auth_tokens:
        raise _UsageError(
            "profile-bridge serve: --demo sends the demo shop's data without a token, but PROFILE_BRIDGE_AUTH_TOKENS"
            "_FILE / PROFILE_BRIDGE_AUTH_TOKENS turn authentication on: run the demo with a bridge that has none"
        )
    if settings.is_standalone:
        return
    if args.proxy:
        why = "--proxy"
    elif PREFIX + "MODE" in settings.explicit:
        why = "PROFILE_BRIDGE_MODE=proxy"
    else:
        why = " and ".join(k for k in (PREFIX + "TEMPO_URL", PREFIX + "PYROSCOPE_URL") if k in settings.explicit)
        why += " set"
    raise _UsageError(
        f"profile-bridge serve: --demo sends the demo shop's data to this bridge's embedded store, but {why} "
        "selects proxy mode: drop it (or add --standalone), or run `profile-bridge demo --traces-to TEMPO_OTLP_HTTP "
        "--profiles-to PYROSCOPE` beside a proxy bridge"
    )


# --------------------------------------------------------------------------------------------- serve


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _display_base(host: str, port: int) -> str:
    """The URL a person on this machine opens for a server listening on ``host``."""
    if host in ("", "0.0.0.0", "::", "127.0.0.1", "::1", "localhost"):
        return f"http://localhost:{port}"
    return f"http://{_host_port(host, port)}"


def _start_failure(settings: Settings, exc: BaseException) -> str:
    text = _one_line(exc)
    if isinstance(exc, OSError) and text.startswith("cannot listen for OTLP gRPC"):
        return (
            f"{text}: --otlp-grpc-listen HOST:PORT (PROFILE_BRIDGE_OTLP_GRPC_LISTEN) moves the OTLP gRPC "
            "receiver, PROFILE_BRIDGE_OTLP_GRPC_ENABLED=false turns it off"
        )
    return f"cannot start ({settings.mode} mode): {text}"


def run_serve(
    settings: Settings, args: argparse.Namespace, env: Mapping[str, str], overrides: Mapping[str, str]
) -> int:
    """``serve``: one process, or a master and its workers (``bridge.workers``) sharing the port."""
    from bridge import workers

    workers.tune_allocator()
    count, note = workers.effective_count(settings, settings.workers)
    if note:
        log.warning("%s", note)
    if count == 1 or args.demo:
        return run_loop(serve(settings, demo=args.demo, environ=env))
    config = getattr(args, "config", None)

    def reload() -> Settings:
        return Settings.from_env(env, file_values=load_toml(config) if config else None, overrides=overrides)

    host, port = settings.listen_host, settings.listen_port
    try:
        taken = workers.in_use_by_another(host, port)
        if taken is not None:
            raise taken
        sockets = workers.bind_sockets(host, port, count)
    except OSError as exc:
        print(_listen_failure(host, port, exc), file=sys.stderr)
        return EXIT_FAILED
    port = sockets[0].getsockname()[1]
    base = _display_base(host, port)

    def on_ready() -> None:
        log.info(
            "profile-bridge listening on http://%s (%s mode, %s): pages at %s/; %d worker processes (pid %d: "
            "SIGHUP restarts them, SIGTERM stops)",
            _host_port(host, port),
            settings.mode,
            _auth_words(settings),
            base,
            count,
            os.getpid(),
        )
        _log_mode(settings, base)
        _warn_if_exposed(settings, port)

    try:
        with workers.metrics_directory() as metrics_dir:
            master = workers.Master(settings, sockets, _worker_main, reload, metrics_dir)
            code = master.run(on_ready)
    finally:
        for sock in sockets:
            sock.close()
    if code:  # the worker said why, in its one line
        log.error("a worker process failed to start: every worker stopped")
    return code


def _worker_main(settings: Settings, worker: WorkerContext) -> int:
    return run_loop(serve(settings, worker=worker))


def run_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on uvloop's event loop when it is installed (it serves a pass-through call in about two thirds
    of asyncio's time: docs/benchmarks.md), else on asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def _listen_failure(host: str, port: int, exc: OSError) -> str:
    reason = os.strerror(exc.errno) if exc.errno else _one_line(exc)
    return (
        f"profile-bridge: cannot listen on {_host_port(host, port)}: {reason}: "
        "--listen HOST:PORT (PROFILE_BRIDGE_LISTEN) moves the bridge's HTTP port"
    )


async def _watch_master(pid: int, stop: asyncio.Event) -> None:
    """A worker whose master is gone (killed without a chance to stop it) stops by itself."""
    while not stop.is_set():
        if os.getppid() != pid:
            log.warning("the master process %d is gone: this worker stops", pid)
            stop.set()
            return
        await asyncio.sleep(1.0)


async def serve(
    settings: Settings,
    *,
    demo: bool = False,
    environ: Mapping[str, str] | None = None,
    worker: WorkerContext | None = None,
) -> int:
    """Run until SIGINT/SIGTERM. A listen failure is one line naming the setting that moves the port, exit code 1.
    With ``demo`` the demo shop runs beside it, sending to it, and is stopped (and flushed) before the bridge.
    ``worker``: one of ``serve --workers``'s processes, serving the socket its master made."""
    from aiohttp import web

    from bridge.app import create_app

    if demo:
        from bridge.demo.shop import DemoUnavailable, check_sdks

        try:
            check_sdks()
        except DemoUnavailable as exc:
            print(f"profile-bridge serve: --demo: {exc}", file=sys.stderr)
            return EXIT_USAGE
    # installed first: a SIGTERM while starting still stops the bridge cleanly (exit 0), not by the default action
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    app = create_app(settings)
    if worker is not None and len(worker.peers) > 1:
        from bridge.upstream import peers

        peers.setup(app, peers.Peers(worker.slot, worker.peers))
    # auto_decompress=False: request bodies arrive as sent; pass-through streams them untouched and handlers undo
    # Content-Encoding themselves with a size limit (connect.decompress / upstream.proxy.read_body)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, auto_decompress=False)
    try:
        await runner.setup()
    except StoreDamaged as exc:  # one ERROR line, saying what to do (bridge.store.database)
        log.error("%s", exc.message)
        await _quiet_cleanup(runner)
        return EXIT_FAILED
    except (OSError, BridgeError, ConfigError) as exc:
        print(f"profile-bridge: {_start_failure(settings, exc)}", file=sys.stderr)
        await _quiet_cleanup(runner)
        return EXIT_FAILED
    if worker is not None:
        worker_site = web.SockSite(runner, worker.sock)
        await worker_site.start()
        peer_site = web.UnixSite(runner, worker.peers[worker.slot]) if len(worker.peers) > 1 else None
        if peer_site is not None:  # the other workers send it what this one owns (bridge.upstream.peers)
            await peer_site.start()
        worker.ready()
        log.debug("worker %d (pid %d) serves", worker.slot, os.getpid())
        watch = asyncio.create_task(_watch_master(worker.master_pid, stop))
        try:
            await stop.wait()
        finally:
            watch.cancel()
            # stop accepting, answer what still arrives on open connections with Connection: close, and wait for
            # the clients to close them (bridge.drain): the worker replacing this one serves everything new; the other
            # workers serve what they would have sent here themselves (bridge.upstream.peers)
            from bridge.drain import drain

            if peer_site is not None:
                await peer_site.stop()
            await drain(runner, worker_site)
            await runner.cleanup()
        return EXIT_OK
    site = web.TCPSite(runner, settings.listen_host, settings.listen_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        print(_listen_failure(settings.listen_host, settings.listen_port, exc), file=sys.stderr)
        return EXIT_FAILED
    port = int(runner.addresses[0][1]) if runner.addresses else settings.listen_port
    base = _display_base(settings.listen_host, port)
    log.info(
        "profile-bridge listening on http://%s (%s mode, %s): pages at %s/",
        _host_port(settings.listen_host, port),
        settings.mode,
        _auth_words(settings),
        base,
    )
    _log_mode(settings, base)
    _warn_if_exposed(settings, port)
    shop = None
    quiet = _QuietIngest()
    if demo:
        # two ingest requests a second would bury the lines that say where to look
        logging.getLogger("bridge.http").addFilter(quiet)
        log.info("--demo: successful SDK ingest requests (POST /v1/traces, Push) are not logged while the demo runs")
        shop = await _start_demo(settings, port, base, environ or {})
        if shop is None:
            await runner.cleanup()
            return EXIT_FAILED
    try:
        await stop.wait()
    finally:
        log.info("profile-bridge stopping")
        if shop is not None:
            # the bridge still serves while the demo's services flush into it
            if code := await shop.stop():
                log.warning("the demo shop stopped with exit code %d", code)
        await runner.cleanup()
        logging.getLogger("bridge.http").removeFilter(quiet)
    return EXIT_OK


def _auth_words(settings: Settings) -> str:
    tokens = len(settings.auth_tokens)
    return f"authentication on: {tokens} token{'s' if tokens != 1 else ''}" if tokens else "no authentication"


def _reachable_from_elsewhere(host: str) -> bool:
    """Whether a listen address accepts connections from other hosts (anything but loopback)."""
    try:
        return not ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host != "localhost"  # a host name: whatever it resolves to, assume it is reachable


def _warn_if_exposed(settings: Settings, port: int) -> None:
    """One WARNING per listener reachable from other hosts while no token is configured."""
    if settings.auth_tokens:
        return
    exposed = (
        [f"HTTP on {_host_port(settings.listen_host, port)}"] if _reachable_from_elsewhere(settings.listen_host) else []
    )
    grpc_host, grpc_port = settings.otlp_grpc_listen
    if settings.otlp_grpc_enabled and _reachable_from_elsewhere(grpc_host):
        exposed.append(f"OTLP gRPC on {_host_port(grpc_host, grpc_port)}")
    if exposed:
        log.warning(
            "%s: reachable from other hosts WITHOUT AUTHENTICATION — anyone who can reach it reads and "
            "writes every tenant's data. Set PROFILE_BRIDGE_AUTH_TOKENS_FILE (docs/security.md), or listen on "
            "127.0.0.1",
            " and ".join(exposed),
        )


class _QuietIngest(logging.Filter):
    """Drops the request log lines of successful SDK ingest (the demo's own traffic)."""

    ROUTES: Final = frozenset({"/v1/traces", "/push.v1.PusherService/Push"})

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, "fields", None)
        route = fields.get("route") if isinstance(fields, dict) else None
        return not (route in self.ROUTES and record.levelno <= logging.INFO and " 200 " in record.getMessage())


def _log_mode(settings: Settings, base: str) -> None:
    if not settings.is_standalone:
        log.info(
            "proxy mode: Tempo %s (PROFILE_BRIDGE_TEMPO_URL), Pyroscope %s (PROFILE_BRIDGE_PYROSCOPE_URL)",
            settings.tempo_url,
            settings.pyroscope_url,
        )
        return
    grpc = f", OTLP gRPC on {_host_port(*settings.otlp_grpc_listen)}" if settings.otlp_grpc_enabled else ""
    log.info(
        "standalone mode: store in %s; send OTLP traces to %s/v1/traces%s, Pyroscope SDK profiles to %s",
        settings.data_dir,
        base,
        grpc,
        base,
    )


async def _start_demo(settings: Settings, port: int, base: str, environ: Mapping[str, str]) -> DemoShop | None:
    from bridge.demo.shop import DemoConfig, DemoShop, DemoUnavailable, loopback

    target = f"http://{loopback(settings.listen_host)}:{port}"
    shop = DemoShop(DemoConfig(traces_to=target, profiles_to=target), environ, look_url=base)
    try:
        await shop.start()
    except DemoUnavailable as exc:
        print(f"profile-bridge serve: --demo: {exc}", file=sys.stderr)
        return None
    return shop


# --------------------------------------------------------------------------------------------- demo


async def demo(settings: Settings, args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``profile-bridge demo``: the demo shop until SIGINT/SIGTERM, sending to a bridge or to Tempo and Pyroscope."""
    import aiohttp

    from bridge.commands.resolve import bridge_url
    from bridge.demo.shop import DemoConfig, DemoShop, DemoUnavailable

    default = args.to or bridge_url(settings)
    traces_to, profiles_to = args.traces_to or default, args.profiles_to or default
    look = ""
    if args.traces_to is None and args.profiles_to is None:  # a bridge takes both: it must be there, and standalone
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5, connect=2)) as session,
                session.get(f"{traces_to}/readyz") as resp,
            ):
                doc = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            print(
                f"profile-bridge demo: no bridge answers at {traces_to} ({type(exc).__name__}): start "
                "`profile-bridge serve` first, or run `profile-bridge serve --demo`; --to URL names another bridge",
                file=sys.stderr,
            )
            return EXIT_FAILED
        if isinstance(doc, dict) and doc.get("mode") == "proxy":
            print(
                f"profile-bridge demo: the bridge at {traces_to} runs in proxy mode and stores nothing itself: "
                "send the demo to Tempo and Pyroscope with --traces-to and --profiles-to",
                file=sys.stderr,
            )
            return EXIT_FAILED
        look = traces_to.replace("://127.0.0.1:", "://localhost:")
    config = DemoConfig(
        traces_to=traces_to,
        profiles_to=profiles_to,
        host=args.host,
        frontend_port=args.frontend_port,
        backend_port=args.backend_port,
        load=args.load,
        load_interval=args.load_interval,
    )
    shop = DemoShop(config, environ, look_url=look)
    try:
        await shop.start()
    except DemoUnavailable as exc:
        print(f"profile-bridge demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopped = asyncio.create_task(stop.wait())
    exited = asyncio.create_task(shop.exited.wait())
    await asyncio.wait({stopped, exited}, return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, exited):
        task.cancel()
    log.info("demo stopping: the services flush their last spans and profile window")
    code = await shop.stop()
    return EXIT_FAILED if shop.exited.is_set() or code else EXIT_OK


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
