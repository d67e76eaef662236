"""The store's function → spans index (``stack_functions``, ``bridge/store/functions.py``): the migration indexes the
stacks a database already holds, ingest indexes new ones, retention prunes it, and a stale row can never make a
stack count for a function it does not hold."""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

from bridge.call import CallContext, Deadline
from bridge.functions import FunctionMatch, FunctionQuery
from bridge.store import Store, decode, schema
from bridge.store.database import DB_FILE

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
T0_S = 1_700_000_000
SELECTOR = '{service_name="svc"}'


def ctx() -> CallContext:
    return CallContext(deadline=Deadline.start(None, 10.0))


def record(samples: list[tuple[tuple[str, ...], int, int | None]], at_s: int = T0_S) -> decode.ProfileRecord:
    labels = tuple(
        sorted(
            {
                **decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds").labels(),
                "service_name": "svc",
            }.items()
        )
    )
    return decode.ProfileRecord(
        labels=labels,
        profile_type=CPU,
        service="svc",
        time_ns=at_s * 1_000_000_000,
        duration_ns=10_000_000_000,
        samples=[(frames, value, span, None) for frames, value, span in samples],
    )


def query(function: str, kind: str = "exact") -> FunctionQuery:
    return FunctionQuery(
        "svc", FunctionMatch.parse(function, kind), CPU, T0_S * 1000 - 1000, T0_S * 1000 + 60_000, limit=10
    )


def index_rows(db: Path) -> set[tuple[str, tuple[str, ...]]]:
    """(function name, the stack's frames) for every index row, read with plain SQL and struct."""
    conn = sqlite3.connect(db)
    try:
        names = dict(conn.execute("SELECT id, name FROM functions").fetchall())
        frames = {
            sid: struct.unpack(f"<{len(blob) // 4}i", blob)
            for sid, blob in conn.execute("SELECT id, frames FROM stacks")
        }
        return {
            (names[f], tuple(names[i] for i in frames[s]))
            for f, s in conn.execute("SELECT function_id, stack_id FROM stack_functions")
        }
    finally:
        conn.close()


async def test_ingest_indexes_every_function_of_every_new_stack(tmp_path: Path) -> None:
    store = await Store.open(tmp_path)
    try:
        await store.ingest_profiles([record([(("main", "work", "work"), 30, 1), (("main", "io"), 10, 2)])], None)
        await store.ingest_profiles([record([(("main", "work", "work"), 5, 3)], T0_S + 10)], None)
    finally:
        await store.close()
    assert index_rows(tmp_path / DB_FILE) == {
        ("main", ("main", "work", "work")),
        ("work", ("main", "work", "work")),
        ("main", ("main", "io")),
        ("io", ("main", "io")),
    }


async def test_the_migration_indexes_the_stacks_an_older_store_holds(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    schema.migrate(conn, target=4)
    conn.executemany(
        "INSERT INTO functions (id, name) VALUES (?, ?)",
        [(1, "main"), (2, "handle"), (3, "count_primes"), (70_000, "deep")],
    )
    stacks = {1: [1, 2, 3], 2: [1, 2], 3: [1, 70_000, 3, 3]}
    for sid, ids in stacks.items():
        conn.execute("INSERT INTO stacks (id, frames) VALUES (?, ?)", (sid, struct.pack(f"<{len(ids)}i", *ids)))
    labels = {"__name__": "process_cpu", "__profile_type__": CPU, "service_name": "svc"}
    conn.execute(
        "INSERT INTO series (tenant, labels, service, profile_type) VALUES ('anonymous', ?, 'svc', ?)",
        (json.dumps(labels, sort_keys=True, separators=(",", ":")), CPU),
    )
    conn.execute(
        "INSERT INTO profiles (series_id, time_ns, duration_ns, total) VALUES (1, ?, 10, 0)", (T0_S * 1_000_000_000,)
    )
    conn.executemany(
        "INSERT INTO samples VALUES (1, 1, ?, ?, ?, NULL)", [(1, 40, 11), (2, 5, 11), (3, 25, 12), (1, 7, None)]
    )
    conn.close()
    store = await Store.open(tmp_path)
    try:
        hits = await store.function_spans(query("count_primes"), SELECTOR, ctx())
    finally:
        await store.close()
    assert index_rows(tmp_path / DB_FILE) == {
        ("main", ("main", "handle", "count_primes")),
        ("handle", ("main", "handle", "count_primes")),
        ("count_primes", ("main", "handle", "count_primes")),
        ("main", ("main", "handle")),
        ("handle", ("main", "handle")),
        ("main", ("main", "deep", "count_primes", "count_primes")),
        ("deep", ("main", "deep", "count_primes", "count_primes")),
        ("count_primes", ("main", "deep", "count_primes", "count_primes")),
    }
    assert [(v.span_id, v.total, v.self, v.span_total) for v in hits.spans] == [
        (decode.int_to_span_id(11), 40, 40, 45),
        (decode.int_to_span_id(12), 25, 25, 25),
    ]
    assert (hits.total, hits.linked) == (72, 65)


async def test_a_stale_index_row_never_counts(tmp_path: Path) -> None:
    store = await Store.open(tmp_path)
    try:
        await store.ingest_profiles([record([(("main", "io"), 10, 2), (("main", "work"), 30, 1)])], None)

        def stale(conn: sqlite3.Connection) -> None:
            work = conn.execute("SELECT id FROM functions WHERE name = 'work'").fetchone()[0]
            io_stack = conn.execute(
                "SELECT stack_id FROM stack_functions JOIN functions f ON f.id = function_id WHERE f.name = 'io'"
            ).fetchone()[0]
            conn.execute("INSERT INTO stack_functions VALUES (?, ?)", (work, io_stack))

        await store.db.commit(stale)
        hits = await store.function_spans(query("work"), SELECTOR, ctx())
    finally:
        await store.close()
    assert [(v.span_id, v.total) for v in hits.spans] == [(decode.int_to_span_id(1), 30)]


async def test_retention_prunes_the_index_with_the_stacks(tmp_path: Path) -> None:
    now = [float(T0_S + 60)]
    store = await Store.open(tmp_path, clock=lambda: now[0])
    try:
        await store.ingest_profiles([record([(("main", "old"), 10, 1)])], None)
        await store.ingest_profiles([record([(("main", "new"), 10, 2)], T0_S + 3600)], None)
        now[0] = T0_S + 3600 + 60
        await store.enforce_retention(max_age_s=1800, max_bytes=1024**3)
        hits = await store.function_spans(query("old"), SELECTOR, ctx())
    finally:
        await store.close()
    assert index_rows(tmp_path / DB_FILE) == {("main", ("main", "new")), ("new", ("main", "new"))}
    assert hits.spans == () and hits.total == 0


async def test_tenants_do_not_see_each_others_spans(tmp_path: Path) -> None:
    store = await Store.open(tmp_path)
    try:
        await store.ingest_profiles([record([(("main", "work"), 10, 1)])], "a")
        await store.ingest_profiles([record([(("main", "work"), 20, 2)])], "b")
        a = await store.function_spans(query("work"), SELECTOR, CallContext(Deadline.start(None, 5.0), tenant="a"))
        anonymous = await store.function_spans(query("work"), SELECTOR, ctx())
    finally:
        await store.close()
    assert [(v.span_id, v.total) for v in a.spans] == [(decode.int_to_span_id(1), 10)]
    assert anonymous.spans == () and anonymous.total == 0


async def test_a_prefix_ending_in_the_last_code_point_still_matches(tmp_path: Path) -> None:
    store = await Store.open(tmp_path)
    try:
        await store.ingest_profiles([record([(("main", "fn\U0010ffffx"), 10, 1)])], None)
        hits = await store.function_spans(query("fn\U0010ffff", "prefix"), SELECTOR, ctx())
    finally:
        await store.close()
    assert hits.functions == ("fn\U0010ffffx",) and hits.total == 10
