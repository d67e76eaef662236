"""What any caller can read off the bridge (issue 19, goal 5's last findings): every answer says
``X-Content-Type-Options: nosniff`` — the router's 404 text, a 400's Connect or API JSON, a refusal, a relayed
answer — and ``/readyz``, open to all, keeps its details (a store's absolute path) from a caller without a token."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.app import create_app
from bridge.config import Settings

Client = Callable[..., Awaitable[TestClient[Any, Any]]]
Server = Callable[..., Awaitable[TestServer]]

TOKEN = "a-read-token-for-team-a-001"
TOKENS = f"sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()} team-a read"


def standalone(tmp_path: Path, **changes: Any) -> web.Application:
    return create_app(Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), **changes))


def with_tokens() -> dict[str, Any]:
    return {"auth_env_tokens": Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": TOKENS}).auth_env_tokens}


async def test_every_answer_says_nosniff(tmp_path: Path, aiohttp_client: Client, aiohttp_server: Server) -> None:
    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<b>upstream</b>", content_type="text/html")

    upstream = web.Application()
    upstream.router.add_route("*", "/{tail:.*}", html)
    url = str((await aiohttp_server(upstream)).make_url("")).rstrip("/")
    proxy = await aiohttp_client(create_app(Settings.for_tests(mode="proxy", tempo_url=url, pyroscope_url=url)))
    local = await aiohttp_client(standalone(tmp_path))
    guarded = await aiohttp_client(standalone(tmp_path / "guarded", **with_tokens()))
    rpc = "/pyroscope/querier.v1.QuerierService/LabelNames"
    answers = [
        ("the router's 404 text", local, "GET", "/no/such/page", {}, 404),
        ("a 400 in Connect JSON", local, "POST", rpc, {"Content-Type": "application/json", "data": b"{"}, 400),
        ("a 400 in the API's JSON", local, "GET", "/api/v1/spans/zz/zz/profile", {}, 400),
        ("a 405", local, "POST", "/healthz", {}, 405),
        ("a 501 in Connect JSON", local, "POST", "/pyroscope/vcs.v1.VCSService/GithubApp", {"data": b"{}"}, 501),
        ("a refusal under /tempo", local, "GET", "/tempo/shutdown", {}, 403),
        ("a 401", guarded, "GET", "/api/v1/requests/slowest", {}, 401),
        ("a page's 401", guarded, "GET", "/", {}, 401),
        ("/healthz", local, "GET", "/healthz", {}, 200),
        ("/metrics", local, "GET", "/metrics", {}, 200),
        ("a relayed answer", proxy, "GET", "/tempo/api/echo", {}, 200),
        ("another relayed answer", proxy, "GET", "/tempo/api/search/tag/x/values", {}, 200),
    ]
    for what, client, method, path, extra, status in answers:
        data = extra.pop("data", None)
        resp = await client.request(method, path, headers=extra, data=data)
        assert resp.status == status, (what, resp.status, await resp.text())
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", what


async def test_readyz_keeps_its_details_from_a_caller_without_a_token(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(standalone(tmp_path, **with_tokens()))
    for headers in ({}, {"X-Profile-Bridge-Token": "not-a-token-of-this-bridge-x"}):
        resp = await client.get("/readyz", headers=headers)
        text = await resp.text()
        assert resp.status == 200 and str(tmp_path) not in text and "/" not in json.loads(text)["upstreams"].__repr__()
        doc = json.loads(text)
        assert doc["status"] == "ready" and doc["upstreams"]["tempo"] == {"status": "ready"}
        assert doc["details"].startswith("hidden")
    resp = await client.get("/readyz", headers={"X-Profile-Bridge-Token": TOKEN})
    assert str(tmp_path) in await resp.text()  # a caller with a token sees where the store is
    # without tokens configured, nothing is withheld from anyone (everything else is open too)
    open_client = await aiohttp_client(standalone(tmp_path / "open"))
    assert str(tmp_path) in await (await open_client.get("/readyz")).text()
