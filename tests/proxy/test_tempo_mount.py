"""The ``/tempo`` mount end to end: the bridge app in proxy mode between a client speaking what Grafana's Tempo data
source speaks and the Tempo test double serving the shop capture and Tempo's own vulture trace (plus the Pyroscope
double for ``PROFILE_BRIDGE_ENRICH=profiled-services``). Standalone mode: the embedded store fed with the capture."""

from __future__ import annotations

import base64
import gzip
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace
from yarl import URL

from bridge._proto import tempo_pb2
from bridge.app import create_app
from bridge.call import CallContext, Deadline, scope_key
from bridge.config import Settings
from bridge.errors import Code
from bridge.services import ProfiledServices
from bridge.spans import PROFILE_ID_ATTR
from bridge.state import METRICS, RUNTIME, SPAN_CACHE, backends_of
from bridge.wire.tempo import is_protobuf_answer, trace_request
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.shop import load_shop
from tests.doubles.tempo import GARBAGE, TempoDouble, refused_url

Server = Callable[..., Awaitable[TestServer]]
Client = Callable[..., Awaitable[TestClient[Any, Any]]]
PB = {"Accept": "application/protobuf"}
# the capture ran at 1795945281 s; the bridge's clock is put a minute later
CAPTURE_NOW = 1795945340.0


@dataclass
class Stack:
    tempo: TempoDouble
    pyroscope: PyroscopeDouble
    client: TestClient[Any, Any]
    app: web.Application
    vulture_id: str

    def metric(self, name: str, **labels: str) -> float:
        value = self.app[METRICS].registry.get_sample_value(name, labels or None)
        return value or 0.0


async def make_stack(aiohttp_server: Server, aiohttp_client: Client, **changes: Any) -> Stack:
    tempo = TempoDouble()
    tempo.add_shop()
    vulture_id = tempo.add_vulture()
    tserver = await aiohttp_server(tempo.app)
    tempo.url = str(tserver.make_url("")).rstrip("/")
    pyro = PyroscopeDouble()
    pserver = await aiohttp_server(pyro.app, auto_decompress=False)
    pyro.url = str(pserver.make_url("")).rstrip("/")
    fields = {"mode": "proxy", "pyroscope_url": pyro.url, "tempo_url": tempo.url}
    app = create_app(Settings.for_tests(**{**fields, **changes}), wall_clock=lambda: CAPTURE_NOW)
    client = await aiohttp_client(await aiohttp_server(app))
    return Stack(tempo, pyro, client, app, vulture_id)


@pytest.fixture
async def stack(aiohttp_server: Server, aiohttp_client: Client) -> Stack:
    return await make_stack(aiohttp_server, aiohttp_client)


def spans_of(body: bytes, version: int, protobuf: bool) -> list[otlp_trace.Span]:
    if protobuf:
        trace = tempo_pb2.TraceByIDResponse.FromString(body).trace if version == 2 else tempo_pb2.Trace.FromString(body)
        items = [otlp_trace.ResourceSpans.FromString(raw) for raw in trace.resource_spans]
        return [s for rs in items for ss in rs.scope_spans for s in ss.spans]
    doc = json.loads(body)
    batches = doc["trace"].get("resourceSpans", []) if version == 2 else doc["batches"]
    out = []
    for rs in batches:
        for ss in rs["scopeSpans"]:
            for raw in ss["spans"]:
                span = otlp_trace.Span(
                    span_id=base64.b64decode(raw["spanId"]), trace_id=base64.b64decode(raw["traceId"])
                )
                for kv in raw.get("attributes", []):
                    if "stringValue" in kv["value"]:
                        span.attributes.add(key=kv["key"]).value.string_value = kv["value"]["stringValue"]
                out.append(span)
    return out


def carried(span: otlp_trace.Span) -> str:
    """What the mount writes into pyroscope.profile.id: the span's id and its trace's (``bridge.ids``)."""
    return f"{span.span_id.hex()}:{span.trace_id.hex()}"


def profile_ids(span: otlp_trace.Span) -> list[str]:
    return [kv.value.string_value for kv in span.attributes if kv.key == PROFILE_ID_ATTR]


TRACE_PATHS = [
    (2, True, "/api/v2/traces/{}"),
    (1, True, "/api/traces/{}"),
    (2, False, "/api/v2/traces/{}"),
    (1, False, "/api/traces/{}"),
]
SHAPE_IDS = ["v2-protobuf", "v1-protobuf", "v2-json", "v1-json"]


# --------------------------------------------------------------------------------------------- enrichment


@pytest.mark.parametrize(("version", "protobuf", "path"), TRACE_PATHS, ids=SHAPE_IDS)
async def test_every_span_enriched_through_the_mount(stack: Stack, version: int, protobuf: bool, path: str) -> None:
    shop = load_shop()
    child = shop.pick("frontend-child")
    headers = PB if protobuf else {}
    for trace_id in (child.trace_id, stack.vulture_id):
        resp = await stack.client.get("/tempo" + path.format(trace_id), headers=headers)
        body = await resp.read()
        assert resp.status == 200, body
        assert resp.headers["Content-Type"].startswith("application/protobuf" if protobuf else "application/json")
        spans = spans_of(body, version, protobuf)
        expected = len(shop.trace(trace_id)) if trace_id == child.trace_id else 6
        assert len(spans) == expected
        assert all(profile_ids(s) == [carried(s)] for s in spans)
    assert stack.metric("profile_bridge_enriched_spans_total") == 3 + 6  # the two SDK-tagged roots had it already


async def test_vulture_json_is_tempos_json_plus_the_attribute(stack: Stack) -> None:
    direct = json.loads(stack.tempo.trace_answer_for(stack.vulture_id, version=2, protobuf=False))
    resp = await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}")
    through = json.loads(await resp.read())
    for rs in through["trace"]["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                added = span["attributes"].pop()
                assert added == {
                    "key": PROFILE_ID_ATTR,
                    "value": {
                        "stringValue": base64.b64decode(span["spanId"]).hex()
                        + ":"
                        + base64.b64decode(span["traceId"]).hex()
                    },
                }
    assert through == direct


async def test_trace_request_carries_query_tenant_and_auth_and_asks_for_gzip(stack: Stack) -> None:
    trace_id = load_shop().trace_ids()[0]
    resp = await stack.client.get(
        f"/tempo/api/v2/traces/{trace_id.upper()}?start=1795945200&end=1795945400",
        headers={
            **PB,
            "X-Scope-OrgID": "team-a",
            "Authorization": "Bearer t0k3n",
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "dropped",
            "X-Grafana-Org-Id": "1",
        },
    )
    assert resp.status == 200
    (seen,) = stack.tempo.calls("/api/v2/traces/")
    assert seen.path == f"/api/v2/traces/{trace_id.upper()}"
    assert seen.query == {"start": "1795945200", "end": "1795945400"}
    assert seen.headers["X-Scope-OrgID"] == "team-a"
    assert seen.headers["Authorization"] == "Bearer t0k3n"
    assert seen.headers["X-Grafana-Org-Id"] == "1"
    assert seen.headers["Accept"] == "application/protobuf"
    assert seen.headers["Accept-Encoding"] == "gzip"
    assert "X-Hop" not in seen.headers


# --------------------------------------------------------------------------------------------- Tempo's other answers


async def test_v1_not_found_and_v2_empty_trace_pass_through_as_they_are(stack: Stack) -> None:
    unknown = "0123456789abcdef0123456789abcdef"
    resp = await stack.client.get(f"/tempo/api/traces/{unknown}", headers=PB)
    assert resp.status == 404
    assert await resp.text() == ""
    for headers in (PB, {}):
        resp = await stack.client.get(f"/tempo/api/v2/traces/{unknown}", headers=headers)
        assert resp.status == 200
        direct = stack.tempo.trace_answer_for(unknown, version=2, protobuf=bool(headers))
        assert await resp.read() == direct
    assert stack.metric("profile_bridge_enrich_failures_total", reason="protobuf") == 0
    assert len(stack.app[SPAN_CACHE]) == 0


@pytest.mark.parametrize("protobuf", [True, False], ids=["protobuf", "json"])
async def test_partial_status_and_message_survive(stack: Stack, protobuf: bool) -> None:
    stack.tempo.partial = "trace exceeds max size (max bytes: 5000000)"
    trace_id = load_shop().pick("frontend-root").trace_id
    resp = await stack.client.get(f"/tempo/api/v2/traces/{trace_id}", headers=PB if protobuf else {})
    body = await resp.read()
    if protobuf:
        msg = tempo_pb2.TraceByIDResponse.FromString(body)
        assert (msg.status, msg.message) == (tempo_pb2.PARTIAL, stack.tempo.partial)
        assert msg.metrics.inspectedBytes > 0
    else:
        doc = json.loads(body)
        assert (doc["status"], doc["message"]) == ("PARTIAL", stack.tempo.partial)
        assert int(doc["metrics"]["inspectedBytes"]) > 0
    assert all(len(profile_ids(s)) == 1 for s in spans_of(body, 2, protobuf))


@pytest.mark.parametrize("client_gzip", [True, False], ids=["client-gzip", "client-identity"])
async def test_gzip_from_tempo_and_to_the_client(stack: Stack, client_gzip: bool) -> None:
    stack.tempo.gzip = True
    trace_id = load_shop().pick("frontend-child").trace_id
    headers = {**PB, "Accept-Encoding": "gzip" if client_gzip else "identity"}
    resp = await stack.client.get(f"/tempo/api/v2/traces/{trace_id}", headers=headers, auto_decompress=False)
    raw = await resp.read()
    assert resp.status == 200
    if client_gzip:
        assert resp.headers["Content-Encoding"] == "gzip"
        raw = gzip.decompress(raw)
    else:
        assert "Content-Encoding" not in resp.headers
    assert all(len(profile_ids(s)) == 1 for s in spans_of(raw, 2, True))
    # and an answer with nothing to add (policy off would do too): the 404 of v1, gzip undone when not accepted
    resp = await stack.client.get("/tempo/api/traces/abcdef", headers=headers, auto_decompress=False)
    assert resp.status == 404
    body = await resp.read()
    assert (gzip.decompress(body) if resp.headers.get("Content-Encoding") == "gzip" else body) == b""


async def test_unchanged_gzip_answer_is_relayed_without_recompression(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, enrich="off")
    stack.tempo.gzip = True
    trace_id = load_shop().pick("frontend-child").trace_id
    resp = await stack.client.get(
        f"/tempo/api/v2/traces/{trace_id}", headers={**PB, "Accept-Encoding": "gzip"}, auto_decompress=False
    )
    body = await resp.read()
    assert resp.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == stack.tempo.trace_answer_for(trace_id, version=2, protobuf=True)
    # the span cache is filled whatever the policy
    assert stack.app[SPAN_CACHE].get(scope_key(None), load_shop().pick("frontend-child").span_id) is not None


@pytest.mark.parametrize("protobuf", [True, False], ids=["protobuf", "json"])
async def test_undecodable_answer_passes_through_with_a_warning_and_a_metric(
    stack: Stack, protobuf: bool, caplog: pytest.LogCaptureFixture
) -> None:
    stack.tempo.faults.garbage = True
    trace_id = load_shop().trace_ids()[0]
    with caplog.at_level(logging.WARNING, logger="bridge.tempo"):
        resp = await stack.client.get(f"/tempo/api/v2/traces/{trace_id}", headers=PB if protobuf else {})
    assert resp.status == 200
    assert await resp.read() == GARBAGE
    reason = "protobuf" if protobuf else "json"
    assert stack.metric("profile_bridge_enrich_failures_total", reason=reason) == 1
    assert any("cannot be decoded" in r.getMessage() and trace_id in r.getMessage() for r in caplog.records)


async def test_corrupt_gzip_passes_through_with_encoding_failure(stack: Stack) -> None:
    # a body that claims gzip and is not: a Tempo behind a broken proxy
    trace_id = load_shop().trace_ids()[0]
    stack.tempo.raw_answers[trace_id] = (
        200,
        {"Content-Type": "application/protobuf", "Content-Encoding": "gzip"},
        b"\x1f\x8b not really gzip",
    )
    resp = await stack.client.get(
        f"/tempo/api/v2/traces/{trace_id}", headers={**PB, "Accept-Encoding": "gzip"}, auto_decompress=False
    )
    assert resp.status == 200
    assert await resp.read() == b"\x1f\x8b not really gzip"
    assert resp.headers["Content-Encoding"] == "gzip"
    assert stack.metric("profile_bridge_enrich_failures_total", reason="encoding") == 1


async def test_grafana_flow_against_a_tempo_without_v2(stack: Stack) -> None:
    """Grafana asks v2 first and, on a 404, the old v1 endpoint (grafana/grafana
    ``public/app/plugins/datasource/tempo/datasource.ts``): both go through."""
    stack.tempo.faults.status, stack.tempo.faults.body, stack.tempo.faults.paths = 404, "404 page not found", "/api/v2/"
    child = load_shop().pick("frontend-child")
    resp = await stack.client.get(f"/tempo/api/v2/traces/{child.trace_id}", headers=PB)
    assert (resp.status, await resp.text()) == (404, "404 page not found\n")
    resp = await stack.client.get(f"/tempo/api/traces/{child.trace_id}", headers=PB)
    assert resp.status == 200
    spans = spans_of(await resp.read(), 1, True)
    assert len(spans) == 5 and all(profile_ids(s) == [carried(s)] for s in spans)
    assert stack.app[SPAN_CACHE].get(scope_key(None), child.span_id) is not None


# --------------------------------------------------------------------------------------------- bad trace ids


@pytest.mark.parametrize(
    ("raw_id", "message"),
    [
        ("12xz", "trace IDs can only contain hex characters: invalid character 'x' at position 3"),
        ("not-a-trace", "trace IDs can only contain hex characters: invalid character 'n' at position 1"),
        ("0123456789abcdef0123456789abcdef0", "trace IDs can't be larger than 128 bits"),
        ("f" * 64, "trace IDs can't be larger than 128 bits"),
        ("12%2034", "trace IDs can only contain hex characters: invalid character ' ' at position 3"),
    ],
)
@pytest.mark.parametrize("path", ["/tempo/api/v2/traces/", "/tempo/api/traces/"])
async def test_bad_trace_id_is_tempos_400_and_never_forwarded(
    stack: Stack, path: str, raw_id: str, message: str
) -> None:
    resp = await stack.client.get(path + raw_id, headers=PB)
    assert resp.status == 400
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert await resp.text() == message + "\n"
    assert stack.tempo.requests == []


async def test_short_and_upper_case_ids_are_tempos_own(stack: Stack) -> None:
    trace_id = stack.vulture_id
    short = trace_id.lstrip("0").upper()
    resp = await stack.client.get(f"/tempo/api/traces/{short}", headers=PB)
    assert resp.status == 200
    assert len(spans_of(await resp.read(), 1, True)) == 6
    # cached under the full id
    assert stack.app[SPAN_CACHE].get_trace(scope_key(None), trace_id) is not None


# --------------------------------------------------------------------------------------------- policies


async def test_policy_profiled_services_asks_pyroscope_once_per_tenant(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, enrich="profiled-services")
    shop = load_shop()
    child = shop.pick("backend-child")
    for tenant in ("team-a", "team-a", "team-b"):
        for trace_id, profiled in ((child.trace_id, True), (stack.vulture_id, False)):
            resp = await stack.client.get(f"/tempo/api/v2/traces/{trace_id}", headers={**PB, "X-Scope-OrgID": tenant})
            spans = spans_of(await resp.read(), 2, True)
            if profiled:  # shop-frontend and shop-backend have profiles
                assert all(profile_ids(s) == [carried(s)] for s in spans)
            else:  # tempo-vulture has none: no button that would lead nowhere
                assert all(profile_ids(s) == [] for s in spans)
    asked = stack.pyroscope.calls("LabelValues")
    assert [r.headers.get("X-Scope-OrgID") for r in asked] == ["team-a", "team-b"]
    assert all(r.message.name == "service_name" for r in asked)  # type: ignore[union-attr]


async def test_policy_profiled_services_follows_the_label_map(aiohttp_server: Server, aiohttp_client: Client) -> None:
    stack = await make_stack(
        aiohttp_server,
        aiohttp_client,
        enrich="profiled-services",
        label_map=(("service.name", "env"), ("host.name", "host")),
    )
    resp = await stack.client.get(f"/tempo/api/v2/traces/{load_shop().trace_ids()[0]}", headers=PB)
    assert resp.status == 200
    (asked,) = stack.pyroscope.calls("LabelValues")
    assert asked.message.name == "env"  # type: ignore[union-attr]
    # the capture's profiles say env=capture, no service is called that: nothing is enriched, SDK values stay as
    # the SDK wrote them
    assert all(profile_ids(s) in ([], [s.span_id.hex()]) for s in spans_of(await resp.read(), 2, True))
    assert stack.metric("profile_bridge_enriched_spans_total") == 0


async def test_policy_profiled_services_without_pyroscope_enriches_everything(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, enrich="profiled-services", pyroscope_url=refused_url())
    resp = await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}", headers=PB)
    assert resp.status == 200
    assert all(len(profile_ids(s)) == 1 for s in spans_of(await resp.read(), 2, True))


async def test_known_services_expire_after_their_ttl_and_survive_a_pyroscope_outage(stack: Stack) -> None:
    now = [1000.0]
    profiles = backends_of(stack.app).profiles
    known = ProfiledServices(profiles, "service_name", 60.0, wall_clock=lambda: CAPTURE_NOW, monotonic=lambda: now[0])
    ctx = CallContext(deadline=Deadline.start(None, 5.0), tenant="team-a")
    assert await known.get(ctx) == frozenset({"shop-frontend", "shop-backend"})
    now[0] += 59.0
    assert await known.get(ctx) == frozenset({"shop-frontend", "shop-backend"})
    assert len(stack.pyroscope.calls("LabelValues")) == 1
    now[0] += 2.0  # expired: asked again, Pyroscope is down now → the last known set
    stack.pyroscope.faults.code = Code.UNAVAILABLE
    assert await known.get(ctx) == frozenset({"shop-frontend", "shop-backend"})
    assert len(stack.pyroscope.calls("LabelValues")) == 2
    other = CallContext(deadline=Deadline.start(None, 5.0), tenant="team-b")
    assert await known.get(other) is None  # nothing known for team-b: the mount enriches every span


async def test_policy_off_relays_tempos_bytes(aiohttp_server: Server, aiohttp_client: Client) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, enrich="off")
    for headers in (PB, {}):
        resp = await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}", headers=headers)
        assert await resp.read() == stack.tempo.trace_answer_for(stack.vulture_id, version=2, protobuf=bool(headers))
    assert stack.metric("profile_bridge_enriched_spans_total") == 0


# --------------------------------------------------------------------------------------------- the span cache


async def test_span_cache_is_filled_per_tenant(stack: Stack) -> None:
    shop = load_shop()
    child = shop.pick("frontend-child")
    resp = await stack.client.get(f"/tempo/api/v2/traces/{child.trace_id}", headers={**PB, "X-Scope-OrgID": "team-a"})
    assert resp.status == 200
    cache = stack.app[SPAN_CACHE]
    entry = cache.get(scope_key("team-a"), child.span_id)
    assert entry is not None
    assert entry.local_root_id == shop.in_trace(child.trace_id, "frontend-root").span_id
    assert not entry.is_local_root
    assert (entry.span.name, entry.span.service, entry.span.kind_name) == (
        "renderCart",
        "shop-frontend",
        "SPAN_KIND_INTERNAL",
    )
    assert dict(entry.span.resource)["host.name"] == "capture-host"
    backend_root = cache.get(scope_key("team-a"), shop.in_trace(child.trace_id, "backend-root").span_id)
    assert backend_root is not None and backend_root.is_local_root
    assert cache.get(scope_key("team-b"), child.span_id) is None
    assert cache.get(scope_key(None), child.span_id) is None
    trace = cache.get_trace(scope_key("team-a"), child.trace_id)
    assert trace is not None and set(trace.spans) == set(shop.trace(child.trace_id).spans)


# --------------------------------------------------------------------------------------------- pass-through


async def test_everything_else_is_streamed_to_tempo(stack: Stack) -> None:
    child = load_shop().pick("frontend-child")
    assert await (await stack.client.get("/tempo/api/echo")).text() == "echo"
    info = await (await stack.client.get("/tempo/api/status/buildinfo")).json()
    assert info["version"].endswith("test-double")
    q = f'{{ span:id = "{child.span_id}" }} | select(span:name, resource.service.name)'
    resp = await stack.client.get(
        "/tempo/api/search",
        params={"q": q, "start": "1795945200", "end": "1795945400"},
        headers={"X-Scope-OrgID": "team-a"},
    )
    doc = await resp.json()
    assert doc["traces"][0]["spanSets"][0]["spans"][0]["spanID"] == child.span_id
    (seen,) = stack.tempo.search_calls
    assert seen.query["q"] == q
    assert seen.headers["X-Scope-OrgID"] == "team-a"
    resp = await stack.client.get("/tempo/api/v2/search/tag/resource.service.name/values")
    assert {v["value"] for v in (await resp.json())["tagValues"]} >= {"shop-frontend", "shop-backend"}
    # what Grafana does not call is not relayed (bridge.wire.allowlist): the bridge's 403, Tempo never asked
    before = len(stack.tempo.requests)
    for method, path in (("GET", "/tempo/ready"), ("POST", "/tempo/api/nothing-here"), ("POST", "/tempo/api/search")):
        resp = await stack.client.request(method, path, data=b"{}")
        assert resp.status == 403 and "PROFILE_BRIDGE_UPSTREAM_ALLOW" in await resp.text(), path
    assert len(stack.tempo.requests) == before


async def test_nothing_outside_the_mount_reaches_tempo(stack: Stack) -> None:
    base = str(stack.client.make_url("")).rstrip("/")
    paths = (
        "/api/traces/abc",
        "/tempoX/api/echo",
        "/tempo/../api/echo",
        "/tempo/api/%2e%2e/ready",
        "/tempo/api/..%2f..%2fready",
        "/tempo/%2e%2e/%2e%2e/etc/passwd",
    )
    for path in paths:
        # sent as written: the client must not normalise the dots away
        resp = await stack.client.session.get(URL(base + path, encoded=True))
        assert resp.status in (400, 404), path
    assert stack.tempo.requests == []


async def test_tempo_down_is_a_plain_text_error(aiohttp_server: Server, aiohttp_client: Client) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, tempo_url=refused_url())
    for path in ("/tempo/api/v2/traces/abc", "/tempo/api/echo"):
        resp = await stack.client.get(path, headers=PB)
        assert resp.status == 503
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert "tempo" in await resp.text()


async def test_browser_cookies_never_reach_tempo_or_pyroscope(stack: Stack) -> None:
    """Issue 11, item 9: a browser's Cookie header (Grafana's session among them) is dropped on the way up, on the
    trace-by-ID fetch, the pass-through and Pyroscope's pass-through alike; tenant and credentials still go."""
    headers = {"Cookie": "grafana_session=secret", "X-Scope-OrgID": "team-a", "Authorization": "Bearer up"}
    assert (await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}", headers=headers)).status == 200
    await stack.client.get("/tempo/api/echo", headers=headers)  # passed through, whatever Tempo answers
    await stack.client.get("/pyroscope/pyroscope/render?query=x", headers=headers)
    seen = [r.headers for r in stack.tempo.requests] + [r.headers for r in stack.pyroscope.requests]
    assert len(seen) >= 3
    for h in seen:
        assert "Cookie" not in h
        assert h["X-Scope-OrgID"] == "team-a" and h["Authorization"] == "Bearer up"


async def test_slow_tempo_times_out_within_the_budget(aiohttp_server: Server, aiohttp_client: Client) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, upstream_timeout=0.2, max_request_timeout=0.3)
    stack.tempo.faults.delay = 2.0
    resp = await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}", headers=PB)
    assert resp.status == 504
    assert "tempo did not answer" in await resp.text()


async def test_tempo_cutting_the_answer_short_is_an_error_not_a_truncated_trace(stack: Stack) -> None:
    stack.tempo.faults.reset = True
    resp = await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}")
    assert resp.status == 503
    assert "closed the connection" in await resp.text()
    assert len(stack.app[SPAN_CACHE]) == 0


async def test_tempo_dropping_the_connection_is_unavailable(stack: Stack) -> None:
    stack.tempo.faults.refuse = True
    for path in (f"/tempo/api/v2/traces/{stack.vulture_id}", "/tempo/api/echo"):
        resp = await stack.client.get(path, headers=PB)
        assert resp.status == 503, path
        assert "tempo" in await resp.text()


async def test_tempo_error_status_passes_through(stack: Stack) -> None:
    stack.tempo.faults.status = 429
    resp = await stack.client.get(f"/tempo/api/v2/traces/{stack.vulture_id}", headers=PB)
    assert (resp.status, await resp.text()) == (429, "too many outstanding requests\n")


# --------------------------------------------------------------------------------------------- standalone mode


async def test_standalone_mode_enriches_the_stores_answers(
    aiohttp_server: Server, aiohttp_client: Client, tmp_path: Path
) -> None:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"))
    app = create_app(settings, wall_clock=lambda: CAPTURE_NOW)
    client = await aiohttp_client(await aiohttp_server(app))
    shop = load_shop()
    sink = app[RUNTIME].backends.ingest
    for req in shop.requests:
        await sink.ingest_otlp_traces(req, "team-a")
    child = shop.pick("frontend-child")
    for version, protobuf, path in TRACE_PATHS:
        resp = await client.get(
            "/tempo" + path.format(child.trace_id), headers={**(PB if protobuf else {}), "X-Scope-OrgID": "team-a"}
        )
        assert resp.status == 200, await resp.text()
        spans = spans_of(await resp.read(), version, protobuf)
        assert {s.span_id.hex() for s in spans} == set(shop.trace(child.trace_id).spans)
        assert all(profile_ids(s) == [carried(s)] for s in spans)
    assert app[SPAN_CACHE].get(scope_key("team-a"), child.span_id) is not None
    resp = await client.get("/tempo/api/traces/zz", headers=PB)
    assert resp.status == 400
    resp = await client.get("/tempo/api/echo")
    assert (resp.status, await resp.text()) == (200, "echo")


# ---------------------------------------------------------------------------------------- the pure parts, as tables


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("api/v2/traces/abc", (2, "abc")),
        ("api/traces/ABC", (1, "ABC")),
        ("api/v2/traces/", (2, "")),
        ("api/traces/abc/extra", None),
        ("api/v2/search", None),
        ("api/search", None),
        ("api/traces", None),
    ],
)
def test_trace_request_paths(tail: str, expected: tuple[int, str] | None) -> None:
    assert trace_request(tail) == expected


@pytest.mark.parametrize(
    ("content_type", "accept", "protobuf"),
    [
        ("application/protobuf", "", True),
        ("application/x-protobuf", "", True),
        ("application/json", "application/protobuf", False),
        ("application/json; charset=utf-8", "", False),
        ("", "application/protobuf", True),
        ("", "application/json, application/protobuf", True),
        ("", "*/*", False),
        ("text/plain", "", False),
    ],
)
def test_answer_encoding_from_content_type_then_accept(content_type: str, accept: str, protobuf: bool) -> None:
    assert is_protobuf_answer(content_type, accept) is protobuf
