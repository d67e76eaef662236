"""Optional authentication (issue 11, item 3): tokens bound to tenants, read and ingest permissions, on every HTTP
route (pages, API, mounts, ingest) and the gRPC receiver; /healthz and /readyz open, /metrics as configured; the
bridge's own credential never goes upstream, the caller's upstream credentials still do."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tsvc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsvc_grpc

from bridge.app import create_app
from bridge.auth import Auth, credential
from bridge.call import CallContext, Deadline
from bridge.config import ConfigError, Settings
from bridge.parsing import parse_token_entries
from bridge.state import RUNTIME
from bridge.store import Store
from tests.doubles.shop import capture_now
from tests.paths import SHOP_CAPTURE
from tests.serving import closed_port

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Server = Callable[..., Awaitable[TestServer]]

TEAM_A = "a-token-for-team-a-0001"  # read and ingest, team-a
TEAM_B = "a-token-for-team-b-0002"  # read, team-b
ANY_READ = "an-operators-read-token-03"  # read, any tenant
INGEST_A = "an-ingest-only-token-a-04"  # ingest, team-a
TOKENS = (
    f"{TEAM_A} team-a read,ingest; {TEAM_B} team-b read; {ANY_READ} * read; "
    f"sha256:{hashlib.sha256(INGEST_A.encode()).hexdigest()} team-a ingest"
)
PROTO = {"Content-Type": "application/x-protobuf"}
TRACES = sorted(SHOP_CAPTURE.glob("*_v1_traces.bin"))[0].read_bytes()
TRACE_ID = tsvc.ExportTraceServiceRequest.FromString(TRACES).resource_spans[0].scope_spans[0].spans[0].trace_id.hex()


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def basic(user: str, password: str) -> dict[str, str]:
    """What Grafana's data sources (basic auth) and a browser's login prompt send."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def settings(tmp_path: Path, **changes: Any) -> Settings:
    env = {"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS}
    base = Settings.from_env(env)
    return Settings.for_tests(
        mode="standalone", data_dir=str(tmp_path / "data"), auth_env_tokens=base.auth_env_tokens, **changes
    )


def store_of(client: TestClient[Any, Any]) -> Store:
    store = client.app[RUNTIME].backends.profiles
    assert isinstance(store, Store)
    return store


async def trace_in(store: Store, tenant: str) -> bool:
    ctx = CallContext(deadline=Deadline.start(None, 10.0), tenant=tenant)
    return await store.trace_by_id(TRACE_ID, ctx) is not None


# --------------------------------------------------------------------------------------------- configuration


def test_token_entries_parse_and_errors_never_quote_a_token() -> None:
    [plain, hashed, anyone] = parse_token_entries(
        f"{TEAM_A} team-a read,ingest\n# a comment\nsha256:{'ab' * 32} team-b ingest  # trailing\n{ANY_READ} * read\n",
        "line",
    )
    assert plain.digest == hashlib.sha256(TEAM_A.encode()).digest() and plain.permissions == {"read", "ingest"}
    assert hashed.digest == bytes.fromhex("ab" * 32) and hashed.tenant == "team-b" and hashed.where == "line 3"
    assert anyone.tenant == "*"
    for text, words in [
        ("short-token team-a read", "shorter than 16 characters"),
        (f"{TEAM_A} team-a write", "are not read, ingest or read,ingest"),
        (f"{TEAM_A} team-a", "has 2 fields"),
        (f"{TEAM_A} team-a read; {TEAM_A} team-b read", "entry 2: the same token as entry 1"),
        ("sha256:abc team-a read", "64 hex characters"),
    ]:
        with pytest.raises(ValueError, match=words) as caught:
            parse_token_entries(text)
        assert TEAM_A not in str(caught.value) and "short-token" not in str(caught.value)
    with pytest.raises(ConfigError) as error:
        Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": f"{TEAM_A} team-a write"})
    assert TEAM_A not in str(error.value) and "(hidden)" in str(error.value)


def test_credentials_from_the_token_header_bearer_and_basic() -> None:
    basic = base64.b64encode(f"grafana:{TEAM_A}".encode()).decode()
    assert credential({"X-Profile-Bridge-Token": TEAM_A, "Authorization": "Bearer other"}) == (TEAM_A, False)
    assert credential({"Authorization": f"Bearer {TEAM_A}"}) == (TEAM_A, True)
    assert credential({"Authorization": f"Basic {basic}"}) == (TEAM_A, True)
    assert credential({"Authorization": "Basic !!!"}) == (None, True)
    assert credential({}) == (None, False)
    auth = Auth(Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS}).auth_tokens)
    assert [
        auth.required(p, m)
        for p, m in [
            ("/healthz", "GET"),
            ("/readyz", "GET"),
            ("/metrics", "GET"),
            ("/", "GET"),
            ("/api/v1/requests/slowest", "GET"),
            ("/v1/traces", "POST"),
            ("/push.v1.PusherService/Push", "POST"),
            ("/tempo/api/search", "GET"),
            ("/tempo/flush", "POST"),
            ("/pyroscope/push.v1.PusherService/Push", "POST"),
            ("/pyroscope/querier.v1.QuerierService/ProfileTypes", "POST"),
            ("/no/such/route", "GET"),
        ]
    ] == [None, None, None, "read", "read", "ingest", "ingest", "read", "read", "ingest", "read", "read"]
    # (/tempo/flush needs only a token: the mount refuses it to anyone, bridge.wire.allowlist)


# --------------------------------------------------------------------------------------------- HTTP, standalone


async def test_without_a_token_only_health_and_metrics_answer(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(create_app(settings(tmp_path), wall_clock=capture_now))
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(path)).status == 200, path
    for method, path in [
        ("GET", "/"),
        ("GET", f"/spans/{TRACE_ID}/0123456789abcdef"),
        ("GET", f"/spans/{TRACE_ID}/0123456789abcdef/compare"),
        ("GET", "/functions/spans"),
        ("GET", "/api/v1/functions/spans?service=s&function=f"),
        ("GET", f"/api/v1/spans/{TRACE_ID}/0123456789abcdef/compare"),
        ("GET", "/api/v1/requests/slowest"),
        ("GET", "/tempo/api/search"),
        ("POST", "/pyroscope/querier.v1.QuerierService/ProfileTypes"),
        ("GET", "/no/such/route"),
    ]:
        resp = await client.request(method, path, headers={"Content-Type": "application/proto"})
        assert resp.status == 401, path
        assert "Basic realm=" in resp.headers["WWW-Authenticate"] and "Bearer" in resp.headers["WWW-Authenticate"]
        assert "needs a token" in await resp.text()
    resp = await client.get("/api/v1/requests/slowest", headers=bearer("not-a-token-we-know-at-all"))
    assert resp.status == 401
    assert await resp.json() == {
        "error": {"code": "unauthenticated", "message": "the token is not one this bridge accepts"}
    }


async def test_metrics_can_require_a_read_token(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(create_app(settings(tmp_path, auth_metrics="read"), wall_clock=capture_now))
    assert (await client.get("/metrics")).status == 401
    assert (await client.get("/metrics", headers=bearer(TEAM_B))).status == 200
    assert (await client.get("/metrics", headers=bearer(INGEST_A))).status == 403  # ingest only


async def test_ingest_is_bound_to_the_tokens_tenant(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(create_app(settings(tmp_path), wall_clock=capture_now))
    resp = await client.post("/v1/traces", data=TRACES, headers=PROTO)
    assert resp.status == 401 and "needs a token" in status_pb2.Status.FromString(await resp.read()).message
    resp = await client.post("/v1/traces", data=TRACES, headers={**PROTO, **bearer(TEAM_B)})
    assert resp.status == 403  # read only
    assert "may read, not ingest" in status_pb2.Status.FromString(await resp.read()).message
    resp = await client.post(
        "/v1/traces", data=TRACES, headers={**PROTO, **bearer(INGEST_A, **{"X-Scope-OrgID": "team-b"})}
    )
    assert resp.status == 403  # a token for team-a cannot write team-b's data
    assert "acts for tenant 'team-a' only" in status_pb2.Status.FromString(await resp.read()).message
    resp = await client.post("/v1/traces", data=TRACES, headers={**PROTO, **bearer(INGEST_A)})
    assert resp.status == 200  # no header: the token's tenant
    store = store_of(client)
    assert await trace_in(store, "team-a")
    assert not await trace_in(store, "team-b") and not await trace_in(store, "anonymous")


async def test_push_with_basic_auth_as_grafana_and_sdks_send_it(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(create_app(settings(tmp_path), wall_clock=capture_now))
    push = sorted(SHOP_CAPTURE.glob("*_push.v1.PusherService_Push.bin"))[0].read_bytes()
    resp = await client.post(
        "/push.v1.PusherService/Push",
        data=push,
        headers={"Content-Type": "application/proto", **basic("any-user", TEAM_A)},
    )
    assert resp.status == 200, await resp.text()
    resp = await client.post(
        "/push.v1.PusherService/Push",
        data=push,
        headers={"Content-Type": "application/proto", **basic("team-a", "wrong-password-000")},
    )
    assert resp.status == 401
    assert (await resp.json())["code"] == "unauthenticated"


async def test_reads_see_the_tokens_tenant_only(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(create_app(settings(tmp_path), wall_clock=capture_now))
    assert (await client.post("/v1/traces", data=TRACES, headers={**PROTO, **bearer(TEAM_A)})).status == 200
    path = f"/tempo/api/v2/traces/{TRACE_ID}"
    resp = await client.get(path, headers=bearer(TEAM_A))
    assert resp.status == 200 and json.loads(await resp.read())["trace"]["resourceSpans"]
    resp = await client.get(path, headers=bearer(TEAM_B))  # team-b's store has no such trace: v2's empty answer
    assert resp.status == 200 and json.loads(await resp.read())["trace"] == {}
    assert (await client.get(path, headers=bearer(TEAM_B, **{"X-Scope-OrgID": "team-a"}))).status == 403
    # an operator's token for any tenant: the header chooses
    assert (await client.get(path, headers=bearer(ANY_READ, **{"X-Scope-OrgID": "team-a"}))).status == 200
    assert (await client.get(path, headers=bearer(INGEST_A))).status == 403  # ingest only: no reads
    # the pages: a browser's login prompt (any user, the token as password)
    resp = await client.get("/", headers=basic("me", TEAM_A))
    assert resp.status == 200 and "text/html" in resp.headers["Content-Type"]


async def test_grpc_exports_need_an_ingest_token(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(
        create_app(
            settings(tmp_path, otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0)), wall_clock=capture_now
        )
    )
    port = client.app[RUNTIME].backends.grpc.port
    req = tsvc.ExportTraceServiceRequest.FromString(TRACES)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = tsvc_grpc.TraceServiceStub(channel)
        for metadata, code in [
            ((), grpc.StatusCode.UNAUTHENTICATED),
            ((("authorization", f"Bearer {TEAM_B}"),), grpc.StatusCode.PERMISSION_DENIED),
            ((("x-profile-bridge-token", INGEST_A), ("x-scope-orgid", "team-b")), grpc.StatusCode.PERMISSION_DENIED),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Export(req, metadata=metadata, timeout=10)
            assert caught.value.code() == code
            assert TEAM_B not in (caught.value.details() or "") and INGEST_A not in (caught.value.details() or "")
        await stub.Export(req, metadata=(("x-profile-bridge-token", INGEST_A),), timeout=10)
    assert await trace_in(store_of(client), "team-a")


async def test_a_stock_opentelemetry_exporter_sends_with_its_headers(tmp_path: Path, aiohttp_client: Client) -> None:
    """The OpenTelemetry SDK's OTLP/HTTP exporter, configured the usual way (headers=… or OTEL_EXPORTER_OTLP_HEADERS),
    against a bridge that requires a token."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    client = await aiohttp_client(create_app(settings(tmp_path), wall_clock=capture_now))
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "sdk-with-token"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span("GET /ok"):
        pass
    spans = memory.get_finished_spans()
    url = str(client.make_url("/v1/traces"))
    refused = OTLPSpanExporter(endpoint=url, timeout=5)
    accepted = OTLPSpanExporter(endpoint=url, timeout=5, headers={"x-profile-bridge-token": INGEST_A})
    assert await asyncio.to_thread(refused.export, spans) == SpanExportResult.FAILURE
    assert await asyncio.to_thread(accepted.export, spans) == SpanExportResult.SUCCESS
    trace_id = f"{spans[0].context.trace_id:032x}"
    ctx = CallContext(deadline=Deadline.start(None, 10.0), tenant="team-a")
    assert await store_of(client).trace_by_id(trace_id, ctx) is not None
    provider.shutdown()


# --------------------------------------------------------------------------------------------- proxy mode


class Upstream:
    """A test double (Tempo and Pyroscope at once) recording the headers each request arrived with."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        if request.path.startswith("/api/v2/traces/"):
            return web.json_response({"trace": {}})
        return web.Response(text="ok")


async def test_proxy_mode_keeps_the_bridges_token_and_passes_the_callers_upstream_credentials(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    upstream = Upstream()
    url = str((await aiohttp_server(upstream.app)).make_url("")).rstrip("/")
    env = Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS})
    app = create_app(
        Settings.for_tests(mode="proxy", tempo_url=url, pyroscope_url=url, auth_env_tokens=env.auth_env_tokens)
    )
    client = await aiohttp_client(app)

    # the bridge's token in its own header: Authorization is the caller's credential for Tempo and passes on
    resp = await client.get(
        f"/tempo/api/v2/traces/{TRACE_ID}",
        headers={"X-Profile-Bridge-Token": TEAM_A, "Authorization": "Bearer for-tempo", "Cookie": "session=1"},
    )
    assert resp.status == 200
    resp = await client.get(
        "/tempo/api/search?q={}", headers={"X-Profile-Bridge-Token": TEAM_A, "Authorization": "Bearer for-tempo"}
    )
    assert resp.status == 200
    for seen in upstream.seen:
        assert seen.get("Authorization") == "Bearer for-tempo"
        assert seen.get("X-Scope-OrgID") == "team-a"  # bound by the token
        assert "X-Profile-Bridge-Token" not in seen and "Cookie" not in seen
    # the bridge's token in Authorization: it is consumed, never forwarded
    upstream.seen.clear()
    assert (await client.get("/tempo/api/search?q={}", headers=bearer(TEAM_A))).status == 200
    [seen] = upstream.seen
    assert "Authorization" not in seen and seen["X-Scope-OrgID"] == "team-a"
    # writes through the mounts need ingest: a read token cannot push to Pyroscope or POST to Tempo
    upstream.seen.clear()
    assert (await client.post("/pyroscope/push.v1.PusherService/Push", data=b"", headers=bearer(TEAM_B))).status == 403
    assert (await client.post("/tempo/flush", headers=bearer(TEAM_B))).status == 403
    assert upstream.seen == []


# --------------------------------------------------------------------------------------------- the start line


def _serve_until(args: list[str], env: dict[str, str], cwd: Path, marker: str) -> tuple[int, str]:
    with subprocess.Popen(
        [sys.executable, "-m", "bridge", "serve", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        cwd=cwd,
    ) as proc:
        assert proc.stderr is not None
        lines = []
        try:
            for line in proc.stderr:
                lines.append(line)
                if marker in line:
                    break
        finally:
            proc.terminate()
            lines.append(proc.communicate(timeout=60)[1])
    return proc.returncode, "".join(lines)


@pytest.mark.slow  # `serve` started three times in its own process; only its start line is read: date-safe
def test_start_line_says_where_and_warns_when_reachable_without_authentication(tmp_path: Path) -> None:
    port = closed_port()
    env = {"PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false", "PROFILE_BRIDGE_DATA_DIR": str(tmp_path / "d")}
    code, text = _serve_until(["--listen", f"0.0.0.0:{port}"], env, tmp_path, "WITHOUT AUTHENTICATION")
    assert code == 0, text
    assert f"listening on http://0.0.0.0:{port} (standalone mode, no authentication)" in text
    assert f"HTTP on 0.0.0.0:{port}: reachable from other hosts WITHOUT AUTHENTICATION" in text

    tokens = tmp_path / "tokens"
    tokens.write_text(f"# team a\n{TEAM_A} team-a read,ingest\n{TEAM_B} team-b read\n")
    code, text = _serve_until(
        ["--listen", f"0.0.0.0:{port}"],
        {**env, "PROFILE_BRIDGE_AUTH_TOKENS_FILE": str(tokens)},
        tmp_path,
        "standalone mode: store in ",  # cli.py logs it after the listening line (mode.py says "store at" before)
    )
    assert code == 0, text
    assert "(standalone mode, authentication on: 2 tokens)" in text and "WITHOUT AUTHENTICATION" not in text
    assert TEAM_A not in text


def test_a_bad_tokens_file_stops_the_bridge_in_one_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TEAM_A} team-a read,write\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROFILE_BRIDGE_AUTH_TOKENS_FILE": str(tokens)},
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and TEAM_A not in proc.stderr
    assert "PROFILE_BRIDGE_AUTH_TOKENS_FILE" in proc.stderr and "line 1: permissions" in proc.stderr
