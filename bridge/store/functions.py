"""The function → spans query of the store: which spans' linked samples hold a function, from the per-sample span
ids every sample row keeps.

The index: ``stack_functions`` (schema migration 5) lists, for every stored stack, each distinct function in it —
filled at ingest (``index_stack``, called when a stack's id is looked up) and pruned with the stacks retention drops
(``collect_garbage``). A query reads it by function id (its primary key), checks each candidate stack against the
stack's own frames (so a row left behind for a dropped stack whose id SQLite gave to a new one never counts), then
adds up the matching stacks' sample rows of the service's profiles in the range, per span id, in one ``GROUP BY``.
Its cost follows the samples of that service and range (the profiles' time index picks them), not the store's size
(``bench/function_spans.py``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from bridge.errors import InvalidArgument
from bridge.functions import MAX_MATCHED_FUNCTIONS, FunctionHits, FunctionMatch, FunctionQuery, SpanValue, order_spans
from bridge.profiletype import ProfileType
from bridge.selector import matches_any, parse_selector
from bridge.store.database import Database
from bridge.store.decode import int_to_span_id, span_id_to_int
from bridge.store.query import window_ns
from bridge.store.schema import unpack_frames
from bridge.upstream.base import CallContext

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
            rows = conn.execute("SELECT id, name FROM functions WHERE substr(name, 1, ?) = ? LIMIT ?",
                                (len(match.text), match.text, MAX_MATCHED_FUNCTIONS + 1)).fetchall()
        else:
            rows = conn.execute("SELECT id, name FROM functions WHERE name >= ? AND name < ? LIMIT ?",
                                (match.text, upper, MAX_MATCHED_FUNCTIONS + 1)).fetchall()
    else:
        rows = []
        for fid, name in conn.execute("SELECT id, name FROM functions LIMIT ?", (MAX_REGEX_NAMES,)):
            if match.matches(name):
                rows.append((fid, name))
                if len(rows) > MAX_MATCHED_FUNCTIONS:
                    break
    if len(rows) > MAX_MATCHED_FUNCTIONS:
        raise InvalidArgument(f"{match.describe()} takes in more than {MAX_MATCHED_FUNCTIONS} function names: "
                              "narrow it")
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
        int(sid) for sid, labels in conn.execute(
            "SELECT id, labels FROM series WHERE tenant = ? AND profile_type = ?", (tenant, profile_type))
        if matches_any(matchers, json.loads(labels))
    ]


_PROFILES: Final = ("profile_id IN (SELECT id FROM profiles WHERE series_id IN (SELECT value FROM json_each(?)) "
                    "AND time_ns >= ? AND time_ns < ?)")


def read_function_spans(conn: sqlite3.Connection, tenant: str, query: FunctionQuery, selector: str) -> FunctionHits:
    """The query, on a reader connection."""
    ProfileType.parse(query.profile_type)
    hits = FunctionHits((), (), 0, 0, 0, SOURCE)
    series = series_of(conn, tenant, query.profile_type, selector)
    functions = matching_functions(conn, query.match) if series else {}
    stacks = stacks_with(conn, sorted(functions)) if functions else {}
    if not stacks:
        return hits
    window = window_ns(query.start_ms, query.end_ms)
    in_profiles: list[Any] = [json.dumps(series), *window]
    leaves = [sid for sid, (leaf, _) in stacks.items() if leaf]
    per_span: list[tuple[int | None, bytes | None, int, int]] = [
        (span, trace, int(total), int(self_value)) for span, trace, total, self_value in conn.execute(
            "SELECT span_id, max(trace_id), sum(value), "
            "sum(CASE WHEN stack_id IN (SELECT value FROM json_each(?)) THEN value ELSE 0 END) "
            f"FROM samples WHERE {_PROFILES} AND stack_id IN (SELECT value FROM json_each(?)) GROUP BY span_id",
            [json.dumps(leaves), *in_profiles, json.dumps(sorted(stacks))],
        )
    ]
    total = sum(row[2] for row in per_span)
    if not total:
        return hits
    linked = [row for row in per_span if row[0] is not None]
    values = order_spans(
        SpanValue(int_to_span_id(span), trace.hex() if trace else "", t, s, 0)
        for span, trace, t, s in linked if span is not None
    )
    top = values[: query.limit]
    span_totals = _span_totals(conn, [n for v in top if (n := span_id_to_int(v.span_id)) is not None], in_profiles)
    spans = tuple(
        SpanValue(v.span_id, v.trace_id, v.total, v.self, span_totals.get(v.span_id, v.total)) for v in top
    )
    return FunctionHits(spans, _names_seen(conn, functions, stacks, in_profiles, query.match), total,
                        sum(row[2] for row in linked), len(values) - len(top), SOURCE)


def _span_totals(conn: sqlite3.Connection, span_ids: Sequence[int], in_profiles: list[Any]) -> dict[str, int]:
    if not span_ids:
        return {}
    rows = conn.execute(
        "SELECT span_id, sum(value) FROM samples INDEXED BY samples_span "
        f"WHERE span_id IN (SELECT value FROM json_each(?)) AND {_PROFILES} GROUP BY span_id",
        [json.dumps(list(span_ids)), *in_profiles],
    )
    return {int_to_span_id(span): int(total) for span, total in rows}


def _names_seen(conn: sqlite3.Connection, functions: dict[int, str], stacks: dict[int, tuple[bool, frozenset[int]]],
                in_profiles: list[Any], match: FunctionMatch) -> tuple[str, ...]:
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
