"""``profile-bridge store check`` and ``profile-bridge store repair``: the store's file checked whole, and a damaged
one rebuilt from every row that can still be read.

- **check**: the header (``integrity.header_problem``) and SQLite's ``PRAGMA quick_check`` over the whole file, on a
  read-only connection (safe beside a running bridge).
- **repair** (the bridge stopped: refused while any process has the store open): a fresh store is built beside the
  damaged one at the damaged one's schema version (``schema.migrate``), and every table is copied into it — by SQLite
  (``INSERT … SELECT`` from the damaged file, attached read-only) when the whole table reads, else page by page
  (``salvage``: every b-tree page that still parses, found from the table's root and through the pointer map). Then
  the damaged file is renamed ``store.sqlite3.damaged-<UTC time>`` (its write-ahead log beside it, if one was left)
  and the fresh one takes its name. Nothing is deleted. Rows are kept as they were read, indexes are rebuilt, and a
  row that collides with one already kept (a unique key read twice) is kept once.
- **Rollups after salvage** (``_rebuild_rollups``): what a salvaged file still holds of the rollups need not add up
  to the profiles it still holds (a lost page of either), and a query trusts a rollup bucket below its watermark. So
  when any table was salvaged or missing, the stack rollups are emptied with their watermarks (the running bridge
  compacts them again from the profiles kept; queries read the profiles meanwhile) and the per-span rollups are
  filled again from the samples kept (``span_totals.rebuild``).
- **In use?** Every SQLite connection to a database in WAL mode holds a shared lock on one byte of its ``-shm`` file
  (SQLite's ``os_unix.c``: ``UNIX_SHM_DMS``, byte 128, the "dead man switch" a connection checks when it opens the
  file): ``in_use`` tries to take that byte exclusively. Only from another process: POSIX locks do not conflict
  within one, and releasing ours would release SQLite's (the command runs in its own process).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

from bridge.store import integrity, rollup, salvage, span_totals
from bridge.store.schema import LATEST, migrate

SHM_DMS_BYTE: Final = 128
REPAIRING_SUFFIX: Final = ".repairing"
INSERT_BATCH: Final = 5000


class RepairError(Exception):
    """Repair cannot go on; ``str()`` is the one line for the user."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    path: Path
    size: int
    problems: list[str]
    seconds: float

    @property
    def intact(self) -> bool:
        return not self.problems


@dataclass(slots=True)
class TableResult:
    name: str
    kept: int = 0
    how: str = "sqlite"  # "sqlite": read whole by SQLite; "pages": salvaged page by page; "missing": not in the file
    lost_pages: int = 0
    bad_cells: int = 0


@dataclass(slots=True)
class RepairResult:
    path: Path
    damaged_kept: Path
    version: int
    tables: list[TableResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def salvaged(self) -> list[TableResult]:
        return [t for t in self.tables if t.how != "sqlite"]


# --------------------------------------------------------------------------------------------- check


def check(path: Path, clock: Callable[[], float] = time.monotonic) -> CheckResult:
    started = clock()
    if not path.is_file():
        raise RepairError(f"there is no store at {path}")
    size = path.stat().st_size
    problem = integrity.header_problem(path)
    if problem is not None:
        return CheckResult(path, size, [problem], clock() - started)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise RepairError(f"cannot open the store at {path}: {exc}") from exc
    try:
        problems = integrity.quick_check(conn)
    finally:
        conn.close()
    return CheckResult(path, size, problems, clock() - started)


def in_use(path: Path) -> bool:
    """Whether another process has the database open (see the module's notes)."""
    import fcntl

    shm = path.with_name(path.name + "-shm")
    try:
        fd = os.open(shm, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
        except OSError:
            return True
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------- repair


def repair(path: Path, wall_clock: Callable[[], float] = time.time) -> RepairResult:
    """Rebuild the store at ``path`` from what can be read of it (see the module's notes)."""
    if not path.is_file():
        raise RepairError(f"there is no store at {path}")
    if in_use(path):
        raise RepairError(f"a process has the store at {path} open (a running bridge?): stop it, then repair")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall_clock()))
    damaged_kept = path.with_name(f"{path.name}.damaged-{stamp}")
    notes = [_fold_wal(path)]
    fresh_path = path.with_name(path.name + REPAIRING_SUFFIX)
    for leftover in _family(fresh_path):
        leftover.unlink(missing_ok=True)
    layout = _old_layout(path)
    if not 1 <= layout.version <= LATEST:
        raise RepairError(
            f"the store at {path} has schema version {layout.version}; this bridge knows 1 to {LATEST}: repair it "
            "with the profile-bridge that wrote it"
        )
    result = RepairResult(path, damaged_kept, layout.version, notes=[n for n in notes if n])
    fresh = sqlite3.connect(fresh_path.resolve().as_uri(), uri=True, isolation_level=None)
    try:
        fresh.execute("PRAGMA auto_vacuum = INCREMENTAL")  # as the store creates it (bridge.store.database)
        fresh.execute("PRAGMA journal_mode = WAL")
        migrate(fresh, layout.version)
        fresh.execute("ATTACH DATABASE ? AS old", (f"{path.resolve().as_uri()}?mode=ro",))
        with open(path, "rb") as fh:
            salvager = salvage.Salvager(_pages(fh, path))
            for table in _tables(fresh):
                result.tables.append(_copy_table(fresh, table, layout, salvager))
        fresh.execute("DETACH DATABASE old")
        if result.salvaged:
            result.notes.extend(_rebuild_rollups(fresh))
        fresh.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except BaseException:
        fresh.close()
        for leftover in _family(fresh_path):
            leftover.unlink(missing_ok=True)
        raise
    fresh.close()
    db, wal, shm = _family(path)
    os.replace(db, damaged_kept)
    if wal.exists() and wal.stat().st_size > 0:  # not folded in (see the notes): kept beside the damaged file
        os.replace(wal, _family(damaged_kept)[1])
    wal.unlink(missing_ok=True)
    shm.unlink(missing_ok=True)  # SQLite's shared-memory index of the log: rebuilt by whoever opens the file
    os.replace(fresh_path, path)
    for leftover in _family(fresh_path):
        leftover.unlink(missing_ok=True)
    return result


def _rebuild_rollups(conn: sqlite3.Connection) -> list[str]:
    """After salvage: the rollups made to agree with the rows kept (see the module's notes); what was done."""
    tables = {str(r[0]) for r in conn.execute("SELECT name FROM main.sqlite_schema WHERE type = 'table'")}
    notes = []
    conn.execute("BEGIN")
    try:
        if "rollups" in tables:
            conn.execute("DELETE FROM rollups")
            conn.executemany(
                "DELETE FROM store_state WHERE key = ?", [(rollup.watermark_key(x),) for x in rollup.LEVELS]
            )
            notes.append("the stack rollups were emptied: the bridge compacts them again from the profiles kept")
        if "span_totals" in tables:
            span_totals.rebuild(conn)
            notes.append("the per-span rollups were rebuilt from the samples kept")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return notes


def _family(db: Path) -> list[Path]:
    """The database file and its WAL and shared-memory files, in that order."""
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


def _fold_wal(path: Path) -> str:
    """Transactions left in the write-ahead log (a bridge that stopped without closing the store) are folded into
    the file first, so the copy has them; a note when that fails."""
    wal = path.with_name(path.name + "-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        return ""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"the write-ahead log could not be folded in ({exc}): its transactions are not in the repaired store"
    return ""


@dataclass(frozen=True, slots=True)
class _Layout:
    version: int
    roots: dict[str, int]  # table name -> root page in the damaged file
    indexes: dict[str, list[tuple[str, int]]]  # table name -> (index name, root page) in the damaged file


def _layout(version: int, schema_rows: list[tuple[object, object, object, object]]) -> _Layout:
    """From ``sqlite_schema`` rows (type, name, tbl_name, rootpage)."""
    roots: dict[str, int] = {}
    indexes: dict[str, list[tuple[str, int]]] = {}
    for kind, name, table, root in schema_rows:
        if not isinstance(root, int) or root <= 0:
            continue
        if kind == "table":
            roots[str(name)] = root
        elif kind == "index":
            indexes.setdefault(str(table), []).append((str(name), root))
    return _Layout(version, roots, indexes)


def _old_layout(path: Path) -> _Layout:
    """The damaged file's schema version and tables' root pages: read by SQLite, else salvaged from page 1."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT type, name, tbl_name, rootpage FROM sqlite_schema").fetchall()
            version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
            return _layout(int(version), rows)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if integrity.damage_of(exc) is None:
            raise RepairError(f"cannot read the store at {path}: {exc}") from exc
    with open(path, "rb") as fh:
        pages = _pages(fh, path)
        schema = salvage.Salvager(pages).salvage(1, index=False, check=lambda v: len(v) == 5)
        partial = _layout(0, [(v[0], v[1], v[2], v[3]) for _, v in schema.rows])
        if "schema_version" not in partial.roots:
            raise RepairError(f"the store at {path} is damaged where it lists its tables: nothing can be salvaged")
        got = salvage.Salvager(pages).salvage(
            partial.roots["schema_version"], index=False, check=lambda v: len(v) == 1 and isinstance(v[0], int)
        )
    versions = [int(v[0]) for _, v in got.rows if isinstance(v[0], int)]
    if len(versions) != 1:
        raise RepairError(f"the store at {path} is damaged where it records its schema version")
    return _Layout(versions[0], partial.roots, partial.indexes)


def _pages(fh: BinaryIO, path: Path) -> salvage.Pages:
    head = fh.read(salvage.HEADER_BYTES)
    try:
        header = salvage.parse_header(head, path.stat().st_size)
    except salvage.SalvageError as exc:
        raise RepairError(f"the store at {path} cannot be repaired: {exc}") from exc
    return salvage.Pages(fh, header)


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    cids: list[int]  # column numbers, in the order a record stores them
    columns: list[str]  # in the order a record stores them
    types: list[str]
    notnull: list[bool]
    without_rowid: bool
    rowid_column: int | None  # the INTEGER PRIMARY KEY column (stored as NULL, its value is the rowid)


def _tables(conn: sqlite3.Connection) -> Iterator[_Table]:
    """The fresh store's tables (what the damaged one's rows are copied into), with each one's record layout."""
    names = [
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name != 'schema_version' ORDER BY name"
        )
    ]
    for name in names:
        info = conn.execute(f'PRAGMA main.table_xinfo("{name}")').fetchall()  # cid, name, type, notnull, dflt, pk
        sql = conn.execute("SELECT sql FROM main.sqlite_schema WHERE name = ?", (name,)).fetchone()[0]
        without_rowid = "WITHOUT ROWID" in str(sql).upper()
        order = [row[0] for row in info]
        if without_rowid:
            pk_index = next(r[1] for r in conn.execute(f'PRAGMA main.index_list("{name}")').fetchall() if r[3] == "pk")
            order = [r[1] for r in conn.execute(f'PRAGMA main.index_xinfo("{pk_index}")').fetchall() if r[1] >= 0]
        by_cid = {row[0]: row for row in info}
        pks = [row for row in info if row[5]]
        rowid_column = None
        if not without_rowid and len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER":
            rowid_column = order.index(pks[0][0])
        yield _Table(
            name,
            order,
            [str(by_cid[c][1]) for c in order],
            [str(by_cid[c][2]).upper() for c in order],
            [bool(by_cid[c][3]) or (bool(by_cid[c][5]) and without_rowid) for c in order],
            without_rowid,
            rowid_column,
        )


_PYTHON_TYPES: Final[dict[str, type]] = {"INTEGER": int, "TEXT": str, "BLOB": bytes}


def _row_check(table: _Table) -> Callable[[list[salvage.Value]], bool]:
    """Does a record fit the table: as many values as columns, each of its column's type, none missing that must be
    there (the INTEGER PRIMARY KEY column is stored as NULL)."""

    def fits(values: list[salvage.Value]) -> bool:
        if len(values) != len(table.columns):
            return False
        for i, value in enumerate(values):
            if value is None:
                if table.notnull[i] and i != table.rowid_column:
                    return False
                continue
            want = _PYTHON_TYPES.get(table.types[i])
            if want is not None and type(value) is not want:
                return False
        return True

    return fits


def _copy_table(fresh: sqlite3.Connection, table: _Table, layout: _Layout, salvager: salvage.Salvager) -> TableResult:
    """One table into the fresh store: by SQLite when the whole table reads, else salvaged (``_salvage_table``)."""
    result = TableResult(table.name)
    if table.name not in layout.roots:
        result.how = "missing"
        return result
    cols = ", ".join(f'"{c}"' for c in table.columns)
    fresh.execute("BEGIN")
    try:
        cursor = fresh.execute(
            f'INSERT OR IGNORE INTO main."{table.name}" ({cols}) SELECT {cols} FROM old."{table.name}"'
        )
        result.kept = cursor.rowcount
        fresh.execute("COMMIT")
        return result
    except sqlite3.DatabaseError as exc:
        if fresh.in_transaction:
            fresh.execute("ROLLBACK")
        if integrity.damage_of(exc) is None:
            raise
    result.how = "pages"
    rows = _salvage_table(fresh, table, layout, salvager, result)
    insert = f'INSERT OR IGNORE INTO main."{table.name}" ({cols}) VALUES ({", ".join("?" * len(table.columns))})'
    fresh.execute("BEGIN")
    for start in range(0, len(rows), INSERT_BATCH):
        before = fresh.total_changes
        fresh.executemany(insert, rows[start : start + INSERT_BATCH])
        result.kept += fresh.total_changes - before
    fresh.execute("COMMIT")
    return result


def _salvage_table(
    fresh: sqlite3.Connection, table: _Table, layout: _Layout, salvager: salvage.Salvager, result: TableResult
) -> list[list[salvage.Value]]:
    """A damaged table's rows, page by page: from its own b-tree, then from every index of it that holds all its
    columns (a table of names with a UNIQUE name, such as ``functions`` or ``stacks``: its index holds each name with
    its row id, so rows whose table pages are lost come back from the index)."""
    fits = _row_check(table)
    got = salvager.salvage(layout.roots[table.name], index=table.without_rowid, check=fits)
    result.lost_pages, result.bad_cells = got.lost_pages, got.bad_cells
    rows = []
    for rowid, values in got.rows:
        if table.rowid_column is not None:
            values[table.rowid_column] = rowid
        rows.append(values)
    for name, root in layout.indexes.get(table.name, []):
        as_row = _row_from_index(fresh, table, name, fits)
        if as_row is not None:
            from_index = salvager.salvage(root, index=True, check=_is_row(as_row))
            rows.extend(row for _, record in from_index.rows if (row := as_row(record)) is not None)
    return rows


def _is_row(
    as_row: Callable[[list[salvage.Value]], list[salvage.Value] | None],
) -> Callable[[list[salvage.Value]], bool]:
    return lambda record: as_row(record) is not None


def _row_from_index(
    fresh: sqlite3.Connection, table: _Table, index: str, fits: Callable[[list[salvage.Value]], bool]
) -> Callable[[list[salvage.Value]], list[salvage.Value] | None] | None:
    """How a record of ``index`` becomes a row of ``table`` — when the index holds every column (its keys and the
    row id, which is the INTEGER PRIMARY KEY), else None."""
    rowid_place = table.rowid_column
    if rowid_place is None:
        return None
    cids = [int(r[1]) for r in fresh.execute(f'PRAGMA main.index_info("{index}")').fetchall()]
    if not cids or min(cids) < 0 or set(cids) | {table.cids[rowid_place]} != set(table.cids):
        return None  # an expression, or not every column: no row can be rebuilt from it
    places = [table.cids.index(c) for c in cids]

    def as_row(record: list[salvage.Value]) -> list[salvage.Value] | None:
        if len(record) != len(places) + 1 or not isinstance(record[-1], int):
            return None
        values: list[salvage.Value] = [None] * len(table.columns)
        for place, value in zip(places, record, strict=False):
            values[place] = value
        values[rowid_place] = record[-1]
        return values if fits(values) else None

    return as_row
