"""The pure core of ``scope=request``: which parts are added up, and how the per-service breakdown is built."""

from __future__ import annotations

from bridge import flamegraph
from bridge.answer import combine, query_for, selector_for
from bridge.config import Settings
from bridge.grafana import EXPLORE_MARGIN_MS
from bridge.resolution import Resolution, Step
from bridge.spans import Span


def span(
    span_id: str,
    service: str,
    name: str = "op",
    start_ms: int = 1_000_000,
    end_ms: int = 1_000_050,
    resource: tuple[tuple[str, str], ...] = (),
) -> Span:
    return Span(
        "ab" * 16,
        span_id,
        "",
        name,
        2,
        service,
        start_ms * 1_000_000,
        end_ms * 1_000_000,
        (("service.name", service), *resource),
    )


def resolution(mode: Step, stacks: list[tuple[tuple[str, ...], int]], span_ids: tuple[str, ...] = ()) -> Resolution:
    fg = flamegraph.encode(flamegraph.build_tree(stacks)) if stacks else flamegraph.empty()
    if mode not in (Step.LINKED,):
        fg = flamegraph.relabel_root(fg, flamegraph.root_label(f"{mode.value} reason"))
    return Resolution(step=mode, reason=f"{mode.value} reason", flamegraph=fg, label_selector="{}", span_ids=span_ids)


FRONT = span("1" * 16, "frontend")
BACK = span("2" * 16, "backend")
OTHER = span("3" * 16, "billing")
SAME_ROOT = span("4" * 16, "frontend")


def test_linked_descendants_are_added_under_a_frame_per_service() -> None:
    own = resolution(Step.LOCAL_ROOT, [(("main", "render"), 60)], (FRONT.span_id,))
    back = resolution(Step.LINKED, [(("main", "count_primes"), 40)], (BACK.span_id,))
    tree, parts, services = combine(FRONT, own, [(BACK, back)])
    assert tree.name == "total" and tree.total == 100
    assert set(tree.children) == {"frontend", "backend"}
    assert tree.children["backend"].children["main"].children["count_primes"].self == 40
    assert [(s.service, s.value, s.spans) for s in services] == [("frontend", 60, 1), ("backend", 40, 1)]
    assert [(p.span.span_id, p.included) for p in parts] == [(FRONT.span_id, True), (BACK.span_id, True)]


def test_time_window_and_empty_descendants_are_listed_but_not_added() -> None:
    own = resolution(Step.LINKED, [(("main",), 10)], (FRONT.span_id,))
    window = resolution(Step.TIME_WINDOW, [(("main", "whole_service"), 500)])
    nothing = resolution(Step.NONE, [])
    tree, parts, services = combine(FRONT, own, [(BACK, window), (OTHER, nothing)])
    assert tree.total == 10 and set(tree.children) == {"frontend"}
    by_id = {p.span.span_id: p for p in parts}
    assert not by_id[BACK.span_id].included and "whole service's CPU" in by_id[BACK.span_id].note
    assert by_id[BACK.span_id].value == 500  # still reported, so the reader sees what was left out
    assert not by_id[OTHER.span_id].included and by_id[OTHER.span_id].note == "no samples"
    assert [s.service for s in services] == ["frontend"]


def test_a_descendant_answered_by_ids_already_counted_is_not_added_twice() -> None:
    own = resolution(Step.LINKED, [(("main",), 10)], (FRONT.span_id,))
    again = resolution(Step.LOCAL_ROOT, [(("main",), 10)], (FRONT.span_id,))
    tree, parts, _ = combine(FRONT, own, [(SAME_ROOT, again)])
    assert tree.total == 10
    assert parts[1].note == "already counted (same local root)" and not parts[1].included


def test_an_empty_own_answer_still_lets_the_backends_speak() -> None:
    own = resolution(Step.NONE, [])
    back = resolution(Step.LINKED, [(("count_primes",), 40)], (BACK.span_id,))
    tree, parts, services = combine(FRONT, own, [(BACK, back)])
    assert tree.total == 40 and not parts[0].included and [s.service for s in services] == ["backend"]


def test_query_for_uses_grafanas_window_and_the_mapped_labels() -> None:
    settings = Settings.for_tests(label_map=(("service.name", "service_name"), ("k8s.pod.name", "pod")))
    s = span("5" * 16, 'we"ird', resource=(("k8s.pod.name", "pod-1"),))
    q = query_for(s, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", settings, max_nodes=100)
    assert q.span_ids == (s.span_id,) and q.trace_id == s.trace_id and q.max_nodes == 100
    assert q.start_ms == 1_000_000 - EXPLORE_MARGIN_MS and q.end_ms == 1_000_050 + EXPLORE_MARGIN_MS
    assert q.label_selector == selector_for(s, settings.label_map) == '{service_name="we\\"ird", pod="pod-1"}'
