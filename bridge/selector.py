"""Pure: Prometheus-style label selectors as Pyroscope reads them: ``{service_name="x", env=~"a|b", k!="v", k!~"re"}``.

One parser for the whole bridge: the resolver merges span labels into a request's selector with it, the store
matches series with it. Semantics (Prometheus): a missing label has the value ``""``; regular expressions are fully
anchored, so ``{span_id="…"}`` matches nothing in the store, because ``span_id`` is never a series label. Quoted
values unquote like Go's ``strconv.Unquote`` (double quotes take JSON-style escapes, single quotes the same,
back-quotes are raw).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    op: str  # =, !=, =~, !~
    value: str
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)  # compiled by the parser

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        pattern = self.pattern if self.pattern is not None else re.compile(self.value)
        found = pattern.fullmatch(actual) is not None
        return found if self.op == "=~" else not found


def _unquote(token: str) -> str:
    if token[0] == "`":
        return token[1:-1]
    inner = token[1:-1]
    if "\\" not in inner:
        return inner
    if token[0] == "'":
        inner = inner.replace("\\'", "'").replace('"', '\\"')
    try:
        value = json.loads(f'"{inner}"')
    except ValueError as exc:
        raise InvalidArgument(f"label value {token!r} has a bad escape") from exc
    return str(value)


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """``{a="b", c=~"d.*"}`` → matchers. ``""`` and ``{}`` select everything."""
    body = text.strip()
    if not body:
        return ()
    if not (body.startswith("{") and body.endswith("}")):
        raise InvalidArgument(f'label selector {text!r} must look like {{name="value", …}}')
    body = body[1:-1].strip()
    matchers: list[Matcher] = []
    pos = 0
    while pos < len(body):
        match = _TOKEN.match(body, pos)
        if match is None:
            raise InvalidArgument(f"label selector {text!r}: cannot parse near {body[pos : pos + 30]!r}")
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
            raise InvalidArgument(f"label selector {text!r}: expected ',' near {body[pos : pos + 30]!r}")
    return tuple(matchers)


def parse_selectors(texts: Sequence[str]) -> list[tuple[Matcher, ...]]:
    """Several selectors (``matchers`` of LabelNames / LabelValues / Series): a series matching any of them counts."""
    return [parse_selector(t) for t in texts if t.strip()]


def matches_all(matchers: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def matches_any(selectors: Sequence[Sequence[Matcher]], labels: Mapping[str, str]) -> bool:
    return not selectors or any(matches_all(s, labels) for s in selectors)


def format_selector(matchers: Sequence[Matcher]) -> str:
    return "{" + ", ".join(f"{m.name}{m.op}{json.dumps(m.value, ensure_ascii=False)}" for m in matchers) + "}"


def merge_selector(selector: str, labels: Sequence[tuple[str, str]]) -> str:
    """The request's selector plus ``name="value"`` for each label it does not already constrain (the request's own
    matchers win: Grafana builds them from the same span)."""
    matchers = list(parse_selector(selector))
    named = {m.name for m in matchers}
    for name, value in labels:
        if name not in named:
            matchers.append(Matcher(name, "=", value))
            named.add(name)
    return format_selector(matchers)
