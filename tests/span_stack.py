"""The bridge in proxy mode in front of the Tempo and Pyroscope test doubles, both holding the shop capture: the stack
the API, page, resolve and doctor tests run against."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.app import create_app
from bridge.config import Settings
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.shop import ShopCapture, capture_now, load_shop
from tests.doubles.tempo import TempoDouble

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"

ServerFactory = Callable[..., Awaitable[TestServer]]
ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


@dataclass(slots=True)
class Stack:
    tempo: TempoDouble
    pyroscope: PyroscopeDouble
    shop: ShopCapture
    settings: Settings
    client: TestClient[Any, Any] | None = None

    @property
    def http(self) -> TestClient[Any, Any]:
        assert self.client is not None
        return self.client

    def capture_clock(self) -> float:
        """'Now' a minute after the capture's last span ended, so "recent" means the capture."""
        return capture_now()


def linked_total(span_id: str) -> int:
    """Ground truth: the CPU the capture's pprof samples carry under ``span_id``."""
    from tests.doubles.pyroscope import load_push_profiles

    return sum(
        v
        for p in load_push_profiles()
        if p.type_id == CPU
        for _, v, labels in p.samples
        if labels.get("span_id") == span_id
    )


async def start_doubles(aiohttp_server: ServerFactory, **changes: Any) -> Stack:
    tempo = TempoDouble()
    tempo.add_shop()
    pyroscope = PyroscopeDouble()
    tempo_server = await aiohttp_server(tempo.app)
    pyro_server = await aiohttp_server(pyroscope.app)
    tempo.url = str(tempo_server.make_url("")).rstrip("/")
    pyroscope.url = str(pyro_server.make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", tempo_url=tempo.url, pyroscope_url=pyroscope.url, **changes)
    return Stack(tempo, pyroscope, load_shop(), settings)


async def start_stack(aiohttp_server: ServerFactory, aiohttp_client: ClientFactory, **changes: Any) -> Stack:
    stack = await start_doubles(aiohttp_server, **changes)
    app: web.Application = create_app(stack.settings, wall_clock=stack.capture_clock)
    stack.client = await aiohttp_client(app)
    return stack


async def start_standalone(aiohttp_client: ClientFactory, data_dir: str) -> tuple[TestClient[Any, Any], ShopCapture]:
    """The bridge in standalone mode, its store filled with the shop capture through its own ingest routes (the
    recorded SDK request bodies, replayed)."""
    from tests.paths import SHOP_CAPTURE

    shop = load_shop()
    app = create_app(
        Settings.for_tests(mode="standalone", data_dir=data_dir, capture_window=10.0), wall_clock=capture_now
    )
    client = await aiohttp_client(app)
    for path in sorted(SHOP_CAPTURE.glob("*.bin")):
        route = "/v1/traces" if path.name.endswith("_v1_traces.bin") else "/push.v1.PusherService/Push"
        ctype = "application/x-protobuf" if route == "/v1/traces" else "application/proto"
        resp = await client.post(route, data=path.read_bytes(), headers={"Content-Type": ctype})
        assert resp.status == 200, await resp.text()
    return client, shop


@dataclass
class Bridge:
    """The bridge in either mode, holding the shop capture: proxy (with its doubles in ``stack``) or standalone."""

    mode: str
    client: Any
    stack: Stack | None = None


async def start_bridge(
    mode: str,
    aiohttp_server: ServerFactory,
    aiohttp_client: ClientFactory,
    data_dir: str,
) -> Bridge:
    """For a fixture parametrised over both modes."""
    if mode == "proxy":
        stack = await start_stack(aiohttp_server, aiohttp_client)
        return Bridge("proxy", stack.http, stack)
    client, _ = await start_standalone(aiohttp_client, data_dir)
    return Bridge("standalone", client)
