"""The function → spans query of the store: which spans' linked samples hold a function, from the per-sample span
ids every sample row keeps.

The index: ``stack_functions`` (schema migration 5) lists, for every stored stack, each distinct function in it —
filled at ingest (``index_stack``, called when a stack's id is looked up) and pruned with the stacks retention drops
(``collect_garbage``). A query reads it by function id (its primary key), checks each candidate stack against the
stack's own frames (so a row left behind for a dropped stack whose id SQLite gave to a new one never counts), then
adds up the matching stacks' sample rows of the service's profiles in the range, per span id, in one ``GROUP BY``.
Its cost follows the samples of that service and range (the profiles' time index picks them), not the store's size
(``bench/function_spans.py``).

When every stack of the range holds the function (an entry point: ``main``, a request handler — the wide bars of a
flame graph), a span's value through it is its whole linked value, which the per-span rollups hold
(``span_totals``): the answer is then read from them, per minute, at a cost that follows the minutes of the range and
the spans on the list rather than its samples; the few spans on the list are measured from their samples as always.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from bridge.call import CallContext
from bridge.errors import InvalidArgument
from bridge.functions import MAX_MATCHED_FUNCTIONS, FunctionHits, FunctionMatch, FunctionQuery, SpanValue, order_spans
from bridge.profiletype import ProfileType
from bridge.selector import matches_any, parse_selector
from bridge.store import rollup, span_totals
from bridge.store.database import Database
from bridge.store.decode import int_to_span_id
from bridge.store.query import window_ns
from bridge.store.schema import unpack_frames

SOURCE: Final = "the store's per-sample span ids"
MAX_REGEX_NAMES: Final = 1_000_000  # function names a pattern is tried against (every name the store holds)


def index_stack(conn: sqlite3.Connection, stack_id: int, function_ids: Iterable[int]) -> None:
    """Record which functions ``stack_id`` holds (writer thread, inside the ingest's transaction)."""
    conn.executemany(
        "INSERT OR IGNORE INTO stack_functions (function_id, stack_id) VALUES (?, ?)",
        [(fid, stack_id) for fid in set(function_ids)],
    )


def collect_garbage(conn: sqlite3.Connection) -> None:
    """Drop the index rows of stacks that are gone (retention, after it drops stacks)."""
    conn.execute("DELETE FROM stack_functions WHERE stack_id NOT IN (SELECT id FROM stacks)")


def _upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (SQLite compares UTF-8 bytes, which
    orders like code points); None when there is none to write."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF or 0xD7FF <= last < 0xE000:
        return None
    return prefix[:-1] + chr(last + 1)


def matching_functions(conn: sqlite3.Connection, match: FunctionMatch) -> dict[int, str]:
    """Function id → name of every stored function the match takes (an exact name and a prefix read the name
    index; a pattern is tried against every name). ``InvalidArgument`` past ``MAX_MATCHED_FUNCTIONS``."""
    if match.kind == "exact":
        rows = conn.execute("SELECT id, name FROM functions WHERE name = ?", (match.text,)).fetchall()
    elif match.kind == "prefix":
        upper = _upper_bound(match.text)
        if upper is None:
            rows = conn.execute(
                "SELECT id, name FROM functions WHERE substr(name, 1, ?) = ? LIMIT ?",
                (len(match.text), match.text, MAX_MATCHED_FUNCTIONS + 1),
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT id, name FROM functions WHERE name >= ? AND name < ? LIMIT ?",
                (match.text, upper, MAX_MATCHED_FUNCTIONS + 1),
            ).fetchall()
    else:
        rows = []
        for fid, name in conn.execute("SELECT id, name FROM functions LIMIT ?", (MAX_REGEX_NAMES,)):
            if match.matches(name):
                rows.append((fid, name))
                if len(rows) > MAX_MATCHED_FUNCTIONS:
                    break
    if len(rows) > MAX_MATCHED_FUNCTIONS:
        raise InvalidArgument(
            f"{match.describe()} takes in more than {MAX_MATCHED_FUNCTIONS} function names: narrow it"
        )
    return {int(fid): str(name) for fid, name in rows}


def stacks_with(conn: sqlite3.Connection, function_ids: Sequence[int]) -> dict[int, tuple[bool, frozenset[int]]]:
    """Stack id → (its leaf is one of the functions, which of the functions it holds), checked against the stack's
    own frames."""
    wanted = set(function_ids)
    out: dict[int, tuple[bool, frozenset[int]]] = {}
    for stack_id, frames in conn.execute(
        "SELECT id, frames FROM stacks WHERE id IN (SELECT DISTINCT stack_id FROM stack_functions "
        "WHERE function_id IN (SELECT value FROM json_each(?)))",
        (json.dumps(sorted(wanted)),),
    ):
        ids = unpack_frames(frames)
        held = wanted.intersection(ids)
        if held:
            out[int(stack_id)] = (ids[-1] in wanted, frozenset(held))
    return out


def series_of(conn: sqlite3.Connection, tenant: str, profile_type: str, selector: str) -> list[int]:
    matchers = [parse_selector(selector)]
    return [
        int(sid)
        for sid, labels in conn.execute(
            "SELECT id, labels FROM series WHERE tenant = ? AND profile_type = ?", (tenant, profile_type)
        )
        if matches_any(matchers, json.loads(labels))
    ]


_PROFILES: Final = (
    "profile_id IN (SELECT id FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
    "AND time_ns >= ? AND time_ns < ?)"
)


MAX_TIED: Final = 5000  # spans tied at the limit whose self values decide the order among them


def read_function_spans(
    conn: sqlite3.Connection, tenant: str, query: FunctionQuery, selector: str, *, rollups: bool = True
) -> FunctionHits:
    """The query, on a reader connection: from the per-span rollups when the function is in every stack of the
    range (and ``rollups``), else one pass over the service's sample rows in the range (per span, the value through
    the function); then the few spans that can make the list, measured from the span index (through the function,
    in it, in all, and their trace ids)."""
    ProfileType.parse(query.profile_type)
    hits = FunctionHits((), (), 0, 0, 0, SOURCE)
    series = series_of(conn, tenant, query.profile_type, selector)
    functions = matching_functions(conn, query.match) if series else {}
    stacks = stacks_with(conn, sorted(functions)) if functions else {}
    if not stacks:
        return hits
    window = window_ns(query.start_ms, query.end_ms)
    ranked = _through_every_stack(conn, series, functions, stacks, window, query) if rollups else None
    if ranked is not None:
        return ranked
    in_profiles: list[Any] = [json.dumps(series), *window]
    per_span: list[tuple[int | None, int]] = [
        (span, int(total))
        for span, total in conn.execute(
            f"SELECT span_id, sum(value) FROM samples WHERE {_PROFILES} "
            "AND stack_id IN (SELECT value FROM json_each(?)) GROUP BY span_id",
            [*in_profiles, json.dumps(sorted(stacks))],
        )
    ]
    total = sum(value for _, value in per_span)
    if not total:
        return hits
    names = _names_seen(conn, functions, stacks, in_profiles, query.match)
    linked = sorted(((value, span) for span, value in per_span if span is not None and value), reverse=True)
    if not linked:
        return FunctionHits((), names, total, 0, 0, SOURCE)
    cutoff = linked[min(query.limit, len(linked)) - 1][0]
    contenders = [span for value, span in linked if value >= cutoff][: max(query.limit, MAX_TIED)]
    top = order_spans(_measure(conn, contenders, stacks, in_profiles))[: query.limit]
    return FunctionHits(tuple(top), names, total, sum(value for value, _ in linked), len(linked) - len(top), SOURCE)


def _through_every_stack(
    conn: sqlite3.Connection,
    series: list[int],
    functions: dict[int, str],
    stacks: dict[int, tuple[bool, frozenset[int]]],
    window: tuple[int, int],
    query: FunctionQuery,
) -> FunctionHits | None:
    """The answer from the per-span rollups (``span_totals``) when every stack of the range holds the function —
    then a span's value through it is its whole linked value, which the rollups hold: the spans are ranked from each
    minute's largest, counted and added up per minute, and only the ones that make the list are measured from their
    samples. None when a stack of the range lacks the function, or the range spans less than two whole minutes
    (the sample pass answers those)."""
    lo, hi = window
    retained = rollup.read_state(conn).get(rollup.RETAINED_FROM, 0)
    first, last = -(-max(lo, retained) // span_totals.MINUTE_NS), hi // span_totals.MINUTE_NS
    if last - first < 2:
        return None
    series_json = json.dumps(series)
    inner, params = rollup.merge_rows(conn, series_json, window)
    per_stack: dict[int, int] = {}
    for stack, value in conn.execute(inner, params):  # the merge's rows: left at the first stack without it
        if stack not in stacks:
            if value:
                return None
            continue
        per_stack[stack] = per_stack.get(stack, 0) + value
    total = sum(per_stack.values())
    held = {fid for stack, v in per_stack.items() if v for fid in stacks[stack][1]}
    names = tuple(sorted(functions[fid] for fid in held))
    # the range's edges (part minutes, and minutes retention cut) from the samples, the crossing rows summed
    exact = span_totals.crossing_spans(conn, series, first, last)
    for span, value, trace in conn.execute(
        "SELECT span_id, sum(value), max(trace_id) FROM samples WHERE profile_id IN (SELECT id FROM profiles "
        "WHERE series_id IN (SELECT value FROM json_each(?)) AND ((time_ns >= ? AND time_ns < ?) OR "
        "(time_ns >= ? AND time_ns < ?))) AND span_id IS NOT NULL GROUP BY span_id",
        (series_json, lo, first * span_totals.MINUTE_NS, last * span_totals.MINUTE_NS, hi),
    ):
        prev = exact.get(span)
        exact[span] = (int(value) + (prev[0] if prev else 0), (prev[1] if prev else None) or trace)
    solo_spans, solo_value = span_totals.solo_totals(conn, series, first, last)
    linked = solo_value + sum(v for v, _ in exact.values())
    count = solo_spans + sum(1 for v, _ in exact.values() if v > 0)
    if not total:
        return FunctionHits((), (), 0, 0, 0, SOURCE)
    if not count:
        return FunctionHits((), names, total, 0, 0, SOURCE)
    # a lower bound of the limit-th value from a few of each minute's largest, then every value at or above it
    few = -(-2 * query.limit // (last - first))
    exact_rows = [(v, span) for span, (v, _) in exact.items() if v > 0]
    sample = _per_span([*span_totals.top_solo(conn, series, first, last, few), *exact_rows], add=False)
    if not sample:
        return FunctionHits((), names, total, linked, count, SOURCE)
    floor = max(1, sample[min(query.limit, len(sample)) - 1][0])
    rows = span_totals.top_solo(conn, series, first, last, MAX_TIED, at_least=floor)
    ranked = _per_span([*rows, *exact_rows], add=True)
    if not ranked:
        return FunctionHits((), names, total, linked, count, SOURCE)
    cutoff = ranked[min(query.limit, len(ranked)) - 1][0]
    contenders = [span for value, span in ranked if value >= cutoff][: max(query.limit, MAX_TIED)]
    top = order_spans(_measure(conn, contenders, stacks, [series_json, lo, hi]))[: query.limit]
    return FunctionHits(tuple(top), names, total, linked, count - len(top), SOURCE)


def _per_span(rows: Sequence[tuple[int, int]], add: bool) -> list[tuple[int, int]]:
    """(value, span) rows → one (value, span) per span, largest first: its rows added up (``add``) or its largest.
    A span idle for over a minute has a row per stretch; either value is at most the span's value over the range,
    so the limit-th of them is a lower bound of the true limit-th — and with the largest, each of the spans above
    that bound has a row at or above it."""
    best: dict[int, int] = {}
    for value, span in rows:
        prev = best.get(span)
        best[span] = value if prev is None else (prev + value if add else max(prev, value))
    return sorted(((v, span) for span, v in best.items()), reverse=True)


def _measure(
    conn: sqlite3.Connection,
    span_ids: Sequence[int],
    stacks: dict[int, tuple[bool, frozenset[int]]],
    in_profiles: list[Any],
) -> list[SpanValue]:
    """Each span's value through the function, in it, and in all, from its own sample rows: found through the
    profiles that hold them (``span_profiles``, per 10 minutes of the range's stored time)."""
    series_json, lo, hi = in_profiles
    buckets = rollup.link_buckets(conn, lo, hi)
    spans = json.dumps(list(span_ids))
    found: dict[int, list[Any]] = {}
    for span, stack, value, trace in conn.execute(
        "SELECT span_id, stack_id, sum(value), max(trace_id) FROM samples WHERE profile_id IN ("
        "SELECT l.profile_id FROM span_profiles AS l JOIN profiles AS p ON p.id = l.profile_id "
        "WHERE l.bucket IN (SELECT value FROM json_each(?)) AND l.span_id IN (SELECT value FROM json_each(?)) "
        "AND p.series_id IN (SELECT value FROM json_each(?)) AND p.time_ns >= ? AND p.time_ns < ?) "
        "AND span_id IN (SELECT value FROM json_each(?)) GROUP BY span_id, stack_id",
        [buckets, spans, series_json, lo, hi, spans],
    ):
        row = found.setdefault(int(span), [0, 0, 0, b""])
        hit = stacks.get(int(stack))
        row[2] += int(value)
        if hit is not None:
            row[0] += int(value)
            row[1] += int(value) if hit[0] else 0
        row[3] = row[3] or trace or b""
    return [
        SpanValue(int_to_span_id(span), trace.hex() if trace else "", through, self_value, whole)
        for span, (through, self_value, whole, trace) in found.items()
        if through
    ]


def _names_seen(
    conn: sqlite3.Connection,
    functions: dict[int, str],
    stacks: dict[int, tuple[bool, frozenset[int]]],
    in_profiles: list[Any],
    match: FunctionMatch,
) -> tuple[str, ...]:
    """The matching names that hold samples in the range (an exact name: itself)."""
    if match.kind == "exact":
        return tuple(sorted(set(functions.values())))
    seen: set[int] = set()
    for (stack_id,) in conn.execute(
        f"SELECT DISTINCT stack_id FROM profile_stacks WHERE {_PROFILES} "
        "AND stack_id IN (SELECT value FROM json_each(?))",
        [*in_profiles, json.dumps(sorted(stacks))],
    ):
        seen |= stacks[int(stack_id)][1]
    return tuple(sorted(functions[fid] for fid in seen))


class FunctionSpans:
    """The store as a ``FunctionIndex``."""

    name = "store"

    def __init__(self, db: Database) -> None:
        self._db = db

    async def function_spans(self, query: FunctionQuery, selector: str, ctx: CallContext) -> FunctionHits:
        return await self._db.read(read_function_spans, ctx.tenant_key, query, selector)
