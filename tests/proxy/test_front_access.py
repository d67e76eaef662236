"""The shipped nginx front keeps the bridge's access control (issue 19, goal 1): nginx run with
``deploy/nginx-front.conf`` and its script between a bridge with tokens on and the Pyroscope and Tempo doubles. Every
bypass of the issue's findings table is tried through the front — no token, a bad token, tenant A's token asking for
tenant B (LabelValues, plain SelectMergeStacktraces in protobuf and JSON, Tempo search, tag values), an
unauthenticated Push, the token header riding upstream, the 421 hand-back replayed without the bound tenant — and
each is refused, or carries the token's tenant and no token of the bridge's, as the bridge alone does."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.protobuf import json_format
from yarl import URL

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.app import create_app
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from tests.nginx_front import running_front
from tests.proxy.test_pyroscope_mount import Stack, make_stack

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Server = Callable[..., Awaitable[TestServer]]

READ_A = "a-read-token-for-team-a-001"  # read, team-a
READ_B = "a-read-token-for-team-b-002"  # read, team-b
INGEST_A = "an-ingest-token-team-a-0003"  # ingest, team-a (as its sha256)
TOKENS = (
    f"{READ_A} team-a read; {READ_B} team-b read; sha256:{hashlib.sha256(INGEST_A.encode()).hexdigest()} team-a ingest"
)
PROTO = "application/proto"
JSON = "application/json"


@pytest.fixture
async def stack(aiohttp_server: Server, aiohttp_client: Client) -> Stack:
    env = Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS})
    return await make_stack(aiohttp_server, aiohttp_client, auth_env_tokens=env.auth_env_tokens)


def plain_flamegraph() -> qpb.SelectMergeStacktracesRequest:
    return qpb.SelectMergeStacktracesRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE, label_selector='{service_name="shop-frontend"}', start=1, end=2
    )


def reads() -> list[tuple[str, str, str, bytes, str]]:
    """(what, method, path, body, content type): the reads the findings table got through the front on main."""
    label_values = tpb.LabelValuesRequest(name="service_name", matchers=["{}"])
    flame = plain_flamegraph()
    return [
        ("LabelValues", "POST", "/pyroscope/querier.v1.QuerierService/LabelValues",
         label_values.SerializeToString(), PROTO),
        ("flame graph, protobuf", "POST", "/pyroscope/querier.v1.QuerierService/SelectMergeStacktraces",
         flame.SerializeToString(), PROTO),
        ("flame graph, JSON", "POST", "/pyroscope/querier.v1.QuerierService/SelectMergeStacktraces",
         json_format.MessageToJson(flame).encode(), JSON),
        ("Tempo search", "GET", "/tempo/api/search?q=%7B%7D", b"", ""),
        ("tag values", "GET", "/tempo/api/v2/search/tag/resource.service.name/values", b"", ""),
    ]  # fmt: skip


class Seen:
    """What reached the doubles since the last look."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.marks = (0, 0)

    def new(self) -> list[dict[str, str]]:
        pyro, tempo = self.stack.pyroscope.requests, self.stack.tempo.requests
        fresh = [r.headers for r in pyro[self.marks[0] :]] + [r.headers for r in tempo[self.marks[1] :]]
        self.marks = (len(pyro), len(tempo))
        return fresh


async def send(
    session: aiohttp.ClientSession, base: str, method: str, path: str, body: bytes, ctype: str, headers: dict[str, str]
) -> tuple[int, str]:
    sent = {**headers, **({"Content-Type": ctype, "Connect-Protocol-Version": "1"} if ctype else {})}
    url = URL(base + path, encoded=True)  # as written: yarl would resolve "%2e%2e" before sending
    async with session.request(method, url, data=body or None, headers=sent) as resp:
        return resp.status, (await resp.read()).decode(errors="replace")


_AUTH_ASKED = re.compile(r'^profile_bridge_requests_total\{code="200",route="/api/v1/auth"\} (\S+)$', re.M)


async def auth_asked(stack: Stack) -> float:
    """How often nginx asked the bridge's access check (the bridge's own /metrics)."""
    text = await (await stack.client.get("/metrics")).text()
    found = _AUTH_ASKED.search(text)
    return float(found.group(1)) if found else 0.0


async def test_every_bypass_of_the_findings_is_refused_through_the_front(stack: Stack) -> None:
    seen = Seen(stack)
    async with (
        running_front(str(stack.client.make_url("")), stack.pyroscope.url, stack.tempo.url) as base,
        aiohttp.ClientSession() as session,
    ):
        refusals = [
            ("no token", {}, 401),
            ("a bad token", {"X-Profile-Bridge-Token": "not-a-token-of-this-bridge"}, 401),
            ("a bad bearer", {"Authorization": "Bearer not-a-token-of-this-bridge"}, 401),
            ("tenant A's token for tenant B", {"X-Profile-Bridge-Token": READ_A, "X-Scope-OrgID": "team-b"}, 403),
            ("tenant A's bearer for tenant B", {"Authorization": f"Bearer {READ_A}", "X-Scope-OrgID": "team-b"}, 403),
        ]
        for what, method, path, body, ctype in reads():
            for who, headers, status in refusals:
                got, text = await send(session, base, method, path, body, ctype, headers)
                assert got == status, (what, who, got, text)
                assert seen.new() == [], (what, who)
                if status == 401:
                    assert "token" in text and "<html>" not in text, (what, who)  # the bridge's own words
        # an unauthenticated Push, and one with a read token: Pyroscope never sees them
        push = "/pyroscope/push.v1.PusherService/Push"
        assert (await send(session, base, "POST", push, b"\x0a\x00", PROTO, {}))[0] == 401
        assert (await send(session, base, "POST", push, b"\x0a\x00", PROTO, {"X-Scope-OrgID": "team-b"}))[0] == 401
        assert (await send(session, base, "POST", push, b"\x0a\x00", PROTO, {"X-Profile-Bridge-Token": READ_A}))[
            0
        ] == 403
        assert seen.new() == []
        # each read with tenant A's token reaches the upstream as tenant A, without the bridge's token
        for what, method, path, body, ctype in reads():
            for headers in (
                {"X-Profile-Bridge-Token": READ_A},
                {"X-Profile-Bridge-Token": READ_A, "X-Scope-OrgID": "team-a"},
            ):
                got, text = await send(session, base, method, path, body, ctype, headers)
                assert got == 200, (what, got, text)
                [upstream] = seen.new()
                assert upstream.get("X-Scope-OrgID") == "team-a", what
                assert "X-Profile-Bridge-Token" not in upstream, what
        # Push with an ingest token: sent on as tenant A
        assert (await send(session, base, "POST", push, b"\x0a\x00", PROTO, {"X-Profile-Bridge-Token": INGEST_A}))[
            0
        ] == 404
        [upstream] = seen.new()  # (the double has no Push: its own 404, relayed)
        assert upstream["X-Scope-OrgID"] == "team-a" and "X-Profile-Bridge-Token" not in upstream


async def test_the_bridges_credential_never_goes_upstream_and_the_callers_own_does(stack: Stack) -> None:
    seen = Seen(stack)
    labels = tpb.LabelNamesRequest(matchers=["{}"]).SerializeToString()
    path = "/pyroscope/querier.v1.QuerierService/LabelNames"
    async with (
        running_front(str(stack.client.make_url("")), stack.pyroscope.url, stack.tempo.url) as base,
        aiohttp.ClientSession() as session,
    ):
        # the bridge's token in Authorization: consumed, never forwarded
        assert (await send(session, base, "POST", path, labels, PROTO, {"Authorization": f"Bearer {READ_A}"}))[0] == 200
        [upstream] = seen.new()
        assert "Authorization" not in upstream and upstream["X-Scope-OrgID"] == "team-a"
        # the bridge's token in its own header: Authorization is the caller's credential for Pyroscope and passes
        headers = {"X-Profile-Bridge-Token": READ_A, "Authorization": "Bearer for-pyroscope", "Cookie": "grafana=1"}
        assert (await send(session, base, "POST", path, labels, PROTO, headers))[0] == 200
        [upstream] = seen.new()
        assert upstream["Authorization"] == "Bearer for-pyroscope" and "X-Profile-Bridge-Token" not in upstream
        assert "Cookie" not in upstream
        # a different token is a different credential: tenant B's own answer, not tenant A's cached one
        assert (await send(session, base, "POST", path, labels, PROTO, {"X-Profile-Bridge-Token": READ_B}))[0] == 200
        [upstream] = seen.new()
        assert upstream["X-Scope-OrgID"] == "team-b"
        # the check is asked once per credential, then kept (nginx's proxy_cache), not once per call
        asked = await auth_asked(stack)
        for _ in range(5):
            assert (await send(session, base, "POST", path, labels, PROTO, {"X-Profile-Bridge-Token": READ_B}))[
                0
            ] == 200
        assert await auth_asked(stack) == asked
        assert len(seen.new()) == 5
    # nothing that reached Pyroscope or Tempo through the front, in this test or the other, carried the bridge's token
    everything = [r.headers for r in stack.pyroscope.requests] + [r.headers for r in stack.tempo.requests]
    assert everything and all("X-Profile-Bridge-Token" not in h for h in everything)


async def test_the_421_hand_back_keeps_the_bound_tenant(stack: Stack) -> None:
    """A gzipped plain flame graph goes to the bridge (the script cannot read it), which hands it back with 421; nginx
    then sends it to Pyroscope as the token's tenant — the finding: it was replayed without X-Scope-OrgID."""
    body = gzip.compress(plain_flamegraph().SerializeToString())
    path = "/pyroscope/querier.v1.QuerierService/SelectMergeStacktraces"
    async with (
        running_front(str(stack.client.make_url("")), stack.pyroscope.url, stack.tempo.url) as base,
        aiohttp.ClientSession() as session,
    ):
        headers = {"Authorization": f"Bearer {READ_A}", "Content-Encoding": "gzip"}
        got, text = await send(session, base, "POST", path, body, PROTO, headers)
        assert got == 200, text
        got, _ = await send(session, base, "POST", path, body, PROTO, {**headers, "X-Scope-OrgID": "team-b"})
        assert got == 403
    [relayed] = stack.pyroscope.calls("SelectMergeStacktraces")
    assert relayed.headers["X-Scope-OrgID"] == "team-a"
    assert "Authorization" not in relayed.headers and "X-Profile-Bridge-Token" not in relayed.headers
    text = await (await stack.client.get("/metrics")).text()
    assert 'code="421",route="/pyroscope/SelectMergeStacktraces"' in text  # it did go through the hand-back


async def test_the_mounts_path_policy_holds_on_the_front(stack: Stack) -> None:
    seen = Seen(stack)
    read = {"X-Profile-Bridge-Token": READ_A}
    async with (
        running_front(str(stack.client.make_url("")), stack.pyroscope.url, stack.tempo.url) as base,
        aiohttp.ClientSession() as session,
    ):
        for method, path, status in [
            ("GET", "/tempo/shutdown", 403),
            ("GET", "/tempo/status/config", 403),
            ("POST", "/tempo/flush", 403),
            ("POST", "/pyroscope/settings.v1.SettingsService/Set", 403),  # needs ingest
            ("POST", "/pyroscope/adhocprofiles.v1.AdHocProfileService/Upload", 403),
            ("POST", "/pyroscope//push.v1.PusherService/Push", 403),  # Push, however spelt
            ("POST", "/pyroscope/%2Fpush.v1.PusherService/Push", 400),
            ("GET", "/tempo/api/%2e%2e/status/config", 400),
            ("GET", "/pyroscope/ready", 403),
        ]:
            got, text = await send(session, base, method, path, b"{}", JSON, read)
            assert got == status, (path, got, text)
            if status == 403 and "Set" not in path and "Upload" not in path and "push" not in path:
                assert "PROFILE_BRIDGE_UPSTREAM_ALLOW" in text, path
        assert seen.new() == []
        # a tag name with an encoded '/' is not nginx's to judge: the bridge relays it
        got, text = await send(
            session,
            base,
            "GET",
            "/tempo/api/v2/search/tag/resource.k8s.pod.labels.app.kubernetes.io%2Fname/values",
            b"",
            "",
            read,
        )
        assert got == 200, text
        assert [r.path for r in stack.tempo.requests][
            -1
        ] == "/api/v2/search/tag/resource.k8s.pod.labels.app.kubernetes.io/name/values"
        assert json.loads(text)["tagValues"] == []  # Tempo's answer (the double knows no such tag)


async def test_the_access_check_answers_what_nginx_needs(stack: Stack, aiohttp_client: Client) -> None:
    """GET /api/v1/auth?need=…: 200 with the tenant and whether Authorization carried the bridge's token, or the
    gate's 401/403; without tokens configured, 200 and the caller's own tenant."""
    auth = "/api/v1/auth"
    resp = await stack.client.get(auth, params={"need": "read"}, headers={"X-Profile-Bridge-Token": READ_A})
    assert resp.status == 200 and resp.headers["X-Profile-Bridge-Tenant"] == "team-a"
    assert "X-Profile-Bridge-Consumed" not in resp.headers and await resp.read() == b""
    resp = await stack.client.get(auth, params={"need": "read"}, headers={"Authorization": f"Bearer {READ_A}"})
    assert resp.status == 200 and resp.headers["X-Profile-Bridge-Consumed"] == "authorization"
    for params, headers, status in [
        ({"need": "ingest"}, {"X-Profile-Bridge-Token": READ_A}, 403),
        ({"need": "ingest"}, {"X-Profile-Bridge-Token": INGEST_A}, 200),
        ({"need": "read"}, {"X-Profile-Bridge-Token": READ_A, "X-Scope-OrgID": "team-b"}, 403),
        ({"need": "read"}, {}, 401),
        ({"need": "write"}, {"X-Profile-Bridge-Token": READ_A}, 400),
        ({}, {"X-Profile-Bridge-Token": READ_A}, 400),
    ]:
        assert (await stack.client.get(auth, params=params, headers=headers)).status == status, (params, headers)
    open_bridge = await aiohttp_client(
        create_app(Settings.for_tests(mode="proxy", pyroscope_url=stack.pyroscope.url, tempo_url=stack.tempo.url))
    )
    resp = await open_bridge.get(auth, params={"need": "ingest"}, headers={"X-Scope-OrgID": "team-c"})
    assert resp.status == 200 and resp.headers["X-Profile-Bridge-Tenant"] == "team-c"
    resp = await open_bridge.get(auth, params={"need": "read"})
    assert resp.status == 200 and "X-Profile-Bridge-Tenant" not in resp.headers
