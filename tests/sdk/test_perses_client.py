"""Perses' Pyroscope client, its own code (``@perses-dev/pyroscope-plugin`` 0.4.0 from npm, pinned by
``tests/perses/package-lock.json``), against a standalone bridge holding the shop capture (issue 20 §5): the data
source's client, the query editor's calls and the profile panel's ``getProfileData`` run under Node
(``tests/perses/drive.js``) and what they return is checked against the capture's own samples.

Date-safe: the bridge's clock is the capture's (injected); the panel's absolute range is given as numbers, and its
relative one (``now-1h``) is resolved by the bridge."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp.test_utils import TestServer

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.config import Settings
from tests.faketime import both_clocks_ahead
from tests.paths import ROOT
from tests.store.test_pyroscope_api import CAPTURE_END_S, CPU, capture, total_of, window_s

PERSES_DIR: Final = ROOT / "tests" / "perses"
SERVICE: Final = "shop-frontend"

pytestmark = pytest.mark.slow  # Node and npm packages; the data's times are the capture's, whatever the clock says


def require_perses() -> str:
    node = shutil.which("node")
    if node is None:
        reason = "node is not installed (Node.js 20, apt-get install -y nodejs npm); needed to run Perses' client"
    elif not (PERSES_DIR / "node_modules" / "@perses-dev" / "pyroscope-plugin" / "package.json").is_file():
        reason = "Perses' client is not installed: run `npm ci --prefix tests/perses` (.ci/run does)"
    else:
        return node
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this test must run")
    pytest.skip(reason)


async def drive(node: str, url: str, lo: int, hi: int) -> dict[str, Any]:
    env = both_clocks_ahead({k: v for k, v in os.environ.items() if not k.startswith("NODE_OPTIONS")})
    proc = await asyncio.create_subprocess_exec(
        node,
        str(PERSES_DIR / "drive.js"),
        url,
        SERVICE,
        str(lo),
        str(hi),
        cwd=str(PERSES_DIR),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    result: dict[str, Any] = json.loads(out)
    return result


def walk(node: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Perses' StackTrace tree → self value per stack (root excluded), checking each node's total is its self plus
    its children's."""
    out: dict[tuple[str, ...], int] = {}
    children = node.get("children", [])
    assert node["total"] == node["self"] + sum(child["total"] for child in children), node["name"]
    if path and node["self"]:
        out[path] = node["self"]
    for child in children:
        for stack, value in walk(child, (*path, child["name"])).items():
            out[stack] = out.get(stack, 0) + value
    return out


async def test_perses_profile_panel_and_query_editor_read_the_store(
    aiohttp_server: Callable[..., Awaitable[TestServer]], tmp_path: Path
) -> None:
    node = require_perses()
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"))
    server = await aiohttp_server(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
    base = str(server.make_url("")).rstrip("/")
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for path, body, headers in capture():
            async with session.post(base + path, data=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
        lo, hi = window_s()
        flames = []
        for max_nodes in (None, 4):  # the whole graph, and folded as Perses' maxNodes=4 asks below
            req = qpb.SelectMergeStacktracesRequest(
                profile_typeID=CPU, label_selector=f'{{service_name="{SERVICE}"}}', start=lo * 1000, end=hi * 1000
            )
            if max_nodes is not None:
                req.max_nodes = max_nodes
            async with session.post(
                base + "/pyroscope/querier.v1.QuerierService/SelectMergeStacktraces",
                data=req.SerializeToString(),
                headers={"Content-Type": "application/proto"},
            ) as resp:
                flames.append(qpb.SelectMergeStacktracesResponse.FromString(await resp.read()).flamegraph)
        flame, flame4 = flames

    out = await drive(node, base + "/pyroscope", lo, hi)

    assert CPU in [t["ID"] for t in out["profileTypes"]["profileTypes"]]
    assert "service_name" in out["labelNames"]["names"] and "span_name" in out["labelNames"]["names"]
    assert "GET /checkout" in out["labelValues"]["names"]
    assert out["services"]["names"] == ["shop-backend", "shop-frontend"]

    profile = out["profile"]
    root = profile["profile"]["stackTrace"]
    assert (root["name"], root["total"], profile["numTicks"]) == ("total", total_of(SERVICE), total_of(SERVICE))
    assert walk(root) == dict(flamegraph.iter_stacks(flamegraph.decode(flame)))
    assert profile["metadata"] == {"spyName": "", "sampleRate": 1_000_000_000, "units": "samples", "name": "cpu"}
    assert profile["timeline"]["durationDelta"] == 15 and sum(profile["timeline"]["samples"]) == total_of(SERVICE)

    # maxNodes=4: the same tree as the flame graph RPC's at max_nodes=4 — the nodes at or above the fourth largest
    # value, ties included, each parent's rest as "other" (as Pyroscope 3fe6a457 truncates: docs/peers.md) — smaller
    # than the whole, and the same total
    small = out["small"]["profile"]["stackTrace"]
    assert walk(small) == dict(flamegraph.iter_stacks(flamegraph.decode(flame4)))
    assert len(walk(small)) < len(walk(root)) and small["total"] == total_of(SERVICE)

    assert out["lastHour"]["numTicks"] == total_of(SERVICE)  # from=now-1h: the bridge's clock is the capture's
    assert out["failure"]["status"] == 400 and "is not name:sample_type" in out["failure"]["message"]
