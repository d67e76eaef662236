"""nginx in front (``deploy/nginx-front.conf`` and its ``deploy/nginx-front.js``): the bridge's side of the pass-back
(a request it would only relay, marked by nginx, is handed back with 421 and never sent to Pyroscope by the bridge;
one it resolves or changes is not), the shipped config's routes checked against the bridge's own wire rules, and the
shipped front itself run by nginx with njs between a bridge and the doubles: which calls skip the bridge, which reach
it, and that each gets the answer it would get from the bridge alone."""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from google.protobuf import json_format

from bridge._proto import querier_pb2 as qpb
from bridge.upstream.proxy import PASS_BACK_HEADER, PASS_BACK_STATUS
from bridge.wire.pyroscope import SPAN_RPCS
from bridge.wire.tempo import trace_request
from tests.nginx_front import CONF, SCRIPT, front_files, running_front
from tests.proxy.test_pyroscope_mount import Stack, call, make_stack, shop_span, span_request
from tests.tools import require_tool

MARK = {PASS_BACK_HEADER: "1"}


@pytest.fixture
async def stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    return await make_stack(aiohttp_server, aiohttp_client)


async def test_a_request_the_bridge_would_only_relay_is_handed_back(stack: Stack) -> None:
    plain = qpb.SelectMergeStacktracesRequest(
        profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds", label_selector="{}", start=1, end=2
    )
    status, headers, _ = await call(stack.client, "SelectMergeStacktraces", plain, headers=MARK)
    assert status == PASS_BACK_STATUS and headers[PASS_BACK_HEADER] == "1"
    status, _, _ = await call(stack.client, "LabelNames", qpb.ProfileTypesRequest(), headers=MARK)
    assert status == PASS_BACK_STATUS
    assert not stack.pyroscope.requests  # the bridge asked Pyroscope nothing
    status, _, _ = await call(stack.client, "SelectMergeStacktraces", plain)  # without the mark: relayed
    assert status == 200 and len(stack.pyroscope.calls("SelectMergeStacktraces")) == 1


async def test_requests_the_bridge_resolves_or_changes_are_never_handed_back(stack: Stack) -> None:
    linked = stack.linked_ids()
    span = shop_span("frontend-root", lambda s: s.span_id in linked)
    resolved = span_request(span, selector=[f"{span.span_id}:{span.trace_id}"])
    status, headers, _ = await call(stack.client, "SelectMergeSpanProfile", resolved, headers=MARK)
    assert status == 200 and headers["X-Profile-Bridge-Resolution"] == "linked"
    cleaned = span_request(span, selector=[f"{span.span_id}:{span.trace_id}"])
    cleaned.format = qpb.PROFILE_FORMAT_TREE  # passed on, but with the selector cut back: the bridge sends it
    status, _, _ = await call(stack.client, "SelectMergeSpanProfile", cleaned, headers=MARK)
    assert status == 200
    assert [list(r.message.span_selector) for r in stack.pyroscope.calls("SelectMergeSpanProfile")][-1] == [
        span.span_id
    ]  # type: ignore[union-attr]


def _locations(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^\s*location\s+(=|~|@|)\s*(\S*)\s*\{", text, re.M)


def test_the_shipped_front_sends_what_the_bridge_changes_to_the_bridge() -> None:
    text = CONF.read_text()
    locations = _locations(text)
    regexes = [re.compile(path) for kind, path in locations if kind == "~"]
    for method in SPAN_RPCS:  # every RPC the bridge decodes goes to it first
        assert any(r.fullmatch(f"/pyroscope/querier.v1.QuerierService/{method}") for r in regexes), method
    for other in ("ProfileTypes", "LabelNames", "SelectSeries"):
        assert not any(r.search(f"/pyroscope/querier.v1.QuerierService/{other}") for r in regexes), other
    for tail in ("api/v2/traces/0af7651916cd43dd8448eb211c80319c", "api/traces/1"):  # trace by ID: enriched
        assert trace_request(tail) is not None
        assert any(r.search("/tempo/" + tail) for r in regexes)
    assert not any(r.search("/tempo/api/search") for r in regexes)
    assert f"error_page {PASS_BACK_STATUS} = @pyroscope;" in text and PASS_BACK_HEADER in text


def test_nginx_itself_accepts_the_shipped_front() -> None:
    """``nginx -t`` on the shipped config (host names swapped for addresses that need no DNS)."""
    nginx = require_tool("nginx", package="nginx-light", purpose="check deploy/nginx-front.conf with nginx -t")
    with tempfile.TemporaryDirectory() as tmp:
        conf = front_files(
            Path(tmp), bridge="127.0.0.1:9", pyroscope="127.0.0.1:9", tempo="127.0.0.1:9", listen="127.0.0.1:9"
        )
        proc = subprocess.run(
            [nginx, "-t", "-p", tmp, "-c", str(conf)], capture_output=True, text=True, timeout=30, check=False
        )
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------------------------- the front, live


_SPAN_RPC_SEEN = re.compile(
    r'^profile_bridge_requests_total\{code="(\d+)",route="/pyroscope/(SelectMerge\w+)"\} (\S+)$', re.M
)


async def _bridge_saw(stack: Stack) -> dict[tuple[str, str], float]:
    """(RPC, HTTP status) → how many span-capable RPCs reached the bridge, from its own /metrics."""
    resp = await stack.client.get("/metrics")
    text = await resp.text()
    return {(method, code): float(n) for code, method, n in _SPAN_RPC_SEEN.findall(text)}


async def _post(
    session: aiohttp.ClientSession, url: str, body: bytes, content_type: str, encoding: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": content_type, "Connect-Protocol-Version": "1"}
    if encoding:
        headers["Content-Encoding"] = encoding
    async with session.post(url, data=io.BytesIO(body), headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def test_the_front_sends_plain_flame_graphs_past_the_bridge_and_span_queries_to_it(stack: Stack) -> None:
    linked = stack.linked_ids()
    span = shop_span("frontend-root", lambda s: s.span_id in linked)
    spanned = span_request(span)
    plain = qpb.SelectMergeStacktracesRequest(
        profile_typeID=spanned.profile_typeID,
        label_selector=spanned.label_selector,
        start=spanned.start,
        end=spanned.end,
        max_nodes=64,
    )
    big = qpb.SelectMergeStacktracesRequest()  # past client_body_buffer_size, still held in memory by nginx
    big.CopyFrom(plain)
    big.profile_id_selector.extend(f"{i:036d}" for i in range(2000))
    big_spanned = qpb.SelectMergeStacktracesRequest()
    big_spanned.CopyFrom(big)
    big_spanned.profile_id_selector.extend(f"{i:036d}" for i in range(30_000))
    big_spanned.span_selector.append(span.span_id)
    with_selector = qpb.SelectMergeStacktracesRequest()
    with_selector.CopyFrom(plain)
    with_selector.span_selector.append(span.span_id)
    proto, js = "application/proto", "application/json"
    cases: list[tuple[str, str, bytes, str, str | None, str]] = [
        # (what, RPC, body, content type, content encoding, where it must go: "pyroscope", "bridge", "handed back")
        ("plain, protobuf", "SelectMergeStacktraces", plain.SerializeToString(), proto, None, "pyroscope"),
        ("plain, JSON", "SelectMergeStacktraces", json_format.MessageToJson(plain).encode(), js, None, "pyroscope"),
        ("plain, empty body", "SelectMergeStacktraces", b"", proto, None, "pyroscope"),
        (
            "plain, over client_body_buffer_size",
            "SelectMergeStacktraces",
            big.SerializeToString(),
            proto,
            None,
            "pyroscope",
        ),
        # read by the bridge, which does not resolve it (the resolver cannot honour profile_id_selector) and has
        # nothing to clean: handed back, for Pyroscope to answer
        (
            "span and profile-id selectors after 1 MiB",
            "SelectMergeStacktraces",
            big_spanned.SerializeToString(),
            proto,
            None,
            "handed back",
        ),
        (
            "plain, gzipped",
            "SelectMergeStacktraces",
            gzip.compress(plain.SerializeToString()),
            proto,
            "gzip",
            "handed back",
        ),
        ("span selector, protobuf", "SelectMergeStacktraces", with_selector.SerializeToString(), proto, None, "bridge"),
        (
            "span selector, JSON",
            "SelectMergeStacktraces",
            json.dumps({**json.loads(json_format.MessageToJson(plain)), "spanSelector": [span.span_id]}).encode(),
            js,
            None,
            "bridge",
        ),
        (
            "span selector, snake_case JSON",
            "SelectMergeStacktraces",
            json.dumps({**json.loads(json_format.MessageToJson(plain)), "span_selector": [span.span_id]}).encode(),
            js,
            None,
            "bridge",
        ),
        ("SelectMergeSpanProfile", "SelectMergeSpanProfile", spanned.SerializeToString(), proto, None, "bridge"),
        ("not protobuf", "SelectMergeStacktraces", b"\xff\xff\xff", proto, None, "bridge"),
        ("not JSON", "SelectMergeStacktraces", b"{", js, None, "bridge"),
    ]
    async with (
        running_front(str(stack.client.make_url("")), stack.pyroscope.url, stack.tempo.url) as base,
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        front = base + "/pyroscope"
        for what, method, body, content_type, encoding, where in cases:
            seen_before = await _bridge_saw(stack)
            relayed_before = len(stack.pyroscope.calls(method))
            status, headers, answer = await _post(
                session, f"{front}/querier.v1.QuerierService/{method}", body, content_type, encoding
            )
            seen = {
                k: v - seen_before.get(k, 0.0)
                for k, v in (await _bridge_saw(stack)).items()
                if v != seen_before.get(k, 0.0)
            }
            relayed = len(stack.pyroscope.calls(method)) - relayed_before
            if where == "pyroscope":
                # an empty request names no profile type: Pyroscope's own 400 ("profile-type selection must be …")
                assert (status, seen, relayed) == (400 if "empty" in what else 200, {}, 1), what
                assert "X-Profile-Bridge-Resolution" not in headers, what
            elif where == "handed back":
                assert (status, seen, relayed) == (200, {(method, str(PASS_BACK_STATUS)): 1.0}, 1), what
            elif what.startswith("not "):  # the bridge's own Connect error, not Pyroscope's
                assert status == 400 and json.loads(answer)["code"] == "invalid_argument", what
                assert (seen, relayed) == ({(method, "400"): 1.0}, 0), what
            else:
                # resolved by the bridge (which asks Pyroscope for the linked samples itself)
                assert status == 200 and headers["X-Profile-Bridge-Resolution"] == "linked", what
                assert seen == {(method, "200"): 1.0}, what
    direct = stack.pyroscope.calls("SelectMergeStacktraces")  # resolved span queries never reach Pyroscope as such
    assert direct and all(
        not r.message.span_selector or r.message.profile_id_selector  # type: ignore[union-attr]
        for r in direct
    )


def test_the_front_script_reads_protobuf_as_the_bridge_does() -> None:
    """nginx-front.js's protobuf walk against the bridge's decoder, on messages the decoder builds (every field
    number and wire type) and on truncations of them; the script is plain ECMAScript 5 in a module, run by Node."""
    runner = require_tool("node", package="nodejs", purpose="run nginx-front.js's decoder")
    full = qpb.SelectMergeStacktracesRequest(
        profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        label_selector='{service_name="a"}',
        start=1 << 40,
        end=-1,
        max_nodes=300,
        format=qpb.PROFILE_FORMAT_TREE,
        profile_id_selector=["x" * 200],
    )
    full.stack_trace_selector.call_site.add(name="main")
    spanned = qpb.SelectMergeStacktracesRequest()
    spanned.CopyFrom(full)
    spanned.span_selector.append("0123456789abcdef")
    traced = qpb.SelectMergeStacktracesRequest(trace_id_selector=["0af7651916cd43dd8448eb211c80319c"])
    cases = {
        "full": (full.SerializeToString(), False),
        "spanned": (spanned.SerializeToString(), True),
        "traced": (traced.SerializeToString(), True),
        "empty": (b"", False),
        "cut": (full.SerializeToString()[:-3], True),
        "zero field": (b"\x00\x01", True),
        "group": (b"\x0b", True),
        "fixed64 short": (b"\x19\x01\x02", True),
        "fixed32": (b"\x1d\x01\x02\x03\x04", False),
        "long varint": (b"\x18" + b"\xff" * 10 + b"\x01", True),
    }
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "check.mjs"
        module = Path(tmp) / "front.mjs"
        module.write_text(SCRIPT.read_text())
        lines = [f"import front from {json.dumps(str(module))};", "var out = {};"]
        for name, (body, _) in cases.items():
            lines.append(f"out[{json.dumps(name)}] = front.protoHasSelector({json.dumps(list(body))});")
        lines.append("console.log(JSON.stringify(out));")
        script.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([runner, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {name: expected for name, (_, expected) in cases.items()}
