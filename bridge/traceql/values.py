"""Pure: TraceQL's typed values (Tempo ``pkg/traceql/ast.go`` ``Static``, ``enum_statics.go``) and the Go
formatting the language shows them in.

A value is a ``Static(type, value)`` pair: ``INT`` and ``DURATION`` hold a Python int (Go's int64 wraps, and so do the
operations in ``ops``), ``FLOAT`` a float, ``STRING`` a str, ``BOOLEAN`` a bool, ``STATUS`` / ``KIND`` the TraceQL
enum number (not OTLP's: ``error`` is 0, ``client`` is 2 — ``enum_statics.go``), arrays a tuple. ``NIL`` is a missing
attribute.

Equality and ordering follow ``Static.Equals`` / ``compare``: ints, floats and durations compare as numbers, a status
equals an int of the same number, anything compared with nil is false (``!=`` included).
"""

from __future__ import annotations

import enum
import math
from typing import Any, Final, NamedTuple


class T(enum.IntEnum):
    """``StaticType`` (``enum_statics.go``), same order."""

    NIL = 0
    SPANSET = 1
    ATTRIBUTE = 2  # decided per span, by the attribute's value
    INT = 3
    FLOAT = 4
    STRING = 5
    BOOLEAN = 6
    INT_ARRAY = 7
    FLOAT_ARRAY = 8
    STRING_ARRAY = 9
    BOOLEAN_ARRAY = 10
    DURATION = 11
    STATUS = 12
    KIND = 13


NUMERIC: Final = frozenset({T.INT, T.FLOAT, T.DURATION})
ARRAYS: Final = frozenset({T.INT_ARRAY, T.FLOAT_ARRAY, T.STRING_ARRAY, T.BOOLEAN_ARRAY})
ELEMENT_OF: Final = {T.INT_ARRAY: T.INT, T.FLOAT_ARRAY: T.FLOAT, T.STRING_ARRAY: T.STRING, T.BOOLEAN_ARRAY: T.BOOLEAN}

STATUS_NAMES: Final = ("error", "ok", "unset")  # Tempo's Status: error 0, ok 1, unset 2
KIND_NAMES: Final = ("unspecified", "internal", "client", "server", "producer", "consumer")
OTLP_STATUS_TO_TRACEQL: Final = {0: 2, 1: 1, 2: 0}  # OTLP unset 0, ok 1, error 2
OTLP_KIND_TO_TRACEQL: Final = {0: 0, 1: 1, 2: 3, 3: 2, 4: 4, 5: 5}  # OTLP server 2, client 3

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


class Static(NamedTuple):
    type: T
    value: Any


NIL: Final = Static(T.NIL, None)
TRUE: Final = Static(T.BOOLEAN, True)
FALSE: Final = Static(T.BOOLEAN, False)


def wrap64(n: int) -> int:
    """Go's int64 arithmetic: wrap around."""
    n &= 0xFFFF_FFFF_FFFF_FFFF
    return n - (1 << 64) if n >= 1 << 63 else n


def as_int64(f: float) -> int:
    """Go's ``int(float64)`` on amd64: out of range (or NaN) gives the minimum int64."""
    if math.isnan(f) or not INT64_MIN <= f < 2.0**63:
        return INT64_MIN
    return int(f)


def to_float(s: Static) -> float:
    """``Static.Float``: ints, floats and durations (nanoseconds) as float; anything else NaN."""
    if s.type is T.FLOAT or s.type is T.INT or s.type is T.DURATION:
        return float(s.value)
    return math.nan


def is_numeric(t: T) -> bool:
    return t in NUMERIC


def equals(a: Static, b: Static) -> bool:
    """``Static.Equals``."""
    ta, tb = a.type, b.type
    if ta is T.NIL or tb is T.NIL:
        return False
    if ta is T.INT or ta is T.DURATION:
        if tb is T.INT or tb is T.DURATION:
            return bool(a.value == b.value)
        if tb is T.STATUS:
            return ta is T.INT and a.value == b.value
        if tb is T.FLOAT:
            return float(a.value) == float(b.value)
        return False
    if ta is T.STATUS:
        return (tb is T.INT or tb is T.STATUS) and a.value == b.value
    if ta is T.FLOAT:
        return bool(a.value == to_float(b))
    if ta is T.KIND or ta is T.BOOLEAN or ta in ARRAYS or ta is T.STRING:
        return ta is tb and a.value == b.value
    return False


def not_equals(a: Static, b: Static) -> bool:
    if a.type is T.NIL or b.type is T.NIL:
        return False
    return not equals(a, b)


def compare(a: Static, b: Static) -> int:
    """``Static.compare``: -1, 0 or 1 (numbers across types as floats; other types by type first)."""
    if a.type is not b.type:
        if a.type in NUMERIC and b.type in NUMERIC:
            x, y = to_float(a), to_float(b)
            return (x > y) - (x < y)
        return (a.type > b.type) - (a.type < b.type)
    if a.type is T.NIL:
        return 0
    if a.type is T.STRING:
        xs, ys = a.value.encode(), b.value.encode()
        return int(xs > ys) - int(xs < ys)
    xv, yv = a.value, b.value
    return int(bool(xv > yv)) - int(bool(xv < yv))


def map_key(s: Static) -> tuple[int, Any]:
    """A hashable identity (``Static.MapKey``): statuses, kinds and ints of the same number stay distinct."""
    return (int(s.type), s.value)


def elements(s: Static) -> list[Static]:
    """The elements of an array value; a scalar is its own only element (``Static.Elements``)."""
    inner = ELEMENT_OF.get(s.type)
    if inner is None:
        return [s]
    return [Static(inner, v) for v in s.value]


# ------------------------------------------------------------------------------------------------ Go formatting


def _shortest_digits(f: float) -> tuple[str, int]:
    """The shortest round-trip digits of ``abs(f)`` and the position of the decimal point (``digs.dp``)."""
    text = repr(abs(f))
    mantissa, _, exp_text = text.partition("e")
    exp = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    if frac == "0":
        frac = ""
    digits = (whole + frac).lstrip("0")
    lead = len(whole + frac) - len(digits)
    dp = len(whole) - lead + exp
    digits = digits.rstrip("0") or "0"
    return digits, dp


def go_format_g(f: float) -> str:
    """``strconv.FormatFloat(f, 'g', -1, 64)`` (and ``fmt``'s ``%g``): shortest digits, an exponent below 1e-4 or
    from 1e6 on (``e+06``)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, f) < 0 else ""
    if f == 0:
        return sign + "0"
    digits, dp = _shortest_digits(f)
    exp = dp - 1
    if exp < -4 or exp >= 6:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= len(digits):
        return sign + digits + "0" * (dp - len(digits))
    return f"{sign}{digits[:dp]}.{digits[dp:]}"


def go_format_fixed(f: float, prec: int) -> str:
    """``strconv.FormatFloat(f, 'f', prec, 64)``."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    return f"{f:.{prec}f}"


def _frac(v: int, prec: int) -> tuple[str, int]:
    """Go ``fmtFrac``: the fraction of ``v / 10**prec`` without trailing zeros, and the whole part."""
    digits = ""
    printed = False
    for _ in range(prec):
        digit = v % 10
        printed = printed or digit != 0
        if printed:
            digits = str(digit) + digits
        v //= 10
    return ("." + digits if printed else ""), v


def go_duration(ns: int) -> str:
    """``time.Duration.String()``: ``1h0m0s``, ``1.5s``, ``100ms``, ``1µs``, ``0s``."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            frac, whole = _frac(u, 3)
            return f"{sign}{whole}{frac}µs"
        frac, whole = _frac(u, 6)
        return f"{sign}{whole}{frac}ms"
    frac, secs = _frac(u, 9)
    out = f"{secs % 60}{frac}s"
    mins = secs // 60
    if mins:
        out = f"{mins % 60}m" + out
        hours = mins // 60
        if hours:
            out = f"{hours}h" + out
    return sign + out


def encode_to_string(s: Static, quotes: bool = False) -> str:
    """``Static.EncodeToString``: how a value reads in an attribute name, a label, a search answer's string."""
    t, v = s.type, s.value
    if t is T.NIL:
        return "nil"
    if t is T.INT:
        return str(v)
    if t is T.FLOAT:
        text = go_format_g(v)
        return text if ("e" in text or "." in text or "N" in text or "I" in text) else text + ".0"
    if t is T.STRING:
        return f"`{v}`" if quotes else str(v)
    if t is T.BOOLEAN:
        return "true" if v else "false"
    if t is T.DURATION:
        return go_duration(v)
    if t is T.STATUS:
        return STATUS_NAMES[v] if 0 <= v < len(STATUS_NAMES) else f"status({v})"
    if t is T.KIND:
        return KIND_NAMES[v] if 0 <= v < len(KIND_NAMES) else f"kind({v})"
    if t in ARRAYS:
        inner = ELEMENT_OF[t]
        items = [encode_to_string(Static(inner, x)) for x in v]
        if t is T.STRING_ARRAY:
            items = [f"`{x}`" for x in v]
        return "[" + ", ".join(items) + "]"
    return f"static({int(t)})"


def any_value(s: Static) -> dict[str, Any]:
    """``Static.AsAnyValue`` as OTLP/JSON (gogo jsonpb: int64 as a string): ints, floats and booleans typed, a
    duration as its Go string, everything else as its string."""
    t, v = s.type, s.value
    if t is T.INT:
        return {"intValue": str(v)}
    if t is T.FLOAT:
        return {"doubleValue": json_float(v)}
    if t is T.BOOLEAN:
        return {"boolValue": bool(v)}
    if t is T.DURATION:
        return {"stringValue": go_duration(v)}
    if t in ARRAYS:
        inner = ELEMENT_OF[t]
        return {"arrayValue": {"values": [any_value(Static(inner, x)) for x in v]}}
    return {"stringValue": encode_to_string(s)}


def json_float(f: float) -> float | str:
    """A double as gogo jsonpb writes it: a number, or the strings ``NaN`` / ``Infinity`` / ``-Infinity``."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f
