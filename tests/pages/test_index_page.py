"""The index page with nothing to show says how to get data there: in standalone mode the URLs to send to (as the
browser reached the bridge) and the demo; in proxy mode where the bridge reads from and Tempo's search lag."""

from __future__ import annotations

import re
from typing import Any

from bridge.app import create_app
from bridge.config import Settings
from tests.doubles.shop import capture_now
from tests.span_stack import Stack, start_stack


async def _index(client: Any) -> str:
    resp = await client.get("/", params={"since": "15m"})
    assert resp.status == 200
    return str(await resp.text())


async def test_an_empty_standalone_index_says_where_to_send_data(aiohttp_client: Any, tmp_path: Any) -> None:
    app = create_app(Settings.for_tests(mode="standalone", data_dir=str(tmp_path)), wall_clock=capture_now)
    client = await aiohttp_client(app)
    page = await _index(client)
    origin = str(client.make_url("")).rstrip("/")
    assert "No traces in the last 15m yet." in page
    assert f"<code>OTEL_EXPORTER_OTLP_ENDPOINT={origin}</code>" in page
    assert f"<code>{origin}/v1/traces</code>" in page
    assert f"server address <code>{origin}</code>" in page
    assert "<code>profile-bridge demo</code>" in page and "<code>profile-bridge serve --demo</code>" in page
    assert "OTLP/gRPC" not in page  # the receiver is off here
    assert "lags" not in page and "Tempo" not in page  # nothing about Tempo's search in standalone mode


async def test_the_grpc_line_names_the_receivers_bound_port(aiohttp_client: Any, tmp_path: Any) -> None:
    settings = Settings.for_tests(
        mode="standalone", data_dir=str(tmp_path), otlp_grpc_enabled=True, otlp_grpc_listen=("127.0.0.1", 0)
    )
    app = create_app(settings, wall_clock=capture_now)
    client = await aiohttp_client(app)
    page = await _index(client)
    match = re.search(r"OTLP/gRPC: <code>127\.0\.0\.1:(\d+)</code>", page)
    assert match and int(match.group(1)) > 0


async def test_an_empty_proxy_index_keeps_the_search_lag_hint(aiohttp_server: Any, aiohttp_client: Any) -> None:
    stack: Stack = await start_stack(aiohttp_server, aiohttp_client)
    stack.tempo.traces.clear()
    page = await _index(stack.http)
    assert "No traces in the last 15m." in page
    assert f"reads Tempo at <code>{stack.tempo.url}</code>" in page
    assert f"Pyroscope at <code>{stack.pyroscope.url}</code>" in page
    assert "search lags ingest by" in page and "profile-bridge demo" not in page
