"""The store's SQLite database and the threads that own its connections; the event loop never blocks on SQLite.

- Writes run on one writer thread with its own connection and explicit ``BEGIN IMMEDIATE`` … ``COMMIT``, so an ingest
  is acknowledged only once its transaction has committed and a failed one leaves nothing behind. Group commit
  (``commit``): jobs that arrive while the writer is busy share the next transaction, each inside its own savepoint.
- Reads run on a small pool of reader threads, each with its own read-only connection; WAL mode lets them read while
  the writer writes.
- A full disk (SQLite's ``SQLITE_FULL``, also when it surfaces as what failed next) is always ``StorageFull``, on
  every path (group commit, ``write``, ``read``): the failed transaction is rolled back whole, and the next write that
  finds room succeeds, with nothing to reset.
- A damaged file (``bridge.store.integrity``) is refused at open — checked whole first when it is at most
  ``START_CHECK_BYTES``, else checked whole in the background once open (``check_whole``) — and, when SQLite reports
  damage later on any path, the store is marked damaged (logged at ERROR once, with what to do): from then on every
  write is refused with ``StoreDamaged`` (503 with ``Retry-After``, gRPC ``UNAVAILABLE``) without touching the file,
  and a group commit in which one job met the damage is rolled back whole — nothing is acknowledged that was written
  into a damaged file. Reads go on; one that meets the damage is ``StoreDamaged`` too, never a 500.
- Writers may cache row ids (``ingest``'s get-or-insert caches) and other state read from the database (the rollups'
  watermarks); they register a hook with ``on_forget_ids``, called whenever what they hold may be stale: after any
  rollback, when retention drops rows (``forget_ids``), and when another process has written to the database since
  this writer last did (``PRAGMA data_version``, checked once each write transaction holds the write lock) — so
  several bridge processes may write one store.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from bridge.errors import BridgeError, StorageFull, StoreDamaged
from bridge.store.integrity import START_CHECK_BYTES, damage_of, header_problem, quick_check, summary
from bridge.store.schema import current_version, migrate

log = logging.getLogger("bridge.store")

T = TypeVar("T")

DB_FILE: Final = "store.sqlite3"


class StoreError(BridgeError):
    """The store cannot be opened or used (unwritable directory, corrupt database, newer schema)."""


def storage_full(exc: BaseException | None) -> StorageFull | None:
    """SQLite's ``SQLITE_FULL`` (the disk, the file system's quota or ``max_page_count`` is full) as ``StorageFull``;
    also when it caused what failed next (SQLite rolls the whole transaction back on it, so a job's ``ROLLBACK TO``
    then fails with "no such savepoint"). None for anything else."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, StorageFull):
            return exc
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_FULL:
            return StorageFull(
                f"the store cannot write, its disk is full ({exc}): nothing of this request was stored; retry later"
            )
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class Database:
    """One SQLite database: a writer thread (``write``, ``commit``, ``transaction``) and a reader pool (``read``)."""

    def __init__(self, path: Path, *, readers: int = 3, synchronous: str = "FULL") -> None:
        self.path = path
        self._synchronous = synchronous
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="store-writer")
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="store-reader")
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._wconn: sqlite3.Connection | None = None
        self._closed = False
        self._pending: list[
            tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]
        ] = []
        self._flush_scheduled = False
        self._forget_hooks: list[Callable[[], None]] = []
        self._data_version: int | None = None
        self.damage: str | None = None  # why the file is known to be damaged: no write is attempted any more
        self.deferred_check = False  # too large to check whole before opening: ``check_whole`` runs once open

    # ----------------------------------------------------------------------------------------- lifetime

    @classmethod
    async def open(cls, path: Path, *, readers: int = 3, synchronous: str = "FULL") -> Database:
        """Open (creating, or migrating to the latest schema) the database at ``path``; ``StoreError`` if it cannot."""
        db = cls(path, readers=readers, synchronous=synchronous)
        try:
            await asyncio.get_running_loop().run_in_executor(db._writer, db._open_writer)
        except BaseException:
            db._shutdown_pools()
            raise
        return db

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def _open_writer(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            problem = header_problem(self.path)
            if problem is not None:
                raise StoreDamaged(self._refusal(problem))
            size = self.path.stat().st_size if self.path.exists() else 0
            conn = self._connect()
            if 0 < size <= START_CHECK_BYTES:
                problems = quick_check(conn)
                if problems:
                    raise StoreDamaged(self._refusal(f"SQLite's quick_check: {summary(problems)}"))
            self.deferred_check = size > START_CHECK_BYTES
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect on a new database only
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA foreign_keys = OFF")
            before = current_version(conn)
            if migrate(conn) != before and before:
                conn.executescript("PRAGMA incremental_vacuum;")  # give back what a migration freed (dropped indexes)
        except (OSError, sqlite3.Error, RuntimeError, StoreDamaged) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, StoreDamaged):
                raise
            if (found := damage_of(exc)) is not None:
                raise StoreDamaged(self._refusal(str(found))) from exc
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc
        self._wconn = conn

    # ----------------------------------------------------------------------------------------- damage

    def _repair_hint(self) -> str:
        return (
            f"`profile-bridge store repair --data-dir {self.path.parent}` rebuilds it from every row that can still be "
            "read and keeps the damaged file beside it (docs/standalone.md)"
        )

    def _refusal(self, reason: str) -> str:
        """The one line a bridge that will not open a damaged store says."""
        return (
            f"the store at {self.path} is damaged ({reason}): the bridge does not start on it. {self._repair_hint()};"
            " or start with another PROFILE_BRIDGE_DATA_DIR"
        )

    def damaged_error(self) -> StoreDamaged:
        """What a request meets once the store is known to be damaged (it names no path: callers read it)."""
        return StoreDamaged(
            f"the standalone store is damaged ({self.damage}): nothing of this request was stored; retry later "
            "(the bridge's operator repairs it with `profile-bridge store repair`)"
        )

    def mark_damaged(self, reason: str) -> None:
        """The file is damaged: refuse every write from now on; logged at ERROR once, with what to do."""
        reason = " ".join(reason.split())  # one line: it goes into the ERROR line and every answer
        with self._lock:
            if self.damage is not None:
                return
            self.damage = reason
        log.error(
            "store: the store at %s is damaged (%s): ingest is refused (HTTP 503 with Retry-After: %d, gRPC "
            "UNAVAILABLE; SDKs and exporters retry) and /readyz says not ready. Stop the bridge: %s; then start it "
            "again",
            self.path,
            reason,
            StoreDamaged.RETRY_AFTER_S,
            self._repair_hint(),
        )

    def fault(self, exc: BaseException) -> BridgeError | None:
        """The bridge's error for a failed SQLite call: ``StorageFull``, ``StoreDamaged`` (the store marked damaged),
        or None for anything else."""
        full = storage_full(exc)
        if full is not None:
            return full
        found = damage_of(exc)
        if found is None:
            return None
        self.mark_damaged(str(found))
        return self.damaged_error()

    def _refuse_if_damaged(self) -> None:
        if self.damage is not None:
            raise self.damaged_error()

    async def check_whole(self) -> list[str]:
        """SQLite's ``quick_check`` over the whole file, on a read-only connection of its own and a thread of its own
        (the readers and the writer go on meanwhile); damage found marks the store damaged."""

        def run() -> list[str]:
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            try:
                return quick_check(conn)
            finally:
                conn.close()

        problems = await asyncio.to_thread(run)
        if problems:
            self.mark_damaged(f"SQLite's quick_check: {summary(problems)}")
        return problems

    async def close(self) -> None:
        """Checkpoint the WAL and close every connection; a second call does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._close_writer)
        finally:
            self._shutdown_pools()
            with self._lock:
                for conn in self._reader_conns:
                    conn.close()
                self._reader_conns.clear()

    def _close_writer(self) -> None:
        if self._wconn is not None:
            try:
                self._wconn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:  # a damaged file: what the log holds stays there for a repair to fold in
                log.warning("store: the write-ahead log could not be folded into %s on close: %s", self.path, exc)
            finally:
                self._wconn.close()
                self._wconn = None

    def _shutdown_pools(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)

    # ----------------------------------------------------------------------------------------- reads

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` on a reader thread (a read-only connection of its own)."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._with_reader, fn, args)

    def _with_reader(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._lock:
                self._reader_conns.append(conn)
        try:
            return fn(conn, *args)
        except sqlite3.Error as exc:  # a sort or temporary index spilling to a full disk; a damaged page
            fault = self.fault(exc)
            if fault is None:
                raise
            raise fault from exc

    # ----------------------------------------------------------------------------------------- writes

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(writer connection, *args)`` on the writer thread, outside any transaction: ``fn`` opens its own with
        ``transaction`` (retention does, several times). Refused once the store is known to be damaged."""
        self._refuse_if_damaged()
        return await asyncio.get_running_loop().run_in_executor(self._writer, self._with_writer, fn, args)

    def _with_writer(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            self._refuse_if_damaged()
            return fn(self._w(), *args)
        except sqlite3.Error as exc:
            fault = self.fault(exc)
            if fault is None:
                raise
            raise fault from exc

    def _w(self) -> sqlite3.Connection:
        if self._wconn is None:
            raise StoreError("the store is closed")
        return self._wconn

    def on_forget_ids(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (on the writer thread) whenever cached row ids may name rows that are gone."""
        self._forget_hooks.append(hook)

    def forget_ids(self) -> None:
        for hook in self._forget_hooks:
            hook()

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE`` (the write lock), then forget what this process holds if another one wrote since."""
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            if self._data_version is not None:
                self.forget_ids()
            self._data_version = version

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(writer connection)`` in one ``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back if it raises. Call it on the
        writer thread only (inside ``write``)."""
        conn = self._w()
        self._begin(conn)
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLITE_FULL may have rolled it back already
                conn.execute("ROLLBACK")
            self.forget_ids()  # ids handed out inside the rolled-back transaction no longer exist
            raise
        return result

    async def commit(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` in a write transaction and return once that transaction has committed.

        Group commit: jobs that arrive while the writer is busy are written together in the next transaction, each
        inside its own savepoint — one job's failure rolls back only that job, and the commit (one fsync) is
        shared. Each caller is answered only after the shared COMMIT. A job that meets a damaged file fails the whole
        group (rolled back: nothing of it is acknowledged); once the store is known to be damaged, jobs are refused
        without touching the file."""
        self._refuse_if_damaged()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._pending.append((job, future, loop))
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        if schedule:
            self._writer.submit(self._flush)
        return await future

    def _flush(self) -> None:
        with self._lock:
            jobs, self._pending = self._pending, []
            self._flush_scheduled = False
        if not jobs:
            return
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            self._refuse_if_damaged()
            conn = self._w()
            self._begin(conn)
            try:
                for n, (job, _, _) in enumerate(jobs):
                    conn.execute(f"SAVEPOINT job{n}")
                    try:
                        outcomes.append((job(conn), None))
                    except Exception as exc:  # noqa: BLE001 - handed to the job's caller below
                        if damage_of(exc) is not None:
                            raise  # the whole group: nothing written into a damaged file is acknowledged
                        conn.execute(f"ROLLBACK TO job{n}")
                        self.forget_ids()  # ids handed out inside the rolled-back job no longer exist
                        outcomes.append((None, storage_full(exc) or exc))
                    conn.execute(f"RELEASE job{n}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self.forget_ids()
                raise
        except Exception as group_exc:  # noqa: BLE001 - the whole group failed: every caller hears it
            error: BaseException = (
                group_exc
                if isinstance(group_exc, BridgeError)
                else self.fault(group_exc) or StoreError(f"the store could not commit: {group_exc}")
            )
            outcomes = [(None, error)] * len(jobs)
        for (_, future, loop), (result, failure) in zip(jobs, outcomes, strict=True):
            try:
                loop.call_soon_threadsafe(_settle, future, result, failure)
            except RuntimeError:  # the caller's event loop has closed: nobody is waiting for this answer
                log.debug("store: an ingest finished after its event loop closed")


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the caller went away (cancelled); its data is committed or rolled back all the same
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
