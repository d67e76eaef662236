"""The resolver: its pure decisions (tables), and the cascade through the real HTTP clients against the doubles."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from bridge import flamegraph
from bridge.call import CallContext, Deadline, scope_key
from bridge.config import DEFAULT_PROFILE_TYPE, Settings
from bridge.errors import InvalidArgument, UpstreamTimeout
from bridge.metrics import Metrics
from bridge.reasons import local_root_reason, time_window_reason
from bridge.resolution import SpanQuery, Step, ascii_header, carried_traces, clean_span_ids
from bridge.resolve import Resolver
from bridge.selector import Matcher, format_selector, merge_selector, parse_selector
from bridge.spancache import CachedSpan, SpanCache
from bridge.spans import Span, Trace
from bridge.timewindow import labels_of, window_of
from bridge.upstream.http import open_clients
from tests.doubles.pyroscope import PyroscopeDouble
from tests.doubles.shop import capture_now, load_shop
from tests.doubles.tempo import TempoDouble

Server = Callable[..., Awaitable[TestServer]]

# --------------------------------------------------------------------------------------------- pure: selectors


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (["7F80395FD15DCDC9"], ("7f80395fd15dcdc9",)),
        (["7f80395fd15dcdc9", "7F80395FD15DCDC9", " 7f80395fd15dcdc9 "], ("7f80395fd15dcdc9",)),
        (['${__span.tags["pyroscope.profile.id"]}', "5af75a6c3094ba71"], ("5af75a6c3094ba71",)),
        (["", "abc", "5af75a6c3094ba71", "0000000000000001"], ("5af75a6c3094ba71", "0000000000000001")),
        # the Tempo mount's carried form: only the span id goes on
        (["5af75a6c3094ba71:e19e0353f421bfce945f7d1514c6c9f1"], ("5af75a6c3094ba71",)),
        (["5AF75A6C3094BA71:1", "5af75a6c3094ba71"], ("5af75a6c3094ba71",)),
        (["5af75a6c3094ba71:nothex", "7f80395fd15dcdc9"], ("7f80395fd15dcdc9",)),
    ],
)
def test_clean_span_ids_table(raw: list[str], clean: tuple[str, ...]) -> None:
    assert clean_span_ids(raw) == clean


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (['${__span.tags["pyroscope.profile.id"]}'], "unresolved Grafana variable"),
        (["${__span.spanId}x"], "unresolved Grafana variable"),
        (["123", "7f80395fd15dcdc9aa"], "16 hex characters"),
        ([], "span selector is empty"),
        ([""], "16 hex characters"),
        (["5af75a6c3094ba71:"], "SPAN:TRACE"),
        (["5af75a6c3094ba71:e19e0353f421bfce945f7d1514c6c9f1:x"], "16 hex characters"),
    ],
)
def test_clean_span_ids_refuses_with_an_actionable_message(raw: list[str], words: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        clean_span_ids(raw)
    assert words in info.value.message


def test_carried_traces_map_each_span_to_the_trace_it_carries() -> None:
    raw = [
        "5af75a6c3094ba71:E19E0353F421BFCE945F7D1514C6C9F1",
        "7f80395fd15dcdc9",
        "1c60f2b8cd2d96d1:abc",
        "5af75a6c3094ba71:0123456789abcdef0123456789abcdef",
        "0000000000000000:e19e0353f421bfce945f7d1514c6c9f1",
    ]
    assert carried_traces(raw) == {
        "5af75a6c3094ba71": "e19e0353f421bfce945f7d1514c6c9f1",
        "1c60f2b8cd2d96d1": "00000000000000000000000000000abc",
    }


@pytest.mark.parametrize(
    ("text", "matchers"),
    [
        ("", ()),
        ("{}", ()),
        (" { } ", ()),
        ('{service_name="shop-backend"}', (Matcher("service_name", "=", "shop-backend"),)),
        (
            '{a="x", b!="y", c=~"z.*", d!~"w"}',
            (Matcher("a", "=", "x"), Matcher("b", "!=", "y"), Matcher("c", "=~", "z.*"), Matcher("d", "!~", "w")),
        ),
        (
            '{a="q\\"uote", b=\'single\', c=`raw\\d`,}',
            (Matcher("a", "=", 'q"uote'), Matcher("b", "=", "single"), Matcher("c", "=", "raw\\d")),
        ),
        ('{service.name="dotted", x="ünï"}', (Matcher("service.name", "=", "dotted"), Matcher("x", "=", "ünï"))),
    ],
)
def test_parse_selector_table(text: str, matchers: tuple[Matcher, ...]) -> None:
    assert parse_selector(text) == matchers
    assert parse_selector(format_selector(matchers)) == matchers  # round trip


@pytest.mark.parametrize("text", ["service_name=x", '{a="x"', "{a=x}", '{="x"}', '{a="x" b="y"}', '{a=="x"}'])
def test_parse_selector_refuses_malformed(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_selector(text)


@pytest.mark.parametrize(
    ("selector", "labels", "merged"),
    [
        ("{}", [("service_name", "shop")], '{service_name="shop"}'),
        ("", [("service_name", "shop"), ("pod", "p-1")], '{service_name="shop", pod="p-1"}'),
        ('{env="capture"}', [("service_name", "shop")], '{env="capture", service_name="shop"}'),
        ('{service_name="mine"}', [("service_name", "shop")], '{service_name="mine"}'),
        ('{service_name=~"sh.*"}', [("service_name", "shop")], '{service_name=~"sh.*"}'),
        ("{}", [("a", 'q"x')], '{a="q\\"x"}'),
    ],
)
def test_merge_selector_table(selector: str, labels: list[tuple[str, str]], merged: str) -> None:
    assert merge_selector(selector, labels) == merged


# --------------------------------------------------------------------------------------------- pure: windows, labels


NOON_NS = int(datetime(2026, 11, 29, 12, 0, 1, tzinfo=UTC).timestamp()) * 1_000_000_000
SPAN = Span(
    trace_id="0" * 31 + "1",
    span_id="7f80395fd15dcdc9",
    parent_span_id="",
    name="GET /price",
    kind=2,
    service="shop-backend",
    start_ns=NOON_NS + 120_000_000,
    end_ns=NOON_NS + 450_000_001,
    resource=(("service.name", "shop-backend"), ("k8s.pod.name", "backend-7d9"), ("host.name", "h1")),
)


def test_window_widens_by_one_capture_window_and_the_clock_skew() -> None:
    start, end = window_of(SPAN, capture_window=10.0, clock_skew=2.0)
    assert start == NOON_NS // 1_000_000 + 120 - 12_000
    assert end == NOON_NS // 1_000_000 + 451 + 2_000  # the end rounds up to whole ms


def test_labels_follow_the_label_map() -> None:
    label_map = (("service.name", "service_name"), ("k8s.pod.name", "pod"), ("absent.attr", "nope"))
    assert labels_of(SPAN, label_map) == [("service_name", "shop-backend"), ("pod", "backend-7d9")]


def test_reason_texts_match_the_issues_examples() -> None:
    reason = time_window_reason(SPAN, 10.0, "no samples linked to span 7f80395fd15dcdc9")
    assert flamegraph.root_label(reason) == (
        "total — time-window fallback: no samples linked to span 7f80395fd15dcdc9 (GET /price, shop-backend, "
        "12:00:01.120–12:00:01.450 UTC, 10 s capture windows)"
    )
    child = Span("0" * 32, "1111111111111111", "5af75a6c3094ba71", "renderCart", 1, "shop-frontend", 0, 1)
    root = Span("0" * 32, "5af75a6c3094ba71", "", "GET /checkout", 2, "shop-frontend", 0, 2)
    assert flamegraph.root_label(local_root_reason(child, root)) == (
        "total — local root GET /checkout (renderCart's CPU is recorded under its local root span 5af75a6c3094ba71)"
    )
    assert ascii_header(reason).isascii() and "12:00:01.120-12:00:01.450" in ascii_header(reason)


# --------------------------------------------------------------------------------------------- the cascade, via HTTP


class Env:
    def __init__(self, pyro: PyroscopeDouble, tempo: TempoDouble, resolver: Resolver, cache: SpanCache) -> None:
        self.pyro, self.tempo, self.resolver, self.cache = pyro, tempo, resolver, cache


@pytest.fixture
async def env(aiohttp_server: Server) -> Any:
    pyro = PyroscopeDouble()
    pserver = await aiohttp_server(pyro.app)
    tempo = TempoDouble()
    tempo.add_shop()
    tserver = await aiohttp_server(tempo.app)
    settings = Settings.for_tests(
        mode="proxy",
        pyroscope_url=str(pserver.make_url("")).rstrip("/"),
        tempo_url=str(tserver.make_url("")).rstrip("/"),
        capture_window=10.0,
    )
    cache = SpanCache(1000, 1024**2, 60)
    async with open_clients(settings, Metrics()) as (traces, profiles):
        resolver = Resolver(traces, profiles, cache, settings, Metrics(), clock=capture_now)
        yield Env(pyro, tempo, resolver, cache)


def ctx(tenant: str | None = None, budget: float = 10.0) -> CallContext:
    return CallContext(Deadline.start(budget, 30.0), tenant=tenant)


def query_for(span: Span, **changes: Any) -> SpanQuery:
    fields: dict[str, Any] = {
        "span_ids": (span.span_id,),
        "profile_type": DEFAULT_PROFILE_TYPE,
        "label_selector": f'{{service_name="{span.service}"}}',
        "start_ms": span.start_ns // 1_000_000 - 60_000,
        "end_ms": span.end_ns // 1_000_000 + 60_000,
    }
    fields.update(changes)
    return SpanQuery(**fields)


def linked_ids(pyro: PyroscopeDouble) -> set[str]:
    return {lb["span_id"] for p in pyro.profiles for _, _, lb in p.samples if "span_id" in lb}


async def test_known_trace_id_skips_the_search(env: Env) -> None:
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    res = await env.resolver.resolve(query_for(io, trace_id=io.trace_id), ctx())
    assert res.step is Step.TIME_WINDOW
    assert res.span == io and res.local_root == io
    # the capture window the span lies in, found from the profiles' stamps (pyroscope-io stamps the start)
    stamps = sorted({p.time_ms for p in env.pyro.profiles if p.labels.get("service_name") == "shop-frontend"})
    own = max(t for t in stamps if t <= io.start_ns // 1_000_000)
    assert res.window_ms is not None and res.window_ms[0] <= own <= res.window_ms[1]
    assert not any(res.window_ms[0] <= t <= res.window_ms[1] for t in stamps if t != own)
    assert res.label_selector == '{service_name="shop-frontend"}'
    assert env.tempo.search_calls == [] and len(env.tempo.calls("/api/v2/traces/")) == 1


async def test_backend_child_resolves_to_its_backend_local_root(env: Env) -> None:
    shop = load_shop()
    linked = linked_ids(env.pyro)
    role = shop.pick("backend-child", lambda r: shop.trace(r.trace_id).local_root(r.span_id).span_id in linked)  # type: ignore[union-attr]
    child = shop.span(role.span_id)
    res = await env.resolver.resolve(query_for(child), ctx())
    assert res.step is Step.LOCAL_ROOT
    assert res.local_root is not None and res.local_root.name == "GET /price"
    assert res.span_ids == (res.local_root.span_id,)
    assert "countPrimes's CPU is recorded under its local root span" in res.reason


async def test_several_ids_are_or_ed_in_one_linked_query(env: Env) -> None:
    linked = sorted(linked_ids(env.pyro))[:3]
    shop = load_shop()
    span = shop.span(linked[0])
    res = await env.resolver.resolve(query_for(span, span_ids=tuple(linked), label_selector="{}"), ctx())
    assert res.step is Step.LINKED and res.span_ids == tuple(linked)
    [asked] = env.pyro.calls("SelectMergeSpanProfile")
    assert list(asked.message.span_selector) == linked  # type: ignore[union-attr]


async def test_nothing_in_the_window_either_is_none_with_the_reason(env: Env) -> None:
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    res = await env.resolver.resolve(query_for(io, label_selector='{service_name="shop-frontend", env="nope"}'), ctx())
    assert res.step is Step.NONE and flamegraph.is_empty(res.flamegraph)
    assert res.flamegraph.names[0].startswith("total — no samples linked to span")
    assert 'env="nope"' in res.reason


async def test_search_hit_without_a_fetchable_trace_still_gets_a_time_window(env: Env) -> None:
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    env.tempo._lookup = lambda request: (request.match_info["trace_id"], None)  # type: ignore[method-assign]
    res = await env.resolver.resolve(query_for(io), ctx())
    assert res.step is Step.TIME_WINDOW
    assert res.span is not None and res.span.span_id == io.span_id and res.span.name == "GET /slow-io"
    assert res.span.start_ns == io.start_ns and res.span.end_ns == io.end_ns
    assert res.label_selector == '{service_name="shop-frontend"}'
    assert [r.path.split("/")[2] for r in env.tempo.calls("/api/")] == ["search", "v2"]  # v2 empty: not found


async def test_tempo_v1_fallback_when_v2_answers_404(env: Env) -> None:
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    env.tempo.faults.paths = "/api/v2/traces/"
    env.tempo.faults.status = 404
    trace = await env.resolver.traces.trace_by_id(io.trace_id, ctx())
    assert trace is not None and trace.get(io.span_id) == io
    assert [r.path for r in env.tempo.requests] == [f"/api/v2/traces/{io.trace_id}", f"/api/traces/{io.trace_id}"]
    assert all(r.headers["Accept"] == "application/protobuf" for r in env.tempo.requests)
    assert await env.resolver.traces.trace_by_id("0" * 31 + "9", ctx()) is None  # v1 404: not found


async def test_waiters_never_wait_past_their_own_budget(env: Env) -> None:
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    env.tempo.faults.delay = 30.0
    leader = asyncio.ensure_future(env.resolver.lookup_span(io.span_id, ctx(budget=20.0)))
    await asyncio.sleep(0.05)
    with pytest.raises(UpstreamTimeout):
        await env.resolver.lookup_span(io.span_id, ctx(budget=0.2))
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_a_cancelled_leader_hands_the_lookup_to_a_waiter(env: Env) -> None:
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    env.tempo.faults.delay = 0.3
    leader = asyncio.ensure_future(env.resolver.lookup_span(io.span_id, ctx()))
    await asyncio.sleep(0.05)
    waiter = asyncio.ensure_future(env.resolver.lookup_span(io.span_id, ctx()))
    await asyncio.sleep(0.05)
    leader.cancel()
    found = await waiter
    assert found is not None and found[0] == io


async def test_span_cache_is_per_tenant(env: Env) -> None:
    shop = load_shop()
    child = shop.span(shop.pick("frontend-child").span_id)
    env.cache.put_trace(scope_key("team-a"), shop.trace(child.trace_id))
    found = await env.resolver.lookup_span(child.span_id, ctx("team-a"))
    assert found is not None and env.tempo.requests == []
    found = await env.resolver.lookup_span(
        child.span_id, ctx("team-b"), start_ms=child.start_ns // 10**6 - 1000, end_ms=child.end_ns // 10**6 + 1000
    )
    assert found is not None
    assert [r.headers.get("X-Scope-OrgID") for r in env.tempo.search_calls] == ["team-b"]


async def test_a_cached_span_whose_root_was_evicted_is_completed_from_its_trace_without_search(env: Env) -> None:
    shop = load_shop()
    linked = linked_ids(env.pyro)
    role = shop.pick("frontend-child", lambda r: shop.trace(r.trace_id).local_root(r.span_id).span_id in linked)  # type: ignore[union-attr]
    child = shop.span(role.span_id)
    root_id = shop.trace(child.trace_id).local_root(child.span_id).span_id  # type: ignore[union-attr]

    class Forgetful(SpanCache):
        """A span cache that no longer answers for the local root (as if evicted)."""

        def get(self, tenant: str | None, span_id: str) -> CachedSpan | None:
            return None if span_id == root_id else super().get(tenant, span_id)

        def get_trace(self, tenant: str | None, trace_id: str) -> Trace | None:
            return None

    cache = Forgetful(1000, 1024**2, 60)
    cache.put_trace(scope_key(None), shop.trace(child.trace_id))
    env.resolver.span_cache = cache
    res = await env.resolver.resolve(query_for(child), ctx())
    assert res.step is Step.LOCAL_ROOT and res.local_root is not None and res.local_root.name == "GET /checkout"
    assert env.tempo.search_calls == []
    assert [r.path for r in env.tempo.requests] == [f"/api/v2/traces/{child.trace_id}"]


@pytest.mark.parametrize("style", ["v2.0", "v2.2"])
async def test_both_no_data_shapes_count_as_empty(env: Env, style: str) -> None:
    env.pyro.empty_style = style
    shop = load_shop()
    io = shop.span(shop.pick("frontend-io").span_id)
    res = await env.resolver.resolve(query_for(io), ctx())
    assert res.step is Step.TIME_WINDOW  # the empty linked answer, in either shape, led to the fallback


async def test_without_a_time_range_the_search_covers_the_last_day_on_the_injected_clock(env: Env) -> None:
    now = 1_795_945_400.0
    env.resolver.clock = lambda: now
    res = await env.resolver.resolve(SpanQuery(("00000000deadbeef",), DEFAULT_PROFILE_TYPE, "{}", 0, 0), ctx())
    assert res.step is Step.NONE
    [search] = env.tempo.search_calls
    assert (int(search.query["start"]), int(search.query["end"])) == (int(now) - 24 * 3600, int(now) + 60)
    # 1_795_945_400 s is 2026-11-29 09:43:20 UTC
    assert "not found in Tempo between 2026-11-28 09:43:20 and 2026-11-29 09:44:20 UTC" in res.reason


async def test_clicks_arriving_while_a_fetched_trace_is_handed_over_share_it() -> None:
    """One trace-by-ID per trace, also for a click that comes in the turns between the shared fetch finishing and its
    waiters resuming: the fetch itself puts the trace in the span cache before anyone can miss it there. A click
    starts on every turn of the event loop, each for another span of the same trace."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    spans = [Span(trace_id, f"{i + 1:016x}", "", f"span {i}", 2, "svc", 1_000, 2_000) for i in range(200)]
    fetched: list[str] = []

    class Tempo:
        name = "tempo"

        async def trace_by_id(
            self, tid: str, c: CallContext, start_s: int | None = None, end_s: int | None = None
        ) -> Trace:
            fetched.append(tid)
            for _ in range(5):
                await asyncio.sleep(0)
            return Trace.from_spans(spans, tid)

    settings = Settings.for_tests(mode="proxy")
    resolver = Resolver(Tempo(), None, SpanCache(10_000, 64 * 1024**2, 60), settings, Metrics(), clock=capture_now)  # type: ignore[arg-type]
    lookups = []
    for span in spans:
        lookups.append(asyncio.ensure_future(resolver.lookup_span(span.span_id, ctx(), trace_id=trace_id)))
        await asyncio.sleep(0)
    found = await asyncio.gather(*lookups)
    assert all(f is not None and f[0].span_id == s.span_id for f, s in zip(found, spans, strict=True))
    assert fetched == [trace_id]
