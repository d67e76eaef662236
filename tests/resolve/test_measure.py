"""Honest numbers: every answer says what its total is — only ``linked`` is the span's own cost; ``local-root`` is
its whole request in that process; ``time-window`` is its service's cost during a window. The page's headline, the
API's JSON and headers, ``profile-bridge resolve`` and Grafana's root bar say so; request-scope percentages count
only what is attributed to the request."""

from __future__ import annotations

import html
import io
import re
from typing import Any

import pytest

from bridge import flamegraph
from bridge.answer import combine
from bridge.commands.resolve import resolve_report
from bridge.config import DEFAULT_PROFILE_TYPE
from bridge.resolution import Attribution, Resolution, Step, measure_of
from bridge.sampling import quantity_of
from bridge.spans import Span
from bridge.timewindow import Stamp, covered_by
from tests.doubles.pyroscope import load_push_profiles
from tests.pages.test_api import linked_total, path
from tests.span_stack import CPU, Stack, start_stack

NOON_NS = 1_795_950_000 * 1_000_000_000  # 2026-11-29 11:00:00 UTC
FRONT = Span("a" * 32, "1111111111111111", "", "GET /health", 2, "shop-frontend", NOON_NS, NOON_NS + 120_000)
ROOT = Span("a" * 32, "2222222222222222", "", "GET /checkout", 2, "shop-frontend", NOON_NS, NOON_NS + 10**9)
BACK = Span("a" * 32, "3333333333333333", "4444444444444444", "GET /price", 2, "shop-backend", NOON_NS, NOON_NS + 10**8)


def fg_of(stacks: dict[tuple[str, ...], int]) -> Any:
    root = flamegraph.Node(flamegraph.ROOT_NAME)
    for frames, value in stacks.items():
        node = root
        node.total += value
        for name in frames:
            node = node.children.setdefault(name, flamegraph.Node(name))
            node.total += value
        node.self += value
    return flamegraph.encode(root)


def res(
    mode: Step,
    span: Span | None,
    value: int,
    *,
    root: Span | None = None,
    window: tuple[int, int] | None = None,
    ids: tuple[str, ...] = (),
) -> Resolution:
    fg = fg_of({("main", "work"): value}) if value else flamegraph.empty()
    return Resolution(
        step=mode,
        reason=f"{mode.value} because",
        flamegraph=fg,
        span=span,
        local_root=root,
        window_ms=window,
        label_selector="{}",
        span_ids=ids,
    )


# --------------------------------------------------------------------------------------------- pure: the measure


@pytest.mark.parametrize(
    ("resolution", "attribution", "text"),
    [
        (res(Step.LINKED, None, 5, ids=("2222222222222222",)), Attribution.SPAN, "CPU linked to this span"),
        (
            res(Step.LINKED, None, 5, ids=("2222222222222222", "3333333333333333")),
            Attribution.SPAN,
            "CPU linked to spans 2222222222222222, 3333333333333333",
        ),
        (
            res(Step.LOCAL_ROOT, FRONT, 5, root=ROOT),
            Attribution.REQUEST,
            "shop-frontend CPU of the whole request GET /checkout (its local root), not this span's own",
        ),
        (
            res(Step.TIME_WINDOW, FRONT, 5, window=(1_795_949_983_000, 1_795_950_002_000)),
            Attribution.SERVICE,
            "shop-frontend CPU during the 19 s window around this span (10:59:43–11:00:02 UTC), not this span's own",
        ),
        (res(Step.NONE, FRONT, 0), Attribution.NOTHING, "no CPU samples"),
    ],
)
def test_what_a_total_measures_table(resolution: Resolution, attribution: Attribution, text: str) -> None:
    measure = measure_of(resolution, DEFAULT_PROFILE_TYPE)
    assert (measure.attribution, measure.text) == (attribution, text)
    assert measure.own is (attribution is Attribution.SPAN)


@pytest.mark.parametrize(
    ("profile_type", "quantity"),
    [
        (DEFAULT_PROFILE_TYPE, "CPU"),
        ("wall:cpu:nanoseconds:wall:nanoseconds", "CPU"),
        ("process_cpu:cpu:nanoseconds:wall:nanoseconds", "CPU"),  # Node's CPU as Pyroscope relabels it
        ("wall:wall:nanoseconds:wall:nanoseconds", "wall time"),
        ("memory:alloc_space:bytes:space:bytes", "allocated memory"),
        ("block:delay:nanoseconds:contentions:count", "lock wait time"),
        ("custom:frobs:count::", "frobs"),
    ],
)
def test_quantity_of_a_profile_type_table(profile_type: str, quantity: str) -> None:
    assert quantity_of(profile_type) == quantity


# --------------------------------------------------------------------------------------------- pure: request scope


def test_a_fallback_own_part_is_drawn_under_a_frame_that_says_so_and_kept_out_of_the_shares() -> None:
    own = res(Step.TIME_WINDOW, FRONT, 900, window=(0, 19_000))
    backend = res(Step.LINKED, BACK, 100, ids=(BACK.span_id,))
    tree, parts, services = combine(FRONT, own, [(BACK, backend)])
    assert tree.total == 1000  # drawn: the fallback is all there is to see of the span itself
    assert set(tree.children) == {"shop-frontend (time-window: whole service)", "shop-backend"}
    shares = {s.label: (s.value, s.attributed) for s in services}
    assert shares == {"shop-backend": (100, True), "shop-frontend (time-window: whole service)": (900, False)}
    assert "not counted in the request's shares" in parts[0].note and parts[1].included


def test_a_request_measure_adds_linked_parts_and_names_the_fallback() -> None:
    from bridge.answer import Answer
    from bridge.spans import Trace

    own = res(Step.TIME_WINDOW, FRONT, 900, window=(0, 19_000))
    backend = res(Step.LINKED, BACK, 100, ids=(BACK.span_id,))
    tree, parts, services = combine(FRONT, own, [(BACK, backend)])
    ans = Answer(
        "request",
        FRONT,
        Trace.from_spans([FRONT, BACK], FRONT.trace_id),
        CPU,
        own,
        tree,
        flamegraph.encode(tree),
        parts=parts,
        services=services,
    )
    assert (ans.attributed_total, ans.fallback_total) == (100, 900)
    measure = ans.measure
    assert measure.attribution is Attribution.SERVICE and not measure.own
    assert measure.text.startswith("CPU linked to this request across 1 service, plus shop-frontend CPU during")
    assert measure.text.endswith("(time-window fallback, not counted)")


# --------------------------------------------------------------------------------------------- through the bridge


@pytest.fixture
async def stack(aiohttp_server: Any, aiohttp_client: Any) -> Stack:
    return await start_stack(aiohttp_server, aiohttp_client, capture_window=10.0)


async def test_the_api_says_a_time_window_total_is_the_services_not_the_spans(stack: Stack) -> None:
    io_span = stack.shop.pick("frontend-io")
    resp = await stack.http.get(path(io_span.trace_id, io_span.span_id))
    doc = await resp.json()
    assert resp.status == 200 and doc["mode"] == "time-window"
    assert doc["measure"]["attribution"] == "service" and doc["measure"]["own"] is False
    assert re.fullmatch(
        r"shop-frontend sampled on-GIL time during the [\d.]+ s window around this span \(\S+–\S+ UTC\), not "
        r"this span's own",  # pyroscope-io's samples (otel.scope.name): on-GIL time, not CPU
        doc["measure"]["text"],
    )
    assert doc["attributedTotal"] == 0 and doc["fallbackTotal"] == doc["total"] > 0
    assert resp.headers["X-Profile-Bridge-Attribution"] == "service"
    assert resp.headers["X-Profile-Bridge-Measure"].isascii()
    assert "not this span's own" in resp.headers["X-Profile-Bridge-Measure"]


async def test_the_api_says_a_linked_total_is_the_spans_own(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    doc = await (await stack.http.get(path(root.trace_id, root.span_id))).json()
    assert doc["measure"] == {"attribution": "span", "own": True, "text": "sampled on-GIL time linked to this span"}
    assert doc["attributedTotal"] == doc["total"] == linked_total(root.span_id) and doc["fallbackTotal"] == 0


async def test_request_scope_shares_count_only_what_the_request_cost(stack: Stack) -> None:
    """A client span whose own answer is a fallback: its frontend part is drawn but has no share; the backend it
    called holds 100 % of what the request is known to have cost."""
    linked = {
        span_id
        for p in load_push_profiles()
        if p.type_id == CPU
        for _, _, labels in p.samples
        if (span_id := labels.get("span_id"))
    }
    for role in stack.shop.of_role("frontend-client"):
        trace = stack.shop.trace(role.trace_id)
        backend = [s for s in trace.descendant_local_roots(role.span_id) if s.span_id in linked]
        if backend and trace.local_root(role.span_id).span_id not in linked:  # type: ignore[union-attr]
            break
    else:
        pytest.fail("the capture has no unlinked frontend request whose backend call was linked")
    doc = await (await stack.http.get(path(role.trace_id, role.span_id), params={"scope": "request"})).json()
    assert doc["mode"] == "time-window"
    by_frame = {s["frame"]: s for s in doc["services"]}
    fallback = by_frame["shop-frontend (time-window: whole service)"]
    assert fallback["attributed"] is False and fallback["share"] is None
    assert by_frame["shop-backend"]["attributed"] is True and by_frame["shop-backend"]["share"] == 1.0
    assert doc["attributedTotal"] == by_frame["shop-backend"]["total"] == linked_total(backend[0].span_id)
    assert doc["fallbackTotal"] == fallback["total"] and doc["total"] == doc["attributedTotal"] + doc["fallbackTotal"]
    assert doc["measure"]["attribution"] == "service" and "not counted" in doc["measure"]["text"]


async def test_the_span_page_headlines_what_the_number_is(stack: Stack) -> None:
    io_span = stack.shop.pick("frontend-io")
    page = html.unescape(await (await stack.http.get(f"/spans/{io_span.trace_id}/{io_span.span_id}")).text())
    headline = re.search(r'<h2 id="headline">(.*?)</h2>', page, re.S)
    assert headline is not None
    assert re.match(
        r"Flame graph — shop-frontend sampled on-GIL time during the [\d.]+ s window around this span .*, not "
        r"this span's own: <span id=\"total\">",
        headline.group(1),
    )
    assert "not this span's own cost" in page

    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    page = html.unescape(await (await stack.http.get(f"/spans/{root.trace_id}/{root.span_id}")).text())
    assert '<h2 id="headline">Flame graph — sampled on-GIL time linked to this span: <span id="total">' in page
    assert "not this span's own cost" not in page


async def test_resolve_prints_what_the_number_is(stack: Stack) -> None:
    io_span = stack.shop.pick("frontend-io")
    out, err = io.StringIO(), io.StringIO()
    code = await resolve_report(
        stack.settings, io_span.trace_id, io_span.span_id, scope="span", top=5, profile_type=CPU, out=out, err=err
    )
    assert code == 0, err.getvalue()
    assert re.search(
        r"^measure  shop-frontend sampled on-GIL time during the [\d.]+ s window around this span .*not this "
        r"span's own"
        r"  \[not this span's own cost\]$",
        out.getvalue(),
        re.M,
    )


@pytest.mark.parametrize(
    ("window", "stamps", "stamp", "covered"),
    [
        # start stamps: the last window runs a capture window past its stamp
        ((1_000, 12_000), [0, 1_000, 11_000, 21_000], "start", (1_000, 21_000)),
        # end stamps: the first window began a capture window before its stamp
        ((10_000, 21_000), [0, 10_000, 20_000, 30_000], "end", (0, 20_000)),
        # either: both sides
        ((10_000, 12_000), [10_000], "either", (0, 20_000)),
        # no stamps: every stamp the window could hold
        ((5_000, 7_000), [], "start", (5_000, 17_000)),
    ],
)
def test_covered_time_is_whole_capture_windows_table(
    window: tuple[int, int], stamps: list[int], stamp: str, covered: tuple[int, int]
) -> None:
    assert covered_by(window, stamps, Stamp(stamp), 10_000) == covered


def test_the_measure_states_the_time_the_samples_cover_not_the_query_range() -> None:
    resolution = Resolution(
        step=Step.TIME_WINDOW,
        reason="why",
        flamegraph=fg_of({("a",): 1}),
        span=FRONT,
        window_ms=(1_795_949_999_000, 1_795_950_001_000),
        label_selector="{}",
        covered_ms=(1_795_949_990_000, 1_795_950_010_000),
    )
    assert measure_of(resolution, DEFAULT_PROFILE_TYPE).text == (
        "shop-frontend CPU during the 20 s window around this span (10:59:50–11:00:10 UTC), not this span's own"
    )
