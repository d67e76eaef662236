"""A damaged store is caught (issue 19, goal 4): measured on main, a store whose last 64 KiB were overwritten while it
was stopped started ready, answered OTLP ingest with 500 (which exporters drop) and ``/ingest`` and Push with 200
into the malformed file.

Now: refused at start with one ERROR line saying what to do; ``profile-bridge store check`` finds it and ``store
repair`` rebuilds the store from every row that can still be read — compared here, row for row, with what SQLite's
own ``dbstat`` table says lived on the pages that were not damaged; damage met while running answers a retryable 503
(gRPC UNAVAILABLE), acknowledges nothing and is logged once; ``/readyz`` sees a file cut short."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp.test_utils import TestClient
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tsvc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsvc_grpc

from bridge._proto import push_pb2
from bridge._proto import types_pb2 as tpb
from bridge.app import create_app
from bridge.cli import main
from bridge.config import Settings
from bridge.errors import StoreDamaged
from bridge.state import RUNTIME
from bridge.store import Store, decode
from bridge.store.database import DB_FILE
from bridge.store.decode import ProfileRecord
from bridge.store.integrity import header_problem, quick_check, summary
from tests.paths import GO_CPU_PPROF, SHOP_CAPTURE
from tests.serving import closed_port
from tests.store.rollup_truth import DERIVED, assert_rollups_agree_with_the_rows_kept, without_watermarks

Client = Callable[..., Awaitable[TestClient[Any, Any]]]

CAPTURE_END_S = 1795945320.0  # a little after the shop capture's last request
FIXTURES_AGE_S = 10 * 365 * 86_400.0  # a retention age that keeps every fixture (stamped 2021 to 2026)
TAIL = 64 * 1024
PROTO = {"Content-Type": "application/x-protobuf"}
PUSH = (SHOP_CAPTURE / "003_push.v1.PusherService_Push.bin").read_bytes()


def _traces() -> bytes:
    req = tsvc.ExportTraceServiceRequest()
    for path in sorted(SHOP_CAPTURE.glob("*_v1_traces.bin")):
        req.MergeFrom(tsvc.ExportTraceServiceRequest.FromString(path.read_bytes()))
    return req.SerializeToString()


TRACES = _traces()


async def _fill(data_dir: Path) -> None:
    """The shop capture (spans, profiles) and a profile 1,500 frames deep, whose stack overflows its page."""
    store = await Store.open(data_dir, clock=lambda: CAPTURE_END_S)
    try:
        for path in sorted(SHOP_CAPTURE.glob("*.bin")):
            body = path.read_bytes()
            if path.name.endswith("_v1_traces.bin"):
                await store.ingest_otlp_traces(tsvc.ExportTraceServiceRequest.FromString(body), None)
            else:
                records = decode.records_from_push(push_pb2.PushRequest.FromString(body), now_ns=0)
                await store.ingest_profiles(records, None)
        deep = tuple(f"deep_function_{i:04d}" for i in range(1500))
        await store.ingest_profiles(
            [
                ProfileRecord(
                    labels=(("__name__", "process_cpu"), ("service_name", "deep")),
                    profile_type="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                    service="deep",
                    time_ns=int(CAPTURE_END_S - 60) * 10**9,
                    duration_ns=10**10,
                    samples=[(deep[: 1500 - i], 7 + i, None, None) for i in range(3)],
                )
            ],
            None,
        )
    finally:
        await store.close()


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed store with data, to copy and damage."""
    data_dir = tmp_path_factory.mktemp("intact")
    asyncio.run(_fill(data_dir))
    assert not (data_dir / f"{DB_FILE}-wal").exists()  # closed cleanly: everything is in the one file
    return data_dir / DB_FILE


def _copy(intact: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / DB_FILE
    target.write_bytes(intact.read_bytes())
    return target


def _overwrite(path: Path, pages: Iterator[tuple[int, int]]) -> None:
    """Write deterministic garbage over (offset, length) ranges of the file."""
    noise = random.Random(19)
    with path.open("r+b") as fh:
        for offset, length in pages:
            fh.seek(offset)
            fh.write(noise.randbytes(length))


def _damage_tail(path: Path) -> set[int]:
    """The issue's damage: the file's last 64 KiB overwritten. The page numbers hit."""
    size = path.stat().st_size
    _overwrite(path, iter([(size - TAIL, TAIL)]))
    page_size = _page_size(path)
    return set(range((size - TAIL) // page_size + 1, size // page_size + 1))


def _page_size(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


# --------------------------------------------------------------------------------------------- ground truth (dbstat)


def _key_order(conn: sqlite3.Connection, btree: str) -> tuple[str, str]:
    """(table, ORDER BY) listing a b-tree's entries in its key order, with the row as the table stores it."""
    row = conn.execute("SELECT type, tbl_name, sql FROM sqlite_schema WHERE name = ?", (btree,)).fetchone()
    kind, table, sql = row
    if kind == "table":
        if "WITHOUT ROWID" in sql.upper():
            (pk,) = [r[1] for r in conn.execute(f"PRAGMA index_list('{table}')") if r[3] == "pk"]
            keys = [r[2] for r in conn.execute(f"PRAGMA index_info('{pk}')")]
            return table, ", ".join(keys)
        return table, "rowid"
    keys = [r[2] for r in conn.execute(f"PRAGMA index_info('{btree}')")]
    return table, ", ".join(keys + ["rowid"])


def _entry_pages(conn: sqlite3.Connection, btree: str, index_btree: bool) -> list[set[int]]:
    """For each entry of a b-tree in key order, the pages it lives on (its page and its overflow pages), from
    SQLite's ``dbstat``: its pages in tree order, each with its cell count (an index b-tree holds entries in its
    interior cells too, between its children's)."""
    rows = conn.execute("SELECT path, pageno, pagetype, ncell FROM dbstat WHERE name = ?", (btree,)).fetchall()
    pages = {path: (pageno, kind, ncell) for path, pageno, kind, ncell in rows if kind != "overflow"}
    overflow: dict[tuple[str, int], set[int]] = collections.defaultdict(set)
    for path, pageno, kind, _ in rows:
        if kind == "overflow":
            head, _, _ = path.partition("+")
            overflow[(head[:-3], int(head[-3:], 16))].add(pageno)
    out: list[set[int]] = []

    def visit(path: str) -> None:
        pageno, kind, ncell = pages[path]
        if kind == "leaf":
            out.extend({pageno} | overflow[(path, i)] for i in range(ncell))
            return
        for i in range(ncell):
            visit(f"{path}{i:03x}/")
            if index_btree:
                out.append({pageno} | overflow[(path, i)])
        visit(f"{path}{ncell:03x}/")

    visit("/")
    return out


def _surviving_rows(intact: Path, damaged: set[int]) -> dict[str, collections.Counter[tuple[Any, ...]]]:
    """Per table, the rows whose pages the damage missed — read from the intact copy — plus, for a table whose
    unique index holds every column, the rows whose index entry survived: what repair must give back, exactly."""
    out: dict[str, collections.Counter[tuple[Any, ...]]] = {}
    with sqlite3.connect(f"{intact.as_uri()}?mode=ro", uri=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "AND name != 'schema_version'"
            )
        ]
        for table in tables:
            _, order = _key_order(conn, table)
            without_rowid = order != "rowid"
            rows = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
            where = _entry_pages(conn, table, index_btree=without_rowid)
            assert len(where) == len(rows), table
            kept = {i for i, pages in enumerate(where) if not pages & damaged}
            ipk = [r for r in conn.execute(f"PRAGMA table_info('{table}')") if r[5]]
            if not without_rowid and len(ipk) == 1 and ipk[0][2].upper() == "INTEGER":
                by_id = {row[ipk[0][0]]: i for i, row in enumerate(rows)}
                for (index,) in conn.execute(
                    "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ? AND name LIKE "
                    "'sqlite_autoindex_%'",
                    (table,),
                ).fetchall():
                    _, index_order = _key_order(conn, index)
                    ids = conn.execute(f"SELECT {ipk[0][1]} FROM {table} ORDER BY {index_order}").fetchall()
                    entries = _entry_pages(conn, index, index_btree=True)
                    kept |= {by_id[i] for (i,), pages in zip(ids, entries, strict=True) if not pages & damaged}
            out[table] = collections.Counter(tuple(rows[i]) for i in kept)
    return out


def _rows(path: Path) -> dict[str, collections.Counter[tuple[Any, ...]]]:
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "AND name != 'schema_version'"
            )
        ]
        return {t: collections.Counter(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in tables}


def _btree_pages(intact: Path, name: str, kind: str) -> list[int]:
    with sqlite3.connect(f"{intact.as_uri()}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ?", (name, kind))]


def _damage_inside(path: Path, intact: Path) -> set[int]:
    """Damage a pointer map cannot help with and one it can: the interior root of ``samples`` (every leaf below it is
    cut off from the tree: the pointer map leads back to them), one leaf of ``functions`` (its rows come back from the
    table's UNIQUE index) and one leaf of ``spans``."""
    page_size = _page_size(path)
    hit = {
        _btree_pages(intact, "samples", "internal")[0],
        _btree_pages(intact, "functions", "leaf")[0],
        _btree_pages(intact, "spans", "leaf")[1],
    }
    _overwrite(path, iter([((n - 1) * page_size, page_size) for n in sorted(hit)]))
    return hit


# --------------------------------------------------------------------------------------------- at start


@pytest.mark.slow  # `profile-bridge serve` in its own process (seconds); the store's data is stamped in the past and
# never read against the clock here: date-safe
def test_a_damaged_store_is_refused_at_start_with_one_error_line(intact: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _damage_tail(_copy(intact, data_dir))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            f"127.0.0.1:{closed_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.stderr
    assert f"the store at {data_dir / DB_FILE} is damaged (SQLite's quick_check: " in errors[0]
    assert f"`profile-bridge store repair --data-dir {data_dir}` rebuilds it from every row" in errors[0]
    assert "listening" not in proc.stderr


async def test_a_store_too_large_to_check_before_opening_is_checked_in_the_background(
    intact: Path, tmp_path: Path, aiohttp_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``START_CHECK_BYTES`` the store opens first and SQLite's quick_check runs in the background: the damage
    it finds makes ``/readyz`` not ready and ingest a 503."""
    monkeypatch.setattr("bridge.store.database.START_CHECK_BYTES", 0)
    data_dir = tmp_path / "data"
    _damage_tail(_copy(intact, data_dir))
    settings = Settings.for_tests(mode="standalone", data_dir=str(data_dir), otlp_grpc_enabled=False)
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
    store = client.app[RUNTIME].backends.profiles
    assert isinstance(store, Store) and store.db.deferred_check
    for _ in range(600):
        if store.db.damage is not None:
            break
        await asyncio.sleep(0.05)
    assert store.db.damage is not None and store.db.damage.startswith("SQLite's quick_check: ")
    ready = await client.get("/readyz")
    assert ready.status == 503
    resp = await client.post("/push.v1.PusherService/Push", data=PUSH, headers={"Content-Type": "application/proto"})
    assert (resp.status, resp.headers.get("Retry-After")) == (503, "60")


# --------------------------------------------------------------------------------------------- check and repair


@pytest.mark.parametrize("damage", ["last-64KiB", "inside"])
def test_check_finds_the_damage_and_repair_keeps_every_readable_row(
    damage: str, intact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    path = _copy(intact, data_dir)
    hit = _damage_tail(path) if damage == "last-64KiB" else _damage_inside(path, intact)
    expected = _surviving_rows(intact, hit)
    damaged_bytes = hashlib.sha256(path.read_bytes()).hexdigest()

    assert main(["store", "check", "--data-dir", str(data_dir)], environ={}) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"the store at {path} is damaged (")
    assert f"`profile-bridge store repair --data-dir {data_dir}`" in out

    assert main(["store", "repair", "--data-dir", str(data_dir)], environ={}) == 0
    out = capsys.readouterr().out
    assert "salvaged page by page" in out and "repaired: " in out, out
    (kept,) = data_dir.glob(f"{DB_FILE}.damaged-*")
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == damaged_bytes  # the damaged original, untouched
    assert f"the damaged file is kept as {kept}" in out

    got = _rows(path)
    original = _rows(intact)
    assert set(got) == set(expected) and "per-span rollups were rebuilt" in out and "rollups were emptied" in out
    for table, rows in expected.items():
        if table not in DERIVED:  # rebuilt from the rows kept, not copied: checked below
            rows = without_watermarks(table, rows)
            assert got[table] == rows, f"{table}: {sum(got[table].values())} rows kept, {sum(rows.values())} readable"
            assert not got[table] - original[table]  # nothing that was not there
    assert_rollups_agree_with_the_rows_kept(path)
    lost = {t: sum((original[t] - got[t]).values()) for t in original}
    assert any(lost.values()) and sum(sum(c.values()) for c in got.values()) > 1000
    if damage == "inside":  # the pointer map and the unique index brought back what the tree walk could not
        assert got["samples"] == original["samples"]
        assert lost["functions"] == 0

    assert main(["store", "check", "--data-dir", str(data_dir)], environ={}) == 0
    assert "is intact" in capsys.readouterr().out
    assert main(["store", "repair", "--data-dir", str(data_dir)], environ={}) == 0
    assert "nothing to repair" in capsys.readouterr().out


async def test_the_repaired_store_opens_and_serves(intact: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _damage_tail(_copy(intact, data_dir))
    with pytest.raises(StoreDamaged):
        await Store.open(data_dir)
    assert main(["store", "repair", "--data-dir", str(data_dir)], environ={}) == 0
    store = await Store.open(data_dir, clock=lambda: CAPTURE_END_S)
    try:
        counts = await store.counts()
        assert counts.spans > 0 and counts.samples > 0
        records = decode.records_from_push(push_pb2.PushRequest.FromString(PUSH), now_ns=0)
        assert await store.ingest_profiles(records, None) > 0
    finally:
        await store.close()


def test_repair_refuses_while_another_process_has_the_store_open(
    intact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    path = _copy(intact, data_dir)
    _damage_tail(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(path)!r})\n"
            "c.execute('SELECT 1 FROM schema_version').fetchone()\n"
            "print('open', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        assert main(["store", "repair", "--data-dir", str(data_dir)], environ={}) == 1
        err = capsys.readouterr().err
        assert (
            err == f"profile-bridge store repair: a process has the store at {path} open (a running bridge?): "
            "stop it, then repair\n"
        )
        assert not list(data_dir.glob("*.damaged-*"))
    finally:
        holder.communicate("", timeout=30)
    assert main(["store", "repair", "--data-dir", str(data_dir)], environ={}) == 0


def test_store_commands_without_a_store_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("check", "repair"):
        assert main(["store", action, "--data-dir", str(tmp_path / "none")], environ={}) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"profile-bridge store {action}: there is no store at" in err


# --------------------------------------------------------------------------------------------- while running


def _refused_traces() -> bytes:
    """The capture's traces under a service name nothing else has (to look for after a repair)."""
    req = tsvc.ExportTraceServiceRequest.FromString(TRACES)
    for rs in req.resource_spans:
        for attr in rs.resource.attributes:
            if attr.key == "service.name":
                attr.value.string_value = "refused-traces"
    return req.SerializeToString()


def _refused_push() -> bytes:
    req = push_pb2.PushRequest.FromString(PUSH)
    for series in req.series:
        for label in series.labels:
            if label.name == "service_name":
                label.value = "refused-push"
    return req.SerializeToString()


async def test_damage_met_while_running_is_a_retryable_503_never_acknowledged_and_logged_once(
    intact: Path,
    tmp_path: Path,
    aiohttp_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Damage that comes after the start check (here: the check is told to see nothing, and the root pages of the
    tables every ingest writes are overwritten): every ingest route answers 503 with Retry-After (gRPC UNAVAILABLE
    with RetryInfo), a query that meets it too, ``/readyz`` says not ready, one ERROR line — and after a repair none
    of the refused data is in the store."""
    monkeypatch.setattr("bridge.store.database.quick_check", lambda conn: [])
    data_dir = tmp_path / "data"
    path = _copy(intact, data_dir)
    names = ("spans", "resources", "series", "sqlite_autoindex_series_1", "functions", "sqlite_autoindex_functions_1")
    with sqlite3.connect(path) as conn:
        roots = [conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (n,)).fetchone()[0] for n in names]
    page_size = _page_size(path)
    _overwrite(path, iter([((n - 1) * page_size, page_size) for n in roots]))
    settings = Settings.for_tests(
        mode="standalone",
        data_dir=str(data_dir),
        otlp_grpc_enabled=True,
        otlp_grpc_listen=("127.0.0.1", 0),
        retention_age=FIXTURES_AGE_S,
    )
    with caplog.at_level(logging.INFO):
        client = await aiohttp_client(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
        backends = client.app[RUNTIME].backends
        assert backends is not None and backends.grpc is not None

        resp = await client.post("/v1/traces", data=_refused_traces(), headers=PROTO)
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "60")
        status = status_pb2.Status.FromString(await resp.read())
        assert status.code == 14 and "the standalone store is damaged" in status.message

        resp = await client.post(
            "/push.v1.PusherService/Push", data=_refused_push(), headers={"Content-Type": "application/proto"}
        )
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "60")
        assert (await resp.json())["code"] == "unavailable"

        resp = await client.post("/ingest?name=refused-ingest.cpu&format=pprof", data=GO_CPU_PPROF.read_bytes())
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "60")

        async with grpc.aio.insecure_channel(f"127.0.0.1:{backends.grpc.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await tsvc_grpc.TraceServiceStub(channel).Export(
                    tsvc.ExportTraceServiceRequest.FromString(_refused_traces()), timeout=10
                )
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        details = dict(caught.value.trailing_metadata() or ())["grpc-status-details-bin"]
        [info] = status_pb2.Status.FromString(details).details
        retry = error_details_pb2.RetryInfo()
        assert info.Unpack(retry) and retry.retry_delay.seconds == 60

        resp = await client.post(
            "/pyroscope/querier.v1.QuerierService/LabelValues",
            data=tpb.LabelValuesRequest(name="service_name", start=0, end=2**62).SerializeToString(),
            headers={"Content-Type": "application/proto"},
        )
        assert resp.status == 503  # a read that meets the damage: retryable, not a 500

        ready = await client.get("/readyz")
        assert ready.status == 503
        body = await ready.text()
        assert "the standalone store is damaged" in body and str(tmp_path) not in body
        await client.close()

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert f"the store at {path} is damaged" in errors[0].getMessage()
    assert "ingest is refused" in errors[0].getMessage() and "store repair" in errors[0].getMessage()

    monkeypatch.undo()
    assert main(["store", "repair", "--data-dir", str(data_dir)], environ={}) == 0
    with sqlite3.connect(path) as conn:
        services = {r[0] for r in conn.execute("SELECT service FROM series UNION SELECT service FROM spans")}
    assert services and not services & {"refused-traces", "refused-push", "refused-ingest"}


async def test_a_group_commit_that_meets_damage_acknowledges_nothing_and_later_writes_are_refused(
    intact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bridge.store.database.quick_check", lambda conn: [])
    path = _copy(intact, tmp_path)
    with sqlite3.connect(path) as conn:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'functions'").fetchone()
    page_size = _page_size(path)
    _overwrite(path, iter([((root - 1) * page_size, page_size)]))
    store = await Store.open(tmp_path)
    ran: list[str] = []

    def touch_functions(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO functions (name) VALUES ('x')")

    def harmless(conn: sqlite3.Connection) -> None:
        ran.append("harmless")

    try:
        with pytest.raises(StoreDamaged) as caught:
            await store.db.commit(touch_functions)
        assert "nothing of this request was stored" in caught.value.message
        with pytest.raises(StoreDamaged):
            await store.db.commit(harmless)
        assert ran == []  # refused without touching the file
        assert store.db.damage is not None
    finally:
        await store.close()


async def test_readyz_sees_a_file_cut_short_while_running(tmp_path: Path, aiohttp_client: Client) -> None:
    data_dir = tmp_path / "data"
    settings = Settings.for_tests(mode="standalone", data_dir=str(data_dir), otlp_grpc_enabled=False)
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
    assert (await client.post("/v1/traces", data=TRACES, headers=PROTO)).status == 200
    assert (await client.get("/readyz")).status == 200
    path = data_dir / DB_FILE
    os.truncate(path, path.stat().st_size - 100)
    ready = await client.get("/readyz")
    assert ready.status == 503
    message = (await ready.json())["upstreams"]["tempo"]["message"]
    assert "not a whole number of" in message and str(tmp_path) not in message
    resp = await client.post("/v1/traces", data=TRACES, headers=PROTO)
    assert (resp.status, resp.headers.get("Retry-After")) == (503, "60")


@pytest.mark.parametrize(
    ("write", "problem"),
    [
        (lambda p: p.write_bytes(b""), None),
        (lambda p: p.write_bytes(b"not sqlite" * 100), "not an SQLite database header"),
        (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x03\x00" + bytes(82)), "page size of 768"),
        (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x10\x00" + bytes(4096 + 10 - 18)), "whole number"),
    ],
    ids=["empty", "not-sqlite", "page-size", "partial-page"],
)
def test_header_problems(tmp_path: Path, write: Callable[[Path], object], problem: str | None) -> None:
    path = tmp_path / DB_FILE
    write(path)
    found = header_problem(path)
    assert (found is None) if problem is None else (found is not None and problem in found), found
    assert header_problem(tmp_path / "absent") is None


def test_header_sees_a_file_cut_short_against_its_page_count(intact: Path, tmp_path: Path) -> None:
    path = _copy(intact, tmp_path)
    assert header_problem(path) is None
    os.truncate(path, path.stat().st_size - _page_size(path))
    found = header_problem(path)
    assert found is not None and "cut short" in found


class _Rows:
    """A connection whose quick_check answers as SQLite does for a tree with several damaged pages: one row holding
    many lines (seen on an 89 MiB store with its last 64 KiB and one interior page written over)."""

    def execute(self, sql: str) -> list[tuple[str]]:
        assert sql.startswith("PRAGMA quick_check")
        lines = [f"Page {n}: btreeInitPage() returns error code 11" for n in range(22765, 22749, -1)]
        return [
            ("*** in database main ***\n" + "\n".join(lines),),
            ("On page 22 at right child: Child page depth differs",),
        ]


def test_quick_checks_findings_make_one_line() -> None:
    found = quick_check(_Rows())  # type: ignore[arg-type]
    assert found[0] == "*** in database main ***" and len(found) == 18
    assert summary(found) == "Page 22765: btreeInitPage() returns error code 11; 16 more"
