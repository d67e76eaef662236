"""Is the store's file intact? The checks the store runs at start, ``/readyz`` runs on every call, and
``profile-bridge store check`` runs whole; and which SQLite errors mean the file is damaged.

- **Damage** is SQLite's ``SQLITE_CORRUPT`` ("database disk image is malformed") or ``SQLITE_NOTADB`` ("file is not
  a database"), also when it caused what failed next (``damage_of``).
- **Cheap** (``header_problem``: a 100-byte read and a ``stat``): the file starts with SQLite's header, its page size
  is one SQLite writes, and it holds whole pages — at least as many as its header counts when no write-ahead log is
  pending (a truncated file).
- **Whole** (``quick_check``): SQLite's ``PRAGMA quick_check`` reads every page of every table and index and checks
  their structure (https://www.sqlite.org/pragma.html#pragma_quick_check); it costs a read of the whole file — on
  the 2-core test machine about 8 s per GiB from the page cache and 50 s per GiB from a cold disk. At start it runs
  before the store opens when the file is at most ``START_CHECK_BYTES``, and in the background after it opens when
  larger (``bridge.store.database``).
"""

from __future__ import annotations

import os
import sqlite3
import struct
from pathlib import Path
from typing import Final

MAGIC: Final = b"SQLite format 3\x00"
START_CHECK_BYTES: Final = 256 * 1024**2  # larger stores are checked whole in the background, after they open
PROBLEMS_SHOWN: Final = 20  # quick_check's report is cut to this many lines

DAMAGE_CODES: Final = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def damage_of(exc: BaseException | None) -> sqlite3.Error | None:
    """The SQLite error in ``exc`` (or what caused it) that says the file is damaged, or None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF in DAMAGE_CODES:
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def header_problem(path: Path) -> str | None:
    """What is wrong with the file's header or size, or None (also for a file that does not exist yet)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if size == 0:
        return None  # created, nothing written yet
    if len(head) < 100 or head[:16] != MAGIC:
        return "its first bytes are not an SQLite database header"
    (raw,) = struct.unpack(">H", head[16:18])
    page_size = 65536 if raw == 1 else raw
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return f"its header names a page size of {raw}, which SQLite never writes"
    if size % page_size:
        return f"it is {size} bytes, not a whole number of {page_size}-byte pages (cut short, or written over)"
    (counted,) = struct.unpack(">I", head[28:32])
    change_counter, valid_for = head[24:28], head[92:96]
    wal = path.with_name(path.name + "-wal")
    wal_pending = wal.exists() and wal.stat().st_size > 0
    if change_counter == valid_for and not wal_pending and counted * page_size > size:
        return f"it holds {size // page_size} pages, but its header counts {counted} (cut short)"
    return None


def quick_check(conn: sqlite3.Connection) -> list[str]:
    """``PRAGMA quick_check``'s findings (empty when the file is intact); a file SQLite cannot even read reports that
    error as its one finding."""
    found: list[str] = []
    try:
        for (row,) in conn.execute(f"PRAGMA quick_check({PROBLEMS_SHOWN})"):  # row by row: keep what came first
            found.extend(line for line in str(row).splitlines() if line.strip())  # one row can hold many lines
    except sqlite3.DatabaseError as exc:
        if damage_of(exc) is None:
            raise
        found.append(str(exc))
    return [] if found == ["ok"] else found


def summary(problems: list[str]) -> str:
    """quick_check's findings in one line (the first, and how many more): it goes into the one ERROR line."""
    first = problems[0].replace("*** in database main ***", "").strip() or problems[0]
    if len(problems) > 1 and problems[0].startswith("*** in database"):
        first = problems[1]
        rest = len(problems) - 2
    else:
        rest = len(problems) - 1
    more = f"; {rest}{'+' if len(problems) >= PROBLEMS_SHOWN else ''} more" if rest > 0 else ""
    return " ".join(f"{first}{more}".split())
