"""Pure: the query parameters of Tempo's search and metrics endpoints, read as Tempo reads them (``pkg/api/http.go``
``ParseSearchRequest``, ``ParseQueryRangeRequest``, ``ParseQueryInstantRequest``, ``bounds``, ``step``;
``modules/frontend``: default and largest limit, spans per spanset, the metrics window's caps and its end cut 30 s
before now, alignment to the step). Every mistake is an ``InvalidArgument`` with Tempo's own wording; ``now`` is
the caller's clock.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from bridge.errors import InvalidArgument
from bridge.traceql.lexer import parse_duration
from bridge.traceql.timeseries import SECOND, QueryRange, default_step
from bridge.traceql.values import go_duration

DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 256 * 1024
DEFAULT_SPSS: Final = 3
MAX_SPSS: Final = 100
MAX_SEARCH_DURATION_S: Final = 168 * 3600
MAX_METRICS_DURATION_NS: Final = 24 * 3600 * SECOND
MAX_INTERVALS: Final = 10_000
QUERY_END_CUTOFF_NS: Final = 30 * SECOND
DEFAULT_SINCE_NS: Final = 3600 * SECOND
_GO_DURATION = re.compile(r"^[-+]?(?:\d*(?:\.\d*)?(?:ns|us|µs|μs|ms|s|m|h))+$")


@dataclass(frozen=True, slots=True)
class Search:
    query: str
    start_s: int
    end_s: int
    limit: int
    spss: int


def _uint32(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name, "")
    if raw == "":
        return None
    if not raw.isdigit() or int(raw) > 0xFFFF_FFFF:
        raise InvalidArgument(f'invalid {name}: strconv.ParseUint: parsing "{raw}": invalid syntax')
    return int(raw)


def search(query: Mapping[str, str]) -> Search:
    """``/api/search``'s parameters."""
    start = _uint32(query, "start") or 0
    end = _uint32(query, "end") or 0
    limit = _uint32(query, "limit")
    if limit == 0:
        raise InvalidArgument("invalid limit: must be a positive number")
    if limit is None:
        limit = DEFAULT_LIMIT
    if limit > MAX_LIMIT:
        raise InvalidArgument(f"limit {limit} exceeds max limit {MAX_LIMIT}")
    spss = _uint32(query, "spss")
    spss = DEFAULT_SPSS if spss is None else spss
    if spss > MAX_SPSS:
        raise InvalidArgument(f"spans per span set exceeds {MAX_SPSS}. received {spss}")
    if (start or end) and end <= start:
        raise InvalidArgument(f"http parameter start must be before end. received start={start} end={end}")
    if end - start > MAX_SEARCH_DURATION_S:
        raise InvalidArgument(f"range specified by start and end exceeds 168h0m0s. received start={start} end={end}")
    return Search(query.get("q", "").strip() or "{}", start, end, limit, spss)


def timestamp(value: str, default_ns: int) -> int:
    """``parseTimestamp``: Unix seconds (up to 10 digits), nanoseconds, fractional seconds or RFC 3339."""
    if value == "":
        return default_ns
    if "." in value:
        try:
            f = float(value)
        except ValueError:
            f = math.nan
        if math.isfinite(f):
            whole, frac = math.modf(f)
            return int(whole) * SECOND + int(round(frac * 1000) / 1000 * SECOND)
    if re.fullmatch(r"[+-]?\d+", value):
        n = int(value)
        if abs(n) > 2**63 - 1:
            raise InvalidArgument(f'strconv.ParseInt: parsing "{value}": value out of range')
        return n * SECOND if len(value) <= 10 else n
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None
    if parsed.tzinfo is None:
        raise InvalidArgument(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    return int(parsed.timestamp()) * SECOND + parsed.microsecond * 1000


def bounds(query: Mapping[str, str], now_ns: int) -> tuple[int, int]:
    """``bounds``: ``end`` (default now), ``start`` (default ``end`` — or now if later — minus ``since``, 1 h)."""
    since = DEFAULT_SINCE_NS
    if query.get("since"):
        parsed = parse_duration(query["since"])
        if parsed is None or not re.fullmatch(r"(\d+[ywdhms]|\d+ms)+|0", query["since"]):
            raise InvalidArgument(
                f"could not parse 'since' parameter: not a valid duration string: \"{query['since']}\""
            )
        since = parsed
    try:
        end = timestamp(query.get("end", ""), now_ns)
    except InvalidArgument as exc:
        raise InvalidArgument(f"could not parse 'end' parameter: {exc.message}") from None
    try:
        start = timestamp(query.get("start", ""), min(end, now_ns) - since)
    except InvalidArgument as exc:
        raise InvalidArgument(f"could not parse 'start' parameter: {exc.message}") from None
    return start, end


def step(query: Mapping[str, str], start: int, end: int) -> int:
    """``step``: seconds (``30``, ``1.5``) or a Go duration (``30s``); default ``DefaultQueryRangeStep``."""
    raw = query.get("step", "")
    if raw == "":
        return default_step(start, end)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds):
        ns = seconds * SECOND
        if abs(ns) > 2**63 - 1:
            raise InvalidArgument(f'cannot parse "{raw}" to a valid duration. It overflows int64')
        value = int(ns)
    elif _GO_DURATION.match(raw) and (parsed := parse_duration(raw)) is not None:
        value = parsed
    else:
        raise InvalidArgument(f'cannot parse "{raw}" to a valid duration')
    if value < 0:
        raise InvalidArgument(f'cannot parse "{raw}": step must be positive')
    return value


def _uint(query: Mapping[str, str], name: str) -> int:
    raw = query.get(name, "")
    return int(raw) if raw.isdigit() and int(raw) <= 0xFFFF_FFFF else 0


def query_range(query: Mapping[str, str], now_ns: int) -> QueryRange:
    """``/api/metrics/query_range``: parsed, checked and aligned as Tempo's frontend does it."""
    text = query.get("q") or query.get("query") or ""
    start, end = bounds(query, now_ns)
    q = QueryRange(text, start, end, step(query, start, end), exemplars=_uint(query, "exemplars"))
    q.max_series = _uint(query, "maxSeries")
    instant = query.get("instant", "").lower()
    q.instant = instant in ("1", "t", "true")
    _clamp_for_validation(q, now_ns)
    _validate(q)
    q.align()
    cutoff = now_ns - QUERY_END_CUTOFF_NS
    if q.end > cutoff:
        q.end = cutoff
        q.align_end_left()
    return q


def query_instant(query: Mapping[str, str], now_ns: int) -> QueryRange:
    """``/api/metrics/query``: one step, ``[start, end]``, its end cut back in whole seconds when too recent."""
    text = query.get("q") or query.get("query") or ""
    start, end = bounds(query, now_ns)
    if end <= start:
        raise InvalidArgument("end must be greater than start")
    cutoff = now_ns - QUERY_END_CUTOFF_NS
    if end >= cutoff:
        end -= math.ceil((end - cutoff) / SECOND) * SECOND
        if end <= start:
            raise InvalidArgument("query window falls entirely within query_end_cutoff")
    q = QueryRange(text, start, end, end - start, instant=True)
    _validate(q)
    return q


def _clamp_for_validation(q: QueryRange, now_ns: int) -> None:
    if q.start >= q.end:
        raise InvalidArgument("end must be greater than start")
    if q.end > now_ns - QUERY_END_CUTOFF_NS:
        q.end = now_ns - QUERY_END_CUTOFF_NS
        if q.start >= q.end:
            raise InvalidArgument("query window falls entirely within query_end_cutoff")


def _validate(q: QueryRange) -> None:
    """``validateQueryRangeReq``: at most 24 h, at most 10,000 intervals."""
    if q.start >= q.end:
        raise InvalidArgument("end must be greater than start")
    if q.end - q.start > MAX_METRICS_DURATION_NS:
        raise InvalidArgument("metrics query time range exceeds the maximum allowed duration of 24h0m0s")
    if q.step == 0 or (q.end - q.start) // q.step > MAX_INTERVALS:
        minimum = (q.end - q.start) // MAX_INTERVALS
        raise InvalidArgument(
            f"step of {go_duration(q.step)} is too small, minimum step for given range is {go_duration(minimum)}"
        )
