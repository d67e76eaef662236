"""The mounts relay only what Grafana, its apps and Perses call (issue 19, goal 2): the allowlist table
(``bridge.wire.allowlist``) row by row, paths normalised before they are judged, and every path of the issue's
findings table through a bridge in proxy mode (tokens on and off) and in standalone mode. What reached the upstream is
recorded by a stand-in that answers every path, so a refusal shows as nothing sent."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.app import create_app
from bridge.auth import Auth
from bridge.config import ConfigError, Settings
from bridge.errors import InvalidArgument, PermissionDenied
from bridge.wire.allowlist import ALLOWED, SETTING, Allowed, markdown_table, match, nginx_map
from tests.paths import ROOT

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Server = Callable[..., Awaitable[TestServer]]

READER = "a-read-token-for-team-a-01"  # read, team-a
WRITER = "an-ingest-token-team-a-002"  # read and ingest, team-a
TOKENS = f"{READER} team-a read; sha256:{hashlib.sha256(WRITER.encode()).hexdigest()} team-a read,ingest"


def example(row: Allowed) -> str:
    """A concrete path for a table row (placeholders filled as Grafana fills them)."""
    return row.path.replace("{id}", "0af7651916cd43dd8448eb211c80319c").replace("{tag}", "resource.service.name")


# --------------------------------------------------------------------------------------------- the table, pure


@pytest.mark.parametrize("row", ALLOWED, ids=lambda r: f"{r.upstream}:{r.method} {r.path}")
def test_every_row_is_relayed_with_its_permission_and_only_with_its_method(row: Allowed) -> None:
    assert row.source.strip(), "every row says which client makes the call"
    call = match(row.upstream, row.method, example(row))
    assert (call.path, call.need) == (example(row), row.need)
    if row.method == "GET":
        assert match(row.upstream, "HEAD", example(row)).need == row.need
    other = "GET" if row.method == "POST" else "POST"
    with pytest.raises(PermissionDenied) as refused:
        match(row.upstream, other, example(row))
    assert f"{SETTING}={row.upstream}:{example(row)}" in refused.value.message


# What the findings table lists (measured on main 138c488): a read token reached these. Each is refused now.
ADMIN = [
    ("tempo", "GET", "/shutdown"),
    ("tempo", "POST", "/shutdown"),
    ("tempo", "GET", "/flush"),
    ("tempo", "GET", "/status/config"),
    ("tempo", "GET", "/status"),
    ("tempo", "POST", "/api/overrides"),
    ("tempo", "GET", "/memberlist"),
    ("pyroscope", "POST", "/storegateway.v1.StoreGatewayService/MergeProfilesStacktraces"),
    ("pyroscope", "POST", "/ingester.v1.IngesterService/Flush"),
    ("pyroscope", "GET", "/runtime_config"),
    ("pyroscope", "GET", "/ops/object-store/tenants"),
    ("pyroscope", "GET", "/ready"),
]


@pytest.mark.parametrize(("upstream", "method", "path"), ADMIN)
def test_admin_endpoints_are_refused_naming_the_setting_that_opens_them(upstream: str, method: str, path: str) -> None:
    with pytest.raises(PermissionDenied) as refused:
        match(upstream, method, path)
    assert f"{SETTING}={upstream}:{path}" in refused.value.message and "docs/security.md" in refused.value.message
    opened = match(upstream, method, path, ((upstream, path),))
    assert opened.need == "ingest"  # the operator's own call: a write as far as tokens go
    assert match(upstream, method, path, ((upstream, "/*"),)).need == "ingest"
    with pytest.raises(PermissionDenied):
        match(upstream, method, path, (("tempo" if upstream == "pyroscope" else "pyroscope", "/*"),))


@pytest.mark.parametrize(
    ("raw", "outcome"),
    [
        # duplicate slashes collapse: what is judged is what is sent (the finding: //push slipped past the list)
        ("//push.v1.PusherService/Push", "/push.v1.PusherService/Push ingest"),
        ("/push.v1.PusherService//Push", "/push.v1.PusherService/Push ingest"),
        ("///querier.v1.QuerierService/LabelNames", "/querier.v1.QuerierService/LabelNames read"),
        # an unreserved character sent encoded is the same call
        ("/%70ush.v1.PusherService/Push", "/%70ush.v1.PusherService/Push ingest"),
        # percent-encoded '/' and '.', backslashes, NUL, dot segments: refused before anything is judged
        ("/%2Fpush.v1.PusherService/Push", "400 percent-encoded '/'"),
        ("/%2fpush.v1.PusherService/Push", "400 percent-encoded '/'"),
        ("/push.v1.PusherService%2FPush", "400 percent-encoded '/'"),
        ("/querier.v1.QuerierService%2e/LabelNames", "400 percent-encoded '.'"),
        ("/%2e%2e/shutdown", "400 percent-encoded '.'"),
        ("/ingest%5c", "400 percent-encoded '\\'"),
        ("/ingest\\", "400 a '\\'"),
        ("/ingest%00", "400 NUL"),
        ("/../ingest", "400 '..' segment"),
        ("/./ingest", "400 '..' segment"),
        ("/querier.v1.QuerierService/../../shutdown", "400 '..' segment"),
        ("/querier.v1.QuerierService/LabelNames/", "403"),
        ("/querier.v1.QuerierService/Junk", "403"),
        ("/", "403"),
    ],
)
def test_paths_are_normalised_before_they_are_judged(raw: str, outcome: str) -> None:
    if outcome[0] == "/":
        path, need = outcome.split()
        assert (match("pyroscope", "POST", raw).path, match("pyroscope", "POST", raw).need) == (path, need)
        return
    error = InvalidArgument if outcome.startswith("400") else PermissionDenied
    with pytest.raises(error) as refused:
        match("pyroscope", "POST", raw)
    assert outcome[4:] in refused.value.message


def test_a_tag_name_may_hold_an_encoded_slash_and_nothing_else_may() -> None:
    """Grafana and Perses encode tag names (``encodeURIComponent``; perses/plugins tempo-client.ts:143), and Kubernetes
    label keys hold a '/': only the tag segment of the tag-values paths may carry ``%2F``."""
    tag = "/api/v2/search/tag/resource.k8s.pod.labels.app.kubernetes.io%2Fname/values"
    assert match("tempo", "GET", tag).path == tag
    assert match("tempo", "GET", tag.replace("/v2", "")).need == "read"
    for bad in (
        "/api/v2/search/tag/a%2F..%2F..%2Fstatus/values",  # a dot segment once decoded
        "/api/v2/traces/abc%2F..%2Fflush",
        "/api/search%2Ftags",
        "/api/v2/search%2Ftag/x/values",
    ):
        with pytest.raises(InvalidArgument):
            match("tempo", "GET", bad)


def test_the_setting_parses_and_says_what_is_wrong() -> None:
    env = {"PROFILE_BRIDGE_UPSTREAM_ALLOW": " tempo:/flush, pyroscope:/adhocprofiles.v1.AdHocProfileService/*,tempo:*"}
    assert Settings.from_env(env).upstream_allow == (
        ("tempo", "/flush"),
        ("pyroscope", "/adhocprofiles.v1.AdHocProfileService/*"),
        ("tempo", "/*"),
    )
    for bad in ("loki:/x", "tempo", "tempo:flush", "tempo:/a*b", "tempo:/a%2Fb", "tempo:/a b"):
        with pytest.raises(ConfigError) as error:
            Settings.from_env({"PROFILE_BRIDGE_UPSTREAM_ALLOW": bad})
        assert str(error.value).startswith("PROFILE_BRIDGE_UPSTREAM_ALLOW has value"), bad


def test_the_fronts_map_and_the_docs_are_the_table() -> None:
    """deploy/nginx-front.conf holds the table as an nginx map, docs/security.md as Markdown;
    scripts/front_allowlist.py rewrites both."""
    for path, render in (("deploy/nginx-front.conf", nginx_map), ("docs/security.md", markdown_table)):
        assert render() in (ROOT / path).read_text(), (
            f"{path} is behind bridge/wire/allowlist.py: run scripts/front_allowlist.py"
        )


# --------------------------------------------------------------------------------------------- through a bridge


class Upstream:
    """Stands in for Tempo and Pyroscope at once: answers every path 200 and records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen.append((request.method, request.raw_path, dict(request.headers)))
        if request.path.startswith(("/api/v2/traces/", "/api/traces/")):
            return web.json_response({"trace": {}})
        return web.Response(text="upstream answered\n")


async def bridge(
    aiohttp_server: Server, aiohttp_client: Client, **changes: Any
) -> tuple[TestClient[Any, Any], Upstream]:
    upstream = Upstream()
    url = str((await aiohttp_server(upstream.app)).make_url("")).rstrip("/")
    app = create_app(Settings.for_tests(mode="proxy", tempo_url=url, pyroscope_url=url, **changes))
    return await aiohttp_client(app), upstream


def tokens() -> dict[str, Any]:
    return {"auth_env_tokens": Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS}).auth_env_tokens}


# the second finding, as sent: a read token reached each of these on main
FINDINGS = [
    ("GET", "/tempo/shutdown", 403),
    ("GET", "/tempo/flush", 403),
    ("GET", "/tempo/status/config", 403),
    ("POST", "/pyroscope/settings.v1.SettingsService/Set", 403),
    ("POST", "/pyroscope/adhocprofiles.v1.AdHocProfileService/Upload", 403),
    ("POST", "/pyroscope//push.v1.PusherService/Push", 403),
    ("POST", "/pyroscope/%2Fpush.v1.PusherService/Push", 400),
]


async def test_a_read_token_reaches_no_admin_or_write_endpoint(aiohttp_server: Server, aiohttp_client: Client) -> None:
    client, upstream = await bridge(aiohttp_server, aiohttp_client, **tokens())
    read = {"X-Profile-Bridge-Token": READER, "Content-Type": "application/json"}
    for method, path, status in FINDINGS:
        resp = await client.request(method, path, headers=read, data=b"{}")
        assert resp.status == status, (method, path, await resp.text())
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert upstream.seen == []
    # what a read token may not do, the message says (Connect JSON under /pyroscope, Tempo's text under /tempo)
    resp = await client.get("/tempo/shutdown", headers=read)
    assert "PROFILE_BRIDGE_UPSTREAM_ALLOW=tempo:/shutdown" in await resp.text()
    resp = await client.post("/pyroscope/settings.v1.SettingsService/Set", headers=read, data=b"{}")
    body = await resp.json()
    assert body["code"] == "permission_denied" and "not ingest" in body["message"]
    # the same writes with the write permission reach Pyroscope — normalised, as the Push path it is
    write = {"X-Profile-Bridge-Token": WRITER, "Content-Type": "application/json"}
    for path in ("/pyroscope/settings.v1.SettingsService/Set", "/pyroscope//push.v1.PusherService/Push"):
        assert (await client.post(path, headers=write, data=b"{}")).status == 200, path
    assert [(m, p) for m, p, _ in upstream.seen] == [
        ("POST", "/settings.v1.SettingsService/Set"),
        ("POST", "/push.v1.PusherService/Push"),
    ]
    assert all(h["X-Scope-OrgID"] == "team-a" and "X-Profile-Bridge-Token" not in h for _, _, h in upstream.seen)
    # an admin endpoint stays refused whatever the token may do
    assert (await client.get("/tempo/shutdown", headers=write)).status == 403


async def test_without_tokens_the_same_paths_are_refused(aiohttp_server: Server, aiohttp_client: Client) -> None:
    client, upstream = await bridge(aiohttp_server, aiohttp_client)
    for method, path, status in FINDINGS:
        if status == 403 and "Set" not in path and "Upload" not in path and "push" not in path:
            assert (await client.request(method, path)).status == 403, path
        elif status == 400:
            assert (await client.request(method, path)).status == 400, path
    assert upstream.seen == []
    # without tokens every call of the table is open, writes too (as every route is)
    for row in ALLOWED:
        resp = await client.request(row.method, f"/{row.upstream}{example(row)}", data=b"{}")
        assert resp.status == 200, (row, await resp.text())


async def test_the_setting_opens_a_call_for_ingest_tokens(aiohttp_server: Server, aiohttp_client: Client) -> None:
    client, upstream = await bridge(aiohttp_server, aiohttp_client, upstream_allow=(("tempo", "/flush"),), **tokens())
    assert (await client.post("/tempo/flush", headers={"X-Profile-Bridge-Token": READER})).status == 403
    assert upstream.seen == []
    assert (await client.post("/tempo/flush", headers={"X-Profile-Bridge-Token": WRITER})).status == 200
    assert [(m, p) for m, p, _ in upstream.seen] == [("POST", "/flush")]
    assert (await client.get("/tempo/shutdown", headers={"X-Profile-Bridge-Token": WRITER})).status == 403


async def test_every_grafana_call_passes_in_proxy_mode_with_a_token(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    """Every row of the table, as its client sends it, reaches the upstream with a token that may do it — the
    calls other engineers serve in standalone mode (render, Diff, settings, TraceQL metrics…) included."""
    client, upstream = await bridge(aiohttp_server, aiohttp_client, **tokens())
    for row in ALLOWED:
        token = READER if row.need == "read" else WRITER
        resp = await client.request(
            row.method, f"/{row.upstream}{example(row)}", headers={"X-Profile-Bridge-Token": token}, data=b"{}"
        )
        assert resp.status == 200, (row, await resp.text())
        if row.need == "ingest":
            refused = await client.request(
                row.method, f"/{row.upstream}{example(row)}", headers={"X-Profile-Bridge-Token": READER}, data=b"{}"
            )
            assert refused.status == 403, row
    assert len(upstream.seen) == len(ALLOWED)


async def test_standalone_refuses_the_same_and_serves_the_table(tmp_path: Path, aiohttp_client: Client) -> None:
    app = create_app(Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data")))
    client = await aiohttp_client(app)
    for method, path, status in FINDINGS:
        if status == 403 and not any(w in path for w in ("Set", "Upload", "push")):
            resp = await client.request(method, path)
            assert resp.status == 403 and SETTING in await resp.text(), path
    for row in ALLOWED:  # never refused by the policy: the store answers, or says it does not serve it (501)
        resp = await client.request(row.method, f"/{row.upstream}{example(row)}", data=b"{}")
        assert resp.status != 403, (row, resp.status)
        if resp.status >= 400 and "json" in resp.headers.get("Content-Type", ""):
            assert json.loads(await resp.read()).get("code") != "permission_denied", row


def test_the_gate_asks_the_table_for_the_permission() -> None:
    auth = Auth(Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS}).auth_tokens)
    needs = {
        ("/pyroscope/querier.v1.QuerierService/ProfileTypes", "POST"): "read",
        ("/pyroscope/push.v1.PusherService/Push", "POST"): "ingest",
        ("/pyroscope//push.v1.PusherService/Push", "POST"): "ingest",
        ("/pyroscope/settings.v1.SettingsService/Set", "POST"): "ingest",
        ("/pyroscope/settings.v1.SettingsService/Get", "POST"): "read",
        ("/tempo/api/search", "GET"): "read",
        ("/tempo/shutdown", "GET"): "read",  # refused by the mount itself, whatever the token
        ("/ingest", "POST"): "ingest",
    }
    for (path, method), need in needs.items():
        assert auth.required(path.replace("//", "/"), method, path) == need, path


async def test_the_bridges_token_never_leaves_it_even_with_tokens_off(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    """A token header sent to a bridge that checks none (a Grafana provisioned for tokens, say) is still the bridge's
    and never Tempo's or Pyroscope's (docs/security.md)."""
    client, upstream = await bridge(aiohttp_server, aiohttp_client)
    own = {"X-Profile-Bridge-Token": READER, "Authorization": "Bearer for-tempo"}
    assert (await client.get("/tempo/api/search?q={}", headers=own)).status == 200
    assert (await client.get("/tempo/api/v2/traces/0af7651916cd43dd8448eb211c80319c", headers=own)).status == 200
    assert len(upstream.seen) == 2
    for _, _, headers in upstream.seen:
        assert "X-Profile-Bridge-Token" not in headers
        assert headers["Authorization"] == "Bearer for-tempo"
