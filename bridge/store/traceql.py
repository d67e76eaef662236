"""Pure: the TraceQL subset standalone mode answers, parsed into conditions the store evaluates.

Grammar::

    query     := spanset ( "|" "select(" attr ("," attr)* ")" )*
    spanset   := "{" [ cond ( "&&" cond )* ] "}"
    cond      := attr op value
    op        := "=" | "!=" | ">" | ">=" | "<" | "<=" | "=~" | "!~"
    value     := "string" | duration (100ms, 1.5s, 2m) | number | true | false | identifier (server, error, …)

Attributes: ``span:id``, ``trace:id``, ``name`` / ``span:name``, ``duration`` / ``span:duration``, ``kind`` /
``span:kind``, ``status`` / ``span:status``, ``resource.<key>``, ``span.<key>`` and ``.<key>`` (span, then resource).
Anything else (``||``, structural operators, aggregates, metrics) is refused with a message naming the subset.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from bridge.errors import InvalidArgument

SUBSET: Final = (
    "standalone mode understands { cond && cond … } | select(…) with span:id, trace:id, name, duration, kind, "
    "status, resource.X, span.X and .X"
)

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)$")
_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_TOKENS = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<op>&&|\|\||=~|!~|!=|>=|<=|=|>|<|\{|\}|\(|\)|,|\|)
      | (?P<word>[A-Za-z0-9_.:µ\-/]+)
    )""",
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r"}
INTRINSICS: Final = {
    "span:id": "span:id",
    "trace:id": "trace:id",
    "name": "name",
    "span:name": "name",
    "duration": "duration",
    "span:duration": "duration",
    "kind": "kind",
    "span:kind": "kind",
    "status": "status",
    "span:status": "status",
}
KINDS: Final = {"unspecified": 0, "internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
STATUSES: Final = {"unset": 0, "ok": 1, "error": 2}
Value = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Attr:
    scope: str  # "intrinsic", "resource", "span" or "any" (.key)
    key: str  # intrinsic name (span:id, trace:id, name, duration, kind, status) or attribute key

    @property
    def text(self) -> str:
        if self.scope == "intrinsic":
            return "span:name" if self.key == "name" else self.key
        if self.scope == "any":
            return "." + self.key
        return f"{self.scope}.{self.key}"


@dataclass(frozen=True, slots=True)
class Cond:
    attr: Attr
    op: str
    value: Value
    pattern: re.Pattern[str] | None = None


@dataclass(frozen=True, slots=True)
class Query:
    conds: tuple[Cond, ...]
    select: tuple[Attr, ...]


def parse_attr(word: str) -> Attr:
    if word in INTRINSICS:
        return Attr("intrinsic", INTRINSICS[word])
    for prefix in ("resource.", "span."):
        if word.startswith(prefix) and len(word) > len(prefix):
            return Attr(prefix[:-1], word[len(prefix) :])
    if word.startswith(".") and len(word) > 1:
        return Attr("any", word[1:])
    raise InvalidArgument(f"TraceQL attribute {word!r} is not supported: {SUBSET}")


def parse_duration_ns(word: str) -> int | None:
    match = _DURATION.match(word)
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKENS.match(text, pos)
        if match is None or match.end() == pos:
            raise InvalidArgument(f"TraceQL {text!r}: cannot parse near {text[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _value(kind: str, raw: str, attr: Attr) -> Value:
    if kind == "str":
        return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), raw[1:-1])
    if kind != "word":
        raise InvalidArgument(f"TraceQL: expected a value, got {raw!r}")
    if attr.key == "duration" and attr.scope == "intrinsic":
        ns = parse_duration_ns(raw)
        if ns is None:
            raise InvalidArgument(f"TraceQL: {raw!r} is not a duration like 100ms or 1.5s")
        return ns
    if raw in ("true", "false"):
        return raw == "true"
    if attr.scope == "intrinsic" and attr.key == "kind" and raw in KINDS:
        return KINDS[raw]
    if attr.scope == "intrinsic" and attr.key == "status" and raw in STATUSES:
        return STATUSES[raw]
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        raise InvalidArgument(f"TraceQL: {raw!r} is not a value (quote strings)") from None


def parse(text: str) -> Query:
    toks = _tokens(text)
    if not toks:
        return Query((), ())
    i = 0

    def expect(value: str) -> None:
        nonlocal i
        if i >= len(toks) or toks[i][1] != value:
            got = toks[i][1] if i < len(toks) else "end of query"
            raise InvalidArgument(f"TraceQL {text!r}: expected {value!r}, got {got!r}; {SUBSET}")
        i += 1

    expect("{")
    conds: list[Cond] = []
    while i < len(toks) and toks[i][1] != "}":
        if conds:
            if toks[i][1] == "||":
                raise InvalidArgument(f"TraceQL '||' is not supported: {SUBSET}")
            expect("&&")
        kind, word = toks[i]
        if kind != "word":
            raise InvalidArgument(f"TraceQL {text!r}: expected an attribute, got {word!r}")
        attr = parse_attr(word)
        i += 1
        if i >= len(toks) or toks[i][0] != "op" or toks[i][1] not in ("=", "!=", ">", ">=", "<", "<=", "=~", "!~"):
            raise InvalidArgument(f"TraceQL {text!r}: expected a comparison after {word!r}")
        op = toks[i][1]
        i += 1
        if i >= len(toks):
            raise InvalidArgument(f"TraceQL {text!r}: expected a value after {op!r}")
        value = _value(toks[i][0], toks[i][1], attr)
        i += 1
        pattern = None
        if op in ("=~", "!~"):
            if not isinstance(value, str):
                raise InvalidArgument(f"TraceQL {text!r}: {op} needs a quoted regular expression")
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise InvalidArgument(f"TraceQL: bad regular expression {value!r} ({exc})") from exc
        conds.append(Cond(attr, op, value, pattern))
    expect("}")
    select: list[Attr] = []
    while i < len(toks):
        expect("|")
        if i >= len(toks) or toks[i][1] != "select":
            got = toks[i][1] if i < len(toks) else "end of query"
            raise InvalidArgument(f"TraceQL pipeline stage {got!r} is not supported: {SUBSET}")
        i += 1
        expect("(")
        while True:
            if i >= len(toks) or toks[i][0] != "word":
                raise InvalidArgument(f"TraceQL {text!r}: select(...) needs attributes")
            select.append(parse_attr(toks[i][1]))
            i += 1
            if i < len(toks) and toks[i][1] == ",":
                i += 1
                continue
            break
        expect(")")
    return Query(tuple(conds), tuple(select))


COMPARISONS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def compare(actual: Value | None, cond: Cond) -> bool:
    """Does one attribute value satisfy a condition? A missing attribute satisfies nothing (TraceQL's nil)."""
    if actual is None:
        return False
    op, want = cond.op, cond.value
    if op in ("=~", "!~"):
        assert cond.pattern is not None
        found = cond.pattern.fullmatch(str(actual)) is not None
        return found if op == "=~" else not found
    if isinstance(want, bool) or isinstance(actual, bool):
        if op == "=":
            return actual == want
        return actual != want if op == "!=" else False
    if isinstance(want, int | float) and not isinstance(actual, int | float):
        try:
            actual = float(actual)
        except ValueError:
            return op == "!="
    if isinstance(want, str) and not isinstance(actual, str):
        actual = str(actual)
    test = COMPARISONS.get(op)
    try:
        return test is not None and test(actual, want)
    except TypeError:
        return False
