"""From a hot function to the spans that burn it: ``GET /api/v1/functions/spans`` and ``/functions/spans`` in both
modes on the shop capture (``count_primes`` in shop-backend, ``render_json`` in shop-frontend).

Every expected value is computed here from the capture's raw pprof samples (``load_push_profiles``, the Pyroscope
double's own pprof reader): per ``span_id`` label, the samples whose stack holds the function (total), whose leaf is
the function (self), and all of them (the span's linked value). In proxy mode the spans come from Pyroscope's span
heatmap, which names one span per value band and time slot: the expected list there is the ground truth restricted
to the spans the Pyroscope double's own SelectHeatmap answer names (``findable``), values still exact."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from bridge._proto import querier_pb2, types_pb2
from tests.doubles.pyroscope import load_push_profiles
from tests.doubles.shop import load_shop
from tests.span_stack import CPU, Bridge, Stack, start_bridge, start_stack

API = "/api/v1/functions/spans"


@dataclass(frozen=True)
class Expected:
    span_id: str
    trace_id: str
    total: int
    self: int
    span_total: int


def expected(service: str, matches: Callable[[str], bool]) -> tuple[list[Expected], int]:
    """Ground truth from the raw samples: the spans through the function, ordered as the API promises (most total,
    then most self, then span id), and the value through it in all of the service's samples."""
    per: dict[str, list[Any]] = {}
    grand = 0
    for profile in load_push_profiles():
        if profile.type_id != CPU or profile.labels.get("service_name") != service:
            continue
        for frames, value, labels in profile.samples:
            through = any(matches(f) for f in frames)
            grand += value if through else 0
            span = labels.get("span_id")
            if not span or not value:
                continue
            row = per.setdefault(span, [0, 0, 0, labels.get("trace_id", "")])
            row[2] += value
            if through:
                row[0] += value
            if frames and matches(frames[-1]):
                row[1] += value
    rows = [Expected(s, t, total, self_, all_) for s, (total, self_, all_, t) in per.items() if total > 0]
    return sorted(rows, key=lambda r: (-r.total, -r.self, r.span_id)), grand


def is_(name: str) -> Callable[[str], bool]:
    return lambda frame: frame == name


def findable(bridge: Bridge, want: list[Expected]) -> list[Expected]:
    """``want`` as the bridge can know it: all of it from the store; in proxy mode the spans the Pyroscope double's
    SelectHeatmap names when asked what the bridge asked last."""
    if bridge.stack is None:
        return want
    msg = bridge.stack.pyroscope.calls("SelectHeatmap")[-1].message
    assert isinstance(msg, querier_pb2.SelectHeatmapRequest)
    answer = bridge.stack.pyroscope.select_heatmap(msg)
    assert isinstance(answer, querier_pb2.SelectHeatmapResponse)
    named = {ex.span_id for series in answer.series for slot in series.slots for ex in slot.exemplars}
    return [w for w in want if w.span_id in named]


@pytest.fixture(params=["proxy", "standalone"])
async def bridge(
    request: pytest.FixtureRequest, aiohttp_server: Any, aiohttp_client: Any, tmp_path: Any
) -> AsyncIterator[Bridge]:
    yield await start_bridge(request.param, aiohttp_server, aiohttp_client, str(tmp_path))


async def get(client: Any, **params: str) -> tuple[int, dict[str, Any]]:
    resp = await client.get(API, params=params)
    return resp.status, await resp.json()


def check_rows(doc: dict[str, Any], want: list[Expected], service: str, name: str) -> None:
    shop = load_shop()
    got = [(s["spanId"], s["function"]["total"], s["function"]["self"], s["spanTotal"]) for s in doc["spans"]]
    assert got == [(w.span_id, w.total, w.self, w.span_total) for w in want]
    for row, w in zip(doc["spans"], want, strict=True):
        span = shop.span(w.span_id)
        assert row["traceId"] == span.trace_id == w.trace_id
        assert row["name"] == name and row["service"] == service
        assert row["localRoot"] is True
        assert row["durationNanos"] == str(span.end_ns - span.start_ns)
        assert row["startTimeUnixNano"] == str(span.start_ns)
        assert row["share"] == round(w.total / w.span_total, 4)
        assert row["links"] == {
            "span": f"/spans/{span.trace_id}/{w.span_id}",
            "compare": f"/spans/{span.trace_id}/{w.span_id}/compare",
        }


# --------------------------------------------------------------------------------------------- both modes


async def test_count_primes_lists_the_backend_requests_that_burn_it(bridge: Bridge) -> None:
    everything, grand = expected("shop-backend", is_("count_primes"))
    assert len(everything) > 12 and everything[0].total > everything[-1].total  # the capture has a ranking to check
    status, doc = await get(bridge.client, service="shop-backend", function="count_primes", limit="12")
    assert status == 200, doc
    want = findable(bridge, everything)
    assert len(want) > 12
    assert doc["mode"] == bridge.mode and doc["service"] == "shop-backend" and doc["match"] == "exact"
    assert doc["functions"] == ["count_primes"]
    assert doc["total"] == grand
    assert doc["moreSpans"] == len(want) - 12
    check_rows(doc, want[:12], "shop-backend", "GET /price")
    roles = {load_shop().role_of(s["spanId"]) for s in doc["spans"]}
    assert roles == {"backend-root"}
    assert doc["message"].startswith("12+ spans burnt count_primes in shop-backend's")


async def test_render_json_lists_the_frontend_requests(bridge: Bridge) -> None:
    want, grand = expected("shop-frontend", is_("render_json"))
    assert want, "the capture has render_json samples linked to spans"
    status, doc = await get(bridge.client, service="shop-frontend", function="render_json")
    assert status == 200, doc
    want = findable(bridge, want)
    assert doc["total"] == grand
    check_rows(doc, want[:20], "shop-frontend", "GET /checkout")
    assert any(s["share"] < 1 for s in doc["spans"])  # a checkout burns more than render_json


async def test_prefix_and_regex_take_in_every_matching_name(bridge: Bridge) -> None:
    want, grand = expected("shop-backend", lambda f: f.startswith("count_primes"))
    status, doc = await get(bridge.client, service="shop-backend", function="count_primes", match="prefix", limit="100")
    assert status == 200, doc
    assert doc["functions"] == ["count_primes", "count_primes.<locals>.<genexpr>"]
    assert doc["total"] == grand
    check_rows(doc, findable(bridge, want), "shop-backend", "GET /price")
    # the generator expression's own samples now count as self in the function
    exact, _ = expected("shop-backend", is_("count_primes"))
    assert sum(w.self for w in want) > sum(w.self for w in exact)

    want, grand = expected("shop-backend", lambda f: re.search(r"genexpr", f) is not None)
    status, doc = await get(bridge.client, service="shop-backend", function="genexpr", match="regex", limit="100")
    assert status == 200, doc
    assert doc["functions"] == ["count_primes.<locals>.<genexpr>"]
    assert doc["total"] == grand
    check_rows(doc, findable(bridge, want), "shop-backend", "GET /price")


async def test_an_unknown_function_is_an_empty_list_with_a_message(bridge: Bridge) -> None:
    status, doc = await get(bridge.client, service="shop-backend", function="count_primez")
    assert status == 200, doc
    assert doc["spans"] == [] and doc["total"] == 0 and doc["functions"] == []
    assert doc["message"].startswith("no count_primez in shop-backend's process_cpu")
    assert "match=prefix" in doc["message"]
    # a function of the other service is not this service's
    status, doc = await get(bridge.client, service="shop-frontend", function="count_primes")
    assert status == 200 and doc["spans"] == [] and doc["total"] == 0


async def test_a_range_without_the_capture_finds_nothing(bridge: Bridge) -> None:
    first = min(p.time_ms for p in load_push_profiles())
    status, doc = await get(
        bridge.client,
        service="shop-backend",
        function="count_primes",
        **{"from": str(first - 7_200_000), "to": str(first - 3_600_000)},
    )
    assert status == 200, doc
    assert doc["spans"] == [] and doc["from"] == first - 7_200_000


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"function": "count_primes"}, "service is missing"),
        ({"service": "shop-backend"}, "function is empty"),
        ({"service": "shop-backend", "function": "x", "match": "glob"}, "match 'glob' is not one of"),
        ({"service": "shop-backend", "function": "(", "match": "regex"}, "is not a regular expression"),
        ({"service": "shop-backend", "function": "x", "from": "yesterday"}, "neither Unix milliseconds nor now"),
        ({"service": "shop-backend", "function": "x", "from": "now", "to": "now-1h"}, "must be before to"),
        ({"service": "shop-backend", "function": "x", "from": "now-8d"}, "more than 7 days apart"),
        ({"service": "shop-backend", "function": "x", "limit": "0"}, "limit '0' is not a whole number in 1..100"),
        ({"service": "shop-backend", "function": "x", "profile_type": "cpu"}, "profile type"),
        ({"service": "shop-backend", "function": "x" * 201, "match": "regex"}, "more than 200"),
    ],
)
async def test_bad_parameters_are_one_clear_400(bridge: Bridge, params: dict[str, str], words: str) -> None:
    resp = await bridge.client.get(API, params=params)
    assert resp.status == 400
    doc = await resp.json()
    assert doc["error"]["code"] == "invalid_argument"
    assert words in doc["error"]["message"]


async def test_grafana_style_times(bridge: Bridge) -> None:
    want, _ = expected("shop-backend", is_("count_primes"))
    status, doc = await get(
        bridge.client, service="shop-backend", function="count_primes", limit="3", **{"from": "now-30m", "to": "now"}
    )
    assert status == 200, doc
    assert doc["to"] - doc["from"] == 1_800_000
    assert [s["spanId"] for s in doc["spans"]] == [w.span_id for w in findable(bridge, want)[:3]]


# --------------------------------------------------------------------------------------------- the page


async def test_the_page_lists_the_spans_with_bars_proportional_to_their_value(bridge: Bridge) -> None:
    want, _ = expected("shop-backend", is_("count_primes"))
    resp = await bridge.client.get(
        "/functions/spans", params={"service": "shop-backend", "function": "count_primes", "limit": "5"}
    )
    assert resp.status == 200
    want = findable(bridge, want)
    html = await resp.text()
    rows = re.findall(r'<tr class="burner">(.*?)</tr>', html, re.S)
    assert len(rows) == 5
    widths = [float(w) for w in re.findall(r'<svg class="bar" width="240"[^>]*><rect width="([0-9.]+)"', html)]
    assert widths == pytest.approx([max(1.0, 240 * round(100.0 * w.total / want[0].total, 2) / 100) for w in want[:5]])
    assert ' style="' not in html.split("<main>", 1)[1]  # no inline style: a strict CSP allows none
    for row, w in zip(rows, want[:5], strict=True):
        span = load_shop().span(w.span_id)
        assert f'href="/spans/{span.trace_id}/{w.span_id}"' in row
        assert f'href="/spans/{span.trace_id}/{w.span_id}/compare"' in row
        assert "GET /price" in row
    assert "requests that burn" in html.lower() and "count_primes" in html


async def test_the_page_without_a_function_offers_the_services_top_functions(bridge: Bridge) -> None:
    resp = await bridge.client.get("/functions/spans", params={"service": "shop-backend"})
    assert resp.status == 200
    html = await resp.text()
    assert 'id="top-functions"' in html
    assert re.search(
        r'<a href="/functions/spans\?service=shop-backend&amp;function=count_primes&amp;from=\d+&amp;'
        r'to=\d+[^"]*">count_primes</a>',
        html,
    )
    resp = await bridge.client.get("/functions/spans")
    assert resp.status == 200 and "Give a service and a function" in await resp.text()


async def test_the_page_escapes_what_the_user_typed(bridge: Bridge) -> None:
    resp = await bridge.client.get("/functions/spans", params={"service": "<b>svc</b>", "function": "<script>x"})
    html = await resp.text()
    assert resp.status == 200
    assert "<script>x" not in html and "&lt;script&gt;x" in html and "<b>svc</b>" not in html


async def test_the_page_shows_a_bad_parameter_as_an_error_page(bridge: Bridge) -> None:
    resp = await bridge.client.get(
        "/functions/spans", params={"service": "shop-backend", "function": "(", "match": "regex"}
    )
    assert resp.status == 400
    assert "not a regular expression" in await resp.text()


# --------------------------------------------------------------------------------------------- proxy mode only


async def proxy_stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    return await start_stack(aiohttp_server, aiohttp_client)


async def test_proxy_asks_pyroscopes_span_heatmap_then_measures_each_span(
    aiohttp_server: Any, aiohttp_client: Any
) -> None:
    stack = await proxy_stack(aiohttp_server, aiohttp_client)
    status, doc = await get(stack.http, service="shop-backend", function="count_primes", limit="3")
    assert status == 200, doc
    [heatmap] = stack.pyroscope.calls("SelectHeatmap")
    msg = heatmap.message
    assert isinstance(msg, querier_pb2.SelectHeatmapRequest)
    assert msg.query_type == querier_pb2.HEATMAP_QUERY_TYPE_SPAN and msg.exemplar_type == types_pb2.EXEMPLAR_TYPE_SPAN
    assert list(msg.group_by) == ["span_name"] and msg.label_selector == '{service_name="shop-backend"}'
    assert msg.step >= 1.0 and msg.start < msg.end
    assert not stack.pyroscope.calls("SelectSeries")  # no Pyroscope serves span exemplars there
    measured = [list(m.message.span_selector) for m in stack.pyroscope.calls("SelectMergeSpanProfile")]  # type: ignore[union-attr]
    assert all(len(ids) == 1 and re.fullmatch(r"[0-9a-f]{16}", ids[0]) for ids in measured)
    assert {ids[0] for ids in measured} >= {s["spanId"] for s in doc["spans"]}
    # the exemplars carry each span's trace id (Pyroscope v2.2): the spans are fetched by trace, never searched for
    assert not stack.tempo.search_calls
    assert doc["linked"] is None and doc["source"] == "Pyroscope's span heatmap exemplars"


async def test_proxy_lists_exact_values_in_order_and_says_what_it_may_miss(
    aiohttp_server: Any, aiohttp_client: Any
) -> None:
    stack = await proxy_stack(aiohttp_server, aiohttp_client)
    want, _ = expected("shop-frontend", is_("render_json"))
    by_id = {w.span_id: w for w in want}
    status, doc = await get(stack.http, service="shop-frontend", function="render_json", limit="50")
    assert status == 200, doc
    assert 0 < len(doc["spans"]) < len(want)  # only the spans the heatmap named
    got = [(s["spanId"], s["function"]["total"], s["function"]["self"], s["spanTotal"]) for s in doc["spans"]]
    assert got == sorted(
        ((sid, by_id[sid].total, by_id[sid].self, by_id[sid].span_total) for sid, *_ in got),
        key=lambda r: (-r[1], -r[2], r[0]),
    )
    assert any("is not seen" in note for note in doc["notes"])


@pytest.mark.parametrize(
    ("pyroscope", "words"),
    [
        ("v1", "SelectHeatmap not implemented in old querier"),  # the old querier's own words
        ("no such procedure", "not_found"),  # a Pyroscope older than v2.1: connect-go's 404
    ],
)
async def test_proxy_without_selectheatmap_is_unimplemented_naming_what_it_needs(
    aiohttp_server: Any, aiohttp_client: Any, pyroscope: str, words: str
) -> None:
    from bridge.errors import Code
    from tests.doubles.pyroscope import Faults

    stack = await proxy_stack(aiohttp_server, aiohttp_client)
    if pyroscope == "v1":
        stack.pyroscope.read_path = "v1"
    else:
        stack.pyroscope.faults = Faults(
            code=Code.NOT_FOUND, message="404 page not found", paths="/querier.v1.QuerierService/SelectHeatmap"
        )
    resp = await stack.http.get(API, params={"service": "shop-backend", "function": "count_primes"})
    assert resp.status == 501
    doc = await resp.json()
    assert doc["error"]["code"] == "unimplemented"
    message = doc["error"]["message"]
    assert "SelectHeatmap with span exemplars" in message and "v2 read path" in message and words in message
    assert not stack.pyroscope.calls("SelectMergeSpanProfile")  # no list was guessed


async def test_proxy_pyroscope_failure_is_the_upstreams_error(aiohttp_server: Any, aiohttp_client: Any) -> None:
    from bridge.errors import Code
    from tests.doubles.pyroscope import Faults

    stack = await proxy_stack(aiohttp_server, aiohttp_client)
    stack.pyroscope.faults = Faults(code=Code.UNAVAILABLE, message="ingesters are down")
    resp = await stack.http.get(API, params={"service": "shop-backend", "function": "count_primes"})
    assert resp.status == 503
    assert "ingesters are down" in (await resp.json())["error"]["message"]
