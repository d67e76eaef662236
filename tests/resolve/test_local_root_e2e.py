"""Issue 3 end to end, through the bridge's two mounts as Grafana uses them: open a trace through ``/tempo`` (the
span cache fills), then click "Profiles for this span" on any span (``SelectMergeSpanProfile`` through
``/pyroscope`` with that span's id). Real data on both sides: the shop capture's OpenTelemetry spans in the Tempo
double, its pyroscope-io profiles in the Pyroscope double."""

from __future__ import annotations

import gzip
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.app import create_app
from bridge.call import scope_key
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from bridge.spans import Span
from bridge.state import SPAN_CACHE
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.shop import SpanRole, load_shop
from tests.doubles.tempo import TempoDouble

Server = Callable[..., Awaitable[TestServer]]
Client = Callable[..., Awaitable[TestClient[Any, Any]]]
QUERIER = "/pyroscope/querier.v1.QuerierService/"
CAPTURE_NOW = 1795945340.0


@dataclass
class Stack:
    tempo: TempoDouble
    pyroscope: PyroscopeDouble
    client: TestClient[Any, Any]
    app: web.Application

    def linked_ids(self) -> set[str]:
        return {labels["span_id"] for p in self.pyroscope.profiles for _, _, labels in p.samples if "span_id" in labels}


@pytest.fixture
async def stack(aiohttp_server: Server, aiohttp_client: Client) -> Stack:
    tempo = TempoDouble()
    tempo.add_shop()
    tserver = await aiohttp_server(tempo.app)
    tempo.url = str(tserver.make_url("")).rstrip("/")
    pyro = PyroscopeDouble()
    pserver = await aiohttp_server(pyro.app, auto_decompress=False)
    pyro.url = str(pserver.make_url("")).rstrip("/")
    settings = Settings.for_tests(mode="proxy", pyroscope_url=pyro.url, tempo_url=tempo.url, capture_window=10.0)
    app = create_app(settings, wall_clock=lambda: CAPTURE_NOW)
    client = await aiohttp_client(await aiohttp_server(app))
    return Stack(tempo, pyro, client, app)


async def open_trace(stack: Stack, trace_id: str, tenant: str | None = None) -> None:
    """What Grafana does when a trace is opened: v2 trace by ID, protobuf."""
    headers = {"Accept": "application/protobuf", **({"X-Scope-OrgID": tenant} if tenant else {})}
    resp = await stack.client.get(f"/tempo/api/v2/traces/{trace_id}", headers=headers)
    assert resp.status == 200
    await resp.read()


async def click(stack: Stack, span: Span, tenant: str | None = None) -> tuple[str, str, qpb.FlameGraph]:
    """What Grafana sends for "Profiles for this span": span ± 60 s, the span's service, the span's own id (now
    present on every span as ``pyroscope.profile.id``)."""
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{span.service}"}}',
        span_selector=[span.span_id],
        start=span.start_ns // 1_000_000 - 60_000,
        end=span.end_ns // 1_000_000 + 60_000,
    )
    headers = {
        "Content-Type": "application/proto",
        "Connect-Protocol-Version": "1",
        "Accept-Encoding": "gzip",
        **({"X-Scope-OrgID": tenant} if tenant else {}),
    }
    resp = await stack.client.post(
        QUERIER + "SelectMergeSpanProfile", data=req.SerializeToString(), headers=headers, auto_decompress=False
    )
    raw = await resp.read()
    assert resp.status == 200, raw
    if resp.headers.get("Content-Encoding") == "gzip":
        raw = gzip.decompress(raw)
    fg = qpb.SelectMergeSpanProfileResponse.FromString(raw).flamegraph
    return resp.headers["X-Profile-Bridge-Resolution"], resp.headers["X-Profile-Bridge-Reason"], fg


def pick_with_linked_root(stack: Stack, role: str) -> tuple[SpanRole, Span, Span]:
    """A span of ``role`` whose local root has linked samples, the span and its local root."""
    shop = load_shop()
    linked = stack.linked_ids()

    def root_is_linked(r: SpanRole) -> bool:
        root = shop.trace(r.trace_id).local_root(r.span_id)
        return root is not None and root.span_id in linked and r.span_id not in linked

    role_span = shop.pick(role, where=root_is_linked)
    trace = shop.trace(role_span.trace_id)
    root = trace.local_root(role_span.span_id)
    assert root is not None
    return role_span, trace.spans[role_span.span_id], root


def root_label(fg: qpb.FlameGraph) -> str:
    return flamegraph.decode(fg).name


# ------------------------------------------------------------------------------------- local root from the cache


@pytest.mark.parametrize(
    ("role", "root_role"),
    [("frontend-child", "frontend-root"), ("frontend-client", "frontend-root"), ("backend-child", "backend-root")],
    ids=["child-renderCart", "client-span", "backend-child-countPrimes"],
)
async def test_span_click_after_opening_the_trace_resolves_local_root_without_search(
    stack: Stack, role: str, root_role: str
) -> None:
    role_span, span, root = pick_with_linked_root(stack, role)
    assert load_shop().role_of(root.span_id) == root_role

    await open_trace(stack, role_span.trace_id)
    mode, reason, fg = await click(stack, span)

    assert mode == "local-root"
    assert root.span_id in reason and root.name in reason
    assert f"local root {root.name}" in root_label(fg)
    assert not flamegraph.is_empty(fg)
    # the answer is the local root's own linked samples: the same flame graph a click on the root gives
    root_mode, _, root_fg = await click(stack, root)
    assert root_mode == "linked"
    assert flamegraph.decode(fg).total == flamegraph.decode(root_fg).total
    # Tempo was asked once, for the trace Grafana opened; never searched, never asked again by the resolver
    assert stack.tempo.search_calls == []
    assert len(stack.tempo.calls("/api/v2/traces/")) == 1


@pytest.mark.parametrize(
    ("path", "accept"),
    [
        ("/tempo/api/v2/traces/{}", "application/protobuf"),
        ("/tempo/api/traces/{}", "application/protobuf"),
        ("/tempo/api/v2/traces/{}", "application/json"),
        ("/tempo/api/traces/{}", "*/*"),
    ],
    ids=["v2-protobuf", "v1-protobuf", "v2-json", "v1-json"],
)
async def test_any_trace_shape_fills_the_cache_the_resolver_reads(stack: Stack, path: str, accept: str) -> None:
    role_span, span, root = pick_with_linked_root(stack, "frontend-child")
    resp = await stack.client.get(path.format(role_span.trace_id), headers={"Accept": accept})
    assert resp.status == 200
    await resp.read()
    mode, reason, _ = await click(stack, span)
    assert mode == "local-root" and root.span_id in reason
    assert stack.tempo.search_calls == []


async def test_io_span_resolves_time_window(stack: Stack) -> None:
    shop = load_shop()
    linked = stack.linked_ids()
    io = shop.pick("frontend-io", where=lambda r: r.span_id not in linked)
    span = shop.trace(io.trace_id).spans[io.span_id]
    assert span.name == "GET /slow-io"

    await open_trace(stack, io.trace_id)
    mode, reason, fg = await click(stack, span)

    assert mode == "time-window"
    assert reason.startswith("time-window fallback: no samples linked to span " + span.span_id)
    assert "GET /slow-io, shop-frontend" in reason
    assert "time-window fallback" in root_label(fg)
    assert not flamegraph.is_empty(fg)
    assert stack.tempo.search_calls == []
    # the window query asked for the span's service, during the span widened to capture windows
    (window_query,) = [r.message for r in stack.pyroscope.calls("SelectMergeStacktraces")]
    assert 'service_name="shop-frontend"' in window_query.label_selector  # type: ignore[union-attr]
    assert window_query.start <= span.start_ns // 1_000_000  # type: ignore[union-attr]
    assert window_query.end >= span.end_ns // 1_000_000  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------ the cache is what makes it


async def test_without_the_cache_the_resolver_searches_tempo(stack: Stack) -> None:
    role_span, span, _ = pick_with_linked_root(stack, "frontend-child")
    mode, _, _ = await click(stack, span)  # the trace was never opened through the bridge
    assert mode == "local-root"
    assert len(stack.tempo.search_calls) == 1
    assert f'span:id = "{span.span_id}"' in stack.tempo.search_calls[0].query["q"]


async def test_cache_answers_while_tempo_search_still_lags(stack: Stack) -> None:
    role_span, span, root = pick_with_linked_root(stack, "frontend-child")
    stack.tempo.faults.search_lag = 100  # freshly ingested: trace by ID works, search does not yet
    await open_trace(stack, role_span.trace_id)
    mode, _, _ = await click(stack, span)
    assert mode == "local-root"
    assert stack.tempo.search_calls == []


async def test_search_lag_without_the_cache_cannot_find_the_span(stack: Stack) -> None:
    role_span, span, _ = pick_with_linked_root(stack, "frontend-child")
    stack.tempo.faults.search_lag = 100
    mode, _, _ = await click(stack, span)
    assert mode == "none"  # what the span cache exists to prevent: a click right after ingest finds nothing
    assert stack.tempo.search_calls != []


async def test_cache_is_per_tenant(stack: Stack) -> None:
    role_span, span, _ = pick_with_linked_root(stack, "frontend-child")
    await open_trace(stack, role_span.trace_id, tenant="team-a")
    assert stack.app[SPAN_CACHE].get(scope_key("team-a"), span.span_id) is not None

    mode, _, _ = await click(stack, span, tenant="team-a")
    assert mode == "local-root"
    assert stack.tempo.search_calls == []

    mode, _, _ = await click(stack, span, tenant="team-b")  # team-b never opened it: its own lookup, through Tempo
    assert mode == "local-root"
    assert [r.headers.get("X-Scope-OrgID") for r in stack.tempo.search_calls] == ["team-b"]


async def test_no_tenant_header_never_reuses_what_the_anonymous_tenant_or_another_caller_opened(stack: Stack) -> None:
    """Issue 11, item 8: a trace opened with ``X-Scope-OrgID: anonymous`` (or with credentials) is not a span a
    caller without that header (or with other credentials) may see from the cache: its lookup goes to Tempo with
    its own headers, and a Tempo that refuses it decides."""
    role_span, span, _ = pick_with_linked_root(stack, "frontend-child")
    await open_trace(stack, role_span.trace_id, tenant="anonymous")
    mode, _, _ = await click(stack, span, tenant="anonymous")
    assert mode == "local-root" and stack.tempo.search_calls == []  # the opener's own click: from the cache

    stack.tempo.faults.search_lag = 100  # the span is not searchable: only the cache could answer
    mode, _, _ = await click(stack, span)  # no header at all
    assert mode == "none"
    assert [r.headers.get("X-Scope-OrgID") for r in stack.tempo.search_calls] == [None]
