"""The standalone store under extreme but valid input and a full disk (issue 11, items 4, 5, 7 and 15): every case
is a clear 4xx or a retryable ``unavailable``, never a 500, and nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge.app import create_app
from bridge.config import Settings
from bridge.errors import Code, StorageFull
from bridge.state import RUNTIME
from bridge.store import Store, decode
from tests.paths import SHOP_CAPTURE
from tests.test_store import CAPTURE_END_S, CPU

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
QUERIER = "/pyroscope/querier.v1.QuerierService/"
DAY = 86_400.0
FRESH_S = int(CAPTURE_END_S) - 30  # a capture start inside every retention age used here


def make_app(tmp_path: Path, now: Callable[[], float] = lambda: CAPTURE_END_S, **changes: Any) -> web.Application:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), **changes)
    return create_app(settings, wall_clock=now)


def store_of(client: TestClient[Any, Any]) -> Store:
    store = client.app[RUNTIME].backends.ingest  # type: ignore[union-attr]
    assert isinstance(store, Store)
    return store


async def query(client: TestClient[Any, Any], method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    resp = await client.post(QUERIER + method, data=json.dumps(body),
                             headers={"Content-Type": "application/json", "Connect-Protocol-Version": "1"})
    return resp.status, await resp.json()


async def post_folded(client: TestClient[Any, Any], name: str, body: bytes, from_s: int = FRESH_S,
                      rate: int = 0) -> Any:
    return await client.post(f"/ingest?name={name}&format=folded&from={from_s}&sampleRate={rate}", data=body)


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
    return [decode.ProfileRecord(labels=(("__name__", "process_cpu"), ("service_name", "filler")), profile_type=CPU,
                                 service="filler", time_ns=FRESH_S * 10**9, duration_ns=10**10,
                                 samples=[(stack, 1, 77, None) for stack in stacks])]


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
        results = await asyncio.gather(store.ingest_otlp_traces(capture_traces(), None),
                                       store.ingest_profiles(filler(5000), None), return_exceptions=True)
        assert all(isinstance(r, StorageFull) for r in results), results
        assert await store.counts() == before

        await set_max_pages(store, 1_000_000_000)  # space is back: nothing to reset
        rejected, _ = await store.ingest_otlp_traces(capture_traces(), None)
        assert rejected == 0 and (await store.counts()).spans == 434
        assert await store.ingest_profiles(filler(6000), None) == 200
    finally:
        await store.close()
