"""Pure: profile values in human units (``1.24 s``, ``380 ms``, ``12.5 MiB``, ``1,204``) and shares."""

from __future__ import annotations

from typing import Final

_TIME_STEPS: Final = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))
_BYTE_STEPS: Final = ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB"), (1.0, "B"))
_TIME_UNITS: Final = {"nanoseconds": 1.0, "microseconds": 1e3, "milliseconds": 1e6, "seconds": 1e9}


def format_value(value: int | float, unit: str) -> str:
    """``value`` of a sample unit (the fourth part of a profile type id's sample type, e.g. ``nanoseconds``)."""
    if unit in _TIME_UNITS:
        return _scaled(value * _TIME_UNITS[unit], _TIME_STEPS)
    if unit == "bytes":
        return _scaled(value, _BYTE_STEPS)
    text = f"{int(value):,}"
    return text if unit in ("", "count", "samples") else f"{text} {unit}"


def _scaled(value: float, steps: tuple[tuple[float, str], ...]) -> str:
    if value == 0:
        return "0"
    for size, suffix in steps:
        if abs(value) >= size:
            scaled = value / size
            digits = 0 if scaled >= 100 or size == 1.0 else 1 if scaled >= 10 else 2
            return f"{scaled:.{digits}f} {suffix}"
    return "0"


def format_duration_ns(ns: int) -> str:
    return _scaled(ns, _TIME_STEPS)


def share(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage with one decimal (``"0.0%"`` when ``whole`` is zero)."""
    return f"{(100.0 * part / whole) if whole else 0.0:.1f}%"
