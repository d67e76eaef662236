"""Pure: Prometheus-style label selectors as Pyroscope reads them: ``{service_name="x", env=~"a|b", k!="v", k!~"re"}``.

Semantics (Prometheus): a missing label has the value ``""``; regular expressions are fully anchored. So
``{span_id="…"}`` matches nothing in the store, because ``span_id`` is never a series label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from bridge.errors import InvalidArgument

OPS: Final = ("=~", "!~", "!=", "=")

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<name>[a-zA-Z_][a-zA-Z0-9_.]*)\s*(?P<op>=~|!~|!=|=)\s*(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    )\s*(?P<sep>,|$)""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: str
    value: str
    pattern: re.Pattern[str] | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(actual) is not None
        return found if self.op == "=~" else not found


def _unquote(raw: str) -> str:
    quote, inner = raw[0], raw[1:-1]
    if quote == "`":
        return inner
    out: list[str] = []
    i = 0
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and i + 1 < len(inner):
            out.append(escapes.get(inner[i + 1], "\\" + inner[i + 1]))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """``{a="b", c=~"d.*"}`` → matchers. ``""`` and ``{}`` select everything."""
    body = text.strip()
    if not body:
        return ()
    if not (body.startswith("{") and body.endswith("}")):
        raise InvalidArgument(f"label selector {text!r} must look like {{name=\"value\", …}}")
    body = body[1:-1].strip()
    matchers: list[Matcher] = []
    pos = 0
    while pos < len(body):
        match = _TOKEN.match(body, pos)
        if match is None:
            raise InvalidArgument(f"label selector {text!r}: cannot parse near {body[pos:pos + 30]!r}")
        value = _unquote(match.group("value"))
        op = match.group("op")
        pattern = None
        if op in ("=~", "!~"):
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise InvalidArgument(f"label selector {text!r}: bad regular expression {value!r} ({exc})") from exc
        matchers.append(Matcher(match.group("name"), op, value, pattern))
        pos = match.end()
        if match.group("sep") == "" and pos < len(body):
            raise InvalidArgument(f"label selector {text!r}: expected ',' near {body[pos:pos + 30]!r}")
    return tuple(matchers)


def parse_selectors(texts: Sequence[str]) -> list[tuple[Matcher, ...]]:
    """Several selectors (``matchers`` of LabelNames / LabelValues / Series): a series matching any of them counts."""
    return [parse_selector(t) for t in texts if t.strip()]


def matches_all(matchers: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def matches_any(selectors: Sequence[Sequence[Matcher]], labels: Mapping[str, str]) -> bool:
    return not selectors or any(matches_all(s, labels) for s in selectors)
