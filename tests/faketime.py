"""The suite with the clock a year ahead (README, ``.ci/run``): libfaketime, in either of its modes.

With ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (the wall clock set ahead, the monotonic clock left real), Debian's libfaketime
0.9.10 makes ``clock_nanosleep`` fail with EINVAL, so CPython's ``time.sleep`` — and with it ``subprocess``'s
``wait(timeout=…)`` — raises ``OSError`` for any duration, and V8's CPU profiler and Chromium's timers misbehave.
``select`` and the event loop's waits are unaffected. So the test process sleeps with ``select`` when ``time.sleep``
cannot sleep (``conftest.py``), and the runtimes that are not Python (Node, Chromium) run with both clocks set ahead
(libfaketime's default mode), like the whole suite in ``.ci/run``.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Mapping
from typing import Final

REAL_MONOTONIC: Final = "FAKETIME_DONT_FAKE_MONOTONIC"


def mend_sleep() -> None:
    """``time.sleep`` through ``select`` when the real one cannot sleep (libfaketime with a real monotonic clock)."""
    try:
        time.sleep(0)
    except OSError:

        def sleep(seconds: float) -> None:
            select.select([], [], [], max(0.0, seconds))

        time.sleep = sleep


def both_clocks_ahead(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a child that is not Python, or a Python child that sleeps (waits on its
    own children with a timeout): libfaketime's default mode."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k != REAL_MONOTONIC}
