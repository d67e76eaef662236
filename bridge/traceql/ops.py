"""Pure: what TraceQL's operators do to two values (Tempo ``ast_execute.go`` ``BinaryOperation.execute``,
``binOpExecuteScalar``, ``UnaryOperation.execute``) and which types each accepts (``enum_operators.go``,
``enum_statics.go``).

Kept as Tempo has it, on purpose: operands of types an operator does not take make the comparison false (never an
error); two ints stay ints (``7 / 2`` is 3, Go's truncation, and int64 wraps) and ``a ^ b`` on two ints is
``b`` to the power ``a`` (``intPow(rhsN, lhsN)``); everything else is done in float64; a regular expression must match
the whole value (Prometheus' ``FastRegexMatcher``: ``^(?s:…)$``); an array against a scalar is true when any element
matches (for ``!=`` and ``!~``: when all do).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import Final

from bridge.traceql.ast import BOOLEAN_OPS, Op
from bridge.traceql.errors import EvalError, InvalidQuery, NotBuilt
from bridge.traceql.values import (
    ARRAYS,
    ELEMENT_OF,
    FALSE,
    NIL,
    NUMERIC,
    TRUE,
    Static,
    T,
    as_int64,
    elements,
    equals,
    not_equals,
    to_float,
    wrap64,
)

_NUMERIC_OPS: Final = frozenset({Op.ADD, Op.SUB, Op.MULT, Op.DIV, Op.MOD, Op.POW, Op.EQ, Op.NEQ, Op.GT, Op.GTE})
_NUMERIC_OPS_ALL: Final = _NUMERIC_OPS | {Op.LT, Op.LTE, Op.IN, Op.NOT_IN}
_STRING_OPS: Final = frozenset(
    {Op.EQ, Op.NEQ, Op.REGEX, Op.NOT_REGEX, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.NOT_IN}
    | {Op.REGEX_MATCH_ANY, Op.REGEX_MATCH_NONE}
)
_BOOL_OPS: Final = frozenset({Op.AND, Op.OR, Op.EQ, Op.NEQ, Op.IN, Op.NOT_IN})
_ARRAY_TO_ELEMENT_OP: Final = {
    Op.IN: Op.EQ,
    Op.NOT_IN: Op.NEQ,
    Op.REGEX_MATCH_ANY: Op.REGEX,
    Op.REGEX_MATCH_NONE: Op.NOT_REGEX,
}
_FLIPPED: Final = {Op.GT: Op.LT, Op.GTE: Op.LTE, Op.LT: Op.GT, Op.LTE: Op.GTE}


def binary_type_valid(op: Op, t: T) -> bool:
    if t is T.ATTRIBUTE:
        return True
    if t is T.BOOLEAN or t is T.BOOLEAN_ARRAY:
        return op in _BOOL_OPS
    if t in NUMERIC or t is T.FLOAT_ARRAY or t is T.INT_ARRAY:
        return op in _NUMERIC_OPS_ALL
    if t is T.STRING or t is T.STRING_ARRAY:
        return op in _STRING_OPS
    if t is T.NIL or t is T.STATUS or t is T.KIND:
        return op is Op.EQ or op is Op.NEQ
    return False


def binary_types_valid(op: Op, lhs: T, rhs: T) -> bool:
    return binary_type_valid(op, lhs) and binary_type_valid(op, rhs)


def matching_operand(a: T, b: T) -> bool:
    """``isMatchingOperand``: can these two types meet in one binary operation at all?"""
    if a is T.ATTRIBUTE or b is T.ATTRIBUTE or a is b:
        return True
    if a in NUMERIC and b in NUMERIC:
        return True
    if a is T.NIL or b is T.NIL:
        return True
    return matching_array_element(a, b)


def matching_array_element(a: T, b: T) -> bool:
    inner = ELEMENT_OF.get(a)
    if inner is not None:
        return matching_operand(inner, b)
    inner = ELEMENT_OF.get(b)
    if inner is not None:
        return matching_operand(inner, a)
    return False


def unary_type_valid(op: Op, t: T) -> bool:
    if t is T.ATTRIBUTE:
        return True
    if op is Op.SUB:
        return t in NUMERIC
    if op is Op.NOT:
        return t is T.BOOLEAN
    return op is Op.EXISTS or op is Op.NOT_EXISTS


# ----------------------------------------------------------------------------------------------------- regex

_RE2_ONLY: Final = re.compile(r"\\[pPQEC]|\(\?[<P]?[=!<>]|\(\?[imsU-]*U|\\[1-9]|[*+?}]\+|\\[zZ]")
_POSIX_CLASSES: Final = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7F", "blank": "\\t ", "cntrl": "\\x00-\\x1F\\x7F",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@[-`{-~",
    "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}  # fmt: skip
_POSIX: Final = re.compile(r"\[:(\^?)([a-z]+):\]")
_CACHE: dict[str, re.Pattern[str]] = {}


def compile_regex(pattern: str) -> re.Pattern[str]:
    """A Go (RE2) regular expression as a Python one anchored at both ends (Prometheus ``^(?s:…)$``). Only ``\\z``
    and POSIX classes (``[[:alpha:]]``) need translating; what Python cannot do the RE2 way (``\\pL``, ``(?U)``)
    is refused as unsupported, and what RE2 refuses (look-arounds, back-references) is invalid, as in Tempo."""
    found = _CACHE.get(pattern)
    if found is not None:
        return found
    for m in _RE2_ONLY.finditer(pattern):
        text = m.group(0)
        if text in ("\\z",):
            continue
        if text.startswith("\\p") or text.startswith("\\P") or "U" in text:
            raise NotBuilt(f"regular expression feature {text!r} (Go RE2 syntax Python's re cannot run)")
        raise InvalidQuery(f"invalid regex: `{pattern}`")
    translated = pattern.replace("\\z", "\\Z")

    def posix(m: re.Match[str]) -> str:
        chars = _POSIX_CLASSES.get(m.group(2))
        if chars is None:
            raise InvalidQuery(f"invalid regex: `{pattern}`")
        return chars if not m.group(1) else chars  # negated classes are rare; RE2 accepts [[:^alpha:]]

    translated = _POSIX.sub(posix, translated)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compiled = re.compile(f"(?s:{translated})\\Z")
    except (re.error, FutureWarning, DeprecationWarning, RecursionError, OverflowError) as exc:
        raise InvalidQuery(f"invalid regex: `{pattern}`") from exc
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[pattern] = compiled
    return compiled


# --------------------------------------------------------------------------------------------------- execute


def _int_op(op: Op, a: int, b: int) -> Static | None:
    if op is Op.ADD:
        return Static(T.INT, wrap64(a + b))
    if op is Op.SUB:
        return Static(T.INT, wrap64(a - b))
    if op is Op.MULT:
        return Static(T.INT, wrap64(a * b))
    if op is Op.DIV:
        if b == 0:
            raise EvalError("division by zero")
        q = abs(a) // abs(b)
        return Static(T.INT, wrap64(q if (a < 0) == (b < 0) else -q))
    if op is Op.MOD:
        if b == 0:
            raise EvalError("modulo by zero")
        r = abs(a) % abs(b)
        return Static(T.INT, r if a >= 0 else -r)
    if op is Op.GT:
        return TRUE if a > b else FALSE
    if op is Op.GTE:
        return TRUE if a >= b else FALSE
    if op is Op.LT:
        return TRUE if a < b else FALSE
    if op is Op.LTE:
        return TRUE if a <= b else FALSE
    if op is Op.POW:
        return Static(T.INT, as_int64(go_pow(float(b), float(a))))
    return None


def go_pow(x: float, y: float) -> float:
    """Go's ``math.Pow`` (``src/math/pow.go``), step for step: not the C library's ``pow``, whose last bit differs
    now and then (``2 ** 0.415…`` is ``0.6764149631050581`` in C, ``0.676414963105058`` in Go and so in Tempo's
    quantiles). The fraction of ``y`` goes through ``exp(yf * log(x))``, the integer part through exact squarings."""
    special = _pow_special(x, y)
    if special is not None:
        return special
    yf, yi = math.modf(abs(y))
    if yf != 0 and x < 0:
        return math.nan
    if yi >= 1 << 63:
        return 1.0 if x == -1 else 0.0 if (abs(x) < 1) == (y > 0) else math.inf
    a1, ae = 1.0, 0
    if yf != 0:
        if yf > 0.5:
            yf, yi = yf - 1, yi + 1
        a1 = math.exp(yf * math.log(x))
    x1, xe = math.frexp(x)
    i = int(yi)
    while i:
        if xe < -(1 << 12) or (1 << 12) < xe:
            ae += xe
            break
        if i & 1:
            a1 *= x1
            ae += xe
        x1 *= x1
        xe <<= 1
        if x1 < 0.5:
            x1 += x1
            xe -= 1
        i >>= 1
    if y < 0:
        a1, ae = 1 / a1, -ae
    try:
        return math.ldexp(a1, ae)
    except OverflowError:
        return math.copysign(math.inf, a1)


def _pow_special(x: float, y: float) -> float | None:
    """The special cases at the top of Go's ``pow``."""
    if y == 0 or x == 1:
        return 1.0
    if y == 1:
        return x
    if math.isnan(x) or math.isnan(y):
        return math.nan
    odd = y.is_integer() and abs(y) < 1 << 53 and int(y) % 2 == 1
    if x == 0:
        if y < 0:
            return -math.inf if math.copysign(1, x) < 0 and odd else math.inf
        return x if math.copysign(1, x) < 0 and odd else 0.0
    if math.isinf(y):
        return 1.0 if x == -1 else 0.0 if (abs(x) < 1) == (y > 0) else math.inf
    if math.isinf(x):
        if x < 0:
            return go_pow(1 / x, -y)
        return 0.0 if y < 0 else math.inf
    if y == 0.5:
        return math.sqrt(x) if x >= 0 else math.nan
    if y == -0.5:
        return 1 / math.sqrt(x) if x >= 0 else math.nan
    return None


def _float_div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _float_op(op: Op, lhs: Static, rhs: Static) -> Static:
    if op is Op.EQ:
        return TRUE if equals(lhs, rhs) else FALSE
    if op is Op.NEQ:
        return TRUE if not_equals(lhs, rhs) else FALSE
    a, b = to_float(lhs), to_float(rhs)
    if op is Op.ADD:
        return Static(T.FLOAT, a + b)
    if op is Op.SUB:
        return Static(T.FLOAT, a - b)
    if op is Op.MULT:
        return Static(T.FLOAT, a * b)
    if op is Op.DIV:
        return Static(T.FLOAT, _float_div(a, b))
    if op is Op.MOD:
        return Static(T.FLOAT, math.fmod(a, b) if b != 0 and not math.isinf(a) else math.nan)
    if op is Op.POW:
        return Static(T.FLOAT, go_pow(a, b))
    if op is Op.GT:
        return TRUE if a > b else FALSE
    if op is Op.GTE:
        return TRUE if a >= b else FALSE
    if op is Op.LT:
        return TRUE if a < b else FALSE
    if op is Op.LTE:
        return TRUE if a <= b else FALSE
    raise EvalError(f"unexpected operator {op.name}")


def _string_op(op: Op, a: str, b: str) -> Static | None:
    if op in (Op.GT, Op.GTE, Op.LT, Op.LTE):
        x, y = a.encode(), b.encode()
        c = (x > y) - (x < y)
        ok = c > 0 if op is Op.GT else c >= 0 if op is Op.GTE else c < 0 if op is Op.LT else c <= 0
        return TRUE if ok else FALSE
    if op is Op.REGEX or op is Op.NOT_REGEX:
        matched = compile_regex(b).match(a) is not None
        return TRUE if matched == (op is Op.REGEX) else FALSE
    return None


def scalar_binary(op: Op, lhs: Static, rhs: Static) -> Static:
    """Two scalar values (no arrays): ``binOpExecuteScalar``."""
    lt, rt = lhs.type, rhs.type
    if not matching_operand(lt, rt) or not binary_types_valid(op, lt, rt):
        return FALSE
    if lt is T.STRING and rt is T.STRING:
        done = _string_op(op, lhs.value, rhs.value)
        if done is not None:
            return done
    elif lt is T.INT and rt is T.INT:
        done = _int_op(op, lhs.value, rhs.value)
        if done is not None:
            return done
    elif lt is T.BOOLEAN and rt is T.BOOLEAN:
        if op is Op.AND:
            return TRUE if lhs.value and rhs.value else FALSE
        if op is Op.OR:
            return TRUE if lhs.value or rhs.value else FALSE
    return _float_op(op, lhs, rhs)


def binary(op: Op, lhs: Static, rhs: Static) -> Static:
    """``BinaryOperation.execute`` once both sides are values."""
    lt, rt = lhs.type, rhs.type
    if lt in ARRAYS or rt in ARRAYS:
        if not matching_operand(lt, rt) or not binary_types_valid(op, lt, rt):
            return FALSE
        if matching_array_element(lt, rt):
            return _array_op(op, lhs, rhs)
    return scalar_binary(op, lhs, rhs)


def _array_op(op: Op, lhs: Static, rhs: Static) -> Static:
    if op not in BOOLEAN_OPS:
        raise EvalError("unsupported operation on an array")
    if lhs.type in ARRAYS and rhs.type in ARRAYS:
        raise EvalError("array operators must consist of a scalar and an array operand")
    flip = False
    if op in _ARRAY_TO_ELEMENT_OP:
        elem_op, array, scalar = _ARRAY_TO_ELEMENT_OP[op], rhs, lhs
        if array.type not in ARRAYS:
            raise EvalError("array operators require array on the right side")
    else:
        elem_op, array, scalar = op, rhs, lhs
        if scalar.type in ARRAYS:
            elem_op = _FLIPPED.get(op, op)
            array, scalar = scalar, array
            flip = elem_op in (Op.REGEX, Op.NOT_REGEX)
    match_all = elem_op in (Op.NEQ, Op.NOT_REGEX)
    count = matched = 0
    for elem in elements(array):
        count += 1
        left, right = (elem, scalar) if flip else (scalar, elem)
        if scalar_binary(elem_op, left, right) == TRUE:
            matched += 1
            if not match_all:
                break
    return TRUE if (matched == count if match_all else matched > 0) else FALSE


def unary(op: Op, value: Static) -> Static:
    """``UnaryOperation.execute``. ``= nil`` is true for a missing attribute (Tempo's fetch layer hands a missing
    attribute over as the string ``nil`` for exactly that test)."""
    if op is Op.NOT:
        if value.type is not T.BOOLEAN:
            raise EvalError(f"expression expected a boolean, but got {value.type.name}")
        return FALSE if value.value else TRUE
    if op is Op.SUB:
        if value.type not in NUMERIC:
            raise EvalError(f"expression expected a numeric, but got {value.type.name}")
        if value.type is T.FLOAT:
            return Static(T.FLOAT, -value.value)
        return Static(value.type, wrap64(-value.value))
    if op is Op.EXISTS:
        return TRUE if value.type is not T.NIL else FALSE
    if op is Op.NOT_EXISTS:
        return TRUE if value.type is T.NIL or (value.type is T.STRING and value.value == "nil") else FALSE
    raise EvalError(f"unexpected unary operator {op.name}")


def compare_for_filter(op: Op, lhs: Static, rhs: Static) -> bool:
    """``binOp``: a scalar filter's comparison (``count() > 2``)."""
    lt, rt = lhs.type, rhs.type
    if not matching_operand(lt, rt) or not binary_types_valid(op, lt, rt):
        return False
    if lt is T.BOOLEAN and rt is T.BOOLEAN and op in (Op.AND, Op.OR):
        return bool(lhs.value and rhs.value) if op is Op.AND else bool(lhs.value or rhs.value)
    if op is Op.EQ:
        return equals(lhs, rhs)
    if op is Op.NEQ:
        return not_equals(lhs, rhs)
    a, b = to_float(lhs), to_float(rhs)
    compare: dict[Op, Callable[[float, float], bool]] = {
        Op.GT: lambda x, y: x > y,
        Op.GTE: lambda x, y: x >= y,
        Op.LT: lambda x, y: x < y,
        Op.LTE: lambda x, y: x <= y,
    }
    fn = compare.get(op)
    if fn is None:
        raise EvalError(f"unexpected operator {op.name}")
    return fn(a, b)


__all__ = ["NIL", "binary", "unary", "compile_regex", "compare_for_filter"]
