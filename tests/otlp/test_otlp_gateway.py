"""The link gateway end to end: real OTLP requests (opentelemetry-proto) into the bridge over HTTP and gRPC, linked,
and forwarded to a recording double over real HTTP and real gRPC; errors, slow upstreams, the standalone sink and
the pprof pull path."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from google.rpc import status_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc as svc_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tsvc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsvc_grpc

from bridge.app import create_app
from bridge.config import Settings
from bridge.metrics import Metrics
from bridge.otlp.gateway import Gateway
from bridge.otlp.grpc_server import start_grpc_server
from bridge.otlp.pull import Puller, service_name
from bridge.state import RUNTIME
from tests.doubles.otlp_sink import (
    OTLP_RECORDER,
    OtlpRecorder,
    RecordingProfileSink,
    build_http_sink,
    start_grpc_sink,
)
from tests.otlp.test_pprof_convert import shop_pprofs

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
PROTO = {"Content-Type": "application/x-protobuf"}
TENANT = {"X-Scope-OrgID": "team-a", "Authorization": "Bearer s3cret"}


def sample_request(*, bad_ids: int = 0, out_of_range: bool = False) -> svc.ExportProfilesServiceRequest:
    """Two samples on one span (trace_id/span_id attributes), ``bad_ids`` samples with a malformed span id."""
    req = svc.ExportProfilesServiceRequest()
    d = req.dictionary
    d.string_table.extend(["", "cpu", "nanoseconds", "trace_id", "span_id", "thread.name", "main"])
    d.attribute_table.add()
    d.attribute_table.add(key_strindex=3).value.string_value = TRACE
    d.attribute_table.add(key_strindex=4).value.string_value = SPAN
    d.attribute_table.add(key_strindex=5).value.string_value = "main"
    d.attribute_table.add(key_strindex=4).value.string_value = "not-a-span-id"
    d.stack_table.add()
    rp = req.resource_profiles.add()
    rp.resource.attributes.add(key="service.name").value.string_value = "shop-backend"
    profile = rp.scope_profiles.add().profiles.add(time_unix_nano=1_700_000_000 * 10**9, duration_nano=10**10)
    profile.sample_type.type_strindex, profile.sample_type.unit_strindex = 1, 2
    profile.samples.add(attribute_indices=[3, 1, 2], values=[10_000_000])
    profile.samples.add(attribute_indices=[1, 2], values=[20_000_000])
    for _ in range(bad_ids):
        profile.samples.add(attribute_indices=[4], values=[1])
    if out_of_range:
        profile.samples.add(attribute_indices=[77], values=[1])
    return req


def assert_linked(req: svc.ExportProfilesServiceRequest) -> None:
    links = req.dictionary.link_table
    assert [(link.trace_id.hex(), link.span_id.hex()) for link in links] == [("0" * 32, "0" * 16), (TRACE, SPAN)]
    samples = req.resource_profiles[0].scope_profiles[0].profiles[0].samples
    assert [(s.link_index, list(s.attribute_indices)) for s in samples[:2]] == [(1, [3]), (1, [])]


@pytest.fixture
async def recorder(aiohttp_server: Any) -> AsyncIterator[tuple[OtlpRecorder, str]]:
    rec = OtlpRecorder()
    server = await aiohttp_server(build_http_sink(rec))
    yield rec, str(server.make_url("")).rstrip("/")


@pytest.fixture
async def grpc_sink() -> AsyncIterator[tuple[OtlpRecorder, int]]:
    rec = OtlpRecorder()
    server, port = await start_grpc_sink(rec)
    yield rec, port
    await server.stop(None)


BridgeFactory = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


@pytest.fixture
def bridge(aiohttp_client: Any) -> BridgeFactory:
    async def make(pyroscope_url: str, **changes: Any) -> TestClient[web.Request, web.Application]:
        settings = Settings.for_tests(mode="proxy", pyroscope_url=pyroscope_url, tempo_url=pyroscope_url, **changes)
        client: TestClient[web.Request, web.Application] = await aiohttp_client(create_app(settings))
        return client

    return make


def grpc_port(client: TestClient[web.Request, web.Application]) -> int:
    return int(client.server.app[RUNTIME].backends.grpc.port)


async def grpc_export(
    port: int, req: svc.ExportProfilesServiceRequest, metadata: tuple[tuple[str, str], ...] = (), timeout: float = 10.0
) -> svc.ExportProfilesServiceResponse:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer: svc.ExportProfilesServiceResponse = await svc_grpc.ProfilesServiceStub(channel).Export(
            req, metadata=metadata, timeout=timeout
        )
        return answer


# --------------------------------------------------------------------------------------------- HTTP receiver


async def test_http_protobuf_is_linked_and_forwarded_with_tenant_headers(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory
) -> None:
    rec, url = recorder
    client = await bridge(url)

    resp = await client.post(
        "/v1development/profiles", data=sample_request().SerializeToString(), headers={**PROTO, **TENANT}
    )

    assert resp.status == 200, await resp.text()
    assert resp.content_type == "application/x-protobuf"
    answer = svc.ExportProfilesServiceResponse.FromString(await resp.read())
    assert not answer.HasField("partial_success")
    [got] = rec.received
    assert (got.tenant, got.authorization) == ("team-a", "Bearer s3cret")
    assert_linked(got.request)
    metrics = await (await client.get("/metrics")).text()
    assert 'profile_bridge_link_samples_total{outcome="linked"} 2.0' in metrics


async def test_invalid_ids_give_partial_success_and_are_still_forwarded(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory
) -> None:
    rec, url = recorder
    rec.partial_message = "2 samples too old"
    client = await bridge(url)

    resp = await client.post(
        "/v1development/profiles", data=sample_request(bad_ids=3).SerializeToString(), headers=PROTO
    )

    assert resp.status == 200
    partial = svc.ExportProfilesServiceResponse.FromString(await resp.read()).partial_success
    assert partial.rejected_profiles == 0
    assert partial.error_message == (
        "3 samples have invalid trace or span ids in their link attributes and were "
        "left unlinked; pyroscope: 2 samples too old"
    )
    [got] = rec.received
    assert [s.link_index for s in got.request.resource_profiles[0].scope_profiles[0].profiles[0].samples] == [
        1,
        1,
        0,
        0,
        0,
    ]


async def test_http_json_with_hex_ids_and_gzip(recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory) -> None:
    from google.protobuf import json_format

    rec, url = recorder
    client = await bridge(url)
    req = sample_request()
    existing = req.dictionary.link_table
    existing.add(trace_id=bytes(16), span_id=bytes(8))
    existing.add(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(SPAN))
    doc = json_format.MessageToDict(req)
    for link in doc["dictionary"]["linkTable"]:  # OTLP/JSON writes ids as hex, not protobuf's base64
        for key in ("traceId", "spanId"):
            if key in link:
                link[key] = base64.b64decode(link[key]).hex()
    body = gzip.compress(json.dumps(doc).encode())

    resp = await client.post(
        "/v1development/profiles", data=body, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )

    assert resp.status == 200, await resp.text()
    assert resp.content_type == "application/json"
    assert json.loads(await resp.read()) == {}
    [got] = rec.received
    assert_linked(got.request)  # the existing hex link was read as such and reused
    assert len(got.request.dictionary.link_table) == 2


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        (b"\x0a\xff\xff", PROTO, 400, "not a valid ExportProfilesServiceRequest protobuf"),
        (b"{not json", {"Content-Type": "application/json"}, 400, "not a valid OTLP/JSON"),
        (b"[1, 2]", {"Content-Type": "application/json"}, 400, "not a JSON object"),
        (b'{"resourceProfiles": 5}', {"Content-Type": "application/json"}, 400, "not a valid OTLP/JSON"),
        (b"\x1f\x8b broken", {**PROTO, "Content-Encoding": "compress"}, 400, "Content-Encoding"),
        (b"x", {"Content-Type": "text/plain"}, 415, "unsupported Content-Type"),
        (sample_request(out_of_range=True).SerializeToString(), PROTO, 400, "attribute_table index 77"),
    ],
)
async def test_bad_http_input_is_an_otlp_error_and_nothing_is_forwarded(
    recorder: tuple[OtlpRecorder, str],
    bridge: BridgeFactory,
    body: bytes,
    headers: dict[str, str],
    status: int,
    message: str,
) -> None:
    rec, url = recorder
    client = await bridge(url)

    resp = await client.post("/v1development/profiles", data=body, headers=headers)

    assert resp.status == status
    raw = await resp.read()
    if resp.content_type == "application/json":
        text = json.loads(raw)["message"]
    else:
        text = status_pb2.Status.FromString(raw).message
    assert message in text
    assert rec.received == []


@pytest.mark.parametrize("gzipped", [False, True])
async def test_an_oversized_body_is_413_which_exporters_do_not_retry(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory, gzipped: bool
) -> None:
    """Issue 11, item 13: 429 makes OTLP exporters retry a body that can never fit; 413 (Content Too Large) with
    the RESOURCE_EXHAUSTED status says so once."""
    rec, url = recorder
    client = await bridge(url, max_body_bytes=4096)
    body = sample_request().SerializeToString() + b"\x00" * 8192
    headers = {"Content-Type": "application/x-protobuf"}
    if gzipped:  # small on the wire, over the limit once inflated
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        assert len(body) < 4096
    resp = await client.post("/v1development/profiles", data=body, headers=headers)
    assert resp.status == 413
    status = status_pb2.Status.FromString(await resp.read())
    assert status.code == 8 and "over the limit of 4096 bytes" in status.message  # RESOURCE_EXHAUSTED
    assert rec.received == []


@pytest.mark.parametrize(
    ("upstream", "status", "code"),
    [((400, "profile too old"), 400, 3), ((503, "ingester down"), 503, 14), ((401, "who are you"), 401, 16)],
)
async def test_upstream_errors_come_back_as_otlp_errors(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory, upstream: tuple[int, str], status: int, code: int
) -> None:
    rec, url = recorder
    rec.http_fail = upstream
    client = await bridge(url)

    resp = await client.post("/v1development/profiles", data=sample_request().SerializeToString(), headers=PROTO)

    assert resp.status == status
    answer = status_pb2.Status.FromString(await resp.read())
    assert answer.code == code
    assert upstream[1] in answer.message and f"HTTP {upstream[0]}" in answer.message


async def test_a_slow_upstream_is_cut_off_by_the_timeout(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory
) -> None:
    rec, url = recorder
    rec.delay = 5.0
    client = await bridge(url, upstream_timeout=0.2)

    resp = await client.post("/v1development/profiles", data=sample_request().SerializeToString(), headers=PROTO)

    assert resp.status == 504
    assert "did not answer within 0.2 s" in status_pb2.Status.FromString(await resp.read()).message


async def test_an_unreachable_upstream_is_unavailable(bridge: BridgeFactory, unused_tcp_port: int) -> None:
    client = await bridge(f"http://127.0.0.1:{unused_tcp_port}")
    resp = await client.post("/v1development/profiles", data=sample_request().SerializeToString(), headers=PROTO)
    assert resp.status == 503
    assert "cannot connect to pyroscope" in status_pb2.Status.FromString(await resp.read()).message


# --------------------------------------------------------------------------------------------- gRPC receiver


async def test_grpc_receiver_links_and_forwards_over_http_with_the_tenant(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory
) -> None:
    rec, url = recorder
    client = await bridge(url, otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0))

    answer = await grpc_export(
        grpc_port(client),
        sample_request(bad_ids=1),
        metadata=(("x-scope-orgid", "team-b"), ("authorization", "Basic eDp5")),
    )

    assert answer.partial_success.rejected_profiles == 0
    assert answer.partial_success.error_message.startswith("1 sample has invalid trace or span ids")
    [got] = rec.received
    assert (got.tenant, got.authorization) == ("team-b", "Basic eDp5")
    assert_linked(got.request)


async def test_grpc_forwarding_mode_sends_over_grpc_with_metadata(
    grpc_sink: tuple[OtlpRecorder, int], bridge: BridgeFactory
) -> None:
    rec, port = grpc_sink
    client = await bridge("http://127.0.0.1:9", profiles_forward="grpc", pyroscope_grpc_target=f"127.0.0.1:{port}")

    resp = await client.post(
        "/v1development/profiles", data=sample_request().SerializeToString(), headers={**PROTO, **TENANT}
    )

    assert resp.status == 200, await resp.text()
    [got] = rec.received
    assert (got.tenant, got.authorization) == ("team-a", "Bearer s3cret")
    assert_linked(got.request)


@pytest.mark.parametrize(
    ("fail", "http_status"),
    [((grpc.StatusCode.INVALID_ARGUMENT, "bad profile"), 400), ((grpc.StatusCode.UNAVAILABLE, "restarting"), 503)],
)
async def test_grpc_upstream_errors_keep_their_code(
    grpc_sink: tuple[OtlpRecorder, int], bridge: BridgeFactory, fail: tuple[grpc.StatusCode, str], http_status: int
) -> None:
    rec, port = grpc_sink
    rec.grpc_fail = fail
    client = await bridge(
        "http://127.0.0.1:9",
        profiles_forward="grpc",
        pyroscope_grpc_target=f"127.0.0.1:{port}",
        otlp_grpc_enabled=True,
        otlp_grpc_listen=("127.0.0.1", 0),
    )

    resp = await client.post("/v1development/profiles", data=sample_request().SerializeToString(), headers=PROTO)
    assert resp.status == http_status
    assert fail[1] in status_pb2.Status.FromString(await resp.read()).message

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_export(grpc_port(client), sample_request())
    assert caught.value.code() == fail[0]
    assert fail[1] in (caught.value.details() or "")


async def test_grpc_slow_upstream_is_deadline_exceeded(
    grpc_sink: tuple[OtlpRecorder, int], bridge: BridgeFactory
) -> None:
    rec, port = grpc_sink
    rec.delay = 5.0
    client = await bridge(
        "http://127.0.0.1:9",
        profiles_forward="grpc",
        pyroscope_grpc_target=f"127.0.0.1:{port}",
        upstream_timeout=0.2,
        otlp_grpc_enabled=True,
        otlp_grpc_listen=("127.0.0.1", 0),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_export(grpc_port(client), sample_request())
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b"\x0a\xff\xff",
            "not a valid opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
        ),
        (sample_request(out_of_range=True).SerializeToString(), "attribute_table index 77"),
    ],
)
async def test_grpc_bad_input_is_invalid_argument_and_nothing_is_forwarded(
    recorder: tuple[OtlpRecorder, str], bridge: BridgeFactory, body: bytes, message: str
) -> None:
    rec, url = recorder
    client = await bridge(url, otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port(client)}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
            request_serializer=None,
            response_deserializer=svc.ExportProfilesServiceResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await export(body, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (caught.value.details() or "")
    assert rec.received == []


# --------------------------------------------------------------------------------------------- standalone hand-off


class RecordingTraceSink:
    def __init__(self) -> None:
        self.received: list[tuple[tsvc.ExportTraceServiceRequest, str | None]] = []

    async def ingest_otlp_traces(self, req: tsvc.ExportTraceServiceRequest, tenant: str | None) -> tuple[int, str]:
        self.received.append((req, tenant))
        return 1, "1 span without an id"


async def test_standalone_gateway_hands_linked_profiles_and_traces_to_the_sinks() -> None:
    settings = Settings.for_tests(otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0))
    sink, traces = RecordingProfileSink(), RecordingTraceSink()
    server = await start_grpc_server(settings, Gateway(settings, Metrics(), sink=sink), traces)
    try:
        await grpc_export(server.port, sample_request(), metadata=(("x-scope-orgid", "team-c"),))
        trace_req = tsvc.ExportTraceServiceRequest()
        trace_req.resource_spans.add().scope_spans.add().spans.add(name="GET /checkout")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            answer = await tsvc_grpc.TraceServiceStub(channel).Export(
                trace_req, metadata=(("x-scope-orgid", "team-c"),), timeout=10
            )
    finally:
        await server.stop()
    [(req, tenant)] = sink.received
    assert tenant == "team-c"
    assert_linked(req)
    assert traces.received == [(trace_req, "team-c")]
    assert (answer.partial_success.rejected_spans, answer.partial_success.error_message) == (1, "1 span without an id")


async def test_without_a_trace_sink_the_trace_service_is_not_served() -> None:
    settings = Settings.for_tests(otlp_grpc_listen=("127.0.0.1", 0))
    server = await start_grpc_server(settings, Gateway(settings, Metrics(), sink=RecordingProfileSink()))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await tsvc_grpc.TraceServiceStub(channel).Export(tsvc.ExportTraceServiceRequest(), timeout=10)
    finally:
        await server.stop()
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --------------------------------------------------------------------------------------------- pprof pull


def pprof_target_app(raw: bytes, asked: list[str]) -> web.Application:
    async def profile(request: web.Request) -> web.Response:
        asked.append(request.query.get("seconds", ""))
        return web.Response(body=raw, content_type="application/octet-stream")

    async def missing(request: web.Request) -> web.Response:
        asked.append("missing")
        return web.Response(status=404, text="404 page not found")

    app = web.Application()
    app.router.add_get("/debug/pprof/profile", profile)
    app.router.add_get("/gone/debug/pprof/profile", missing)
    return app


async def test_pull_scrapes_converts_links_and_forwards_and_survives_a_failing_target(
    recorder: tuple[OtlpRecorder, str], aiohttp_server: Any
) -> None:
    rec, url = recorder
    service, raw = next((s, r) for s, r in shop_pprofs() if s == "shop-backend")
    asked: list[str] = []
    target_server = await aiohttp_server(pprof_target_app(raw, asked))
    good = str(target_server.make_url("/debug/pprof/profile?seconds=1")) + "#shop-backend"
    bad = str(target_server.make_url("/gone/debug/pprof/profile?seconds=1"))
    settings = Settings.for_tests(
        mode="proxy", pyroscope_url=url, tempo_url=url, pprof_targets=(good, bad), pprof_interval=0.05
    )
    server = TestServer(create_app(settings))
    await server.start_server()
    try:
        for _ in range(400):
            puller = server.app[RUNTIME].backends.puller
            if len(rec.received) >= 2 and puller.state[bad].failures >= 2:
                break
            await asyncio.sleep(0.025)
        metrics = server.app[RUNTIME].backends.gateway.metrics.render().decode()
    finally:
        await server.close()

    assert len(rec.received) >= 2
    assert puller.state[bad].failures >= 2 and "HTTP 404" in puller.state[bad].last_error
    assert puller.state[good].failures == 0
    # the scraper's session is the upstream one: no cookie jar, so no target's Set-Cookie rides on later requests
    assert isinstance(puller.session.cookie_jar, aiohttp.DummyCookieJar)
    assert set(asked) == {"1", "missing"}
    got = rec.received[0].request
    attrs = got.resource_profiles[0].resource.attributes
    assert [(a.key, a.value.string_value) for a in attrs] == [("service.name", "shop-backend")]
    stats = puller.state[good].last_stats
    assert stats is not None and stats.linked > 0 and stats.invalid == 0
    assert len(got.dictionary.link_table) == stats.links_added + 1
    assert f'profile_bridge_pprof_scrapes_total{{outcome="error",target="{bad}"}}' in metrics


def test_service_name_comes_from_the_fragment_or_the_host() -> None:
    assert service_name("http://shop:6060/debug/pprof/profile?seconds=5#shop-backend") == "shop-backend"
    assert service_name("http://shop:6060/debug/pprof/profile?seconds=5") == "shop"


async def test_pull_target_timeout_is_reported_not_raised(aiohttp_server: Any) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(body=b"")

    app = web.Application()
    app.router.add_get("/debug/pprof/profile", slow)
    target = await aiohttp_server(app)
    url = str(target.make_url("/debug/pprof/profile?seconds=0"))
    settings = replace(Settings.for_tests(), upstream_timeout=0.2)
    sink = RecordingProfileSink()
    import aiohttp

    async with aiohttp.ClientSession() as session:
        puller = Puller(settings, session, Gateway(settings, Metrics(), sink=sink), Metrics())
        with pytest.raises(Exception) as caught:
            await puller.scrape_once(url)
    assert "did not answer within 0.2 s" in str(caught.value)
    assert sink.received == []


async def test_recorder_double_rejects_what_pyroscope_would(aiohttp_client: Any) -> None:
    """The double decodes for real: garbage is refused, not recorded."""
    client = await aiohttp_client(build_http_sink())
    resp = await client.post("/v1development/profiles", data=b"\x0a\xff", headers=PROTO)
    assert resp.status == 400
    assert client.server.app[OTLP_RECORDER].received == []


async def test_standalone_bridge_stores_linked_samples_received_over_grpc(aiohttp_client: Any, tmp_path: Any) -> None:
    """OTLP over gRPC → the standalone bridge → its store: span profiles of the shop capture answer by span id."""
    from bridge._proto import querier_pb2 as qpb
    from bridge.call import CallContext, Deadline
    from bridge.otlp.pprof_convert import pprof_to_otlp
    from bridge.pprof import decode_pprof

    service, raw = next((s, r) for s, r in shop_pprofs() if s == "shop-backend")
    profile = decode_pprof(raw)
    per_span: dict[str, int] = {}
    st = profile.string_table
    for s in profile.sample:
        labels = {st[lb.key]: st[lb.str] for lb in s.label if lb.str}
        if "span_id" in labels:
            per_span[labels["span_id"]] = per_span.get(labels["span_id"], 0) + s.value[0]
    span, expected = max(per_span.items(), key=lambda kv: kv[1])
    now = profile.time_nanos / 1e9
    settings = Settings.for_tests(
        mode="standalone", data_dir=str(tmp_path), otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0)
    )
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: now))

    answer = await grpc_export(
        grpc_port(client), pprof_to_otlp(profile, service), metadata=(("x-scope-orgid", "team-d"),)
    )

    assert not answer.HasField("partial_success")
    store = client.server.app[RUNTIME].backends.profiles
    ctx = CallContext(deadline=Deadline.start(None, 10.0), tenant="team-d")
    start_ms, end_ms = int(now * 1000) - 60_000, int(now * 1000) + 60_000
    [ptype] = (await store.profile_types(qpb.ProfileTypesRequest(start=start_ms, end=end_ms), ctx)).profile_types
    got = await store.select_merge_span_profile(
        qpb.SelectMergeSpanProfileRequest(
            profile_typeID=ptype.ID,
            label_selector=f'{{service_name="{service}"}}',
            span_selector=[span],
            start=start_ms,
            end=end_ms,
        ),
        ctx,
    )
    assert got.flamegraph.total == expected


async def test_grpc_forwarding_without_a_target_stops_startup_with_a_config_error() -> None:
    from bridge.config import ConfigError
    from bridge.otlp.runtime import open_gateway

    settings = Settings.for_tests(mode="proxy", profiles_forward="grpc", pyroscope_grpc_target="")
    with pytest.raises(ConfigError, match="PROFILE_BRIDGE_PYROSCOPE_GRPC_TARGET has value ''"):
        async with open_gateway(settings, Metrics()):
            pass


@pytest.mark.parametrize("auto_decompress", [True, False])  # `serve` runs with False: the handler undoes gzip
async def test_gzip_bodies_work_whoever_undoes_the_gzip(
    recorder: tuple[OtlpRecorder, str], aiohttp_server: Any, auto_decompress: bool
) -> None:
    import aiohttp

    rec, url = recorder
    settings = Settings.for_tests(mode="proxy", pyroscope_url=url, tempo_url=url)
    server = await aiohttp_server(create_app(settings), auto_decompress=auto_decompress)
    body = gzip.compress(sample_request().SerializeToString())
    async with aiohttp.ClientSession() as session:
        async with session.post(
            server.make_url("/v1development/profiles"), data=body, headers={**PROTO, "Content-Encoding": "gzip"}
        ) as resp:
            assert resp.status == 200, await resp.text()
        async with session.post(
            server.make_url("/v1development/profiles"),
            data=body[: len(body) // 2],
            headers={**PROTO, "Content-Encoding": "gzip"},
        ) as resp:
            assert resp.status == 400
    [got] = rec.received
    assert_linked(got.request)


async def test_a_profile_stamped_past_2200_is_a_400_in_standalone_mode(aiohttp_client: Any, tmp_path: Any) -> None:
    """Issue 11, item 5: ``time_unix_nano`` ≥ 2^63 (valid fixed64, no int64) made the store fail with a 500."""
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path))
    client = await aiohttp_client(create_app(settings))
    req = sample_request()
    req.resource_profiles[0].scope_profiles[0].profiles[0].time_unix_nano = 2**64 - 1
    resp = await client.post(
        "/v1development/profiles", data=req.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
    )
    assert resp.status == 400
    assert "between 1970 and 2200" in status_pb2.Status.FromString(await resp.read()).message
