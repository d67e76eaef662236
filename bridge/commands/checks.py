"""One ``doctor`` check's verdict (a name, passed / failed / skipped, what was found, and the fix when it failed) and
how a list of them reads: one line a check, a ``fix:`` line under each failed one, then the count.

A check whose input a failed check should have given is skipped, not failed again (``skipped``): only the hop that
broke is named as failing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from bridge.errors import BridgeError

OK: Final = "✓"
FAIL: Final = "✗"
SKIP: Final = "·"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool | None  # None: skipped (an earlier hop failed, or nothing to look at)
    detail: str
    fix: str = ""


def skipped(name: str, needs: str) -> Check:
    """``name`` not checked: it ``needs`` what an earlier, failed check should have given."""
    return Check(name, None, f"skipped: needs {needs}")


async def reachable(name: str, where: str, ready: Callable[[], Awaitable[str]], fix: str) -> Check:
    """``name``: what ``ready()`` answered from ``where``, or the error it raised and ``fix``."""
    try:
        status = await ready()
    except BridgeError as exc:
        return Check(name, False, exc.message, fix)
    return Check(name, True, f"{where} answered: {status}")


def plural(n: int) -> str:
    return "" if n == 1 else "s"


def format_checks(checks: list[Check]) -> str:
    lines: list[str] = []
    for check in checks:
        mark = SKIP if check.ok is None else OK if check.ok else FAIL
        lines.append(f"{mark} {check.name}: {check.detail}")
        if check.ok is False and check.fix:
            lines.append(f"    fix: {check.fix}")
    failed = [c.name for c in checks if c.ok is False]
    lines.append("")
    lines.append(
        f"{len(failed)} of {len(checks)} checks failed: {', '.join(failed)}"
        if failed
        else f"all {len(checks)} checks passed"
    )
    return "\n".join(lines) + "\n"
