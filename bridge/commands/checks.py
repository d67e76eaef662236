"""One ``doctor`` check's verdict: a name, passed / failed / skipped, what was found, and the fix when it failed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool | None  # None: skipped (an earlier hop failed, or nothing to look at)
    detail: str
    fix: str = ""
