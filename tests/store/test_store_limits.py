"""The standalone store under extreme but valid input and a full disk (issue 11, items 4, 5, 7 and 15): every case
is a clear 4xx or a retryable ``unavailable``, never a 500, and nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge._proto import push_pb2
from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.config import Settings
from bridge.diskfull import WatchedSink
from bridge.errors import BridgeError, Code, InvalidArgument, StorageFull
from bridge.state import RUNTIME
from bridge.store import Store, decode
from tests.paths import SHOP_CAPTURE
from tests.store.test_store import ALL_MS, CAPTURE_END_S, CPU, ctx

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
QUERIER = "/pyroscope/querier.v1.QuerierService/"
DAY = 86_400.0
FRESH_S = int(CAPTURE_END_S) - 30  # a capture start inside every retention age used here


def make_app(tmp_path: Path, now: Callable[[], float] = lambda: CAPTURE_END_S, **changes: Any) -> web.Application:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), **changes)
    return create_app(settings, wall_clock=now)


def store_of(client: TestClient[Any, Any]) -> Store:
    sink = client.app[RUNTIME].backends.ingest  # type: ignore[union-attr]
    assert isinstance(sink, WatchedSink)  # standalone ingest goes through the disk-full watch to the store
    store = sink.store
    assert isinstance(store, Store)
    return store


async def query(client: TestClient[Any, Any], method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    resp = await client.post(
        QUERIER + method,
        data=json.dumps(body),
        headers={"Content-Type": "application/json", "Connect-Protocol-Version": "1"},
    )
    return resp.status, await resp.json()


async def post_folded(
    client: TestClient[Any, Any], name: str, body: bytes, from_s: int = FRESH_S, rate: int = 0
) -> Any:
    return await client.post(f"/ingest?name={name}&format=folded&from={from_s}&sampleRate={rate}", data=body)


# --------------------------------------------------------------------------------------------- item 4: huge values


async def test_huge_sample_values_are_refused_at_ingest_and_flame_graphs_keep_answering(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    """Two accepted uploads of 2^62 used to overflow SQLite's SUM: every flame graph of the service answered 500."""
    client = await aiohttp_client(make_app(tmp_path))
    ok = await post_folded(client, "victim.cpu", b"main;work 5\n")
    assert ok.status == 200, await ok.text()
    for _ in range(2):
        resp = await post_folded(client, "victim.cpu", b"main;work 4611686018427387904\n")
        assert resp.status == 400
        text = await resp.text()
        assert "outside ±2^53" in text and "4611686018427387904" in text
    # a profile whose samples are each in range but whose total is not
    resp = await post_folded(client, "victim.cpu", b"main;a 9007199254740992\nmain;b 9007199254740992\n")
    assert resp.status == 400 and "totals 18014398509481984" in await resp.text()
    profile_type = "process_cpu:samples:count::"
    status, doc = await query(
        client,
        "SelectMergeStacktraces",
        {
            "profile_typeID": profile_type,
            "label_selector": '{service_name="victim"}',
            "start": ALL_MS[0],
            "end": ALL_MS[1],
        },
    )
    assert status == 200 and int(doc["flamegraph"]["total"]) == 5


async def huge_store(tmp_path: Path) -> Store:
    """Three profiles whose values an older bridge stored without a bound: 2^62 each, 1.5 × 2^63 together."""
    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S + DAY)
    ptype = decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds")
    for offset in (0, 10, 20):
        records = decode.records_from_samples(
            {"service_name": "old"}, ptype, (FRESH_S + offset) * 10**9, 10**10, [(("main", "hot"), 7, {})]
        )
        await store.ingest_profiles(records, None)
    await store.db.commit(lambda c: c.execute("UPDATE profile_stacks SET value = 4611686018427387904"))
    return store


@pytest.mark.parametrize("compacted", [False, True])
async def test_sums_past_int64_are_a_clear_error_not_a_500(tmp_path: Path, compacted: bool) -> None:
    """Values stored before the bound (an older bridge) can still sum past int64: the merge says so (400
    out_of_range), from raw profiles and through the rollups alike, and compaction does not get stuck on them."""
    store = await huge_store(tmp_path)
    try:
        if compacted:
            assert await store.compact() > 0
            rows = await store.db.read(lambda c: c.execute("SELECT value FROM rollups WHERE level = 60").fetchall())
            assert rows and all(v == 2**63 - 1 for (v,) in rows)  # saturated, not wrapped or turned into a float
        req = qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="old"}', start=ALL_MS[0], end=ALL_MS[1]
        )
        with pytest.raises(BridgeError) as caught:
            await store.select_merge_stacktraces(req, ctx())
        assert caught.value.code == Code.OUT_OF_RANGE and caught.value.http_status == 400
        assert "2^63 - 1" in caught.value.message and "narrow" in caught.value.message
        # one profile alone still answers
        one = qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="old"}', start=FRESH_S * 1000, end=FRESH_S * 1000
        )
        assert (await store.select_merge_stacktraces(one, ctx())).flamegraph.total == 2**62
    finally:
        await store.close()


async def test_an_overflowing_merge_answers_400_over_http(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))  # the clock: these minutes are too fresh to compact
    for offset in (0, 10, 20):
        assert (await post_folded(client, "old.cpu", b"main;hot 7\n", from_s=FRESH_S + offset)).status == 200
    store = store_of(client)
    await store.db.commit(lambda c: c.execute("UPDATE profile_stacks SET value = 4611686018427387904"))
    status, doc = await query(
        client,
        "SelectMergeStacktraces",
        {
            "profile_typeID": "process_cpu:samples:count::",
            "label_selector": '{service_name="old"}',
            "start": ALL_MS[0],
            "end": ALL_MS[1],
        },
    )
    assert status == 400, doc
    assert doc["code"] == "out_of_range" and "2^63 - 1" in doc["message"]


# --------------------------------------------------------------------------------------------- item 5: extreme input


@pytest.mark.parametrize("step", [math.inf, -math.inf, math.nan, 0.0, -15.0, 1e-9])
async def test_select_series_with_an_impossible_step_is_a_400(
    tmp_path: Path, aiohttp_client: Client, step: float
) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    msg = qpb.SelectSeriesRequest(profile_typeID=CPU, label_selector="{}", start=0, end=10**12, step=step)
    for body, ctype in (
        (msg.SerializeToString(), "application/proto"),
        (json_format.MessageToJson(msg).encode(), "application/json"),
    ):
        resp = await client.post(
            QUERIER + "SelectSeries", data=body, headers={"Content-Type": ctype, "Connect-Protocol-Version": "1"}
        )
        assert resp.status == 400, await resp.text()
        doc = json.loads(await resp.read())
        assert doc["code"] == "invalid_argument" and "step" in doc["message"]


async def test_select_series_with_huge_start_and_end_answers(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    assert (await post_folded(client, "edge.cpu", b"main 3\n")).status == 200
    for start, end in ((-(2**63), 2**63 - 1), (2**62, 2**63 - 1), (-(2**63), -(2**62))):
        status, doc = await query(
            client,
            "SelectSeries",
            {
                "profile_typeID": "process_cpu:samples:count::",
                "label_selector": "{}",
                "start": str(start),
                "end": str(end),
                "step": 60,
            },
        )
        assert status == 200, doc
        for method in ("SelectMergeStacktraces", "SelectMergeProfile", "SelectMergeSpanProfile"):
            status, doc = await query(
                client,
                method,
                {
                    "profile_typeID": "process_cpu:samples:count::",
                    "label_selector": "{}",
                    "start": str(start),
                    "end": str(end),
                    "span_selector": ["0000000000000001"],
                },
            )
            # answered (an empty or clipped window) or refused with a message; never a 500
            assert status == 200 or (
                status == 400 and doc["code"] == "invalid_argument" and "between 1970 and 2200" in doc["message"]
            ), (method, doc)


@pytest.mark.parametrize("from_s", ["99999999999999999999", "9223372036854775807", "-5000000000"])
@pytest.mark.parametrize("fmt", ["folded", "pprof"])
async def test_ingest_with_an_impossible_from_is_a_400(
    tmp_path: Path, aiohttp_client: Client, from_s: str, fmt: str
) -> None:
    from tests.paths import GO_CPU_PPROF

    client = await aiohttp_client(make_app(tmp_path))
    body = b"main;work 3\n" if fmt == "folded" else GO_CPU_PPROF.read_bytes()
    resp = await client.post(f"/ingest?name=far.cpu&format={fmt}&from={from_s}", data=body)
    assert resp.status == 400, await resp.text()
    assert "between 1970 and 2200" in await resp.text()
    assert (await store_of(client).counts()).profiles == 0


def test_the_decoder_bounds_capture_times() -> None:
    ptype = decode.ProfileType("process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds")
    sample = [(("main",), 1, {})]
    assert decode.records_from_samples({}, ptype, decode.LATEST_NS - 1, 0, sample)
    for time_ns, duration in ((decode.LATEST_NS, 0), (-1, 0), (0, 2**63)):
        with pytest.raises(InvalidArgument, match="between 1970 and 2200"):
            decode.records_from_samples({}, ptype, time_ns, duration, sample)


# --------------------------------------------------------------------------------------------- item 7: full disk


async def set_max_pages(store: Store, pages: int | None) -> None:
    """Cap the database at ``pages`` pages (None: its current size): SQLite then answers SQLITE_FULL, as a full disk
    does."""

    def job(conn: sqlite3.Connection) -> None:
        limit = pages if pages is not None else conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {int(limit)}").fetchone()

    await store.db.write(job)


def filler(n: int) -> list[decode.ProfileRecord]:
    stacks = [tuple(f"fill{n}_{i}_{j}" for j in range(30)) for i in range(200)]
    return [
        decode.ProfileRecord(
            labels=(("__name__", "process_cpu"), ("service_name", "filler")),
            profile_type=CPU,
            service="filler",
            time_ns=FRESH_S * 10**9,
            duration_ns=10**10,
            samples=[(stack, 1, 77, None) for stack in stacks],
        )
    ]


def capture_traces() -> otlp_trace_svc.ExportTraceServiceRequest:
    req = otlp_trace_svc.ExportTraceServiceRequest()
    for path in sorted(SHOP_CAPTURE.glob("*_v1_traces.bin")):
        req.MergeFrom(otlp_trace_svc.ExportTraceServiceRequest.FromString(path.read_bytes()))
    return req


async def test_a_full_disk_is_storage_full_on_every_write_path_and_the_store_recovers(tmp_path: Path) -> None:
    """SQLITE_FULL used to reach callers as a generic store error (HTTP 500, which exporters do not retry)."""
    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S + DAY)
    try:
        for n in range(3):
            await store.ingest_profiles(filler(n), None)
        await set_max_pages(store, None)
        for n in range(3, 1000):
            try:
                await store.ingest_profiles(filler(n), None)
            except StorageFull as exc:
                full = exc
                break
        else:
            raise AssertionError("the capped database never filled up")
        assert full.code == Code.UNAVAILABLE and full.http_status == 503 and "disk is full" in full.message
        before = await store.counts()
        # concurrent writers share one transaction: every one of them hears it, none is half-stored
        results = await asyncio.gather(
            store.ingest_otlp_traces(capture_traces(), None),
            store.ingest_profiles(filler(5000), None),
            return_exceptions=True,
        )
        assert all(isinstance(r, StorageFull) for r in results), results
        with pytest.raises(StorageFull):
            await store.compact()  # background work hears it the same way (and is retried by its loop)
        assert await store.counts() == before

        await set_max_pages(store, 1_000_000_000)  # space is back: nothing to reset
        rejected, _ = await store.ingest_otlp_traces(capture_traces(), None)
        assert rejected == 0 and (await store.counts()).spans == 434
        assert await store.ingest_profiles(filler(6000), None) == 200
    finally:
        await store.close()


# --------------------------------------------------------------------------------------------- item 15: retention


def capture_push() -> bytes:
    return next(p for p in sorted(SHOP_CAPTURE.glob("*_push.v1.PusherService_Push.bin"))).read_bytes()


async def test_data_older_than_retention_is_refused_not_acknowledged_then_dropped(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    """It used to be acknowledged, then silently deleted by the next retention pass."""
    now = [CAPTURE_END_S + 2 * DAY]
    client = await aiohttp_client(make_app(tmp_path, now=lambda: now[0], retention_age=DAY))
    store = store_of(client)

    traces = capture_traces()
    fresh = traces.resource_spans.add()
    fresh.CopyFrom(traces.resource_spans[0])
    del fresh.scope_spans[1:]
    del fresh.scope_spans[0].spans[1:]
    span = fresh.scope_spans[0].spans[0]
    span.span_id = bytes.fromhex("abcdef0123456789")
    span.start_time_unix_nano = int(now[0] - 60) * 10**9
    span.end_time_unix_nano = span.start_time_unix_nano + 10**9
    resp = await client.post(
        "/v1/traces", data=traces.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
    )
    assert resp.status == 200
    answer = otlp_trace_svc.ExportTraceServiceResponse.FromString(await resp.read())
    assert answer.partial_success.rejected_spans == 434
    message = answer.partial_success.error_message
    assert "434 spans older than the store's retention of 1d" in message and "PROFILE_BRIDGE_RETENTION_AGE" in message
    assert "2026-11-29T09:4" in message
    assert (await store.counts()).spans == 1  # the fresh one

    resp = await client.post(
        "/push.v1.PusherService/Push", data=capture_push(), headers={"Content-Type": "application/proto"}
    )
    assert resp.status == 400
    doc = await resp.json()
    assert doc["code"] == "invalid_argument" and "older than the store's retention of 1d" in doc["message"]
    resp = await post_folded(client, "late.cpu", b"main 1\n", from_s=FRESH_S)
    assert resp.status == 400 and "older than the store's retention" in await resp.text()
    assert (await store.counts()).profiles == 0

    from tests.store.test_store_otlp import build_request

    otlp = build_request()
    young = otlp.resource_profiles[0].scope_profiles[0].profiles.add()
    young.CopyFrom(otlp.resource_profiles[0].scope_profiles[0].profiles[0])
    young.time_unix_nano = int(now[0] - 60) * 10**9
    resp = await client.post(
        "/v1development/profiles", data=otlp.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
    )
    assert resp.status == 200, await resp.text()
    from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as psvc

    got = psvc.ExportProfilesServiceResponse.FromString(await resp.read())
    assert got.partial_success.rejected_profiles == 1
    assert "1 profiles older than the store's retention" in got.partial_success.error_message
    assert (await store.counts()).uploads == 1  # the young one (two series: its samples carry a span_name label)

    # what was acknowledged stays until it ages out
    assert (await store.enforce_retention(DAY, 2**40)).profiles == 0
    assert (await store.counts()).uploads == 1


async def test_default_retention_is_a_week_with_a_size_cap() -> None:
    settings = Settings.from_env({})
    assert settings.retention_age == 7 * DAY
    assert settings.retention_bytes == 10 * 1024**3


async def test_data_within_retention_is_taken(tmp_path: Path) -> None:
    store = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S + 6 * DAY, retention_age=7 * DAY)
    try:
        records = decode.records_from_push(push_pb2.PushRequest.FromString(capture_push()), now_ns=0)
        assert await store.ingest_profiles(records, None) > 0
    finally:
        await store.close()
