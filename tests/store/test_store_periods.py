"""The store keeps what one sample adds to each profile (migration 9, ``profiles.period``), from what every upload
shape says: the pprof ``period`` (Push, /ingest pprof), the /ingest ``sampleRate`` (folded), OTLP's ``period``.
Ground truth: the shop capture (pyroscope-io 1.4, 100 Hz: a period of 10 ms in ``cpu:nanoseconds``), the Go CPU
profile from Pyroscope's test data, the ``@pyroscope/nodejs`` capture."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bridge.call import CallContext, Deadline
from bridge.compression import Budget
from bridge.pprof import decode_pprof
from bridge.profiletype import ProfileType
from bridge.store import Store, decode, schema
from bridge.store.database import DB_FILE
from bridge.store.decode_jfr import records_from_jfr
from tests.paths import FIXTURES, GO_CPU_PPROF, JFR_FIXTURES
from tests.store.test_store import ALL_MS, CAPTURE_END_S, CPU, ingest_capture

NODE_CPU = "process_cpu:cpu:nanoseconds:wall:nanoseconds"  # as Pyroscope relabels @pyroscope/nodejs's cpu


def ctx() -> CallContext:
    return CallContext(deadline=Deadline.start(None, 10.0))


def test_sample_period_of_each_sample_type() -> None:
    # pyroscope-io and the Go SDK: cpu nanoseconds under a cpu nanoseconds period: each sample adds the period
    assert ProfileType("t", "cpu", "nanoseconds", "cpu", "nanoseconds").sample_period(10_000_000) == 10_000_000
    # a count of samples adds one; @pyroscope/nodejs's wall time is count × period
    assert ProfileType("t", "samples", "count", "wall", "nanoseconds").sample_period(10_278_000) == 1
    assert ProfileType("t", "wall", "nanoseconds", "wall", "nanoseconds").sample_period(10_278_000) == 10_278_000
    # a profile without a period, or whose values are in another unit, does not say
    assert ProfileType("t", "cpu", "nanoseconds", "cpu", "nanoseconds").sample_period(0) == 0
    assert ProfileType("t", "alloc_space", "bytes", "space", "bytes").sample_period(0) == 0
    assert ProfileType("t", "contentions", "count", "mutex", "count").sample_period(1) == 0


async def test_push_keeps_the_pprof_period(tmp_path: Path) -> None:
    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    try:
        await ingest_capture(store)
        backend = await store.sample_periods(CPU, '{service_name="shop-backend"}', *ALL_MS, ctx())
        everyone = await store.sample_periods(CPU, "{}", *ALL_MS, ctx())
        nothing = await store.sample_periods(CPU, '{service_name="nobody"}', *ALL_MS, ctx())
    finally:
        await store.close()
    assert set(backend) == {10_000_000}  # every shop-backend upload at 100 Hz (one row per series and upload)
    assert set(everyone) == {10_000_000} and sum(everyone.values()) > sum(backend.values())
    assert nothing == {}


async def test_legacy_ingest_keeps_the_period_of_each_shape(tmp_path: Path) -> None:
    go = decode.records_from_legacy_pprof(
        GO_CPU_PPROF.read_bytes(), decode.parse_legacy_name("go-app{}"), from_s=None, until_s=None, now_ns=10**18
    )
    assert {(r.profile_type, r.period) for r in go} == {
        ("process_cpu:samples:count:cpu:nanoseconds", 1),
        ("process_cpu:cpu:nanoseconds:cpu:nanoseconds", 10_000_000),
    }
    node_raw = (FIXTURES / "node-capture" / "001_ingest.bin").read_bytes()
    node_period = decode_pprof(node_raw).period
    node = decode.records_from_legacy_pprof(
        node_raw, decode.parse_legacy_name("shop-node{}"), from_s=None, until_s=None, now_ns=10**18, spy="nodespy"
    )
    periods = {r.profile_type: r.period for r in node}
    assert periods["wall:samples:count:wall:nanoseconds"] == 1
    assert periods["wall:wall:nanoseconds:wall:nanoseconds"] == node_period
    assert periods[NODE_CPU] == node_period  # kept as the pprof says; its values are measured, not counted
    folded = decode.records_from_folded(
        b"main;work 7\nmain 3\n",
        decode.parse_legacy_name("py-app.cpu{}"),
        from_s=1,
        until_s=11,
        sample_rate=100,
        now_ns=10**18,
    )
    assert [(r.profile_type, r.period, r.total) for r in folded] == [(CPU, 10_000_000, 100_000_000)]
    counts = decode.records_from_folded(
        b"main 3\n", decode.parse_legacy_name("py-app.cpu{}"), from_s=1, until_s=11, sample_rate=0, now_ns=10**18
    )
    assert [(r.profile_type, r.period) for r in counts] == [("process_cpu:samples:count::", 1)]


async def test_migration_9_keeps_older_profiles_with_an_unknown_period(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    assert schema.migrate(conn, target=8) == 8
    labels = {"__name__": "process_cpu", "__profile_type__": CPU, "service_name": "old"}
    conn.execute(
        "INSERT INTO series (tenant, labels, service, profile_type) VALUES ('anonymous', ?, 'old', ?)",
        (json.dumps(labels, sort_keys=True, separators=(",", ":")), CPU),
    )
    conn.execute("INSERT INTO profiles (series_id, time_ns, duration_ns, total) VALUES (1, 5000000000, 10, 7)")
    conn.close()
    store = await Store.open(tmp_path, clock=lambda: 10.0)
    try:
        assert await store.sample_periods(CPU, '{service_name="old"}', 0, 10_000, ctx()) == {0: 1}
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    assert schema.current_version(conn) == schema.LATEST >= 9  # 10: typed tags
    conn.close()


def test_a_jfr_upload_keeps_the_period_its_sample_rate_gives() -> None:
    # the Java SDK's recording at sampleRate 100: each CPU sample is worth 1e9 // 100 ns (jfr-parser pprof/pprof.go)
    budget = Budget(64 * 1024 * 1024)
    records = records_from_jfr(
        (JFR_FIXTURES / "example.jfr.gz").read_bytes(),
        decode.parse_legacy_name("java-app{}"),
        from_s=1_700_000_000,
        until_s=1_700_000_010,
        sample_rate=100,
        now_ns=10**18,
        max_bytes=budget.limit,
        budget=budget,
    )
    periods = {r.profile_type: r.period for r in records}
    assert periods[CPU] == 10_000_000
    assert periods["memory:alloc_in_new_tlab_bytes:bytes:space:bytes"] == 0  # not sampled in time
    assert periods["mutex:delay:nanoseconds:mutex:count"] == 0
