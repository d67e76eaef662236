"""Flame graph exports: folded stacks, pprof (``go tool pprof``-compatible) and the SVG-ready layout."""

from __future__ import annotations

import gzip
import random
from collections import Counter

import pytest

from bridge import flamegraph
from bridge._proto import profile_pb2
from tests.paths import GO_CPU_PPROF

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def stacks_of_pprof(prof: profile_pb2.Profile, value_index: int = 0) -> Counter[tuple[str, ...]]:
    """Stacks (root first) → summed value, read the way pprof reads them: location ids leaf first, each location's
    lines innermost first."""
    strings = list(prof.string_table)
    functions = {f.id: strings[f.name] for f in prof.function}
    locations = {loc.id: [functions[line.function_id] for line in loc.line] for loc in prof.location}
    out: Counter[tuple[str, ...]] = Counter()
    for sample in prof.sample:
        frames: list[str] = []
        for loc_id in sample.location_id:
            frames.extend(locations[loc_id])
        frames.reverse()
        out[tuple(frames)] += sample.value[value_index]
    return out


def go_cpu_tree() -> flamegraph.Node:
    raw = GO_CPU_PPROF.read_bytes()
    prof = profile_pb2.Profile.FromString(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return flamegraph.build_tree(stacks_of_pprof(prof, value_index=1).items())


def small_tree() -> flamegraph.Node:
    return flamegraph.build_tree(
        [
            (("main", "handle", "count_primes"), 70),
            (("main", "handle", "render_json"), 20),
            (("main", "handle"), 5),
            (("main", "gc"), 5),
        ]
    )


def random_tree(nodes: int, seed: int = 7) -> flamegraph.Node:
    """A tree of about ``nodes`` frames with a realistic skew: a few hot paths and a long tail."""
    rng = random.Random(seed)
    names = [f"pkg{i % 40}.fn_{i}" for i in range(nodes)]
    stacks: list[tuple[tuple[str, ...], int]] = []
    root = flamegraph.Node(flamegraph.ROOT_NAME)
    while root.count() < nodes:
        depth = rng.randint(2, 24)
        frames = tuple(names[min(int(rng.paretovariate(0.6)) * (d + 1) + d, nodes - 1)] for d in range(depth))
        stacks.append((frames, rng.randint(1, 1000)))
        if len(stacks) % 200 == 0:
            root = flamegraph.build_tree(stacks)
    return flamegraph.build_tree(stacks)


# --------------------------------------------------------------------------------------------- collapsed


def test_collapsed_lists_every_stack_once_with_its_self_value() -> None:
    text = flamegraph.to_collapsed(small_tree())
    assert text == ("main;gc 5\nmain;handle 5\nmain;handle;count_primes 70\nmain;handle;render_json 20\n")


def test_collapsed_round_trips_a_real_profile() -> None:
    tree = go_cpu_tree()
    stacks = []
    for line in flamegraph.to_collapsed(tree).splitlines():
        frames, _, value = line.rpartition(" ")
        stacks.append((tuple(frames.split(";")), int(value)))
    again = flamegraph.build_tree(stacks)
    assert list(flamegraph.iter_stacks(again)) == list(flamegraph.iter_stacks(tree))
    assert again.total == tree.total > 0


def test_collapsed_keeps_lines_parseable_when_names_hold_separators() -> None:
    tree = flamegraph.build_tree([(("a;b", "line\nbreak"), 3)])
    assert flamegraph.to_collapsed(tree) == "a:b;line break 3\n"


# --------------------------------------------------------------------------------------------- layout


def assert_well_formed(lay: flamegraph.Layout) -> None:
    rows: dict[int, list[flamegraph.Rect]] = {}
    for rect in lay.rects:
        rows.setdefault(rect.depth, []).append(rect)
        assert rect.width >= lay.min_width or rect.depth == 0
        assert -1e-6 <= rect.x and rect.x + rect.width <= lay.width + 1e-6
    for row in rows.values():
        row.sort(key=lambda r: r.x)
        for left, right in zip(row, row[1:], strict=False):
            assert left.x + left.width <= right.x + 1e-6, "bars of one row overlap"
    for depth, row in rows.items():
        if depth == 0:
            continue
        for rect in row:
            assert any(p.x - 1e-6 <= rect.x and rect.x + rect.width <= p.x + p.width + 1e-6 for p in rows[depth - 1])


def test_layout_is_width_proportional() -> None:
    lay = flamegraph.layout(small_tree(), width=1000, min_width=1)
    by_name = {r.name: r for r in lay.rects}
    assert by_name["total"].width == pytest.approx(1000)
    assert by_name["count_primes"].width == pytest.approx(700)
    assert by_name["render_json"].width == pytest.approx(200)
    assert by_name["gc"].width == pytest.approx(50)
    assert lay.folded == 0 and lay.depth == 4
    assert_well_formed(lay)


def test_layout_folds_narrow_siblings_into_one_bar() -> None:
    stacks = [(("main", "hot"), 900)] + [(("main", f"tiny_{i}"), 1) for i in range(100)]
    lay = flamegraph.layout(flamegraph.build_tree(stacks), width=1000, min_width=2)
    names = [r.name for r in lay.rects]
    assert "hot" in names and not any(n.startswith("tiny_") for n in names)
    fold = next(r for r in lay.rects if r.name == flamegraph.FOLDED_NAME)
    assert fold.folded == 100 and fold.total == 100 and fold.depth == 2
    assert lay.folded == 100
    assert_well_formed(lay)


# slow: seconds of pure layout; reads no clock, so it cannot depend on the date
@pytest.mark.slow
def test_a_10000_node_tree_stays_within_the_rectangle_budget() -> None:
    tree = random_tree(10_000)
    assert tree.count() >= 10_000
    lay = flamegraph.layout(tree, width=1200, min_width=2, max_rects=2000)
    assert len(lay.rects) <= 2000
    assert lay.folded > 0
    assert_well_formed(lay)
    drawn = sum(r.total for r in lay.rects if r.depth == 1)
    assert drawn <= tree.total


def test_a_deep_chain_raises_the_threshold_rather_than_the_budget() -> None:
    chain = tuple(f"f{i}" for i in range(5000))
    lay = flamegraph.layout(flamegraph.build_tree([(chain, 10)]), width=800, min_width=2, max_rects=1000)
    assert len(lay.rects) <= 1000
    cut = next(r for r in lay.rects if r.name == flamegraph.FOLDED_NAME)
    assert cut.total == 10 and cut.folded == 5000 - cut.depth + 1
    assert max(r.depth for r in lay.rects) == cut.depth
    assert_well_formed(lay)


def test_layout_of_an_empty_tree_is_one_root_bar() -> None:
    lay = flamegraph.layout(flamegraph.Node(flamegraph.ROOT_NAME), width=500)
    assert [(r.name, r.width) for r in lay.rects] == [("total", 500)]
