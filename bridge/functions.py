"""Pure: the question "which spans burn this function?" — what is asked (``FunctionQuery``: a service, a function
matched exactly, by prefix or by regular expression, a time range, a profile type, a limit), what a backend answers
(``FunctionHits``: per span, the value in stacks through the function and in the function itself, and the span's
whole linked value) and the tree walk both modes use to measure a function in a flame graph.

Definitions, the same in both modes (``docs/functions-and-compare.md``):

- *total through F*: the value of every sample whose stack holds a frame matching F, counted once per sample however
  often F recurses in it;
- *self in F*: the value of every sample whose leaf frame matches F;
- a span's *linked value*: all its linked samples (``span_id`` = the span) in the range.

The backends (``FunctionIndex`` in ``bridge.sources``) are the store (``bridge.store.functions``) and
Pyroscope's span exemplars (``bridge.upstream.exemplars``); ``bridge.burners`` adds the spans' names and times.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from bridge import flamegraph
from bridge.errors import InvalidArgument
from bridge.parsing import parse_seconds
from bridge.profiletype import ProfileType

MATCH_KINDS: Final = ("exact", "prefix", "regex")
MAX_FUNCTION_CHARS: Final = 1000  # an exact name or a prefix
MAX_PATTERN_CHARS: Final = 200  # a regular expression
MAX_SERVICE_CHARS: Final = 256
MAX_MATCHED_FUNCTIONS: Final = 1000  # distinct function names a prefix or a pattern may match
DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 100
DEFAULT_RANGE_MS: Final = 3_600_000  # the last hour
MAX_RANGE_MS: Final = 7 * 24 * 3_600_000
_NOW: Final = re.compile(r"^now(?:\s*-\s*(?P<ago>[0-9.]+\s*[a-z]+))?$")


@dataclass(frozen=True, slots=True)
class FunctionMatch:
    """Which frame names count as the function: ``exact`` (the default), ``prefix``, or ``regex`` (a Python regular
    expression searched anywhere in the name; anchor it with ``^…$``)."""

    kind: str
    text: str
    pattern: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, text: str, kind: str = "exact") -> FunctionMatch:
        if kind not in MATCH_KINDS:
            raise InvalidArgument(f"match {kind[:40]!r} is not one of: {', '.join(MATCH_KINDS)}")
        if not text:
            raise InvalidArgument("function is empty: give a function name as it appears on the flame graph")
        if kind == "regex":
            if len(text) > MAX_PATTERN_CHARS:
                raise InvalidArgument(f"function pattern is {len(text)} characters long, more than {MAX_PATTERN_CHARS}")
            try:
                return cls(kind, text, re.compile(text))
            except re.error as exc:
                raise InvalidArgument(f"function pattern {text[:80]!r} is not a regular expression: {exc}") from exc
        if len(text) > MAX_FUNCTION_CHARS:
            raise InvalidArgument(f"function is {len(text)} characters long, more than {MAX_FUNCTION_CHARS}")
        return cls(kind, text)

    def matches(self, name: str) -> bool:
        if self.kind == "exact":
            return name == self.text
        if self.kind == "prefix":
            return name.startswith(self.text)
        assert self.pattern is not None
        return self.pattern.search(name) is not None

    def describe(self) -> str:
        """``count_primes`` / ``functions starting with count_`` / ``functions matching /prime/`` (for messages)."""
        if self.kind == "exact":
            return self.text
        if self.kind == "prefix":
            return f"functions starting with {self.text}"
        return f"functions matching /{self.text}/"


@dataclass(frozen=True, slots=True)
class FunctionQuery:
    service: str
    match: FunctionMatch
    profile_type: str
    start_ms: int
    end_ms: int
    limit: int = DEFAULT_LIMIT


@dataclass(frozen=True, slots=True)
class SpanValue:
    """One span's samples through the function, in the query's range."""

    span_id: str  # 16 lower-case hex
    trace_id: str  # 32 lower-case hex, "" when the samples do not say
    total: int  # in stacks through the function
    self: int  # in the function itself (leaf frames)
    span_total: int  # every sample linked to the span

    @property
    def order(self) -> tuple[int, int, str]:
        return -self.total, -self.self, self.span_id


@dataclass(frozen=True, slots=True)
class FunctionHits:
    """A backend's answer: the spans that burn the function, most first (at most the query's limit)."""

    spans: tuple[SpanValue, ...]
    functions: tuple[str, ...]  # the frame names that matched (at most MAX_MATCHED_FUNCTIONS)
    total: int  # through the function in the service's samples over the range, linked to a span or not
    linked: int | None  # of that, in samples linked to a span (None: the backend cannot say)
    more: int  # spans with samples through the function beyond the limit (a lower bound when ``linked`` is None)
    source: str  # how the spans were found, in words
    notes: tuple[str, ...] = ()  # what the answer may have left out


def order_spans(values: Iterable[SpanValue]) -> list[SpanValue]:
    """Most value through the function first, then most self, then by span id (a stable order)."""
    return sorted(values, key=lambda v: v.order)


def through_function(tree: flamegraph.Node, match: FunctionMatch) -> tuple[int, int]:
    """(total through the function, self in it) in a call tree: the totals of the outermost matching frames (a
    recursive function is counted once per stack) and the self values of every matching frame. The root (``total``)
    is not a function."""
    total = self_value = 0
    work: list[tuple[flamegraph.Node, bool]] = [(child, False) for child in tree.children.values()]
    while work:
        node, inside = work.pop()
        hit = match.matches(node.name)
        if hit:
            self_value += node.self
            if not inside:
                total += node.total
        work.extend((child, inside or hit) for child in node.children.values())
    return total, self_value


def matched_names(tree: flamegraph.Node, match: FunctionMatch, limit: int = MAX_MATCHED_FUNCTIONS) -> list[str]:
    """The distinct frame names of ``tree`` that match, sorted (at most ``limit``)."""
    found: set[str] = set()
    work = list(tree.children.values())
    while work:
        node = work.pop()
        if node.name not in found and match.matches(node.name):
            found.add(node.name)
        work.extend(node.children.values())
    return sorted(found)[:limit]


# --------------------------------------------------------------------------------------------- parameters


def parse_time(text: str, now_ms: int, what: str) -> int:
    """``from`` / ``to``: Unix milliseconds, or Grafana's ``now`` and ``now-<duration>`` (``now-1h``, ``now-30m``)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    match = _NOW.match(value.lower())
    if match is None:
        raise InvalidArgument(
            f"{what} {text[:40]!r} is neither Unix milliseconds nor now / now-<duration> (e.g. now-1h)"
        )
    ago = match.group("ago")
    if ago is None:
        return now_ms
    try:
        return now_ms - int(parse_seconds(ago.replace(" ", "")) * 1000)
    except ValueError as exc:
        raise InvalidArgument(f"{what} {text[:40]!r}: {exc}") from exc


def parse_range(query: Mapping[str, str], now_ms: int) -> tuple[int, int]:
    """``from`` and ``to`` (default: the last hour), ``from`` before ``to``, at most 7 days apart."""
    end = parse_time(query.get("to", "") or "now", now_ms, "to")
    start = parse_time(query.get("from", "") or "", now_ms, "from") if query.get("from") else end - DEFAULT_RANGE_MS
    if start >= end:
        raise InvalidArgument(f"from ({start}) must be before to ({end})")
    if end - start > MAX_RANGE_MS:
        raise InvalidArgument("from and to are more than 7 days apart")
    return start, end


def parse_limit(text: str) -> int:
    value = text.strip() or str(DEFAULT_LIMIT)
    limit = int(value) if value.isdigit() else 0
    if not 0 < limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit {text[:40]!r} is not a whole number in 1..{MAX_LIMIT}")
    return limit


def parse_function_query(query: Mapping[str, str], default_profile_type: str, now_ms: int) -> FunctionQuery:
    """Pure: the API's and the page's parameters, validated; ``InvalidArgument`` naming the bad one."""
    service = query.get("service", "").strip()
    if not service:
        raise InvalidArgument(
            "service is missing: give the service whose profiles hold the function (e.g. service=shop-backend)"
        )
    if len(service) > MAX_SERVICE_CHARS:
        raise InvalidArgument(f"service is longer than {MAX_SERVICE_CHARS} characters")
    match = FunctionMatch.parse(query.get("function", ""), query.get("match", "") or "exact")
    profile_type = query.get("profile_type", "") or default_profile_type
    ProfileType.parse(profile_type)  # BadProfileType: invalid_argument, naming the form
    start, end = parse_range(query, now_ms)
    return FunctionQuery(service, match, profile_type, start, end, parse_limit(query.get("limit", "")))
