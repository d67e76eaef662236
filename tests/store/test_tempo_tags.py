"""Tempo's tag endpoints as the real Tempo answers them — the standalone store and the Tempo double checked against the
same answers, measured from grafana/tempo ad33aa8 by ``bench/differential.py`` on data shaped like this: attributes of
every type in every scope, events, links, an instrumentation scope, status messages (empty ones too)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge.store import Store, schema, tempo_api
from bridge.store.database import DB_FILE
from tests.doubles.tempo import TempoDouble
from tests.store.test_store import ctx

NOW_S = 1_796_170_000
TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")


def _kv(key: str, value: str | int | float | bool) -> common_pb2.KeyValue:
    if isinstance(value, bool):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(bool_value=value))
    if isinstance(value, int):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(int_value=value))
    if isinstance(value, float):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(double_value=value))
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def resource_spans() -> list[otlp_trace.ResourceSpans]:
    start = NOW_S * 10**9 - 30 * 10**9
    web = otlp_trace.ResourceSpans()
    web.resource.attributes.extend([_kv("service.name", "shop-web"), _kv("host.cores", 2)])
    scope = web.scope_spans.add()
    scope.scope.name, scope.scope.version = "shop", "1.0.0"
    root = scope.spans.add(trace_id=TRACE, span_id=bytes.fromhex("00f067aa0ba902b7"), name="GET /checkout")
    root.kind = otlp_trace.Span.SPAN_KIND_SERVER
    root.start_time_unix_nano, root.end_time_unix_nano = start, start + 40_000_000
    root.attributes.extend([_kv("http.route", "/checkout"), _kv("http.status_code", 500), _kv("cart.total", 12.0)])
    root.status.code, root.status.message = otlp_trace.Status.STATUS_CODE_ERROR, "price lookup failed"
    event = root.events.add(name="exception", time_unix_nano=start + 1000)
    event.attributes.append(_kv("exception.type", "PriceError"))
    child = scope.spans.add(trace_id=TRACE, span_id=bytes.fromhex("1122334455667788"), name="render-cart")
    child.parent_span_id = root.span_id
    child.start_time_unix_nano, child.end_time_unix_nano = start + 1_000_000, start + 20_000_000
    child.attributes.extend([_kv("cart.cached", True), _kv("cart.total", 13.5)])
    child.links.add(trace_id=bytes(range(16)), span_id=bytes(range(1, 9))).attributes.append(_kv("link.kind", "x"))
    return [web]


# (path, what Tempo answers: the sorted tag names / values, or (status, text) for an error)
EXPECTED: list[tuple[str, Any]] = [
    ("api/v2/search/tags?scope=resource", {"resource": ["host.cores", "service.name"]}),
    ("api/v2/search/tags?scope=span", {"span": ["cart.cached", "cart.total", "http.route", "http.status_code"]}),
    ("api/v2/search/tags?scope=event", {"event": ["exception.type"]}),
    ("api/v2/search/tags?scope=link", {"link": ["link.kind"]}),
    ("api/v2/search/tags?scope=instrumentation", {}),
    ("api/v2/search/tags?scope=bogus", (400, "invalid scope: bogus")),
    ("api/v2/search/tags?scope=all", (400, "invalid scope: all")),
    ("api/v2/search/tag/span.http.status_code/values", [("int", "500")]),
    ("api/v2/search/tag/span.cart.cached/values", [("bool", "true")]),
    ("api/v2/search/tag/span.cart.total/values", [("float", "12.0"), ("float", "13.5")]),
    ("api/v2/search/tag/resource.host.cores/values", [("int", "2")]),
    ("api/v2/search/tag/.http.route/values", [("string", "/checkout")]),
    ("api/v2/search/tag/event.exception.type/values", [("string", "PriceError")]),
    ("api/v2/search/tag/link.link.kind/values", [("string", "x")]),
    ("api/v2/search/tag/status/values", [("keyword", "error"), ("keyword", "ok"), ("keyword", "unset")]),
    (
        "api/v2/search/tag/span:kind/values",
        [("keyword", k) for k in sorted(("client", "server", "producer", "consumer", "internal", "unspecified"))],
    ),  # fmt: skip
    ("api/v2/search/tag/duration/values", []),
    ("api/v2/search/tag/span:id/values", []),
    ("api/v2/search/tag/name/values", [("string", "GET /checkout"), ("string", "render-cart")]),
    ("api/v2/search/tag/statusMessage/values", [("string", ""), ("string", "price lookup failed")]),
    ("api/v2/search/tag/rootServiceName/values", [("string", "shop-web")]),
    ("api/v2/search/tag/trace:rootName/values", [("string", "GET /checkout")]),
    ("api/v2/search/tag/event:name/values", [("string", "exception")]),
    ("api/v2/search/tag/instrumentation:version/values", [("string", "1.0.0")]),
    (
        "api/v2/search/tag/http.route/values",
        # Tempo goes on "at line 1, col 2: unknown identifier: http" (the position is the TraceQL parser's)
        (400, "please provide a valid tagName: failed to parse identifier http.route: parse error at line 1, col "),
    ),
]
V1_EXPECTED: list[tuple[str, Any]] = [
    (
        "api/search/tags",
        [
            "cart.cached",
            "cart.total",
            "exception.type",
            "host.cores",
            "http.route",
            "http.status_code",
            "link.kind",
            "service.name",
        ],
    ),  # fmt: skip
    ("api/search/tag/http.status_code/values", ["500"]),
    ("api/search/tag/cart.cached/values", ["true"]),
    ("api/search/tag/status.code/values", ["0", "2", "error", "ok", "unset"]),
    ("api/search/tag/error/values", ["true"]),
    ("api/search/tag/rootServiceName/values", ["shop-web"]),
    ("api/search/tag/exception.type/values", []),  # v1 reads resource, span and instrumentation only
    ("api/search/tag/span.http.route/values", []),  # an attribute of that exact name
]


def normalised(status: int, body: bytes) -> Any:
    if status != 200:
        return status, body.decode().strip()
    doc = json.loads(body)
    if "scopes" in doc:
        return {s["name"]: sorted(s["tags"]) for s in doc["scopes"] if s["name"] != "intrinsic"}
    if "tagNames" in doc:
        return sorted(doc["tagNames"])
    values = doc["tagValues"]
    if values and isinstance(values[0], dict):
        return sorted((v["type"], v.get("value", "")) for v in values)  # Tempo's JSON omits an empty value
    return sorted(values)


def same(got: Any, want: Any) -> bool:
    if isinstance(want, tuple) and isinstance(got, tuple):  # an error: the status, and the text (or its start)
        return got[0] == want[0] and str(got[1]).startswith(want[1])
    return bool(got == want)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: NOW_S)
    await s.ingest_otlp_traces(otlp_trace_svc.ExportTraceServiceRequest(resource_spans=resource_spans()), None)
    yield s
    await s.close()


async def store_answer(store: Store, path: str) -> Any:
    sub, _, qs = path.partition("?")
    query = dict(kv.split("=", 1) for kv in qs.split("&") if kv)
    status, _, body = await tempo_api.answer(store, "GET", sub, query, {}, ctx())
    return normalised(status, body)


@pytest.mark.parametrize(("path", "want"), EXPECTED + V1_EXPECTED, ids=[p for p, _ in EXPECTED + V1_EXPECTED])
async def test_the_store_answers_as_tempo(store: Store, path: str, want: Any) -> None:
    got = await store_answer(store, path)
    assert same(got, want), got


async def test_the_store_lists_tempos_intrinsics_in_v2_and_only_when_asked_in_v1(store: Store) -> None:
    status, _, body = await tempo_api.answer(store, "GET", "api/v2/search/tags", {}, {}, ctx())
    scopes = {s["name"]: s["tags"] for s in json.loads(body)["scopes"]}
    assert len(scopes["intrinsic"]) == 25 and {"span:statusMessage", "trace:rootService"} <= set(scopes["intrinsic"])
    assert set(scopes) == {"resource", "span", "event", "link", "intrinsic"}  # an empty scope is left out
    v1 = await store_answer(store, "api/search/tags?scope=intrinsic")
    assert v1 == sorted(scopes["intrinsic"]) and "duration" not in await store_answer(store, "api/search/tags")


async def test_the_tags_seen_before_start_are_left_out(store: Store) -> None:
    assert await store_answer(store, f"api/v2/search/tags?scope=span&start={NOW_S + 60}") == {}
    assert await store_answer(store, f"api/v2/search/tag/name/values?start={NOW_S - 60}") != []
    assert (await store_answer(store, "api/v2/search/tags?start=soon"))[0] == 400


V2_ONLY = [(p, w) for p, w in EXPECTED if p.startswith("api/v2/search/tag")]


async def test_the_tempo_double_answers_as_tempo(aiohttp_server: Any, aiohttp_client: Any) -> None:
    double = TempoDouble()
    double.add_trace(TRACE.hex(), resource_spans())
    client = await aiohttp_client(await aiohttp_server(double.app))
    for path, want in V2_ONLY:
        sub, _, qs = path.partition("?")
        name = sub.split("/")[4] if "/tag/" in sub else ""
        url = "/" + (sub.replace(name, quote(name, safe="")) if name else sub) + (f"?{qs}" if qs else "")
        resp = await client.get(url)
        got = normalised(resp.status, await resp.read())
        assert same(got, want), (path, got)


async def test_string_tags_stored_before_the_typed_table_are_kept(tmp_path: Path) -> None:
    """Migration 10 (``tags`` typed): the string values an older store kept still answer, typed ``string``."""
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    schema.migrate(conn, target=9)
    conn.execute("INSERT INTO tags VALUES ('anonymous', 'resource', 'service.name', 'old-svc', ?)", (NOW_S * 10**9,))
    conn.close()
    store = await Store.open(tmp_path, clock=lambda: NOW_S)
    try:
        assert await store_answer(store, "api/v2/search/tag/resource.service.name/values") == [("string", "old-svc")]
        assert await store_answer(store, "api/search/tag/service.name/values") == ["old-svc"]
    finally:
        await store.close()
