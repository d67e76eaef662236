"""``profile-bridge store check`` and ``profile-bridge store repair``: the standalone store's file checked whole, and
a damaged one rebuilt (``bridge.store.repair`` does the work; this module parses and prints).

Exit codes: ``check`` 0 intact, 1 damaged; ``repair`` 0 repaired (or nothing to repair), 1 it could not; 2 no store
there or a bad argument. One line on stderr for every failure, never a stack trace.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from bridge.config import Settings

if TYPE_CHECKING:  # imported when a command runs: the parser is built for every command
    from bridge.store.repair import CheckResult, RepairResult

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
MIB: Final = 1024**2
PROBLEMS_PRINTED: Final = 5


def add_parser(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """``store check`` and ``store repair`` under the command line's subcommands."""
    store = sub.add_parser(
        "store",
        help="check or repair the standalone store's file",
        description="The standalone store's SQLite file (PROFILE_BRIDGE_DATA_DIR/store.sqlite3): `check` reads it "
        "whole (SQLite's quick_check, safe beside a running bridge); `repair` rebuilds a damaged one from every row "
        "that can still be read, keeping the damaged file beside it (the bridge must be stopped).",
    )
    actions = store.add_subparsers(dest="store_action", metavar="ACTION", required=True, parser_class=type(store))
    for name, text in (
        ("check", "check the whole file; exit 0 intact, 1 damaged"),
        ("repair", "rebuild a damaged store from every readable row (stop the bridge first)"),
    ):
        action = actions.add_parser(name, parents=[common], help=text, description=text)
        action.add_argument("--data-dir", metavar="DIR", help="PROFILE_BRIDGE_DATA_DIR (default ./profile-bridge-data)")


def run_store(settings: Settings, action: str, data_dir: str | None, out: TextIO, err: TextIO) -> int:
    from bridge.store import repair
    from bridge.store.database import DB_FILE
    from bridge.store.integrity import summary

    path = Path(data_dir or settings.data_dir) / DB_FILE
    if not path.is_file():
        print(
            f"profile-bridge store {action}: there is no store at {path} (--data-dir DIR or PROFILE_BRIDGE_DATA_DIR)",
            file=err,
        )
        return EXIT_USAGE
    try:
        checked = repair.check(path)
        if action == "check":
            return _report_check(checked, out)
        if checked.intact:
            print(f"the store at {path} is intact (SQLite's quick_check): nothing to repair", file=out)
            return EXIT_OK
        print(f"the store at {path} is damaged: {summary(checked.problems)}", file=out)
        result = repair.repair(path)
        after = repair.check(path)
    except repair.RepairError as exc:
        print(f"profile-bridge store {action}: {exc}", file=err)
        return EXIT_FAILED
    except OSError as exc:
        print(f"profile-bridge store {action}: {exc.strerror or exc} ({exc.filename or path})", file=err)
        return EXIT_FAILED
    return _report_repair(result, after, out, err)


def _report_check(checked: CheckResult, out: TextIO) -> int:
    size = f"{checked.size / MIB:,.1f} MiB"
    if checked.intact:
        print(
            f"the store at {checked.path} is intact: {size}, every page read by SQLite's quick_check "
            f"({checked.seconds:.1f} s)",
            file=out,
        )
        return EXIT_OK
    print(f"the store at {checked.path} is damaged ({size}):", file=out)
    for line in checked.problems[:PROBLEMS_PRINTED]:
        print(f"  {line}", file=out)
    if len(checked.problems) > PROBLEMS_PRINTED:
        print(f"  … and {len(checked.problems) - PROBLEMS_PRINTED} more", file=out)
    print(
        f"with the bridge stopped, `profile-bridge store repair --data-dir {checked.path.parent}` rebuilds it from "
        "every row that can still be read (docs/standalone.md)",
        file=out,
    )
    return EXIT_FAILED


def _report_repair(result: RepairResult, after: CheckResult, out: TextIO, err: TextIO) -> int:
    from bridge.store.integrity import summary

    for table in result.tables:
        if table.how == "sqlite":
            line = f"{table.kept:,} rows (read whole)"
        elif table.how == "missing":
            line = "not in the damaged file: left empty"
        else:
            line = (
                f"{table.kept:,} rows salvaged page by page ({table.lost_pages} pages lost, {table.bad_cells} "
                "cells unreadable)"
            )
        print(f"  {table.name}: {line}", file=out)
    for note in result.notes:
        print(f"  note: {note}", file=out)
    print(f"the damaged file is kept as {result.damaged_kept}", file=out)
    if not after.intact:
        print(
            f"profile-bridge store repair: the rebuilt store at {result.path} does not pass quick_check either "
            f"({summary(after.problems)}); the damaged file is kept as {result.damaged_kept}",
            file=err,
        )
        return EXIT_FAILED
    salvaged = len(result.salvaged)
    print(
        f"repaired: {result.path} passes SQLite's quick_check ({salvaged} of {len(result.tables)} tables salvaged "
        "page by page); start the bridge again",
        file=out,
    )
    return EXIT_OK
