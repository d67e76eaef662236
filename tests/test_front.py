"""nginx in front (``deploy/nginx-front.conf``): the bridge's side of the pass-back (a request it would only relay,
marked by nginx, is handed back with 421 and never sent to Pyroscope by the bridge; one it resolves or changes is
not), and the shipped config's routes checked against the bridge's own wire rules. When nginx is installed the config
is also checked by ``nginx -t``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bridge._proto import querier_pb2 as qpb
from bridge.upstream.proxy import PASS_BACK_HEADER, PASS_BACK_STATUS
from bridge.wire.pyroscope import SPAN_RPCS
from bridge.wire.tempo import trace_request
from tests.test_pyroscope_mount import Stack, call, make_stack, shop_span, span_request
from tests.tools import require_tool

CONF = Path(__file__).resolve().parent.parent / "deploy" / "nginx-front.conf"
MARK = {PASS_BACK_HEADER: "1"}


@pytest.fixture
async def stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    return await make_stack(aiohttp_server, aiohttp_client)


async def test_a_request_the_bridge_would_only_relay_is_handed_back(stack: Stack) -> None:
    plain = qpb.SelectMergeStacktracesRequest(profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                                              label_selector="{}", start=1, end=2)
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
        span.span_id]  # type: ignore[union-attr]


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
    _nginx_accepts(nginx, CONF.read_text())


def _nginx_accepts(nginx: str, text: str) -> None:
    import tempfile

    for name in ("bridge:4041", "pyroscope:4040", "tempo:3200"):
        text = text.replace(f"server {name};", "server 127.0.0.1:9;")
    text = text.replace("listen 4041;", "listen 127.0.0.1:9;")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "front.conf").write_text(text)
        (Path(tmp) / "nginx.conf").write_text(
            f"pid {tmp}/nginx.pid; error_log {tmp}/error.log; events {{}} http {{ access_log off; "
            f"client_body_temp_path {tmp}/b; proxy_temp_path {tmp}/p; fastcgi_temp_path {tmp}/f; "
            f"uwsgi_temp_path {tmp}/u; scgi_temp_path {tmp}/s; include {tmp}/front.conf; }}")
        proc = subprocess.run([nginx, "-t", "-p", tmp, "-c", f"{tmp}/nginx.conf"], capture_output=True, text=True,
                              timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
