"""The function list and the compare page in a real browser (headless Chromium, as ``test_browser``): a click on a
frame of the span page offers the requests that burn that function, the offer leads to the list with its bars, a
row leads to the comparison with usual, and a click on the diff flame graph offers the same. Screenshots go to
``tests/artifacts/``."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.pages.test_browser import browser, click, evaluate, linked_total, open_page, served  # noqa: F401
from tests.paths import ARTIFACTS
from tests.span_stack import Stack

pytestmark = pytest.mark.browser


async def click_frame(tools: Any, session: str, name: str) -> None:
    box = await evaluate(
        tools,
        session,
        f"""(() => {{
        window.scrollTo(0, 0);
        const g = Array.from(document.querySelectorAll('#flame g.f')).find(g => g.dataset.n === {name!r});
        const r = g.querySelector('rect').getBoundingClientRect();
        return {{x: r.x + Math.min(r.width / 2, 20), y: r.y + r.height / 2}};
    }})()""",
    )
    await click(tools, session, box["x"], box["y"])


async def offer(tools: Any, session: str) -> tuple[bool, str]:
    hidden = await evaluate(tools, session, "document.getElementById('frame-offer').hidden")
    href = await evaluate(tools, session, "document.getElementById('offer-burners').getAttribute('href')")
    return bool(hidden), str(href)


async def shot(tools: Any, session: str, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    data = (await tools.send("Page.captureScreenshot", {"format": "png"}, session=session))["data"]
    (ARTIFACTS / name).write_bytes(base64.b64decode(data))


async def test_from_a_frame_to_the_requests_that_burn_it_and_on_to_compare(served: tuple[Stack, str]) -> None:  # noqa: F811
    stack, base = served
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    async with browser() as tools:
        session = await open_page(tools, f"{base}/spans/{root.trace_id}/{root.span_id}")
        assert (await offer(tools, session))[0] is True  # nothing offered before a click
        await click_frame(tools, session, "render_json")
        hidden, href = await offer(tools, session)
        assert not hidden
        query = parse_qs(urlsplit(href).query)
        assert urlsplit(href).path == "/functions/spans"
        assert query["service"] == ["shop-frontend"] and query["function"] == ["render_json"]
        span = stack.shop.span(root.span_id)
        assert int(query["from"][0]) < span.start_ns // 1_000_000 < int(query["to"][0])
        # the root frame takes the offer back
        await click_frame(tools, session, "total")
        assert (await offer(tools, session))[0] is True

        await tools.send("Page.navigate", {"url": base + href}, session=session)
        await tools.wait_event("Page.loadEventFired")
        rows = await evaluate(tools, session, "document.querySelectorAll('tr.burner').length")
        assert rows > 0
        bars = await evaluate(
            tools,
            session,
            """Array.from(document.querySelectorAll('#burners svg.bar rect'))
            .map(r => [r.getBoundingClientRect().width, parseFloat(r.dataset.share)])""",
        )
        assert bars[0][1] == 100 and bars[0][0] > 200  # the widest row fills its column
        for drawn, percent in bars:  # the browser draws each bar at its share of the widest
            assert drawn == pytest.approx(bars[0][0] * percent / 100, abs=1.5)
        await shot(tools, session, "functions-page.png")

        compare = await evaluate(tools, session, "document.querySelector('tr.burner a.muted').getAttribute('href')")
        await tools.send("Page.navigate", {"url": base + compare}, session=session)
        await tools.wait_event("Page.loadEventFired")
        # the verdict: the unusual functions, or that nothing differs beyond sampling noise, and the test used
        verdict = "(document.getElementById('unusual') || document.getElementById('no-unusual')).textContent"
        assert await evaluate(tools, session, verdict)
        assert "Poisson" in await evaluate(tools, session, "document.getElementById('test').textContent")
        legend = await evaluate(tools, session, "document.getElementById('legend').textContent")
        assert "more than usual" in legend and "less than usual" in legend
        await shot(tools, session, "compare-page.png")
        await click_frame(tools, session, "render_json")
        hidden, href = await offer(tools, session)
        assert not hidden and parse_qs(urlsplit(href).query)["function"] == ["render_json"]


async def test_in_request_scope_a_frame_is_offered_in_its_own_service(served: tuple[Stack, str]) -> None:  # noqa: F811
    stack, base = served
    client = next(
        r
        for r in stack.shop.of_role("frontend-client")
        if any(linked_total(s.span_id) for s in stack.shop.trace(r.trace_id).descendant_local_roots(r.span_id))
    )
    async with browser() as tools:
        session = await open_page(tools, f"{base}/spans/{client.trace_id}/{client.span_id}?scope=request")
        await click_frame(tools, session, "count_primes")
        hidden, href = await offer(tools, session)
        assert not hidden and parse_qs(urlsplit(href).query)["service"] == ["shop-backend"]
        await click_frame(tools, session, "shop-backend")  # a service bar is not a function
        assert (await offer(tools, session))[0] is True
