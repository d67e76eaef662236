"""What every bench script shares: a free loopback port for the servers it starts, the machine's load average for
its report lines, and percentiles of the times it measured."""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    """A loopback port nothing listens on now (the benches start their own servers on 127.0.0.1 only)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def loadavg() -> str:
    """``/proc/loadavg`` as printed beside every ratio line ("unknown" where there is none)."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
