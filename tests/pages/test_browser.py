"""The span page in a real browser: headless Chromium (Debian's ``chromium``) driven over the Chrome DevTools Protocol
with aiohttp's websocket client. Checks the rendered DOM — flame graph frames, the badge, search highlighting a frame,
click-to-zoom — and keeps a screenshot in ``tests/artifacts/``.

Without Chromium the test is skipped with the reason, unless ``CI`` is set: then it fails (README, "Quick start")."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import re
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.faketime import both_clocks_ahead
from tests.paths import ARTIFACTS, ROOT
from tests.span_stack import Stack, linked_total, start_doubles
from tests.tools import require_tool

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1280,1400",
)
EVIL = "<script>window.__owned = 1</script>"


def chromium_binary() -> str:
    return require_tool(
        "chromium",
        "chromium-browser",
        "google-chrome",
        package="chromium",
        purpose="render the span page in a real browser",
    )


class DevTools:
    """A minimal Chrome DevTools Protocol client: one browser websocket, flattened page sessions."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.event_arrived = asyncio.Event()
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = msg.json()
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)
                self.event_arrived.set()

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        msg_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = future
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        await self.ws.send_json(message)
        reply = await asyncio.wait_for(future, timeout=30)
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        async def find() -> dict[str, Any]:
            while True:
                for i, ev in enumerate(self.events):
                    if ev["method"] == method:
                        return self.events.pop(i)
                self.event_arrived.clear()
                await self.event_arrived.wait()

        return await asyncio.wait_for(find(), timeout=timeout)


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[DevTools]:
    binary = chromium_binary()
    with tempfile.TemporaryDirectory(prefix="pb-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "about:blank",
            env=both_clocks_ahead(),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stderr is not None
            ws_url = ""
            while not ws_url:
                line = await asyncio.wait_for(proc.stderr.readline(), timeout=60)
                if not line:
                    raise AssertionError("chromium exited before announcing its DevTools endpoint")
                m = re.search(rb"DevTools listening on (ws://\S+)", line)
                if m:
                    ws_url = m.group(1).decode()
            drain = asyncio.get_running_loop().create_task(_drain(proc.stderr))
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120, connect=10)) as session,
                session.ws_connect(ws_url, max_msg_size=64 * 1024**2) as ws,
            ):
                tools = DevTools(ws)
                try:
                    yield tools
                finally:
                    tools.reader.cancel()
            drain.cancel()
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), timeout=10)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def open_page(tools: DevTools, url: str) -> str:
    target = await tools.send("Target.createTarget", {"url": "about:blank"})
    attached = await tools.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
    session = attached["sessionId"]
    await tools.send("Page.enable", session=session)
    await tools.send("Runtime.enable", session=session)
    await tools.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 1400, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    await tools.send("Page.navigate", {"url": url}, session=session)
    await tools.wait_event("Page.loadEventFired")
    return str(session)


async def evaluate(tools: DevTools, session: str, expression: str) -> Any:
    result = await tools.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    assert "exceptionDetails" not in result, result
    return result["result"].get("value")


async def click(tools: DevTools, session: str, x: float, y: float) -> None:
    for kind in ("mousePressed", "mouseReleased"):
        await tools.send(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            session=session,
        )


@pytest.fixture
async def served(aiohttp_server: Any) -> tuple[Stack, str]:
    from bridge.app import create_app

    stack = await start_doubles(aiohttp_server)
    server = await aiohttp_server(create_app(stack.settings, wall_clock=stack.capture_clock))
    return stack, str(server.make_url("")).rstrip("/")


async def test_span_page_renders_searches_and_zooms_in_chromium(served: tuple[Stack, str]) -> None:
    stack, base = served
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    async with browser() as tools:
        session = await open_page(tools, f"{base}/spans/{root.trace_id}/{root.span_id}")

        assert await evaluate(tools, session, "document.getElementById('badge').textContent.trim()") == "linked"
        assert await evaluate(tools, session, "document.getElementById('span-name').textContent") == "GET /checkout"
        frames = await evaluate(
            tools, session, "Array.from(document.querySelectorAll('#flame g.f')).map(g => g.dataset.n)"
        )
        assert frames[0] == "total" and "render_json" in frames and len(frames) > 5
        # the frames are laid out by the browser at the widths the server gave them
        root_width = await evaluate(
            tools, session, "document.querySelector('#flame g.f rect').getBoundingClientRect().width"
        )
        assert root_width == pytest.approx(1200, abs=1)

        # search: type into the box; matching frames are highlighted (class and the fill the CSS gives them)
        await evaluate(tools, session, "document.getElementById('search').focus()")
        await tools.send("Input.insertText", {"text": "render_json"}, session=session)
        matched = await evaluate(
            tools, session, "Array.from(document.querySelectorAll('#flame g.f.match')).map(g => g.dataset.n)"
        )
        assert matched and all("render_json" in n for n in matched)
        fill = await evaluate(tools, session, "getComputedStyle(document.querySelector('#flame g.f.match rect')).fill")
        assert fill == "rgb(230, 0, 230)"
        assert re.fullmatch(
            r"\d+ frames match", await evaluate(tools, session, "document.getElementById('matches').textContent")
        )

        # the Content-Security-Policy is in force (an inline script without the page's nonce does not run) and the
        # page's own script (search above, zoom below) and styles (the tree's indentation) live with it
        injected = await evaluate(
            tools,
            session,
            """(() => {
            const s = document.createElement('script'); s.textContent = 'window.__csp = 1';
            document.body.appendChild(s); return typeof window.__csp; })()""",
        )
        assert injected == "undefined"
        assert (
            await evaluate(tools, session, "getComputedStyle(document.querySelector('#tree td.d1')).paddingLeft")
            == "16px"
        )

        screenshot = await tools.send("Page.captureScreenshot", {"format": "png"}, session=session)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "span-page.png"
        shot.write_bytes(base64.b64decode(screenshot["data"]))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000

        # click-to-zoom: a click on a narrower frame widens it to the whole graph and hides what is outside it
        box = await evaluate(
            tools,
            session,
            """(() => {
            const g = Array.from(document.querySelectorAll('#flame g.f'))
                .find(g => +g.dataset.w < 1100 && +g.dataset.w > 100);
            const r = g.querySelector('rect').getBoundingClientRect();
            window.scrollTo(0, 0);
            const r2 = g.querySelector('rect').getBoundingClientRect();
            return {name: g.dataset.n, x: r2.x + r2.width / 2, y: r2.y + r2.height / 2, w: r.width};
        })()""",
        )
        await click(tools, session, box["x"], box["y"])
        zoomed = await evaluate(
            tools,
            session,
            f"""(() => {{
            const g = Array.from(document.querySelectorAll('#flame g.f')).find(g => g.dataset.n === {box["name"]!r});
            const hidden = Array.from(document.querySelectorAll('#flame g.f')).filter(g => g.style.display === 'none');
            return {{w: +g.querySelector('rect').getAttribute('width'), hidden: hidden.length}};
        }})()""",
        )
        assert zoomed["w"] == pytest.approx(1200) and zoomed["hidden"] > 0
        shot_zoom = ARTIFACTS / "span-page-zoomed.png"
        shot_zoom.write_bytes(
            base64.b64decode((await tools.send("Page.captureScreenshot", {"format": "png"}, session=session))["data"])
        )


async def test_a_span_named_script_stays_text_in_the_browser(served: tuple[Stack, str]) -> None:
    stack, base = served
    base_role = stack.shop.pick("frontend-root")
    rs_list = stack.shop.resource_spans(base_role.trace_id)
    trace_id = "feedfacefeedfacefeedfacefeedface"
    root_id = ""
    for rs in rs_list:
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.trace_id = bytes.fromhex(trace_id)
                span.name = EVIL
                if not span.parent_span_id:
                    root_id = span.span_id.hex()
    stack.tempo.add_trace(trace_id, rs_list)
    async with browser() as tools:
        session = await open_page(tools, f"{base}/spans/{trace_id}/{root_id}")
        assert await evaluate(tools, session, "document.getElementById('span-name').textContent") == EVIL
        assert await evaluate(tools, session, "typeof window.__owned") == "undefined"
        assert await evaluate(tools, session, "document.querySelectorAll('script').length") == 1


async def test_from_the_index_to_a_request_profile_by_links_alone(served: tuple[Stack, str]) -> None:
    """Index → a GET /checkout page → the request scope, following links only (no JavaScript involved)."""
    _, base = served
    async with browser() as tools:
        session = await open_page(tools, f"{base}/")
        headings = await evaluate(tools, session, "Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
        assert {"shop-frontend", "shop-backend"} <= set(headings)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "index.png").write_bytes(
            base64.b64decode((await tools.send("Page.captureScreenshot", {"format": "png"}, session=session))["data"])
        )

        href = await evaluate(
            tools,
            session,
            """Array.from(document.querySelectorAll('table.spans a'))
            .find(a => a.textContent === 'GET /checkout').getAttribute('href')""",
        )
        await tools.send("Page.navigate", {"url": base + href}, session=session)
        await tools.wait_event("Page.loadEventFired")
        href = await evaluate(
            tools,
            session,
            """Array.from(document.querySelectorAll('.toggle a'))
            .find(a => a.textContent === 'request').getAttribute('href')""",
        )
        await tools.send("Page.navigate", {"url": base + href}, session=session)
        await tools.wait_event("Page.loadEventFired")
        services = await evaluate(
            tools,
            session,
            """Array.from(
            document.querySelectorAll('#services tr td:first-child')).map(td => td.textContent)""",
        )
        assert "shop-frontend" in services
        top_frames = await evaluate(
            tools,
            session,
            """Array.from(document.querySelectorAll('#flame g.f'))
            .filter(g => g.dataset.d === '1').map(g => g.dataset.n)""",
        )
        assert set(top_frames) == set(services)  # one frame per service under the root
        (ARTIFACTS / "span-page-request.png").write_bytes(
            base64.b64decode((await tools.send("Page.captureScreenshot", {"format": "png"}, session=session))["data"])
        )


def test_artifacts_directory_is_ignored_by_git() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "tests/artifacts/" in ignored
