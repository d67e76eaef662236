"""Flame graph exports: folded stacks, pprof (``go tool pprof``-compatible) and the SVG-ready layout."""

from __future__ import annotations

import gzip
import random
import subprocess
from collections import Counter

import pytest

from bridge import flamegraph
from bridge._proto import profile_pb2
from tests.paths import GO_CPU_PPROF
from tests.tools import require_tool

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
    return flamegraph.build_tree([
        (("main", "handle", "count_primes"), 70),
        (("main", "handle", "render_json"), 20),
        (("main", "handle"), 5),
        (("main", "gc"), 5),
    ])


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
    assert text == (
        "main;gc 5\n"
        "main;handle 5\n"
        "main;handle;count_primes 70\n"
        "main;handle;render_json 20\n"
    )


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


# --------------------------------------------------------------------------------------------- pprof


def test_pprof_layout_is_what_go_tool_pprof_expects() -> None:
    prof = profile_pb2.Profile.FromString(flamegraph.to_pprof(small_tree(), CPU, period=10_000_000)
                                          .SerializeToString())
    strings = list(prof.string_table)
    assert strings[0] == ""
    assert len(set(strings)) == len(strings)
    assert [(strings[t.type], strings[t.unit]) for t in prof.sample_type] == [("cpu", "nanoseconds")]
    assert (strings[prof.period_type.type], strings[prof.period_type.unit]) == ("cpu", "nanoseconds")
    assert prof.period == 10_000_000
    assert [m.id for m in prof.mapping] == [1] and prof.mapping[0].has_functions
    function_ids = {f.id for f in prof.function}
    assert all(f.id > 0 and strings[f.name] for f in prof.function)
    for loc in prof.location:
        assert loc.id > 0 and loc.mapping_id == 1
        assert [line.function_id for line in loc.line] and all(line.function_id in function_ids for line in loc.line)
    # one sample per stack, leaf first
    assert len(prof.sample) == 4
    assert all(len(s.value) == 1 for s in prof.sample)
    leafs = {strings[next(f.name for f in prof.function if f.id == s.location_id[0])] for s in prof.sample}
    assert leafs == {"gc", "handle", "count_primes", "render_json"}
    assert stacks_of_pprof(prof) == Counter({
        ("main", "gc"): 5, ("main", "handle"): 5, ("main", "handle", "count_primes"): 70,
        ("main", "handle", "render_json"): 20,
    })


@pytest.mark.parametrize(
    ("type_id", "sample", "period"),
    [
        ("process_cpu:cpu:nanoseconds:cpu:nanoseconds", ("cpu", "nanoseconds"), ("cpu", "nanoseconds")),
        ("memory:alloc_space:bytes:space:bytes", ("alloc_space", "bytes"), ("space", "bytes")),
        ("goroutine:goroutine:count:goroutine:count", ("goroutine", "count"), ("goroutine", "count")),
    ],
)
def test_pprof_sample_and_period_types_come_from_the_profile_type_id(
    type_id: str, sample: tuple[str, str], period: tuple[str, str]
) -> None:
    prof = flamegraph.to_pprof(small_tree(), type_id)
    strings = list(prof.string_table)
    assert (strings[prof.sample_type[0].type], strings[prof.sample_type[0].unit]) == sample
    assert (strings[prof.period_type.type], strings[prof.period_type.unit]) == period


@pytest.mark.parametrize("bad", ["", "cpu", "a:b:c:d", "a:b::d:e", "a:b:c:d:e:f"])
def test_pprof_rejects_a_malformed_profile_type(bad: str) -> None:
    with pytest.raises(ValueError, match="name:sample_type:sample_unit:period_type:period_unit"):
        flamegraph.to_pprof(small_tree(), bad)


def test_pprof_round_trips_a_real_go_profile() -> None:
    tree = go_cpu_tree()
    prof = flamegraph.to_pprof(tree, CPU)
    again = profile_pb2.Profile.FromString(gzip.decompress(gzip.compress(prof.SerializeToString())))
    assert stacks_of_pprof(again) == Counter(dict(flamegraph.iter_stacks(tree)))
    assert sum(s.value[0] for s in again.sample) == tree.total


def test_pprof_of_an_empty_tree_is_still_a_valid_profile() -> None:
    prof = flamegraph.to_pprof(flamegraph.Node(flamegraph.ROOT_NAME), CPU)
    assert list(prof.string_table)[0] == "" and len(prof.sample_type) == 1 and not prof.sample


def test_go_tool_pprof_reads_the_export(tmp_path: object) -> None:
    require_tool("go", package="golang-go", purpose="check the pprof export with go tool pprof")
    from pathlib import Path

    out = Path(str(tmp_path)) / "span.pb.gz"
    out.write_bytes(gzip.compress(flamegraph.to_pprof(small_tree(), CPU, period=10_000_000).SerializeToString()))
    done = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=10", str(out)], capture_output=True,
                          text=True, timeout=120, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                                                       "GOCACHE": str(Path(str(tmp_path)) / "gocache")})
    assert done.returncode == 0, done.stderr
    assert "count_primes" in done.stdout and "render_json" in done.stdout
    assert "Type: cpu" in done.stdout


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
