"""A full disk under the standalone store (issue 11, item 7): every ingest route answers a retryable error (HTTP 503
with Retry-After, gRPC UNAVAILABLE with RetryInfo), the episode is logged at ERROR once, ``/readyz`` says not ready
and why, metrics count it, and the bridge recovers on its own when space is back.

The disk fills for real in SQLite's sense: the store's writer connection gets ``PRAGMA max_page_count`` at the
database's current size, so the next write that needs a page fails with ``SQLITE_FULL`` ("database or disk is
full"), the very code a full file system gives."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp.test_utils import TestClient
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tsvc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsvc_grpc

from bridge._proto import types_pb2 as tpb
from bridge.app import create_app
from bridge.call import CallContext, Deadline
from bridge.config import Settings
from bridge.diskfull import DiskFull
from bridge.errors import StorageFull
from bridge.state import RUNTIME
from bridge.store import Store
from bridge.store.decode import ProfileRecord
from tests.paths import GO_CPU_PPROF, SHOP_CAPTURE
from tests.store.test_store import CAPTURE_END_S

Client = Callable[..., Awaitable[TestClient[Any, Any]]]


def _all_traces() -> bytes:
    """Every trace batch of the shop capture in one request: more pages than a fresh database has free."""
    req = tsvc.ExportTraceServiceRequest()
    for path in sorted(SHOP_CAPTURE.glob("*_v1_traces.bin")):
        req.MergeFrom(tsvc.ExportTraceServiceRequest.FromString(path.read_bytes()))
    return req.SerializeToString()


TRACES = _all_traces()
CTX = CallContext(deadline=Deadline.start(None, 10.0))
FIXTURES_AGE_S = 10 * 365 * 86_400.0  # a retention age that keeps every fixture, stamped 2021 to 2026
PUSH = (SHOP_CAPTURE / "003_push.v1.PusherService_Push.bin").read_bytes()


async def fill(store: Store) -> None:
    """Cap the database at its current size, then write to the store itself (not through the bridge's watch) until
    the disk is full: big writes first, then smaller ones, until not even one new stack fits."""
    await set_max_pages(store, None)
    n = 0
    for stacks_per_write in (200, 20, 1):
        for _ in range(1000):
            n += 1
            stacks = [tuple(f"fill{n}_{i}_{j}" for j in range(30)) for i in range(stacks_per_write)]
            record = ProfileRecord(
                labels=(("__name__", "process_cpu"), ("service_name", "filler")),
                profile_type="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                service="filler",
                time_ns=1_700_000_000 * 10**9,
                duration_ns=10**10,
                samples=[(stack, 1, None, None) for stack in stacks],
            )
            try:
                await store.ingest_profiles([record], None)
            except StorageFull:
                break
        else:
            raise AssertionError("the capped database never filled up")


async def set_max_pages(store: Store, pages: int | None) -> None:
    """Cap the database at ``pages`` pages (None: at its current size) on the store's writer connection."""

    def job(conn: sqlite3.Connection) -> None:
        limit = pages if pages is not None else conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {int(limit)}").fetchone()

    await store.db.commit(job)


async def test_a_full_disk_is_retryable_logged_once_not_ready_counted_and_recovers(
    tmp_path: Path, aiohttp_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.for_tests(
        mode="standalone",
        data_dir=str(tmp_path / "data"),
        otlp_grpc_enabled=True,
        otlp_grpc_listen=("127.0.0.1", 0),
        retention_age=FIXTURES_AGE_S,
    )  # the Go pprof fixture is from 2021
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
    backends = client.app[RUNTIME].backends
    assert backends is not None and isinstance(backends.profiles, Store) and backends.grpc is not None
    store = backends.profiles
    assert (await client.get("/readyz")).status == 200
    await fill(store)

    proto = {"Content-Type": "application/x-protobuf"}
    with caplog.at_level(logging.INFO, logger="bridge.store"):
        resp = await client.post("/v1/traces", data=TRACES, headers=proto)
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "30")
        status = status_pb2.Status.FromString(await resp.read())
        assert status.code == 14 and "disk is full" in status.message  # UNAVAILABLE: exporters retry it

        resp = await client.post(
            "/push.v1.PusherService/Push", data=PUSH, headers={"Content-Type": "application/proto"}
        )
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "30")
        doc = await resp.json()
        assert doc["code"] == "unavailable" and "disk is full" in doc["message"]

        resp = await client.post("/ingest?name=full.cpu&format=pprof", data=GO_CPU_PPROF.read_bytes())
        assert (resp.status, resp.headers.get("Retry-After")) == (503, "30")
        assert "disk is full" in await resp.text()

        async with grpc.aio.insecure_channel(f"127.0.0.1:{backends.grpc.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await tsvc_grpc.TraceServiceStub(channel).Export(
                    tsvc.ExportTraceServiceRequest.FromString(TRACES), timeout=10
                )
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        details = dict(caught.value.trailing_metadata() or ())["grpc-status-details-bin"]
        [info] = status_pb2.Status.FromString(details).details
        retry = error_details_pb2.RetryInfo()
        assert info.Unpack(retry) and retry.retry_delay.seconds == 30

        ready = await client.get("/readyz")
        assert ready.status == 503
        writes = (await ready.json())["upstreams"]["store_writes"]
        assert writes["status"] == "unavailable" and "is full since" in writes["message"]
        assert "4 writes refused" in writes["message"]
        metrics = await (await client.get("/metrics")).text()
        assert "profile_bridge_store_disk_full 1.0" in metrics
        assert "profile_bridge_store_disk_full_refusals_total 4.0" in metrics

        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "is full" in errors[0].getMessage()  # once per episode, not per request
        counts = await store.counts()
        assert counts.spans == 0  # nothing acknowledged, nothing half-stored
        services = await store.label_values(tpb.LabelValuesRequest(name="service_name", start=0, end=2**62), CTX)
        assert list(services.names) == ["filler"]

        await set_max_pages(store, 1_000_000_000)  # space is back
        resp = await client.post("/v1/traces", data=TRACES, headers=proto)
        assert resp.status == 200
        assert (await client.get("/readyz")).status == 200
        assert "profile_bridge_store_disk_full 0.0" in await (await client.get("/metrics")).text()
        assert any("accepted again" in r.getMessage() and "4 refused" in r.getMessage() for r in caplog.records)
    assert (await store.counts()).spans > 0


def test_readiness_recovers_without_a_write_once_the_file_system_has_room() -> None:
    """A load balancer stops sending to a not-ready bridge, so no write may come to end the episode: ``/readyz``
    itself ends it once the Retry-After has passed and the file system under the data directory has room."""
    now = [100.0]
    free = [0]
    disk = DiskFull("/data", monotonic=lambda: now[0], free_bytes=lambda path: free[0])
    disk.refused(StorageFull("database or disk is full"))
    assert disk.problem() is not None
    now[0] += 60
    assert disk.problem() is not None  # quiet long enough, but still no room
    free[0] = 1024**3
    assert disk.problem() is None and disk.episode is None
