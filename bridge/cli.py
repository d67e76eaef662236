"""The command line. ``main(argv) -> int``; nothing else parses argv or reads ``os.environ``.

Exit codes: 0 success; 1 a check or the service failed at run time; 2 bad usage or a bad setting (one line on
stderr naming the flag or setting and its value). ``profile-bridge`` without a command prints the usage, exit 2.
``--config FILE`` goes before or after the command.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bridge.config import FIELDS_BY_KEY, PREFIX, ConfigError, Settings, load_toml, settings_help
from bridge.parsing import parse_url
from bridge.provisioning.settings import provision_help

if TYPE_CHECKING:
    pass

from bridge.serve import EXIT_OK, EXIT_USAGE, demo, run_loop, run_serve

log = logging.getLogger("bridge.cli")


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
        return _dispatch(args, settings, env, overrides)
    except ConfigError as exc:
        print(f"profile-bridge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK


def _dispatch(args: argparse.Namespace, settings: Settings, env: Mapping[str, str], overrides: dict[str, str]) -> int:
    """Run the command the arguments name, with the settings parsed."""
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
