"""The bridge's pages: the span page (header, badge, server-rendered SVG flame graph, span tree, scope toggle, Grafana
links), the index of slow requests, escaping of every user-controlled string, and the size budget."""

from __future__ import annotations

import html
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from bridge import flamegraph, views
from bridge.answer import Answer
from bridge.resolution import Resolution, Step
from bridge.spans import Trace
from tests.core.test_flamegraph_render import random_tree
from tests.span_stack import CPU, Stack, linked_total, start_stack

EVIL = '<script>alert("owned")</script>'
EVIL_TRACE = "feedfacefeedfacefeedfacefeedface"


def frames_of(page: str) -> list[str]:
    """The frame names drawn in the SVG (``data-n`` of each ``<g class="f …">``), unescaped."""
    return [html.unescape(m) for m in re.findall(r'<g class="f[^"]*"[^>]*data-n="([^"]*)"', page)]


async def get_page(stack: Stack, url: str, **params: str) -> tuple[int, str]:
    resp = await stack.http.get(url, params=params)
    return resp.status, await resp.text()


# --------------------------------------------------------------------------------------------- span page


async def test_span_page_shows_header_badge_flame_graph_and_tree(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    resp = await stack.http.get(f"/spans/{root.trace_id}/{root.span_id}")
    assert resp.status == 200 and resp.content_type == "text/html"
    page = await resp.text()
    assert '<h1 id="span-name">GET /checkout</h1>' in page
    assert "shop-frontend" in page
    assert re.search(r'<span id="badge" class="badge mode-linked"[^>]*>linked</span>', page)
    drawn = frames_of(page)
    assert drawn[0] == "total" and "render_json" in drawn
    # every span of the trace is in the tree, each linking to its page; the root's linked samples are shown
    trace = stack.shop.trace(root.trace_id)
    for span in trace.spans.values():
        assert f'href="/spans/{span.trace_id}/{span.span_id}"' in page
    assert f"{linked_total(root.span_id) / 1e6:.1f} ms" in page
    assert 'class="current"' in page
    # the scope toggle and the downloads are plain links (no JavaScript needed)
    assert f'href="/spans/{root.trace_id}/{root.span_id}?scope=request"' in page
    assert f"/api/v1/spans/{root.trace_id}/{root.span_id}/profile?scope=span&amp;" in page
    assert "format=pprof" in page and "format=collapsed" in page


async def test_hover_titles_give_self_total_and_share(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    _, page = await get_page(stack, f"/spans/{root.trace_id}/{root.span_id}")
    titles = [html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", page)]
    value = r"(?:0|[\d.]+ (?:ns|µs|ms|s))"
    assert any(re.fullmatch(rf"render_json\ntotal {value} \([\d.]+%\), self {value} \([\d.]+%\)", t) for t in titles)
    assert any(t.startswith("total\ntotal ") and "(100.0%)" in t for t in titles)


async def test_frames_are_width_proportional(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    _, page = await get_page(stack, f"/spans/{root.trace_id}/{root.span_id}")
    widths = {
        html.unescape(n): float(w) for w, n in re.findall(r'data-w="([\d.]+)" data-d="\d+" data-n="([^"]*)"', page)
    }
    assert widths["total"] == views.SVG_WIDTH
    # this request spent 60 ms in render_json, 30 ms of them in json.dumps (see the capture)
    assert widths["render_json"] == views.SVG_WIDTH
    assert widths["dumps"] == pytest.approx(views.SVG_WIDTH / 2)


async def test_a_child_span_page_badges_local_root_with_its_reason(stack: Stack) -> None:
    child = stack.shop.pick("frontend-child")
    _, page = await get_page(stack, f"/spans/{child.trace_id}/{child.span_id}")
    assert re.search(r'class="badge mode-local-root"[^>]*>local-root</span>', page)
    assert "recorded under its local root span" in html.unescape(page)


async def test_request_scope_page_shows_the_backend_and_its_share(stack: Stack) -> None:
    client = next(
        r
        for r in stack.shop.of_role("frontend-client")
        if any(linked_total(s.span_id) for s in stack.shop.trace(r.trace_id).descendant_local_roots(r.span_id))
    )
    _, page = await get_page(stack, f"/spans/{client.trace_id}/{client.span_id}", scope="request")
    assert "count_primes" in frames_of(page)
    assert {"shop-frontend", "shop-backend"} <= set(frames_of(page))
    # the service bars are told apart from functions by colour
    assert re.search(r'data-d="1" data-n="shop-backend"><title>[^<]*</title><rect [^>]*fill="rgb\(160,190,230\)"', page)
    services = re.search(r'<table id="services">(.*?)</table>', page, re.S)
    assert services is not None and "shop-backend" in services.group(1) and "%" in services.group(1)
    assert '<a href="/spans/' in page and 'class="on">request</a>' in page


async def test_server_side_search_highlights_matching_frames(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    _, page = await get_page(stack, f"/spans/{root.trace_id}/{root.span_id}", q="render_json")
    matched = [html.unescape(n) for n in re.findall(r'<g class="f match"[^>]*data-n="([^"]*)"', page)]
    assert matched and all("render_json" in n for n in matched)
    assert re.search(r'<span id="matches"[^>]*>\d+ frames match</span>', page)


async def test_grafana_explore_links_when_a_grafana_url_is_set(aiohttp_server: Any, aiohttp_client: Any) -> None:
    stack = await start_stack(
        aiohttp_server,
        aiohttp_client,
        grafana_url="https://grafana.example:3000",
        grafana_profiles_uid="pyro-uid",
        grafana_tempo_uid="tempo-uid",
    )
    root = stack.shop.pick("frontend-root")
    _, page = await get_page(stack, f"/spans/{root.trace_id}/{root.span_id}")
    links = [html.unescape(h) for h in re.findall(r'<a href="([^"]*)" class="grafana">', page)]
    assert len(links) == 2
    panes = [json.loads(parse_qs(urlsplit(link).query)["panes"][0]) for link in links]
    assert all(urlsplit(link).path == "/explore" and link.startswith("https://grafana.example:3000/") for link in links)
    profile_query = panes[0]["pb"]["queries"][0]
    assert profile_query["datasource"] == {"type": "grafana-pyroscope-datasource", "uid": "pyro-uid"}
    # the span carries its trace: the click resolves on any bridge process (bridge.ids)
    assert profile_query["spanSelector"] == [f"{root.span_id}:{root.trace_id}"]
    assert profile_query["profileTypeId"] == CPU
    assert profile_query["labelSelector"] == '{service_name="shop-frontend"}'
    assert panes[1]["pb"]["queries"][0]["datasource"]["uid"] == "tempo-uid"
    assert panes[1]["pb"]["queries"][0]["query"] == root.trace_id


async def test_no_grafana_links_without_a_grafana_url(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root")
    _, page = await get_page(stack, f"/spans/{root.trace_id}/{root.span_id}")
    assert 'class="grafana"' not in page


@pytest.mark.parametrize(
    ("url", "status", "words"),
    [
        ("/spans/nothex/1c60f2b8cd2d96d1", 400, "trace id"),
        ("/spans/e19e0353f421bfce945f7d1514c6c9f1/123", 400, "span id"),
        ("/spans/e19e0353f421bfce945f7d1514c6c9f1/0123456789abcdef", 404, "was not found"),
        ("/spans/e19e0353f421bfce945f7d1514c6c9f1/1c60f2b8cd2d96d1?scope=everything", 400, "scope"),
        ("/?since=yesterday", 400, "since"),
    ],
)
async def test_page_errors_are_html_pages_with_the_right_status(
    stack: Stack, url: str, status: int, words: str
) -> None:
    resp = await stack.http.get(url)
    text = await resp.text()
    assert resp.status == status and resp.content_type == "text/html"
    assert words in html.unescape(text) and "Traceback" not in text


# --------------------------------------------------------------------------------------------- escaping


def add_evil_trace(stack: Stack) -> tuple[str, str]:
    """A copy of a shop trace whose span names and service carry markup."""
    base = stack.shop.pick("frontend-root")
    rs_list = stack.shop.resource_spans(base.trace_id)
    root_id = ""
    for rs in rs_list:
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                kv.value.string_value = "<b>svc</b>"
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.trace_id = bytes.fromhex(EVIL_TRACE)
                span.name = EVIL
                if not span.parent_span_id:
                    root_id = span.span_id.hex()
    stack.tempo.add_trace(EVIL_TRACE, rs_list)
    return EVIL_TRACE, root_id


async def test_user_controlled_strings_are_escaped(stack: Stack) -> None:
    trace_id, span_id = add_evil_trace(stack)
    _, page = await get_page(stack, f"/spans/{trace_id}/{span_id}", q='"><img src=x onerror=alert(1)>')
    assert EVIL not in page and "<b>svc</b>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in page
    assert "&lt;b&gt;svc&lt;/b&gt;" in page
    assert page.count("<script") == 1 and page.count("<script nonce=") == 1  # only the page's own script


def synthetic_answer(tree: flamegraph.Node, trace: Trace, span_id: str) -> Answer:
    span = trace.spans[span_id]
    res = Resolution(
        step=Step.LINKED,
        reason=f"samples linked to span {span_id}",
        flamegraph=flamegraph.encode(tree),
        span=span,
        local_root=span,
        label_selector="{}",
        span_ids=(span_id,),
    )
    return Answer("span", span, trace, CPU, res, tree, res.flamegraph)


def test_frame_names_are_escaped_in_the_svg(stack_free_trace: Trace) -> None:
    span_id = next(iter(stack_free_trace.spans))
    tree = flamegraph.build_tree([((EVIL, "<img src=x onerror=alert(1)>"), 100), (("ok",), 50)])
    ctx = views.span_context(synthetic_answer(tree, stack_free_trace, span_id), stack_settings(), {}, "")
    page = views.render_html("span.html", **ctx)
    assert EVIL not in page and "<img src=x" not in page
    assert EVIL in frames_of(page)


# --------------------------------------------------------------------------------------------- size budget


@pytest.fixture
def stack_free_trace() -> Trace:
    from tests.doubles.shop import load_shop

    shop = load_shop()
    return shop.trace(shop.pick("frontend-root").trace_id)


def stack_settings() -> Any:
    from bridge.config import Settings

    return Settings.for_tests(mode="proxy")


def test_a_10000_node_flame_graph_page_stays_within_budget(stack_free_trace: Trace) -> None:
    tree = random_tree(10_000)
    assert tree.count() >= 10_000
    span_id = next(iter(stack_free_trace.spans))
    ctx = views.span_context(synthetic_answer(tree, stack_free_trace, span_id), stack_settings(), {}, "")
    page = views.render_html("span.html", **ctx)
    drawn = frames_of(page)
    assert len(drawn) <= views.MAX_RECTS
    assert len(page.encode()) < 1_000_000, len(page.encode())
    assert "frames narrower than" in page  # says what it folded
    assert drawn.count(flamegraph.FOLDED_NAME) >= 1


# --------------------------------------------------------------------------------------------- index


async def test_index_lists_the_slowest_requests_per_service(stack: Stack) -> None:
    status, page = await get_page(stack, "/")
    assert status == 200
    assert "<h2>shop-frontend</h2>" in page and "<h2>shop-backend</h2>" in page
    assert "GET /checkout" in page and "GET /price" in page
    links = re.findall(r'<a href="(/spans/[0-9a-f]{32}/[0-9a-f]{16})">', page)
    assert links
    for link in links[:3]:
        assert (await stack.http.get(link)).status == 200
    # slowest first within a service
    section = page.split("<h2>shop-frontend</h2>")[1].split("</table>")[0]
    durations = re.findall(r'<td class="num">([\d.]+) (ms|s|µs)</td>', section)
    scale = {"s": 1e3, "ms": 1.0, "µs": 1e-3}
    ms = [float(v) * scale[u] for v, u in durations]
    assert ms == sorted(ms, reverse=True)
    # one slow endpoint (GET /slow-io sleeps 300 ms) does not hide the others
    assert 1 <= section.count(">GET /slow-io</a>") <= 3 and ">GET /checkout</a>" in section
    search = stack.tempo.search_calls[-1]
    assert int(search.query["end"]) - int(search.query["start"]) == 3600 + 1


async def test_index_says_so_when_nothing_is_recent(stack: Stack) -> None:
    status, page = await get_page(stack, "/", since="1m")
    assert status == 200
    # the clock stands a minute after the capture: a one-minute window still holds its last traces, a 15 s one not
    status, page = await get_page(stack, "/", since="15s")
    assert status == 200 and "No traces in the last 15s" in page


async def test_standalone_index_and_span_page_come_from_the_store(aiohttp_client: Any, tmp_path: Any) -> None:
    from tests.span_stack import start_standalone

    client, shop = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    resp = await client.get("/")
    page = await resp.text()
    assert resp.status == 200, page
    assert "<h2>shop-frontend</h2>" in page and "<h2>shop-backend</h2>" in page and "standalone mode" in page
    link = re.findall(r'<a href="(/spans/[0-9a-f]{32}/[0-9a-f]{16})">GET /checkout</a>', page)[0]
    resp = await client.get(link)
    page = await resp.text()
    assert resp.status == 200 and re.search(r'class="badge mode-(linked|time-window|none)"', page)
    assert frames_of(page)[0] == "total"


async def test_a_span_without_samples_says_so_and_why(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root")
    _, page = await get_page(
        stack, f"/spans/{root.trace_id}/{root.span_id}", profile_type="memory:alloc_space:bytes:space:bytes"
    )
    assert re.search(r'class="badge mode-none"[^>]*>none</span>', page)
    assert '<p id="no-data" class="error">No samples for this span: ' in page
    # the scope toggle keeps the profile type
    assert "scope=request&amp;profile_type=memory%3Aalloc_space%3Abytes%3Aspace%3Abytes" in page


def test_the_span_tree_of_a_huge_trace_is_capped_and_keeps_the_current_span() -> None:
    from bridge.answer import Linked
    from bridge.spans import Span

    spans = [
        Span("ab" * 16, f"{i + 1:016x}", f"{i:016x}" if i else "", f"op{i}", 1, "svc", i, i + 10) for i in range(3000)
    ]
    trace = Trace.from_spans(spans, "ab" * 16)
    current = spans[2500].span_id
    rows, hidden = views.tree_rows(trace, current, {spans[0].span_id: Linked(5_000_000, None)}, "nanoseconds", "span")
    assert len(rows) == views.MAX_TREE_ROWS + 1 and hidden == 3000 - len(rows)
    assert rows[-1].current and rows[-1].span.span_id == current
    assert rows[0].linked == "5.00 ms" and rows[0].local_root
    assert rows[1].linked == ""  # an in-process child: its CPU is in its local root


async def test_a_time_window_answer_shows_the_window_in_utc(stack: Stack) -> None:
    io_span = stack.shop.pick("frontend-io")
    _, page = await get_page(stack, f"/spans/{io_span.trace_id}/{io_span.span_id}")
    assert "mode-time-window" in page  # GET /slow-io burns no CPU of its own
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC"
    assert re.search(
        rf'<p class="muted" id="window">Time window queried: {stamp} … {stamp}\. The samples were taken '
        rf"between {stamp} and {stamp} \(whole capture windows\)\.</p>",
        page,
    )
    assert re.search(rf'<span id="started">{stamp}</span>', page)


async def test_a_failing_backend_is_an_html_page_naming_it(stack: Stack) -> None:
    from tests.doubles.tempo import Faults

    stack.tempo.faults = Faults(status=503, body="Tempo is restarting")
    for url in ("/", "/spans/e19e0353f421bfce945f7d1514c6c9f1/1c60f2b8cd2d96d1"):
        resp = await stack.http.get(url)
        text = await resp.text()
        assert resp.status == 503 and resp.content_type == "text/html"
        assert "tempo" in text.lower() and "Traceback" not in text


async def test_every_page_sends_its_security_headers_and_a_fresh_nonce(stack: Stack) -> None:
    """Issue 11, item 14: a Content-Security-Policy whose only script and style are the page's own (by nonce, no
    unsafe-inline), nosniff, and no framing (the Grafana app plugin opens pages in a new tab, never a frame)."""
    root = stack.shop.pick("frontend-root")
    nonces = []
    for url in ("/", f"/spans/{root.trace_id}/{root.span_id}", "/spans/zz/yy"):
        resp = await stack.http.get(url)
        assert resp.status in (200, 400), url
        csp = resp.headers["Content-Security-Policy"]
        nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]{20,})'", csp)
        assert nonce is not None, csp
        assert f"style-src 'nonce-{nonce.group(1)}'" in csp
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["X-Frame-Options"] == "DENY"
        page = await resp.text()
        assert f'<style nonce="{nonce.group(1)}">' in page
        assert ' style="' not in page  # no inline style attribute: the policy would block it
        nonces.append(nonce.group(1))
    assert len(set(nonces)) == len(nonces)  # one per answer
