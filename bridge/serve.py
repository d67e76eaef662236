"""Running the service: ``serve`` (one process, or the master of ``--workers``), its start-up lines and warnings,
and ``demo`` (the demo shop against a bridge). Called by ``bridge.cli`` once the settings are parsed; exit codes as
``bridge.cli`` documents them."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final

from bridge.config import ConfigError, Settings, load_toml
from bridge.errors import BridgeError, StoreDamaged

if TYPE_CHECKING:
    from aiohttp import web

    from bridge.demo.shop import DemoShop
    from bridge.workers import WorkerContext

log = logging.getLogger("bridge.cli")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


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
    stop = _stop_on_signals()
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
        return await _serve_worker(runner, worker, stop)
    return await _serve_site(runner, settings, stop, demo, environ)


async def _serve_worker(runner: web.AppRunner, worker: WorkerContext, stop: asyncio.Event) -> int:
    """One of ``serve --workers``'s processes: serve the master's socket (and the peers' one) until told to stop,
    then drain."""
    from aiohttp import web

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


async def _serve_site(
    runner: web.AppRunner, settings: Settings, stop: asyncio.Event, demo: bool, environ: Mapping[str, str] | None
) -> int:
    """The single process: listen on the configured address, say where, run the demo shop when asked, and serve until
    told to stop."""
    from aiohttp import web

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


def _stop_on_signals() -> asyncio.Event:
    """An event SIGINT and SIGTERM set (instead of their default action), on the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


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

    if args.to:
        default = args.to
    else:
        from bridge.commands.resolve import bridge_url

        default = bridge_url(settings)
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
    # the shop and its SDKs are imported once a bridge is known to answer: "no bridge" is said without them
    from bridge.demo.shop import DemoConfig, DemoShop, DemoUnavailable

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
    stop = _stop_on_signals()
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
