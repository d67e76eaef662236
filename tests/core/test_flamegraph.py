"""The flame-graph core (bridge/flamegraph.py) on real profile data: the shop capture's pyroscope-io profiles and
Pyroscope's own Go CPU profile."""

from __future__ import annotations

from collections import Counter

import pytest

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.pprof import decode_pprof, iter_samples
from tests.doubles.pyroscope import load_push_profiles
from tests.paths import GO_CPU_PPROF


def shop_stacks() -> list[tuple[tuple[str, ...], int]]:
    return [(frames, value) for p in load_push_profiles() for frames, value, _ in p.samples]


def go_stacks() -> list[tuple[tuple[str, ...], int]]:
    profile = decode_pprof(GO_CPU_PPROF.read_bytes())
    return [(frames, value) for frames, value, _ in iter_samples(profile, len(profile.sample_type) - 1)]


def folded(stacks: list[tuple[tuple[str, ...], int]]) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for frames, value in stacks:
        if value:
            out[tuple(frames)] += value
    return out


Stacks = list[tuple[tuple[str, ...], int]]


def encode_via_tree(stacks: Stacks, max_nodes: int | None = None) -> qpb.FlameGraph:
    return flamegraph.encode(flamegraph.build_tree(stacks), max_nodes)


# the encoder's two entry points: a call tree, and merged stacks without a tree; every encoding test runs on both
ENCODERS = pytest.mark.parametrize("encode", [encode_via_tree, flamegraph.encode_stacks], ids=["tree", "stacks"])


@ENCODERS
@pytest.mark.parametrize("source", [shop_stacks, go_stacks], ids=["shop-capture", "go-cpu"])
def test_encode_decode_round_trip_on_real_profiles(source: object, encode: object) -> None:
    stacks = source()  # type: ignore[operator]
    fg = encode(stacks)  # type: ignore[operator]
    assert fg.names[0] == "total" and len(set(fg.names)) == len(fg.names)
    assert fg.total == sum(v for _, v in stacks) > 0
    assert list(fg.levels[0].values) == [0, fg.total, 0, 0]
    assert fg.max_self == max(v for v in folded(stacks).values())
    back = flamegraph.decode(fg)
    assert folded(list(flamegraph.iter_stacks(back))) == folded(stacks)
    again = flamegraph.encode(back)
    assert again == fg  # deterministic
    assert qpb.FlameGraph.FromString(fg.SerializeToString()) == fg


def test_shop_capture_totals_match_the_fixture_readme() -> None:
    tree = flamegraph.build_tree(shop_stacks())
    assert tree.total == 3_590_000_000  # "201 pprof samples worth 3.59 s of CPU"


@ENCODERS
def test_rows_are_delta_encoded_and_children_sit_inside_their_parents(encode: object) -> None:
    fg = encode(shop_stacks())  # type: ignore[operator]
    prev: list[tuple[int, int]] = [(0, fg.total)]
    for level in fg.levels[1:]:
        row: list[tuple[int, int]] = []
        end = 0
        for i in range(0, len(level.values), 4):
            x = end + level.values[i]
            end = x + level.values[i + 1]
            assert any(px <= x and end <= pend for px, pend in prev)
            row.append((x, end))
        prev = row


@ENCODERS
@pytest.mark.parametrize("max_nodes", [1, 5, 20, 50])
def test_folding_keeps_totals_and_bounds_nodes(max_nodes: int, encode: object) -> None:
    tree = flamegraph.build_tree(shop_stacks())
    full = tree.count() - 1
    fg = encode(shop_stacks(), max_nodes)  # type: ignore[operator]
    assert fg.total == tree.total
    nodes = sum(len(level.values) // 4 for level in fg.levels[1:])
    names = [fg.names[level.values[i]] for level in fg.levels[1:] for i in range(3, len(level.values), 4)]
    assert nodes < full
    kept = [n for n in names if n != flamegraph.OTHER_NAME]
    # Pyroscope's rule (pkg/model/tree.go minValue): every node whose total reaches the max_nodes-th largest, ties too
    totals = tree.descendant_totals()
    threshold = sorted(totals, reverse=True)[max_nodes - 1]
    assert len(kept) == sum(t >= threshold for t in totals) >= max_nodes
    assert flamegraph.OTHER_NAME in names
    assert flamegraph.decode(fg).total == tree.total
    assert fg.max_self == max(level.values[i] for level in fg.levels for i in range(2, len(level.values), 4))
    for level in fg.levels[1:]:  # a parent's children never exceed it
        assert all(level.values[i + 1] > 0 for i in range(0, len(level.values), 4))


@ENCODERS
def test_no_folding_when_under_the_limit(encode: object) -> None:
    stacks = shop_stacks()
    assert encode(stacks, 10_000) == encode(stacks)  # type: ignore[operator]
    assert encode(stacks, 0) == encode(stacks)  # type: ignore[operator]


def _random_stacks(seed: int) -> Stacks:
    """Small random stacks over a tiny alphabet (shared prefixes, repeated stacks, zero values, frames named like
    the root and like the fold) — the cases where two encodings of the same tree could part."""
    import random

    rng = random.Random(seed)
    alphabet = ["a", "b", "c", "d", "other", "total"]
    out: Stacks = []
    for _ in range(rng.randint(0, 60)):
        frames = tuple(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        out.append((frames, rng.choice([0, 1, 1, 2, 3, 5, 10, 100])))
    return out


@pytest.mark.parametrize("max_nodes", [None, 0, 1, 2, 3, 5, 8, 16, 50, 10_000])
def test_encoding_merged_stacks_equals_encoding_their_tree(max_nodes: int | None) -> None:
    cases = [shop_stacks(), go_stacks()] + [_random_stacks(seed) for seed in range(60)]
    for stacks in cases:
        assert flamegraph.encode_stacks(stacks, max_nodes) == encode_via_tree(stacks, max_nodes)


def test_a_relabelled_root_keeps_its_label_when_encoded_again() -> None:
    fg = flamegraph.encode_stacks([(("main", "total"), 5), (("main",), 1)])
    label = flamegraph.root_label("linked: because")
    again = flamegraph.encode(flamegraph.decode(flamegraph.relabel_root(fg, label)))
    assert again.names[0] == "total" and again.names[again.levels[0].values[3]] == label
    assert [list(level.values)[:3] for level in again.levels] == [list(level.values)[:3] for level in fg.levels]
    assert again.names[again.levels[2].values[3]] == "total"  # the function called "total", not the root's label


def test_relabel_renames_only_the_root_bar() -> None:
    fg = flamegraph.encode(flamegraph.build_tree(shop_stacks()))
    label = flamegraph.root_label("time-window fallback: because")
    out = flamegraph.relabel_root(fg, label)
    assert out.names[out.levels[0].values[3]] == "total — time-window fallback: because"
    assert fg.names[0] == "total"  # the input is untouched
    assert list(out.levels[1:]) == list(fg.levels[1:]) and out.total == fg.total


def test_relabel_keeps_a_function_that_is_called_total() -> None:
    tree = flamegraph.build_tree([(("main", "total"), 5), (("main",), 1)])
    fg = flamegraph.encode(tree)
    out = flamegraph.relabel_root(fg, "total — x")
    back = flamegraph.decode(out)
    assert back.name == "total — x"
    assert back.children["main"].children["total"].total == 5


def test_merge_into_adds_trees() -> None:
    a = flamegraph.build_tree([(("f", "g"), 2)])
    b = flamegraph.build_tree([(("f", "h"), 3), (("k",), 1)])
    merged = flamegraph.merge_into(a, b)
    assert merged.total == 6
    assert folded(list(flamegraph.iter_stacks(merged))) == folded([(("f", "g"), 2), (("f", "h"), 3), (("k",), 1)])


@pytest.mark.parametrize(
    ("fg", "is_empty"),
    [
        (None, True),
        (qpb.FlameGraph(), True),
        (flamegraph.empty(), True),
        (flamegraph.empty("total — span not found"), True),
        (
            qpb.FlameGraph(
                names=["total", "f"], levels=[qpb.Level(values=[0, 0, 0, 0]), qpb.Level(values=[0, 0, 0, 1])], total=0
            ),
            True,
        ),
        (flamegraph.encode(flamegraph.build_tree([(("f",), 1)])), False),
    ],
)
def test_empty_detection_table(fg: qpb.FlameGraph | None, is_empty: bool) -> None:
    assert flamegraph.is_empty(fg) is is_empty


def test_empty_is_pyroscope_v22_no_data() -> None:
    fg = flamegraph.empty("total — why")
    assert list(fg.names) == ["total — why"]
    assert [list(level.values) for level in fg.levels] == [[0, 0, 0, 0]]
    assert flamegraph.decode(fg).total == 0
