"""A span against its usual self: ``GET /api/v1/spans/{trace}/{span}/compare``, the compare page and ``resolve
--compare``, in both modes on the shop capture.

Expected values come from the capture itself: the requests of an endpoint from ``spans.jsonl`` (every
``backend-root`` span is a ``GET /price`` request of shop-backend, every ``frontend-root`` one a ``GET /checkout``
of shop-frontend) and the samples linked to them from the raw pprof (``load_push_profiles``). The diff flame graph
is read back by a decoder written here from Pyroscope's 7-values-per-node layout."""

from __future__ import annotations

import io
import math
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from html import unescape
from typing import Any

import pytest

from bridge.config import Settings
from tests.doubles.pyroscope import load_push_profiles
from tests.doubles.shop import capture_now, load_shop
from tests.span_stack import CPU, Bridge, start_bridge, start_stack

Stacks = dict[tuple[str, ...], int]


# --------------------------------------------------------------------------------------------- ground truth


def linked_stacks(span_ids: Iterable[str]) -> Stacks:
    """Stack (root first) → value, over the CPU samples linked to any of ``span_ids``."""
    wanted = set(span_ids)
    out: Stacks = {}
    for profile in load_push_profiles():
        if profile.type_id != CPU:
            continue
        for frames, value, labels in profile.samples:
            if value and labels.get("span_id") in wanted:
                out[frames] = out.get(frames, 0) + value
    return out


def per_path(stacks: Stacks, requests: int = 1) -> dict[tuple[str, ...], tuple[int, int]]:
    """Path → (total, self) of the call tree, each self divided by ``requests`` rounded half up and each total the
    sum of those below it (the documented per-request rule), paths at zero dropped."""
    selfs: dict[tuple[str, ...], int] = {}
    for frames, value in stacks.items():
        selfs[frames] = selfs.get(frames, 0) + value
    scaled = {p: (v * 2 + requests) // (2 * requests) for p, v in selfs.items()}
    totals: dict[tuple[str, ...], int] = {}
    for path, value in scaled.items():
        for i in range(1, len(path) + 1):
            totals[path[:i]] = totals.get(path[:i], 0) + value
    return {p: (t, scaled.get(p, 0)) for p, t in totals.items() if t > 0}


def conditional_p(here: int, usual: int, requests: int) -> float:
    """The test's own reading of the exact conditional Poisson test: P(X ≤ here) and P(X ≥ here) for X ~
    Binomial(here + usual, 1 / (1 + requests)), summed term by term; two-sided, twice the smaller."""
    n, p = here + usual, 1 / (1 + requests)
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    return min(1.0, 2 * min(sum(pmf[: here + 1]), sum(pmf[here:])))


def functions(stacks: Stacks) -> dict[str, tuple[int, int]]:
    """Function → (self, total): self where it is the leaf, total once per stack that holds it."""
    out: dict[str, list[int]] = {}
    for frames, value in stacks.items():
        for name in set(frames):
            out.setdefault(name, [0, 0])[1] += value
        out.setdefault(frames[-1], [0, 0])[0] += value
    return {k: (v[0], v[1]) for k, v in out.items()}


@dataclass(frozen=True)
class Endpoint:
    name: str
    service: str
    role: str


PRICE = Endpoint("GET /price", "shop-backend", "backend-root")
CHECKOUT = Endpoint("GET /checkout", "shop-frontend", "frontend-root")


def baseline_of(endpoint: Endpoint, own: str) -> list[str]:
    return [r.span_id for r in load_shop().of_role(endpoint.role) if r.span_id != own]


def decode_diff(doc: dict[str, Any]) -> dict[tuple[str, ...], tuple[int, int, int, int]]:
    """Path → (left total, left self, right total, right self), read from the protojson FlameGraphDiff: 7 values per
    node, each side's x delta-encoded in its row; a child sits inside its parent on both sides."""
    names = doc["names"]
    rows: list[list[tuple[int, int, int, int, tuple[str, ...], tuple[int, ...]]]] = []
    for depth, level in enumerate(doc["levels"]):
        values = [int(v) for v in level.get("values", [])]
        assert len(values) % 7 == 0
        row = []
        end_l = end_r = 0
        for i in range(0, len(values), 7):
            xl, tl, sl, xr, tr, sr, n = values[i : i + 7]
            xl, xr = end_l + xl, end_r + xr
            end_l, end_r = xl + tl, xr + tr
            if depth == 0:
                path: tuple[str, ...] = ()
            else:
                parent = next(
                    p
                    for p in rows[-1]
                    if p[0] <= xl and xl + tl <= p[0] + p[5][0] and p[2] <= xr and xr + tr <= p[2] + p[5][2]
                )
                path = (*parent[4], names[n])
            row.append((xl, end_l, xr, end_r, path, (tl, sl, tr, sr)))
        rows.append(row)
    return {node[4]: node[5] for row in rows for node in row}  # type: ignore[misc]


# --------------------------------------------------------------------------------------------- the two modes


@pytest.fixture(params=["proxy", "standalone"])
async def bridge(
    request: pytest.FixtureRequest, aiohttp_server: Any, aiohttp_client: Any, tmp_path: Any
) -> AsyncIterator[Bridge]:
    yield await start_bridge(request.param, aiohttp_server, aiohttp_client, str(tmp_path))


def a_busy_price_request() -> str:
    """A GET /price request with linked samples well above the usual."""
    roles = load_shop().of_role("backend-root")
    totals = {r.span_id: sum(linked_stacks([r.span_id]).values()) for r in roles}
    return max(totals, key=lambda sid: (totals[sid], sid))


async def compare(client: Any, span_id: str, **params: str) -> tuple[int, dict[str, Any]]:
    span = load_shop().span(span_id)
    resp = await client.get(f"/api/v1/spans/{span.trace_id}/{span_id}/compare", params=params)
    return resp.status, await resp.json()


async def test_a_busy_request_against_the_endpoints_usual_one(bridge: Bridge) -> None:
    own = a_busy_price_request()
    others = baseline_of(PRICE, own)
    status, doc = await compare(bridge.client, own)
    assert status == 200, doc
    mine, theirs = linked_stacks([own]), linked_stacks(others)
    n = len(others)
    assert doc["here"]["mode"] == "linked" and doc["here"]["isRequestCost"] is True
    assert doc["here"]["total"] == sum(mine.values())
    assert doc["baseline"]["name"] == "GET /price" and doc["baseline"]["service"] == "shop-backend"
    assert doc["baseline"]["requests"] == n and sorted(doc["baseline"]["spanIds"]) == sorted(others)
    assert doc["baseline"]["total"] == sum(theirs.values())
    assert doc["baseline"]["perRequest"] == round(sum(theirs.values()) / n, 3)
    assert doc["headline"] == f"this GET /price request against {n} other requests of shop-backend (per request)"
    assert doc["notes"] == []

    # per function, each side and the difference, sorted by how unusual (self difference, then total)
    here, usual = functions(mine), functions(theirs)
    want = []
    for name in here.keys() | usual.keys():
        hs, ht = here.get(name, (0, 0))
        us, ut = (v / n for v in usual.get(name, (0, 0)))
        want.append((name, hs, ht, us, ut))
    want.sort(key=lambda w: (-abs(w[1] - w[3]), -abs(w[2] - w[4]), w[0]))
    got = [
        (f["name"], f["here"]["self"], f["here"]["total"], f["usual"]["self"], f["usual"]["total"])
        for f in doc["functions"]
    ]
    assert got == [(w[0], w[1], w[2], round(w[3], 3), round(w[4], 3)) for w in want]
    for f in doc["functions"]:
        assert f["diff"]["self"] == round(f["here"]["self"] - dict((w[0], w[3]) for w in want)[f["name"]], 3)

    # unusual: only self sample counts (10 ms each, pyroscope-io at 100 Hz) that differ beyond sampling noise, p < 0.01
    period = 10_000_000
    tested = {
        w[0]: (w[1] // period, round(w[3] * n) // period, conditional_p(w[1] // period, round(w[3] * n) // period, n))
        for w in want
    }
    for f in doc["functions"]:
        here_n, usual_n, p = tested[f["name"]]
        assert (f["samples"]["here"], f["samples"]["usual"]) == (here_n, usual_n)
        assert f["pValue"] == pytest.approx(p, rel=1e-6, abs=1e-12)
    top = [w for w in want if tested[w[0]][2] < 0.01][:5]
    assert 0 < len(top) < len([w for w in want if w[1] != w[3]])  # some differences are noise, not all
    assert [u["name"] for u in doc["unusual"]] == [w[0] for w in top]
    assert doc["unusual"][0]["name"].startswith("count_primes") and doc["unusual"][0]["diff"]["self"] > 0
    assert doc["test"] == {"name": doc["test"]["name"], "alpha": 0.01, "period": period}
    assert "conditional test of two Poisson rates" in doc["test"]["name"]
    for item in doc["unusual"]:
        assert re.fullmatch(
            re.escape(item["name"]) + r": ([0-9.]+ [mµ]?s|none) here \(\d+ samples?\) vs ([0-9.]+ [mµ]?s|none) per "
            rf"request usually \(\d+ samples? in {n} requests; p (< 0\.0001|= 0\.00\d\d)\)",
            item["text"],
        ), item["text"]

    # the diff flame graph: usual per request on the left, this request on the right
    fg = doc["flamegraphDiff"]
    assert fg["names"][0] == "total"
    left, right = per_path(theirs, n), per_path(mine)
    nodes = decode_diff(fg)
    assert nodes.pop(()) == (sum(v[1] for v in left.values()), 0, sum(mine.values()), 0)
    expected = {
        p: (left.get(p, (0, 0))[0], left.get(p, (0, 0))[1], right.get(p, (0, 0))[0], right.get(p, (0, 0))[1])
        for p in left.keys() | right.keys()
        if p
    }
    assert nodes == expected
    assert int(fg["leftTicks"]) == sum(v[1] for v in left.values())
    assert int(fg["rightTicks"]) == sum(mine.values())
    assert int(fg["total"]) == int(fg["leftTicks"]) + int(fg["rightTicks"])
    assert int(fg["maxSelf"]) == max(max(v[1] for v in left.values()), max(v[1] for v in right.values()))


async def test_a_child_span_is_compared_as_its_request(bridge: Bridge) -> None:
    shop = load_shop()
    child = next(
        r
        for r in shop.of_role("frontend-child")
        if sum(linked_stacks([shop.in_trace(r.trace_id, "frontend-root").span_id]).values())
    )
    root = shop.in_trace(child.trace_id, "frontend-root")
    status, doc = await compare(bridge.client, child.span_id)
    assert status == 200, doc
    others = baseline_of(CHECKOUT, root.span_id)
    assert doc["here"]["mode"] == "local-root" and doc["here"]["isRequestCost"] is True
    assert doc["here"]["endpoint"]["spanId"] == root.span_id
    assert doc["baseline"]["name"] == "GET /checkout" and doc["baseline"]["requests"] == len(others)
    assert root.span_id not in doc["baseline"]["spanIds"]
    assert doc["baseline"]["total"] == sum(linked_stacks(others).values())
    assert doc["here"]["total"] == sum(linked_stacks([root.span_id]).values())
    assert any("part of the request GET /checkout" in note for note in doc["notes"])


async def test_a_span_without_its_own_samples_is_compared_anyway_and_says_so(bridge: Bridge) -> None:
    io_span = load_shop().pick("frontend-io")
    status, doc = await compare(bridge.client, io_span.span_id)
    assert status == 200, doc
    assert doc["here"]["mode"] in ("time-window", "none") and doc["here"]["isRequestCost"] is False
    assert doc["notes"][0].startswith(f"this span's own answer is {doc['here']['mode']}, not this request's cost")
    assert doc["notes"][0].endswith("compared anyway")
    assert doc["baseline"]["name"] == "GET /slow-io"


async def test_collapsed_is_differential_folded_stacks(bridge: Bridge) -> None:
    own = a_busy_price_request()
    span = load_shop().span(own)
    resp = await bridge.client.get(f"/api/v1/spans/{span.trace_id}/{own}/compare", params={"format": "collapsed"})
    assert resp.status == 200 and resp.content_type == "text/plain"
    others = baseline_of(PRICE, own)
    left, right = per_path(linked_stacks(others), len(others)), per_path(linked_stacks([own]))
    want = sorted(
        f"{';'.join(p)} {left.get(p, (0, 0))[1]} {right.get(p, (0, 0))[1]}"
        for p in left.keys() | right.keys()
        if p and (left.get(p, (0, 0))[1] or right.get(p, (0, 0))[1])
    )
    assert (await resp.text()).splitlines() == want


@pytest.mark.parametrize(
    ("params", "status", "words"),
    [
        ({"baseline": "service"}, 400, "baseline 'service' is not one of: endpoint"),
        ({"window": "30s"}, 400, "not between 1m and 24h"),
        ({"window": "soon"}, 400, "window 'soon'"),
        ({"format": "pprof"}, 400, "format 'pprof' is not one of: json, collapsed"),
        ({"profile_type": "cpu"}, 400, "profile type"),
    ],
)
async def test_bad_parameters(bridge: Bridge, params: dict[str, str], status: int, words: str) -> None:
    code, doc = await compare(bridge.client, a_busy_price_request(), **params)
    assert code == status and words in doc["error"]["message"]


async def test_an_unknown_span_is_404(bridge: Bridge) -> None:
    resp = await bridge.client.get("/api/v1/spans/e19e0353f421bfce945f7d1514c6c9f1/0123456789abcdef/compare")
    assert resp.status == 404
    assert "was not found" in (await resp.json())["error"]["message"]


def test_the_window_is_around_the_span_and_never_past_now() -> None:
    from bridge.compare import window_around

    span = load_shop().span(a_busy_price_request())
    start, end = span.start_ns // 1_000_000, -(-span.end_ns // 1_000_000)
    far = end + 10 * 3_600_000
    assert window_around(span, 3600, far) == (start - 1_800_000, end + 1_800_000)
    assert window_around(span, 3600, end + 60_000) == (end + 60_000 - 3_600_000, end + 60_000)
    assert window_around(span, 3600, start - 5_000) == (start - 1_800_000, end + 1_800_000)  # another clock: as is


async def test_proxy_searches_the_window(aiohttp_server: Any, aiohttp_client: Any) -> None:
    stack = await start_stack(aiohttp_server, aiohttp_client)
    own = a_busy_price_request()
    status, doc = await compare(stack.http, own, window="15m")
    assert status == 200, doc
    lo, hi = doc["baseline"]["window"]["startMs"], doc["baseline"]["window"]["endMs"]
    assert hi == int(capture_now() * 1000) and hi - lo == 900_000  # the capture ended a minute before now
    search = next(r for r in stack.tempo.calls("/api/search") if "GET /price" in r.query.get("q", ""))
    assert (int(search.query["start"]), int(search.query["end"])) == (lo // 1000, -(-hi // 1000))


# --------------------------------------------------------------------------------------------- pages


async def test_the_compare_page_shows_the_diff_and_the_top_five_in_words(bridge: Bridge) -> None:
    own = a_busy_price_request()
    span = load_shop().span(own)
    _, doc = await compare(bridge.client, own)
    resp = await bridge.client.get(f"/spans/{span.trace_id}/{own}/compare")
    assert resp.status == 200
    html = await resp.text()
    items = re.findall(r'<li class="(more|less)"><code>([^<]*)</code>: ([^<]*)</li>', html)
    assert [f"{unescape(name)}: {unescape(rest)}" for _, name, rest in items] == [u["text"] for u in doc["unusual"]]
    assert items[0][0] == "more"  # count_primes: more than usual, in red
    assert "more than usual" in html and "less than usual" in html  # the legend
    fills = re.findall(r'<rect [^>]*fill="rgb\((\d+),(\d+),(\d+)\)"', html)
    assert any(int(r) == 255 and int(g) < 200 for r, g, _ in fills)  # a red bar
    assert 'id="frame-offer"' in html and "requests that burn this function" in html
    assert f'href="/spans/{span.trace_id}/{own}"' in html


async def test_the_span_page_offers_compare_and_frame_clicks_offer_the_function_list(bridge: Bridge) -> None:
    own = a_busy_price_request()
    span = load_shop().span(own)
    html = await (await bridge.client.get(f"/spans/{span.trace_id}/{own}", params={"q": "count_prim"})).text()
    assert f'href="/spans/{span.trace_id}/{own}/compare"' in html and "Compare with usual" in html
    assert 'id="frame-offer"' in html and "window.pbOffer(" in html
    link = re.search(r'id="query-burners" href="([^"]+)"', html)
    assert link is not None
    href = link.group(1).replace("&amp;", "&")
    assert "service=shop-backend" in href and "function=count_prim" in href and "match=regex" in href
    resp = await bridge.client.get(href)
    assert resp.status == 200 and 'class="burner"' in await resp.text()


async def test_the_compare_page_shows_errors_as_a_page(bridge: Bridge) -> None:
    resp = await bridge.client.get("/spans/e19e0353f421bfce945f7d1514c6c9f1/0123456789abcdef/compare")
    assert resp.status == 404 and "Cannot show this page" in await resp.text()


# --------------------------------------------------------------------------------------------- proxy only


async def test_proxy_without_other_requests_compares_with_nothing(aiohttp_server: Any, aiohttp_client: Any) -> None:
    stack = await start_stack(aiohttp_server, aiohttp_client)
    own = a_busy_price_request()
    span = load_shop().span(own)
    stack.tempo.traces = {span.trace_id: stack.tempo.traces[span.trace_id]}
    status, doc = await compare(stack.http, own)
    assert status == 200, doc
    assert doc["baseline"]["requests"] == 0 and doc["baseline"]["total"] == 0
    assert "nothing to compare with" in doc["notes"][-1]
    assert doc["headline"] == "no other GET /price requests of shop-backend in the window to compare with"
    assert all(f["usual"]["self"] == 0 for f in doc["functions"])
    assert not stack.pyroscope.calls("SelectMergeSpanProfile")[1:]  # only the span's own answer


async def test_proxy_baseline_samples_come_from_pyroscope_by_span_ids(aiohttp_server: Any, aiohttp_client: Any) -> None:
    stack = await start_stack(aiohttp_server, aiohttp_client)
    own = a_busy_price_request()
    _, doc = await compare(stack.http, own)
    searched = [r.query.get("q", "") for r in stack.tempo.calls("/api/search")]
    assert (
        '{ resource.service.name = "shop-backend" && span:name = "GET /price" } | select(span:name, '
        "resource.service.name)" in searched
    )
    asked = {sid for call in stack.pyroscope.calls("SelectMergeSpanProfile") for sid in call.message.span_selector}  # type: ignore[union-attr]
    assert asked >= set(doc["baseline"]["spanIds"]) | {own}


# --------------------------------------------------------------------------------------------- the command


async def test_resolve_compare_prints_the_same_top_list(aiohttp_server: Any, aiohttp_client: Any) -> None:
    from bridge.commands.resolve import resolve_report

    stack = await start_stack(aiohttp_server, aiohttp_client)
    own = a_busy_price_request()
    span = load_shop().span(own)
    _, doc = await compare(stack.http, own)
    out, err = io.StringIO(), io.StringIO()
    code = await resolve_report(
        stack.settings,
        span.trace_id,
        own,
        scope="span",
        top=5,
        profile_type=CPU,
        out=out,
        err=err,
        compare_window="1h",
        clock=capture_now,
    )
    assert code == 0, err.getvalue()
    text = out.getvalue()
    section = text.split("\ncompare  ", 1)[1]
    assert section.startswith(doc["headline"])
    listed = section.split("most unusual functions", 1)[1].splitlines()[1:]
    assert [line.strip() for line in listed if line.strip()] == [u["text"] for u in doc["unusual"]]

    code = await resolve_report(
        stack.settings,
        span.trace_id,
        own,
        scope="span",
        top=5,
        profile_type=CPU,
        out=io.StringIO(),
        err=(err := io.StringIO()),
        compare_window="5s",
    )
    assert code == 2 and "not between 1m and 24h" in err.getvalue() and err.getvalue().count("\n") == 1


async def test_resolve_compare_in_standalone_mode_asks_the_running_bridge(aiohttp_server: Any, tmp_path: Any) -> None:
    import aiohttp

    from bridge.app import create_app
    from bridge.commands.resolve import resolve_report
    from tests.paths import SHOP_CAPTURE

    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path), capture_window=10.0)
    server = await aiohttp_server(create_app(settings, wall_clock=capture_now))
    async with aiohttp.ClientSession() as session:
        for path in sorted(SHOP_CAPTURE.glob("*.bin")):
            route = "/v1/traces" if path.name.endswith("_v1_traces.bin") else "/push.v1.PusherService/Push"
            ctype = "application/x-protobuf" if route == "/v1/traces" else "application/proto"
            async with session.post(
                server.make_url(route), data=path.read_bytes(), headers={"Content-Type": ctype}
            ) as resp:
                assert resp.status == 200
    own = a_busy_price_request()
    span = load_shop().span(own)
    cli_settings = Settings.for_tests(mode="standalone", listen_host="127.0.0.1", listen_port=server.port)
    out, err = io.StringIO(), io.StringIO()
    code = await resolve_report(
        cli_settings, span.trace_id, own, scope="span", top=5, profile_type=CPU, out=out, err=err, compare_window="1h"
    )
    assert code == 0, err.getvalue()
    assert "most unusual functions" in out.getvalue() and "count_primes" in out.getvalue()
    assert re.search(r"here \(\d+ samples?\) vs .* samples? in \d+ requests; p ", out.getvalue())
