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


@pytest.mark.parametrize("source", [shop_stacks, go_stacks], ids=["shop-capture", "go-cpu"])
def test_encode_decode_round_trip_on_real_profiles(source: object) -> None:
    stacks = source()  # type: ignore[operator]
    tree = flamegraph.build_tree(stacks)
    fg = flamegraph.encode(tree)
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


def test_rows_are_delta_encoded_and_children_sit_inside_their_parents() -> None:
    fg = flamegraph.encode(flamegraph.build_tree(shop_stacks()))
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


@pytest.mark.parametrize("max_nodes", [1, 5, 20, 50])
def test_folding_keeps_totals_and_bounds_nodes(max_nodes: int) -> None:
    tree = flamegraph.build_tree(shop_stacks())
    full = tree.count() - 1
    fg = flamegraph.encode(tree, max_nodes)
    assert fg.total == tree.total
    nodes = sum(len(level.values) // 4 for level in fg.levels[1:])
    names = [fg.names[level.values[i]] for level in fg.levels[1:] for i in range(3, len(level.values), 4)]
    assert nodes < full
    kept = [n for n in names if n != flamegraph.OTHER_NAME]
    assert len(kept) <= max_nodes + 1  # ties at the threshold may keep one more
    assert flamegraph.OTHER_NAME in names
    assert flamegraph.decode(fg).total == tree.total
    for level in fg.levels[1:]:  # a parent's children never exceed it
        assert all(level.values[i + 1] > 0 for i in range(0, len(level.values), 4))


def test_no_folding_when_under_the_limit() -> None:
    tree = flamegraph.build_tree(shop_stacks())
    assert flamegraph.encode(tree, 10_000) == flamegraph.encode(tree)
    assert flamegraph.encode(tree, 0) == flamegraph.encode(tree)


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
        (qpb.FlameGraph(names=["total", "f"], levels=[qpb.Level(values=[0, 0, 0, 0]), qpb.Level(values=[0, 0, 0, 1])],
                        total=0), True),
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
