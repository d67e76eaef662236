"""``serve --workers N``: one master process, N worker processes, one port.

- **Sockets.** The master binds one listening socket per worker slot, all on the same address with ``SO_REUSEPORT``
  (the kernel spreads new connections over them by a hash of the connection), and keeps them open for its whole
  life. A worker serves its slot's socket. Because the master holds the sockets, a worker that is restarted or
  replaced never closes one: connections that arrive meanwhile wait in the slot's accept queue instead of being
  refused. (One shared socket would leave the balance to whichever worker's accept loop wakes first: asyncio
  accepts up to a hundred connections per wake-up, so 32 persistent clients could all land on one worker.)
- **Workers** are forked from the master before it has imported the app, started an event loop or a thread: each
  imports the app itself, so a restart also picks up code installed since. A worker tells the master it serves by
  writing one byte to a pipe.
- **Signals.** SIGTERM or SIGINT: every worker stops gracefully (stops accepting, finishes what it serves, closes
  idle connections), then the master exits 0. SIGHUP: the settings are read again (the ``--config`` file and the
  flags given at start; the environment as it was) and the workers are replaced one slot at a time — the new
  worker serves before the old one is told to stop. A worker that dies is started again, after a back-off.
- **Once per bridge.** The OTLP gRPC receiver (its own port, bound without ``SO_REUSEPORT``) and the pprof puller
  (each target scraped once, not once per worker) run in slot 0 only. On SIGHUP slot 0 is replaced like the others —
  the new worker serves HTTP first — and its gRPC receiver binds the port as soon as the old worker, which stops its
  receiver first when told to stop, lets go of it (``Settings.otlp_grpc_wait``; exporters retry meanwhile).
- **Zero loss.** A worker told to stop drains (``bridge.drain``): it stops accepting, answers what still arrives on
  its keep-alive connections with ``Connection: close`` and waits for its clients to close them; new connections
  wait in the slot's socket for the new worker. No request in flight is lost (``tests/proxy/test_reload.py``).
- **One trace, one worker.** Each worker also serves its slot's Unix socket in the run directory, and a request
  about a trace goes to the worker that owns it (``bridge.upstream.peers``): each trace is fetched from Tempo once
  per bridge, however many workers it has.
- **Metrics.** Every worker writes its counters and histograms to files in one directory (prometheus_client's
  multiprocess mode), and ``/metrics`` on any worker answers the sum over all of them, so a scraper on the shared
  port sees one bridge whose counters only go up, whichever worker answers (``bridge.metrics``).
- **Standalone mode runs one process**: the embedded SQLite store has one writer thread with group commit and
  in-process state (series and stack ids, retention); several processes writing it would race each other through
  SQLite's file lock and lose the group commit. ``--workers`` applies to proxy mode, where the bridge holds no data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from bridge.config import ConfigError, Settings

log = logging.getLogger("bridge.workers")

READY: Final = b"R"
READY_TIMEOUT_S: Final = 60.0  # a worker that has not started serving by then is taken as failed
STOP_GRACE_S: Final = 30.0  # after SIGTERM, a worker has this long to finish before SIGKILL
BACKOFF_S: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # before starting a slot again after its worker died
STABLE_S: Final = 30.0  # a worker that lived this long resets its slot's back-off
METRICS_DIR_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client reads it (its multiprocess mode)


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """What a worker process is given: its slot, the slot's listening socket, the master's pid (a worker whose
    master is gone stops by itself), the callback that tells the master it serves, and every slot's peer socket
    path (``bridge.upstream.peers``: a worker serves its own there too)."""

    slot: int
    sock: socket.socket
    master_pid: int
    ready: Callable[[], None]
    peers: tuple[str, ...] = ()


# what a worker runs: (its settings, its context) -> exit code
WorkerMain = Callable[[Settings, WorkerContext], int]


def default_count() -> int:
    """The processors this process may run on (a container's CPU set; a cgroup quota is not seen)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def effective_count(settings: Settings, asked: int | None) -> tuple[int, str]:
    """How many worker processes ``serve`` runs, and why when that is not what was asked: 0 (or None) asks for one
    per processor; standalone mode always runs one (the store has one writer)."""
    want = asked or default_count()
    if settings.is_standalone:
        if asked and asked > 1:
            return 1, (
                f"standalone mode runs one process (the embedded store has one writer): --workers {asked} "
                "is for proxy mode"
            )
        return 1, ""
    return want, ""


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on ``host:port`` in one ``SO_REUSEPORT`` group. Port 0: the first picks a free
    port, the others join it. Raises ``OSError`` (the caller reports it in one line)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    out: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if host == "::" else 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.listen(1024)
            sock.setblocking(False)
    except OSError:
        for sock in out:
            sock.close()
        raise
    return out


def in_use_by_another(host: str, port: int) -> OSError | None:
    """``SO_REUSEPORT`` lets a second process of the same user bind a port a bridge (or anything started with that
    option) already listens on — and share its connections. Refuse that the way a plain bind would: try a plain
    bind first. ``None`` when the port is free (or 0)."""
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc
    return None


@dataclass(slots=True)
class _Worker:
    slot: int
    pid: int
    ready_fd: int | None  # the read end of its ready pipe, until it has said so
    started: float
    ready: bool = False
    stopping: bool = False
    stop_sent: float = 0.0


@dataclass(slots=True)
class _Restart:
    """A rolling restart in progress: the slots still to replace, and the worker being replaced now."""

    settings: Settings
    slots: list[int]
    old: _Worker | None = None  # the worker of the slot being replaced (stopped once its successor serves)
    new: _Worker | None = None


@dataclass(slots=True)
class Master:
    """Runs the workers until SIGTERM/SIGINT. ``reload`` gives fresh settings on SIGHUP (raises ConfigError when they
    are bad: the workers then keep running as they are)."""

    settings: Settings
    sockets: list[socket.socket]
    run_worker: WorkerMain
    reload: Callable[[], Settings]
    metrics_dir: str
    workers: dict[int, _Worker] = field(default_factory=dict)  # by pid
    _stop: bool = False
    _hup: bool = False
    _restart: _Restart | None = None
    _backoff: dict[int, int] = field(default_factory=dict)
    _respawn_at: dict[int, float] = field(default_factory=dict)
    _wake_r: int = -1

    # ------------------------------------------------------------------------------------------- life

    def run(self, on_ready: Callable[[], None]) -> int:
        """Start every slot, call ``on_ready`` once all serve, run until told to stop. 0, or 1 when the first
        workers could not start."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self._wake_r = wake_r
        old_wakeup = signal.set_wakeup_fd(wake_w)
        previous = {
            sig: signal.signal(sig, self._on_signal)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
        }
        try:
            if not self._start_all():
                self._stop_all()
                return 1
            on_ready()
            while not self._stop:
                self._step(1.0)
            log.info("profile-bridge stopping: %d workers finish what they serve", len(self.workers))
            self._stop_all()
            return 0
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for fd in (wake_r, wake_w):
                os.close(fd)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self._stop = True
        elif signum == signal.SIGHUP:
            self._hup = True

    def _start_all(self) -> bool:
        for slot in range(len(self.sockets)):
            self._spawn(slot, self.settings)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(w.ready for w in self.workers.values()):
            if self._stop or time.monotonic() > deadline:
                return False
            self._wait(1.0)
            for pid, code in self._reap():
                worker = self.workers.pop(pid, None)
                if worker is not None and not worker.ready:
                    log.debug("worker %d (pid %d) exited with %d before serving", worker.slot, pid, code)
                    return False
        return True

    def _stop_all(self) -> None:
        for worker in self.workers.values():
            self._terminate(worker)
        deadline = time.monotonic() + STOP_GRACE_S + 5
        while self.workers and time.monotonic() < deadline:
            self._wait(0.2)
            self._reap_and_forget()
        for worker in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)
        while self.workers:
            self._wait(0.2)
            self._reap_and_forget()

    # ------------------------------------------------------------------------------------------- the loop

    def _step(self, timeout: float) -> None:
        self._wait(timeout)
        now = time.monotonic()
        for pid, code in self._reap():
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            self._forget(worker)
            if worker.stopping:
                continue
            lived = now - worker.started
            log.warning(
                "worker %d (pid %d) exited with %s after %.0f s; starting it again",
                worker.slot,
                pid,
                _exit_text(code),
                lived,
            )
            self._schedule_respawn(worker.slot, lived, now)
            restart = self._restart
            if restart is not None and restart.new is worker:
                log.error(
                    "SIGHUP: the new worker %d did not start; restart abandoned, the others keep serving", worker.slot
                )
                self._restart = None
        for slot, when in list(self._respawn_at.items()):
            if now >= when and not self._stop:
                del self._respawn_at[slot]
                if not any(w.slot == slot and not w.stopping for w in self.workers.values()):
                    self._spawn(slot, self._restart.settings if self._restart else self.settings)
        if self._hup:
            self._hup = False
            self._begin_restart()
        self._advance_restart(now)
        for worker in self.workers.values():
            if worker.stopping and now - worker.stop_sent > STOP_GRACE_S:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)

    def _wait(self, timeout: float) -> None:
        fds = [self._wake_r] + [w.ready_fd for w in self.workers.values() if w.ready_fd is not None]
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            return
        for fd in readable:
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    while os.read(fd, 512):
                        pass
                continue
            worker = next(w for w in self.workers.values() if w.ready_fd == fd)
            data = b""
            with contextlib.suppress(BlockingIOError):
                data = os.read(fd, 1)
            if data == READY:
                worker.ready = True
            os.close(fd)  # a closed pipe without the byte: the worker died before serving (reaped next)
            worker.ready_fd = None

    def _reap(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return out
            if pid == 0:
                return out
            out.append((pid, os.waitstatus_to_exitcode(status)))

    def _reap_and_forget(self) -> None:
        for pid, _ in self._reap():
            worker = self.workers.pop(pid, None)
            if worker is not None:
                self._forget(worker)

    def _forget(self, worker: _Worker) -> None:
        if worker.ready_fd is not None:
            os.close(worker.ready_fd)
            worker.ready_fd = None
        _mark_dead(self.metrics_dir, worker.pid)

    def _schedule_respawn(self, slot: int, lived: float, now: float) -> None:
        tries = 0 if lived >= STABLE_S else self._backoff.get(slot, 0) + 1
        self._backoff[slot] = tries
        self._respawn_at[slot] = now + BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]

    # ------------------------------------------------------------------------------------------- SIGHUP

    def _begin_restart(self) -> None:
        if self._restart is not None:
            log.info("SIGHUP: a restart is already under way")
            return
        try:
            settings = self.reload()
        except ConfigError as exc:
            log.error("SIGHUP: settings not reloaded, the workers keep running as they are: %s", exc)
            return
        if (settings.listen_host, settings.listen_port) != (
            self.settings.listen_host,
            self.settings.listen_port,
        ) or settings.mode != self.settings.mode:
            log.warning(
                "SIGHUP: a new listen address or mode needs a full restart; keeping %s:%d (%s mode)",
                self.settings.listen_host,
                self.settings.listen_port,
                self.settings.mode,
            )
            settings = _keep_address(settings, self.settings)
        log.info("SIGHUP: replacing %d workers one at a time", len(self.sockets))
        self._restart = _Restart(settings, list(range(len(self.sockets))))

    def _advance_restart(self, now: float) -> None:
        restart = self._restart
        if restart is None or self._stop:
            return
        if restart.new is not None:
            if restart.new.ready:
                if restart.old is not None and not restart.old.stopping:
                    self._terminate(restart.old)
                restart.new = restart.old = None
            elif now - restart.new.started > READY_TIMEOUT_S:
                log.error(
                    "SIGHUP: the new worker %d did not start serving within %.0f s; restart abandoned",
                    restart.new.slot,
                    READY_TIMEOUT_S,
                )
                self._terminate(restart.new)
                self._restart = None
            return
        if not restart.slots:
            self.settings = restart.settings
            self._restart = None
            log.info("SIGHUP: every worker replaced")
            return
        slot = restart.slots.pop(0)
        current = next((w for w in self.workers.values() if w.slot == slot and not w.stopping), None)
        restart.old = current
        # the new worker serves before the old one stops, in every slot: slot 0's takes the OTLP gRPC port over once
        # the old one (which stops its receiver first) lets go of it
        settings = dataclasses.replace(restart.settings, otlp_grpc_wait=READY_TIMEOUT_S) if current else None
        restart.new = self._spawn(slot, settings or restart.settings)

    # ------------------------------------------------------------------------------------------- processes

    def _terminate(self, worker: _Worker) -> None:
        worker.stopping = True
        worker.stop_sent = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGTERM)

    def _spawn(self, slot: int, settings: Settings) -> _Worker:
        ready_r, ready_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                os.close(ready_r)
                code = _worker_process(self, settings, slot, ready_w)
            except BaseException:  # noqa: BLE001 - nothing may unwind into the master's code in the child
                with contextlib.suppress(Exception):
                    log.exception("worker %d failed", slot)
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        os.close(ready_w)
        os.set_blocking(ready_r, False)
        worker = _Worker(slot, pid, ready_r, time.monotonic())
        self.workers[pid] = worker
        return worker


def _worker_process(master: Master, settings: Settings, slot: int, ready_w: int) -> int:
    """In the forked child: the master's state is let go, the signals made ordinary again, the slot's settings
    made (gRPC receiver and puller in slot 0 only), then the worker runs."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    sock = master.sockets[slot]
    for other in master.sockets:
        if other is not sock:
            other.close()
    for worker in master.workers.values():
        if worker.ready_fd is not None:
            os.close(worker.ready_fd)
    os.close(master._wake_r)
    os.environ[METRICS_DIR_ENV] = master.metrics_dir
    from bridge import metrics

    metrics.use_multiprocess(master.metrics_dir)

    def ready() -> None:
        with contextlib.suppress(OSError):
            os.write(ready_w, READY)
            os.close(ready_w)

    context = WorkerContext(slot, sock, os.getppid(), ready, peer_paths(master.metrics_dir, len(master.sockets)))
    return master.run_worker(slot_settings(settings, slot), context)


PEERS_DIR: Final = "peers"


def peer_paths(run_dir: str, count: int) -> tuple[str, ...]:
    """Each slot's peer socket, in the master's private run directory (made by ``metrics_directory``)."""
    return tuple(os.path.join(run_dir, PEERS_DIR, f"worker-{slot}.sock") for slot in range(count))


def slot_settings(settings: Settings, slot: int) -> Settings:
    """What runs once per bridge runs in slot 0: other slots have no gRPC receiver and no pprof puller."""
    if slot == 0:
        return settings
    return dataclasses.replace(settings, otlp_grpc_enabled=False, pprof_targets=())


def _keep_address(settings: Settings, old: Settings) -> Settings:
    return dataclasses.replace(settings, listen_host=old.listen_host, listen_port=old.listen_port, mode=old.mode)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def _mark_dead(metrics_dir: str, pid: int) -> None:
    """prometheus_client's ``mark_process_dead``: drops the dead worker's live gauges (its counters stay)."""
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, metrics_dir)  # type: ignore[no-untyped-call]
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.debug("metrics of worker pid %d: %s", pid, exc)


@contextlib.contextmanager
def metrics_directory() -> Iterator[str]:
    """A fresh private directory for the workers' metric files and their peer sockets, removed when the master
    exits."""
    path = tempfile.mkdtemp(prefix="profile-bridge-metrics-")
    os.mkdir(os.path.join(path, PEERS_DIR), 0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


M_TRIM_THRESHOLD: Final = -1  # glibc mallopt parameters
M_MMAP_THRESHOLD: Final = -3
HEAP_KEPT: Final = 32 * 1024 * 1024


def tune_allocator() -> bool:
    """Keep freed memory in the heap (glibc only; elsewhere nothing happens). Every chunk of a relayed answer is a
    new buffer of up to 256 KiB: glibc would hand each back to the kernel (``brk``) when it is freed and take it
    again for the next, and the kernel zeroes every page it hands out — page faults that cost a 1 MB relay about a
    tenth of the bridge's CPU. Up to ``HEAP_KEPT`` bytes of freed memory now stay for reuse."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024)) and bool(libc.mallopt(M_TRIM_THRESHOLD, HEAP_KEPT))
    except (OSError, AttributeError):
        return False
