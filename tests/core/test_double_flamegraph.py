"""The Pyroscope double's own flame-graph encoder and pprof reader against the bridge's: written apart, each checks
the other. Both encodings are read back two ways — by a plain containment reader here and by the bridge's
``flamegraph.decode`` (which must read Pyroscope's layout, where a node's self width comes before its children) —
and must give the same tree. Where Pyroscope and the bridge differ on purpose, a test below pins the difference."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.pprof import decode_pprof, iter_samples
from tests.core.test_pprof import _push_profiles
from tests.doubles.pyroscope import encode_flamegraph, pprof_samples, read_pprof
from tests.paths import FIXTURES, GO_CPU_PPROF

Stacks = list[tuple[tuple[str, ...], int]]
Nodes = dict[tuple[str, ...], tuple[int, int]]


def nodes_of(fg: qpb.FlameGraph) -> Nodes:
    """Every node of a flame graph as path → (total, self), each node's parent found as the node of the row above
    whose x range contains it; same paths summed."""
    out: dict[tuple[str, ...], list[int]] = {}
    above: list[tuple[int, int, tuple[str, ...]]] = []
    for depth, level in enumerate(fg.levels):
        row: list[tuple[int, int, tuple[str, ...]]] = []
        end = 0
        values = list(level.values)
        for i in range(0, len(values), 4):
            x = end + values[i]
            total, self_value, name = values[i + 1], values[i + 2], fg.names[values[i + 3]]
            end = x + total
            if depth == 0:
                path: tuple[str, ...] = ()
            else:
                parents = [p for p in above if p[0] <= x and x + total <= p[1]]
                assert len(parents) == 1, f"node {name} at depth {depth} is not inside exactly one parent"
                path = (*parents[0][2], name)
            sums = out.setdefault(path, [0, 0])
            sums[0] += total
            sums[1] += self_value
            row.append((x, end, path))
        above = row
    return {path: (t, s) for path, (t, s) in out.items()}


def tree_of(node: flamegraph.Node) -> tuple[int, int, dict[str, object]]:
    return node.total, node.self, {name: tree_of(child) for name, child in node.children.items()}


def random_stacks(rng: random.Random) -> Stacks:
    """Random stacks over a small alphabet (shared prefixes, repeats, zero values, a frame called like the root).
    Frames are never empty and never called ``other``: there Pyroscope and the bridge differ on purpose (below)."""
    alphabet = ["a", "b", "c", "d", "e", "total"]
    return [
        (tuple(rng.choice(alphabet) for _ in range(rng.randint(1, 7))), rng.choice([0, 1, 1, 2, 3, 5, 10, 100]))
        for _ in range(rng.randint(0, 80))
    ]


def has_tie_at_the_fold(stacks: Stacks, max_nodes: int | None) -> bool:
    """Whether the ``max_nodes``-th largest node total ties with the next one (where the two fold rules part)."""
    totals = sorted(flamegraph.build_tree(stacks).descendant_totals(), reverse=True)
    if not max_nodes or len(totals) <= max_nodes:
        return False
    return totals[max_nodes - 1] == totals[max_nodes]


def assert_same_tree(ours: qpb.FlameGraph, theirs: qpb.FlameGraph) -> None:
    assert nodes_of(ours) == nodes_of(theirs)
    assert tree_of(flamegraph.decode(ours)) == tree_of(flamegraph.decode(theirs))
    assert (ours.total, ours.max_self, ours.names[0]) == (theirs.total, theirs.max_self, theirs.names[0])


# slow: seconds of pure encoding; reads no clock, so it cannot depend on the date (runs once, not under faketime)
@pytest.mark.slow
@pytest.mark.parametrize("max_nodes", [None, 1, 2, 3, 5, 8, 13, 40])
def test_the_double_and_the_bridge_encode_random_trees_alike(max_nodes: int | None) -> None:
    rng = random.Random(max_nodes or 0)
    compared = folded = 0
    for _ in range(500):
        stacks = random_stacks(rng)
        if has_tie_at_the_fold(stacks, max_nodes):
            continue
        ours = flamegraph.encode_stacks(stacks, max_nodes)
        assert_same_tree(ours, encode_flamegraph(stacks, max_nodes or 0))
        assert_same_tree(flamegraph.encode(flamegraph.build_tree(stacks), max_nodes), ours)
        compared += 1
        folded += flamegraph.OTHER_NAME in ours.names
    assert compared >= 100
    assert max_nodes is None or max_nodes >= 40 or folded >= 20  # the fold itself was compared


def real_stacks() -> Iterable[tuple[str, Stacks]]:
    profile = read_pprof(GO_CPU_PPROF.read_bytes())
    yield "go-cpu", [(frames, value) for frames, value, _ in pprof_samples(profile, 1)]
    shop: Stacks = []
    for raw in _push_profiles():
        shop += [(frames, value) for frames, value, _ in pprof_samples(read_pprof(raw), 0)]
    yield "shop-capture", shop


@pytest.mark.parametrize("max_nodes", [None, 10, 100, 8192])
def test_the_double_and_the_bridge_encode_real_profiles_alike(max_nodes: int | None) -> None:
    for _, stacks in real_stacks():
        if has_tie_at_the_fold(stacks, max_nodes):
            continue
        assert_same_tree(flamegraph.encode_stacks(stacks, max_nodes), encode_flamegraph(stacks, max_nodes or 0))


def fixture_pprofs() -> list[bytes]:
    """Every pprof of the fixtures: Pyroscope's Go CPU profile, pyroscope-io pushes, @pyroscope/nodejs uploads."""
    node = sorted((FIXTURES / "node-capture").glob("*_ingest.bin"))
    return [GO_CPU_PPROF.read_bytes(), *_push_profiles(), *(path.read_bytes() for path in node)]


@pytest.mark.parametrize("raw", fixture_pprofs())
def test_the_double_reads_pprof_as_the_bridge_does(raw: bytes) -> None:
    theirs = read_pprof(raw)
    ours = decode_pprof(raw)
    for index in range(len(ours.sample_type)):
        assert pprof_samples(theirs, index) == list(iter_samples(ours, index))


# --------------------------------------------------------------------------------------------- Pyroscope's own ways


def levels(fg: qpb.FlameGraph) -> list[list[int]]:
    return [list(level.values) for level in fg.levels]


def test_the_double_writes_pyroscope_s_layout() -> None:
    """By hand, from NewFlameGraph: a node's self width first, its children after it, by name; names by first use."""
    fg = encode_flamegraph([(("a", "b"), 3), (("a",), 2), (("c",), 5)])
    assert list(fg.names) == ["total", "a", "c", "b"]
    assert levels(fg) == [[0, 10, 0, 0], [0, 5, 2, 1, 0, 5, 5, 2], [2, 3, 3, 3]]
    assert (fg.total, fg.max_self) == (10, 5)
    bridge = flamegraph.encode_stacks([(("a", "b"), 3), (("a",), 2), (("c",), 5)])
    assert levels(bridge)[2][:3] == [0, 3, 3]  # the bridge puts children first: same tree, another x


def test_the_double_answers_no_data_as_pyroscope_2_2() -> None:
    fg = encode_flamegraph([])
    assert list(fg.names) == ["total"] and levels(fg) == [[0, 0, 0, 0]] and fg.total == 0
    assert flamegraph.is_empty(fg)


def test_ties_at_the_fold_are_kept_by_pyroscope_and_the_bridge() -> None:
    """Pyroscope keeps every node whose total reaches the ``max_nodes``-th largest, so ties may keep more than
    ``max_nodes`` (measured against grafana/pyroscope 3fe6a457: maxNodes 4 kept a chain of five); the bridge too."""
    stacks: Stacks = [(("a",), 5), (("b",), 5), (("c",), 1)]
    want = {(): (11, 0), ("a",): (5, 5), ("b",): (5, 5), ("other",): (1, 1)}
    assert nodes_of(encode_flamegraph(stacks, 1)) == want
    assert nodes_of(flamegraph.encode_stacks(stacks, 1)) == want


def test_a_function_called_other_pyroscope_folds_it_the_bridge_keeps_it() -> None:
    stacks: Stacks = [(("other", "x"), 4), (("y",), 1)]
    fg = encode_flamegraph(stacks)
    assert list(fg.names) == ["total", "y", "other"] and levels(fg) == [[0, 5, 0, 0], [0, 1, 1, 1, 0, 4, 4, 2]]
    assert nodes_of(flamegraph.encode_stacks(stacks)) == {
        (): (5, 0),
        ("other",): (4, 0),
        ("other", "x"): (4, 4),
        ("y",): (1, 1),
    }
