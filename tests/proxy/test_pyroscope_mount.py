"""The ``/pyroscope`` mount end to end: the bridge app in proxy mode between a client speaking Grafana's wire
protocol and the Pyroscope and Tempo test doubles serving the shop capture."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from google.protobuf import json_format
from google.protobuf.message import Message

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.app import create_app
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from bridge.errors import Code
from bridge.spans import Span
from bridge.state import METRICS
from bridge.units import format_value
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.pyroscope_checks import BackendError
from tests.doubles.shop import load_shop
from tests.doubles.tempo import TempoDouble, refused_url

QUERIER = "/pyroscope/querier.v1.QuerierService/"
Server = Callable[..., Awaitable[TestServer]]
Client = Callable[..., Awaitable[TestClient[Any, Any]]]


@dataclass
class Stack:
    pyroscope: PyroscopeDouble
    tempo: TempoDouble
    client: TestClient[Any, Any]
    app: web.Application

    def linked_ids(self) -> set[str]:
        return {labels["span_id"] for p in self.pyroscope.profiles for _, _, labels in p.samples if "span_id" in labels}


async def make_stack(
    aiohttp_server: Server, aiohttp_client: Client, *, auto_decompress: bool = True, **changes: Any
) -> Stack:
    pyro = PyroscopeDouble()
    pserver = await aiohttp_server(pyro.app, auto_decompress=False)
    pyro.url = str(pserver.make_url("")).rstrip("/")
    tempo = TempoDouble()
    tempo.add_shop()
    tserver = await aiohttp_server(tempo.app)
    tempo.url = str(tserver.make_url("")).rstrip("/")
    fields = {"mode": "proxy", "pyroscope_url": pyro.url, "tempo_url": tempo.url, "capture_window": 10.0}
    settings = Settings.for_tests(**{**fields, **changes})
    app = create_app(settings)
    server = await aiohttp_server(app, auto_decompress=auto_decompress)
    client = await aiohttp_client(server)
    return Stack(pyro, tempo, client, app)


@pytest.fixture
async def stack(aiohttp_server: Server, aiohttp_client: Client) -> Stack:
    return await make_stack(aiohttp_server, aiohttp_client)


def span_request(
    span: Span, *, selector: list[str] | None = None, label_selector: str | None = None, max_nodes: int | None = None
) -> qpb.SelectMergeSpanProfileRequest:
    """What Grafana's "Profiles for this span" sends: span ± 60 s, the span's service as label selector."""
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=label_selector if label_selector is not None else f'{{service_name="{span.service}"}}',
        span_selector=selector if selector is not None else [span.span_id],
        start=span.start_ns // 1_000_000 - 60_000,
        end=span.end_ns // 1_000_000 + 60_000,
    )
    if max_nodes is not None:
        req.max_nodes = max_nodes
    return req


async def call(
    client: TestClient[Any, Any],
    method: str,
    msg: Message,
    *,
    codec: str = "proto",
    gzip_request: bool = False,
    accept_gzip: bool = True,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    ctype = "application/proto" if codec == "proto" else "application/json"
    body = msg.SerializeToString() if codec == "proto" else json_format.MessageToJson(msg).encode()
    sent = {"Content-Type": ctype, "Connect-Protocol-Version": "1", **(headers or {})}
    if gzip_request:
        body = gzip.compress(body)
        sent["Content-Encoding"] = "gzip"
    skip = [] if accept_gzip else ["Accept-Encoding"]
    if accept_gzip:
        sent["Accept-Encoding"] = "gzip"
    resp = await client.post(QUERIER + method, data=body, headers=sent, skip_auto_headers=skip, auto_decompress=False)
    raw = await resp.read()
    if resp.headers.get("Content-Encoding") == "gzip":
        raw = gzip.decompress(raw)
    return resp.status, dict(resp.headers), raw


def decode(cls: type[Message], raw: bytes, codec: str = "proto") -> Any:
    msg = cls()
    if codec == "proto":
        msg.ParseFromString(raw)
    else:
        json_format.Parse(raw, msg)
    return msg


async def resolve(stack: Stack, span: Span, **kwargs: Any) -> tuple[int, dict[str, str], qpb.FlameGraph]:
    status, headers, raw = await call(stack.client, "SelectMergeSpanProfile", span_request(span), **kwargs)
    assert status == 200, raw
    return status, headers, decode(qpb.SelectMergeSpanProfileResponse, raw, kwargs.get("codec", "proto")).flamegraph


def shop_span(role: str, where: Callable[[Span], bool] | None = None) -> Span:
    shop = load_shop()
    picked = shop.pick(role, None if where is None else (lambda r: where(shop.span(r.span_id))))
    return shop.span(picked.span_id)


def root_name(fg: qpb.FlameGraph) -> str:
    return str(fg.names[fg.levels[0].values[3]])


# --------------------------------------------------------------------------------------------- the cascade


@pytest.mark.parametrize("codec", ["proto", "json"])
async def test_linked_hit_returns_pyroscopes_flame_graph_as_it_came(stack: Stack, codec: str) -> None:
    linked = stack.linked_ids()
    span = shop_span("frontend-root", lambda s: s.span_id in linked)
    _, headers, fg = await resolve(stack, span, codec=codec)
    assert headers["X-Profile-Bridge-Resolution"] == "linked"
    assert span.span_id in headers["X-Profile-Bridge-Reason"]
    assert headers["Content-Type"] == ("application/proto" if codec == "proto" else "application/json")
    direct = stack.pyroscope.select_merge_span_profile(span_request(span))
    # exactly what Pyroscope answered, its root bar saying what the total is and how sure: pyroscope-io's samples
    # (otel.scope.name) every 10 ms, and the score interval of n of them: n + z²/2 ± z·√(n + z²/4)
    n = direct.flamegraph.total // 10_000_000  # type: ignore[attr-defined]
    z = 1.959963984540054
    low, high = (10 * (n + z * z / 2 + sign * z * (n + z * z / 4) ** 0.5) for sign in (-1, 1))
    assert root_name(fg) == (
        f"total — sampled on-GIL time linked to this span, {n} samples: {n * 10:.1f} ms "
        f"(95 %: {format_value(low * 1e6, 'nanoseconds')} – {format_value(high * 1e6, 'nanoseconds')})"
    )
    assert fg == flamegraph.relabel_root(direct.flamegraph, root_name(fg))  # type: ignore[attr-defined]
    assert stack.tempo.requests == []  # a linked hit needs no span lookup
    [asked] = stack.pyroscope.calls("SelectMergeSpanProfile")
    assert list(asked.message.span_selector) == [span.span_id]  # type: ignore[union-attr]


async def test_child_span_resolves_to_its_local_root(stack: Stack) -> None:
    shop = load_shop()
    linked = stack.linked_ids()
    child = shop_span("frontend-child", lambda s: shop.trace(s.trace_id).local_root(s.span_id).span_id in linked)
    root = shop.trace(child.trace_id).local_root(child.span_id)
    assert root.name == "GET /checkout" and child.name == "renderCart"
    _, headers, fg = await resolve(stack, child)
    assert headers["X-Profile-Bridge-Resolution"] == "local-root"
    expected = (
        f"total — shop-frontend sampled on-GIL time of the whole request GET /checkout (its local root), not this "
        f"span's own; 6 samples: 60.0 ms (95 %: 27.5 ms – 131 ms) — local root GET /checkout (renderCart's CPU is "
        f"recorded under its local root span {root.span_id})"
    )
    assert root_name(fg) == expected
    assert headers["X-Profile-Bridge-Reason"].startswith("local root GET /checkout (renderCart's CPU")
    assert headers["X-Profile-Bridge-Attribution"] == "request"
    assert headers["X-Profile-Bridge-Measure"] == (
        "shop-frontend sampled on-GIL time of the whole request GET /checkout (its local root), not this span's own"
    )
    root_only = stack.pyroscope.select_merge_span_profile(span_request(root)).flamegraph  # type: ignore[attr-defined]
    assert flamegraph.decode(fg).total == root_only.total
    selectors = [list(c.message.span_selector) for c in stack.pyroscope.calls("SelectMergeSpanProfile")]
    assert selectors == [[child.span_id], [root.span_id]]


async def test_client_span_of_shop_frontend_resolves_to_its_local_root(stack: Stack) -> None:
    shop = load_shop()
    linked = stack.linked_ids()
    client_span = shop_span("frontend-client", lambda s: shop.trace(s.trace_id).local_root(s.span_id).span_id in linked)
    assert client_span.kind_name == "SPAN_KIND_CLIENT"
    _, headers, fg = await resolve(stack, client_span)
    assert headers["X-Profile-Bridge-Resolution"] == "local-root"
    assert "local root GET /checkout" in root_name(fg)


async def test_child_span_whose_root_has_no_samples_falls_back_to_the_time_window(stack: Stack) -> None:
    shop = load_shop()
    linked = stack.linked_ids()
    child = shop_span("frontend-child", lambda s: shop.trace(s.trace_id).local_root(s.span_id).span_id not in linked)
    _, headers, fg = await resolve(stack, child)
    assert headers["X-Profile-Bridge-Resolution"] == "time-window"
    label = root_name(fg)
    # the root bar says first what the total is (the service's CPU over whole capture windows), then why
    assert re.match(
        r"total — shop-frontend sampled on-GIL time during the [\d.]+ s window around this span \(\S+–\S+ UTC\), "
        r"not this span's own; \d+ samples: [\d.]+ ms \(95 %: [\d.]+ ms – [\d.]+ ms\) — time-window fallback: no "
        r"samples linked to span " + child.span_id,
        label,
    )
    assert "renderCart, shop-frontend" in label and "10 s capture windows" in label
    assert headers["X-Profile-Bridge-Attribution"] == "service"
    [window_call] = stack.pyroscope.calls("SelectMergeStacktraces")
    req: qpb.SelectMergeStacktracesRequest = window_call.message  # type: ignore[assignment]
    assert req.label_selector == '{service_name="shop-frontend"}'
    # exactly the capture window the span lies in (pyroscope-io stamps its start): not the one before it
    stamps = sorted(
        {
            p.time_ms
            for p in stack.pyroscope.profiles
            if p.labels.get("service_name") == "shop-frontend" and p.type_id == DEFAULT_PROFILE_TYPE
        }
    )
    own = max(t for t in stamps if t <= child.start_ns // 1_000_000)
    assert req.start <= own <= req.end
    assert not any(req.start <= t <= req.end for t in stamps if t != own)
    assert not req.span_selector


@pytest.mark.parametrize("role", ["frontend-io", "frontend-short"])
async def test_io_and_short_spans_fall_back_to_their_services_time_window(stack: Stack, role: str) -> None:
    linked = stack.linked_ids()
    span = shop_span(role, lambda s: s.span_id not in linked)
    _, headers, fg = await resolve(stack, span)
    assert headers["X-Profile-Bridge-Resolution"] == "time-window"
    assert fg.total > 0
    assert f"({span.name}, shop-frontend, " in root_name(fg)
    assert headers["X-Profile-Bridge-Reason"].isascii()
    # the window's flame graph is what the service burned then, relabelled only at the root
    decoded = flamegraph.decode(fg)
    direct = stack.pyroscope.flame(
        stack.pyroscope.select(
            DEFAULT_PROFILE_TYPE,
            '{service_name="shop-frontend"}',
            span.start_ns // 1_000_000 - 12_000,
            -(-span.end_ns // 1_000_000) + 2_000,
            None,
        ),
        None,
    )
    assert direct is not None
    assert decoded.total == direct.total


async def test_span_unknown_to_tempo_answers_a_placeholder_that_grafana_draws_saying_why(stack: Stack) -> None:
    """A ``none`` answer has no samples, but Grafana's span details draw a flame graph only when it has more than one
    row: the answer is a one-unit, two-row placeholder whose bars say why (the header says it is not data)."""
    span = shop_span("frontend-io")
    unknown = Span(span.trace_id, "00000000deadbeef", "", "x", 0, "shop-frontend", span.start_ns, span.end_ns)
    _, headers, fg = await resolve(stack, unknown)
    assert headers["X-Profile-Bridge-Resolution"] == "none"
    assert len(fg.levels) == 2 and fg.total == 1 and list(fg.levels[1].values) == [0, 1, 1, 1]
    assert root_name(fg).startswith("total — none: span 00000000deadbeef not found in Tempo")
    assert fg.names[1].startswith("no samples — span 00000000deadbeef not found in Tempo")
    assert stack.tempo.search_calls  # it was looked for
    q = stack.tempo.search_calls[0].query
    assert q["q"] == '{ span:id = "00000000deadbeef" } | select(span:name, resource.service.name)'
    assert "start" in q and "end" in q


async def test_span_cache_answers_before_tempo_search(stack: Stack) -> None:
    from bridge.call import scope_key
    from bridge.state import SPAN_CACHE

    shop = load_shop()
    linked = stack.linked_ids()
    child = shop_span("backend-child", lambda s: shop.trace(s.trace_id).local_root(s.span_id).span_id in linked)
    stack.app[SPAN_CACHE].put_trace(scope_key(None), shop.trace(child.trace_id))
    _, headers, _ = await resolve(stack, child)
    assert headers["X-Profile-Bridge-Resolution"] == "local-root"
    assert stack.tempo.requests == []


async def test_stacktraces_with_span_selector_are_resolved_and_without_are_passed_through(stack: Stack) -> None:
    span = shop_span("frontend-io")
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector='{service_name="shop-frontend"}',
        start=span.start_ns // 1_000_000 - 60_000,
        end=span.end_ns // 1_000_000 + 60_000,
        span_selector=[span.span_id],
    )
    status, headers, raw = await call(stack.client, "SelectMergeStacktraces", req)
    assert status == 200 and headers["X-Profile-Bridge-Resolution"] == "time-window"
    assert decode(qpb.SelectMergeStacktracesResponse, raw).flamegraph.total > 0
    del req.span_selector[:]
    status, headers, raw = await call(stack.client, "SelectMergeStacktraces", req, gzip_request=True)
    assert status == 200 and "X-Profile-Bridge-Resolution" not in headers
    assert decode(qpb.SelectMergeStacktracesResponse, raw) == stack.pyroscope.select_merge_stacktraces(req)


# --------------------------------------------------------------------------------------------- codecs and gzip


@pytest.mark.parametrize("codec", ["proto", "json"])
@pytest.mark.parametrize("gzip_request", [False, True])
@pytest.mark.parametrize("accept_gzip", [False, True])
@pytest.mark.parametrize("auto_decompress", [False, True])
async def test_codecs_and_gzip_both_ways(
    aiohttp_server: Server,
    aiohttp_client: Client,
    codec: str,
    gzip_request: bool,
    accept_gzip: bool,
    auto_decompress: bool,
) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, auto_decompress=auto_decompress)
    span = shop_span("frontend-io")
    req = span_request(span)
    ctype = "application/proto" if codec == "proto" else "application/json"
    body = req.SerializeToString() if codec == "proto" else json_format.MessageToJson(req).encode()
    headers = {"Content-Type": ctype}
    if gzip_request:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    if accept_gzip:
        headers["Accept-Encoding"] = "gzip"
    resp = await stack.client.post(
        QUERIER + "SelectMergeSpanProfile",
        data=body,
        headers=headers,
        skip_auto_headers=["Accept-Encoding"],
        auto_decompress=False,
    )
    raw = await resp.read()
    assert resp.status == 200, raw
    assert resp.headers["Content-Type"] == ctype
    assert (resp.headers.get("Content-Encoding") == "gzip") is accept_gzip
    if accept_gzip:
        raw = gzip.decompress(raw)
    fg = decode(qpb.SelectMergeSpanProfileResponse, raw, codec).flamegraph
    assert resp.headers["X-Profile-Bridge-Resolution"] == "time-window" and fg.total > 0


# --------------------------------------------------------------------------------------------- bad selectors


async def test_unresolved_grafana_variable_is_an_actionable_invalid_argument(stack: Stack) -> None:
    span = shop_span("frontend-child")
    literal = '${__span.tags["pyroscope.profile.id"]}'
    status, headers, raw = await call(
        stack.client, "SelectMergeSpanProfile", span_request(span, selector=[literal]), accept_gzip=False
    )
    assert status == 400
    doc = json.loads(raw)
    assert doc["code"] == "invalid_argument"
    assert "unresolved Grafana variable" in doc["message"] and "/tempo" in doc["message"]
    assert stack.pyroscope.requests == [] and stack.tempo.requests == []  # nothing forwarded, never empty


async def test_selector_is_cleaned_lower_cased_and_deduplicated(stack: Stack) -> None:
    linked = stack.linked_ids()
    span = shop_span("backend-root", lambda s: s.span_id in linked)
    selector = ['${__span.tags["pyroscope.profile.id"]}', span.span_id.upper(), "xyz", span.span_id, ""]
    status, headers, _ = await call(stack.client, "SelectMergeSpanProfile", span_request(span, selector=selector))
    assert status == 200 and headers["X-Profile-Bridge-Resolution"] == "linked"
    [asked] = stack.pyroscope.calls("SelectMergeSpanProfile")
    assert list(asked.message.span_selector) == [span.span_id]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("selector", "words"),
    [(["123"], "16 hex characters"), (["zzzzzzzzzzzzzzzz"], "16 hex characters")],
)
async def test_selectors_without_a_valid_id_are_refused(stack: Stack, selector: list[str], words: str) -> None:
    span = shop_span("frontend-root")
    status, _, raw = await call(
        stack.client, "SelectMergeSpanProfile", span_request(span, selector=selector), accept_gzip=False
    )
    assert status == 400 and words in raw.decode()
    assert stack.pyroscope.requests == []


async def test_an_empty_span_selector_is_refused_never_forwarded(stack: Stack) -> None:
    span = shop_span("frontend-root")
    for fmt in (qpb.PROFILE_FORMAT_FLAMEGRAPH, qpb.PROFILE_FORMAT_TREE):
        req = span_request(span, selector=[])
        req.format = fmt
        status, _, raw = await call(stack.client, "SelectMergeSpanProfile", req, accept_gzip=False)
        assert status == 400 and b"span selector is empty" in raw
    assert stack.pyroscope.requests == []


@pytest.mark.parametrize("gzip_request", [False, True])
@pytest.mark.parametrize("codec", ["proto", "json"])
async def test_other_formats_are_forwarded_with_the_selector_cleaned(
    stack: Stack, gzip_request: bool, codec: str
) -> None:
    linked = stack.linked_ids()
    span = shop_span("frontend-root", lambda s: s.span_id in linked)
    req = span_request(span, selector=['${__span.tags["pyroscope.profile.id"]}', span.span_id.upper()])
    req.format = qpb.PROFILE_FORMAT_TREE
    status, headers, raw = await call(
        stack.client, "SelectMergeSpanProfile", req, codec=codec, gzip_request=gzip_request
    )
    assert status == 200 and "X-Profile-Bridge-Resolution" not in headers
    [seen] = stack.pyroscope.calls("SelectMergeSpanProfile")
    assert list(seen.message.span_selector) == [span.span_id]  # type: ignore[union-attr]
    assert seen.message.format == qpb.PROFILE_FORMAT_TREE  # type: ignore[union-attr]
    assert "Content-Encoding" not in seen.headers  # re-encoded plain


async def test_the_carried_trace_never_reaches_pyroscope(stack: Stack) -> None:
    """``<span>:<trace>`` (what the /tempo mount writes into pyroscope.profile.id) is cut back to the span id."""
    linked = stack.linked_ids()
    span = shop_span("frontend-root", lambda s: s.span_id in linked)
    carried = f"{span.span_id}:{span.trace_id}"
    req = span_request(span, selector=[carried])
    req.format = qpb.PROFILE_FORMAT_TREE  # not resolved: passed on, cleaned
    status, _, _ = await call(stack.client, "SelectMergeSpanProfile", req)
    assert status == 200
    resolved = span_request(span, selector=[carried])
    status, headers, _ = await call(stack.client, "SelectMergeSpanProfile", resolved)
    assert status == 200 and headers["X-Profile-Bridge-Resolution"] == "linked"
    seen = [list(r.message.span_selector) for r in stack.pyroscope.calls("SelectMergeSpanProfile")]  # type: ignore[union-attr]
    assert seen == [[span.span_id], [span.span_id]]


async def test_malformed_bodies_are_invalid_argument(stack: Stack) -> None:
    resp = await stack.client.post(
        QUERIER + "SelectMergeSpanProfile", data=b"\xff\xff\xff\xff", headers={"Content-Type": "application/proto"}
    )
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_argument"
    resp = await stack.client.post(
        QUERIER + "SelectMergeSpanProfile", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_argument"
    resp = await stack.client.post(
        QUERIER + "SelectMergeSpanProfile",
        data=b"\x1f\x8b\x08broken",
        headers={"Content-Type": "application/proto", "Content-Encoding": "gzip"},
    )
    assert resp.status == 400 and (await resp.json())["code"] == "invalid_argument"


# --------------------------------------------------------------------------------------------- lookups: cache


async def test_lookup_cache_is_per_tenant(stack: Stack) -> None:
    span = shop_span("frontend-io")
    for tenant in ("team-a", "team-b", "team-a"):
        _, headers, _ = await resolve(stack, span, headers={"X-Scope-OrgID": tenant})
        assert headers["X-Profile-Bridge-Resolution"] == "time-window"
    searches = [r.headers.get("X-Scope-OrgID") for r in stack.tempo.search_calls]
    assert searches == ["team-a", "team-b"]  # team-a's second click came from its cache, team-b had its own
    for call_ in stack.pyroscope.requests:
        assert call_.headers.get("X-Scope-OrgID") in ("team-a", "team-b")


async def test_ten_concurrent_identical_lookups_make_one_upstream_call(stack: Stack) -> None:
    stack.tempo.faults.delay = 0.2  # so the ten overlap
    span = shop_span("frontend-io")
    results = await asyncio.gather(*(resolve(stack, span) for _ in range(10)))
    assert {h["X-Profile-Bridge-Resolution"] for _, h, _ in results} == {"time-window"}
    assert len(stack.tempo.search_calls) == 1
    assert len(stack.tempo.calls("/api/v2/traces/")) == 1
    assert len({fg.SerializeToString() for _, _, fg in results}) == 1


# --------------------------------------------------------------------------------------------- failures


async def test_pyroscope_down_is_unavailable(aiohttp_server: Server, aiohttp_client: Client) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, pyroscope_url=refused_url())
    span = shop_span("frontend-root")
    status, _, raw = await call(stack.client, "SelectMergeSpanProfile", span_request(span), accept_gzip=False)
    assert status == 503
    assert b'"unavailable"' in raw and b"cannot connect to pyroscope" in raw
    status, _, raw = await call(stack.client, "ProfileTypes", qpb.ProfileTypesRequest(), accept_gzip=False)
    assert status == 503 and b"cannot connect to pyroscope" in raw


async def test_tempo_down_during_fallback_is_unavailable_naming_tempo(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, tempo_url=refused_url())
    status, _, raw = await call(
        stack.client, "SelectMergeSpanProfile", span_request(shop_span("frontend-io")), accept_gzip=False
    )
    assert status == 503 and b"cannot connect to tempo" in raw


@pytest.mark.parametrize("method", ["SelectMergeSpanProfile", "ProfileTypes"])
async def test_slow_pyroscope_honours_connect_timeout_ms(stack: Stack, method: str) -> None:
    stack.pyroscope.faults.delay = 30.0
    msg: Message = span_request(shop_span("frontend-root")) if method != "ProfileTypes" else qpb.ProfileTypesRequest()
    # the guard only stops a hang; the answer must come from the 300 ms budget
    status, _, raw = await asyncio.wait_for(
        call(stack.client, method, msg, accept_gzip=False, headers={"Connect-Timeout-Ms": "300"}), timeout=10
    )
    assert status == 504
    assert b'"deadline_exceeded"' in raw and b"pyroscope did not answer" in raw


async def test_a_timeout_message_names_the_timeout_that_fired(aiohttp_server: Server, aiohttp_client: Client) -> None:
    """The request's budget is 6 s (Connect-Timeout-Ms) but the read timeout (PROFILE_BRIDGE_UPSTREAM_TIMEOUT) is
    0.3 s: the message says 0.3 s, the figure that fired, not 6 s (issue 11, item 11)."""
    stack = await make_stack(aiohttp_server, aiohttp_client, upstream_timeout=0.3)
    stack.pyroscope.faults.delay = 30.0
    status, _, raw = await asyncio.wait_for(
        call(
            stack.client,
            "ProfileTypes",
            qpb.ProfileTypesRequest(),
            accept_gzip=False,
            headers={"Connect-Timeout-Ms": "6000"},
        ),
        timeout=10,
    )
    assert status == 504
    message = json.loads(raw)["message"]
    assert message == "pyroscope did not answer: nothing arrived for 0.3 s", message


async def test_slow_tempo_within_budget_is_deadline_exceeded(stack: Stack) -> None:
    stack.tempo.faults.delay = 30.0
    status, _, raw = await asyncio.wait_for(
        call(
            stack.client,
            "SelectMergeSpanProfile",
            span_request(shop_span("frontend-io")),
            accept_gzip=False,
            headers={"Connect-Timeout-Ms": "400"},
        ),
        timeout=10,
    )
    assert status == 504 and b"tempo" in raw


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [("reset", 503, Code.UNAVAILABLE), ("garbage", 500, Code.INTERNAL), ("code", 429, Code.RESOURCE_EXHAUSTED)],
)
async def test_pyroscope_resetting_or_answering_garbage_or_errors(
    stack: Stack, fault: str, status: int, code: Code
) -> None:
    if fault == "reset":
        stack.pyroscope.faults.reset = True
    elif fault == "garbage":
        stack.pyroscope.faults.garbage = True
    else:
        stack.pyroscope.faults.code = Code.RESOURCE_EXHAUSTED
        stack.pyroscope.faults.message = "too many queries"
    got, _, raw = await call(
        stack.client, "SelectMergeSpanProfile", span_request(shop_span("frontend-root")), accept_gzip=False
    )
    assert got == status
    doc = json.loads(raw)
    assert doc["code"] == code.value and "pyroscope" in doc["message"]
    assert "Traceback" not in doc["message"]


@pytest.mark.parametrize(("fault", "status", "code"), [("garbage", 500, "internal"), ("reset", 503, "unavailable")])
async def test_tempo_answering_garbage_or_resetting(stack: Stack, fault: str, status: int, code: str) -> None:
    setattr(stack.tempo.faults, fault, True)
    got, _, raw = await call(
        stack.client, "SelectMergeSpanProfile", span_request(shop_span("frontend-io")), accept_gzip=False
    )
    doc = json.loads(raw)
    assert got == status and doc["code"] == code and "tempo" in doc["message"]


@pytest.mark.parametrize("auto_decompress", [False, True])
async def test_oversized_bodies_raw_and_after_gzip(
    aiohttp_server: Server, aiohttp_client: Client, auto_decompress: bool
) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, auto_decompress=auto_decompress, max_body_bytes=4096)
    big = span_request(shop_span("frontend-root"), label_selector='{service_name="' + "x" * 8000 + '"}')
    status, _, raw = await call(stack.client, "SelectMergeSpanProfile", big, accept_gzip=False)
    assert status == 413 and b"resource_exhausted" in raw  # Content Too Large; the code in the body
    status, _, raw = await call(stack.client, "SelectMergeSpanProfile", big, gzip_request=True, accept_gzip=False)
    assert len(gzip.compress(big.SerializeToString())) < 4096  # small on the wire, too big once inflated
    assert status == 413 and b"resource_exhausted" in raw  # Content Too Large; the code in the body
    assert stack.pyroscope.requests == []


# --------------------------------------------------------------------------------------------- pass-through


PASSTHROUGH: list[tuple[str, Message]] = [
    ("ProfileTypes", qpb.ProfileTypesRequest(start=1795945270000, end=1795945320000)),
    ("LabelNames", tpb.LabelNamesRequest(matchers=['{service_name="shop-backend"}'])),
    ("LabelValues", tpb.LabelValuesRequest(name="service_name")),
    (
        "SelectSeries",
        qpb.SelectSeriesRequest(
            profile_typeID=DEFAULT_PROFILE_TYPE,
            label_selector="{}",
            start=1795945270000,
            end=1795945320000,
            step=10.0,
            group_by=["service_name"],
        ),
    ),
]


@pytest.mark.parametrize(("method", "msg"), PASSTHROUGH, ids=[m for m, _ in PASSTHROUGH])
@pytest.mark.parametrize("codec", ["proto", "json"])
async def test_passthrough_byte_for_byte(stack: Stack, method: str, msg: Message, codec: str) -> None:
    headers = {"X-Scope-OrgID": "team-a", "Authorization": "Bearer s3cret", "Connect-Timeout-Ms": "5000"}
    via_bridge = await call(stack.client, method, msg, codec=codec, accept_gzip=False, headers=headers)
    ctype = "application/proto" if codec == "proto" else "application/json"
    body = msg.SerializeToString() if codec == "proto" else json_format.MessageToJson(msg).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.pyroscope.url + "/querier.v1.QuerierService/" + method,
            data=body,
            headers={"Content-Type": ctype, "Connect-Protocol-Version": "1", **headers},
            skip_auto_headers=["Accept-Encoding"],
        ) as resp,
    ):
        direct = await resp.read()
    assert via_bridge[0] == resp.status == 200
    assert via_bridge[2] == direct and len(direct) > 2
    assert "X-Profile-Bridge-Resolution" not in via_bridge[1]
    first, second = stack.pyroscope.calls(method)
    assert first.body == second.body == body  # the request arrived untouched
    for name, value in headers.items():
        assert first.headers[name] == value


async def test_passthrough_keeps_gzip_untouched(aiohttp_server: Server, aiohttp_client: Client) -> None:
    stack = await make_stack(aiohttp_server, aiohttp_client, auto_decompress=False)
    body = gzip.compress(qpb.ProfileTypesRequest().SerializeToString())
    resp = await stack.client.post(
        QUERIER + "ProfileTypes",
        data=body,
        auto_decompress=False,
        headers={"Content-Type": "application/proto", "Content-Encoding": "gzip", "Accept-Encoding": "gzip"},
    )
    assert resp.status == 200 and resp.headers["Content-Encoding"] == "gzip"
    answer = qpb.ProfileTypesResponse.FromString(gzip.decompress(await resp.read()))
    assert [t.ID for t in answer.profile_types] == [DEFAULT_PROFILE_TYPE]
    [seen] = stack.pyroscope.calls("ProfileTypes")
    assert seen.body == body and seen.headers["Content-Encoding"] == "gzip"


async def test_other_paths_under_the_mount_are_forwarded_and_nothing_else(stack: Stack) -> None:
    resp = await stack.client.get("/pyroscope/pyroscope/render?query=x&from=now-1h")
    assert resp.status == 404  # Pyroscope's (the double's) own 404, forwarded
    resp = await stack.client.get("/pyroscope/ready")
    assert resp.status == 403  # not a call Grafana's clients make (bridge.wire.allowlist): never sent
    assert [r.method for r in stack.pyroscope.requests] == ["/pyroscope/render"]
    resp = await stack.client.get("/querier.v1.QuerierService/ProfileTypes")
    assert resp.status in (404, 405)
    assert len(stack.pyroscope.requests) == 1


async def test_resolutions_are_counted_in_metrics(stack: Stack) -> None:
    linked = stack.linked_ids()
    await resolve(stack, shop_span("frontend-root", lambda s: s.span_id in linked))
    await resolve(stack, shop_span("frontend-io"))
    text = stack.app[METRICS].render().decode()
    assert 'profile_bridge_resolutions_total{mode="linked"} 1.0' in text
    assert 'profile_bridge_resolutions_total{mode="time-window"} 1.0' in text
    assert 'route="/pyroscope/SelectMergeSpanProfile"' in text


def test_reason_header_is_ascii_safe() -> None:
    from bridge.resolution import ascii_header

    assert ascii_header("total — a–b “c” é\n") == 'total - a-b "c" ? '


# --------------------------------------------------------------------------------------------- standalone mode


async def test_standalone_mode_answers_from_the_store_and_resolves_spans(aiohttp_client: Client, tmp_path: Any) -> None:
    from tests.paths import SHOP_CAPTURE
    from tests.store.test_store import CAPTURE_END_S

    # the store refuses data older than its retention age: its clock is the capture's
    app = create_app(
        Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), capture_window=10.0),
        wall_clock=lambda: CAPTURE_END_S,
    )
    client = await aiohttp_client(app)
    for path in sorted(SHOP_CAPTURE.glob("*.bin")):
        route = "/v1/traces" if path.name.endswith("_v1_traces.bin") else "/push.v1.PusherService/Push"
        ctype = "application/x-protobuf" if route == "/v1/traces" else "application/proto"
        resp = await client.post(route, data=path.read_bytes(), headers={"Content-Type": ctype})
        assert resp.status == 200, await resp.text()

    status, _, raw = await call(client, "ProfileTypes", qpb.ProfileTypesRequest(), codec="json")
    assert status == 200
    assert DEFAULT_PROFILE_TYPE in [t.ID for t in decode(qpb.ProfileTypesResponse, raw, "json").profile_types]

    shop = load_shop()
    profiles = PyroscopeDouble().profiles
    linked = {lb["span_id"] for p in profiles for _, _, lb in p.samples if "span_id" in lb}
    child = shop_span("frontend-child", lambda s: shop.trace(s.trace_id).local_root(s.span_id).span_id in linked)
    status, headers, raw = await call(client, "SelectMergeSpanProfile", span_request(child))
    assert status == 200, raw
    assert headers["X-Profile-Bridge-Resolution"] == "local-root"
    assert "local root GET /checkout" in root_name(decode(qpb.SelectMergeSpanProfileResponse, raw).flamegraph)

    # the rest of Pyroscope's API: tests/store/test_pyroscope_api.py; what no store answers stays unimplemented
    resp = await client.post("/pyroscope/vcs.v1.VCSService/GithubApp", json={})
    assert resp.status == 501 and (await resp.json())["code"] == "unimplemented"


async def test_cookies_set_by_the_upstream_never_reach_another_request(
    aiohttp_server: Server, aiohttp_client: Client
) -> None:
    probe = await make_stack(aiohttp_server, aiohttp_client)
    # a host name, not an IP: a cookie jar would keep cookies for it
    stack = await make_stack(
        aiohttp_server,
        aiohttp_client,
        pyroscope_url=probe.pyroscope.url.replace("127.0.0.1", "localhost"),
        upstream_allow=(("pyroscope", "/ready"),),  # opened: it is not a call Grafana makes
    )
    stack.pyroscope = probe.pyroscope
    stack.pyroscope.cookie = "session=alice; Path=/"
    resp = await stack.client.get("/pyroscope/ready", headers={"Cookie": "mine=1"})
    assert resp.status == 200 and resp.headers["Set-Cookie"] == "session=alice; Path=/"  # passed to its client
    stack.client.session.cookie_jar.clear()
    resp = await stack.client.get("/pyroscope/ready")
    assert resp.status == 200
    seen = [r.headers.get("Cookie") for r in stack.pyroscope.requests]
    assert seen == [None, None]  # the caller's own cookie is never forwarded (issue 11, item 9), and the bridge's
    # upstream session remembers nothing between requests


async def test_a_zero_budget_fails_at_once_instead_of_waiting_forever(stack: Stack) -> None:
    stack.pyroscope.faults.delay = 30.0
    for method, msg in (
        ("ProfileTypes", qpb.ProfileTypesRequest()),
        ("SelectMergeSpanProfile", span_request(shop_span("frontend-root"))),
    ):
        status, _, raw = await asyncio.wait_for(
            call(stack.client, method, msg, accept_gzip=False, headers={"Connect-Timeout-Ms": "0"}), timeout=10
        )
        assert status == 504 and b"no time left" in raw
    assert stack.pyroscope.requests == []


# --------------------------------------------------------------------------------------------- the double's contract


def test_the_pyroscope_double_follows_the_contract() -> None:
    """The double itself: inclusive time range on the capture start, span selector rules, selector operators."""
    from tests.doubles.pyroscope import matches_selector

    double = PyroscopeDouble()
    first = min(double.profiles, key=lambda p: p.time_ms)
    same_service = f'{{service_name="{first.labels["service_name"]}"}}'
    at = double.select(DEFAULT_PROFILE_TYPE, same_service, first.time_ms, first.time_ms, None)
    same = [p for p in double.profiles if p.time_ms == first.time_ms and p.labels["service_name"] in same_service]
    assert sum(v for _, v in at) == sum(v for p in same for _, v, _ in p.samples)  # both ends inclusive
    assert double.select(DEFAULT_PROFILE_TYPE, same_service, first.time_ms + 1, first.time_ms + 5000, None) == []
    with pytest.raises(BackendError, match='invalid span id length: "abc"'):  # a 500 "unknown", as v2 relays it
        double.select_merge_span_profile(
            qpb.SelectMergeSpanProfileRequest(profile_typeID=DEFAULT_PROFILE_TYPE, span_selector=["abc"], end=2**62)
        )
    # an empty range: v2's frontend answers before its backend checks anything
    assert (
        double.select_merge_span_profile(
            qpb.SelectMergeSpanProfileRequest(
                profile_typeID=DEFAULT_PROFILE_TYPE, span_selector=["abc"], start=1, end=2
            )
        ).flamegraph.total
        == 0
    )
    everything = double.select_merge_span_profile(
        qpb.SelectMergeSpanProfileRequest(profile_typeID=DEFAULT_PROFILE_TYPE, label_selector="{}", start=0, end=2**62)
    )
    assert everything.flamegraph.total == 3_590_000_000  # an empty selector filters nothing, as in Pyroscope v2
    labels = {"service_name": "shop-backend", "env": "capture"}
    assert matches_selector('{service_name="shop-backend", env!="prod"}', labels)
    assert matches_selector('{service_name=~"shop-.*"}', labels)
    assert not matches_selector('{service_name!~"shop-.*"}', labels)
    assert not matches_selector('{pod="x"}', labels)


async def test_grpc_web_span_queries_pass_through_undecoded(stack: Stack) -> None:
    body = b"\x00\x00\x00\x00\x05hello"  # a gRPC-Web frame: not for the bridge to decode
    resp = await stack.client.post(
        QUERIER + "SelectMergeSpanProfile", data=body, headers={"Content-Type": "application/grpc-web+proto"}
    )
    await resp.read()
    [seen] = stack.pyroscope.requests
    assert seen.body == body and seen.headers["Content-Type"] == "application/grpc-web+proto"
    assert "X-Profile-Bridge-Resolution" not in resp.headers
