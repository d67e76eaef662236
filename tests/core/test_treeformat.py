"""``bridge.treeformat``: Pyroscope's tree bytes (``PROFILE_FORMAT_TREE``), held to grafana/pyroscope's own cases
(``pkg/model/tree_test.go`` at 3fe6a457: ``Test_Tree_minValue``, ``Test_Tree_MarshalUnmarshal``) and to bytes
written out by hand from ``MarshalTruncate`` — read here with a decoder of this test's own."""

from __future__ import annotations

import pytest

from bridge import flamegraph, treeformat
from bridge.errors import InvalidArgument


def tree(*stacks: tuple[str, ...]) -> flamegraph.Node:
    """``newTree`` of tree_test.go: locations leaf first, each stack of value 1."""
    return flamegraph.build_tree((tuple(reversed(s)), 1) for s in stacks)


MIN_VALUE_TREE = (("c", "b", "a"), ("c", "b", "a"), ("c1", "b", "a"), ("c", "b1", "a"))
NINE = (
    ("c", "b", "a"),
    ("c", "b", "a"),
    ("c1", "b", "a"),
    ("c", "b1", "a"),
    ("c1", "b1", "a"),
    ("c", "b", "a1"),
    ("c1", "b", "a1"),
    ("c", "b1", "a1"),
    ("c1", "b1", "a1"),
)


@pytest.mark.parametrize(("max_nodes", "expected"), [(2, 3), (2**63 - 1, 0), (0, 0), (-1, 0)])
def test_min_value(max_nodes: int, expected: int) -> None:
    assert treeformat.min_value(tree(*MIN_VALUE_TREE), max_nodes) == expected


def read_tree(data: bytes) -> list[tuple[tuple[str, ...], int, int]]:
    """This test's own reading of the format: pre-order (name, self, children) records under a virtual root →
    (path, self, number of children) per node."""
    pos = 0

    def uvarint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    out: list[tuple[tuple[str, ...], int, int]] = []

    def node(path: tuple[str, ...]) -> None:
        nonlocal pos
        size = uvarint()
        name = data[pos : pos + size].decode()
        pos += size
        self_value, count = uvarint(), uvarint()
        here = (*path, name)
        out.append((here, self_value, count))
        for _ in range(count):
            node(here)

    node(())
    assert pos == len(data)
    return out


def stacks_of(root: flamegraph.Node) -> dict[tuple[str, ...], int]:
    return dict(flamegraph.iter_stacks(root))


def test_marshal_unmarshal_round_trips() -> None:
    full = tree(*NINE)
    assert stacks_of(treeformat.unmarshal(treeformat.marshal(full, -1))) == stacks_of(full)
    assert treeformat.marshal(flamegraph.Node("total"), -1) == b""
    assert treeformat.unmarshal(b"").total == 0


def test_truncation_folds_into_other_as_pyroscope_does() -> None:
    """tree_test.go "truncation": 3 nodes kept; the rest per parent into ``other``."""
    got = treeformat.unmarshal(treeformat.marshal(tree(*NINE), 3))
    expected = flamegraph.build_tree(
        [(("a", "b", "other"), 3), (("a", "other"), 2), (("a1", "other"), 4)]  # root first here
    )
    assert stacks_of(got) == stacks_of(expected)
    assert got.total == 9


def test_bytes_are_marshal_truncate_s() -> None:
    """Written out from MarshalTruncate: the virtual root, then each node's last child first; names and values as
    uvarints. Root a (self 2) with children b (5) and c (3); root d (1)."""
    stacks = [(("a", "b"), 5), (("a", "c"), 3), (("d",), 1), (("a",), 2)]
    expected = (
        b"\x00\x00\x02"  # virtual root: no name, self 0, 2 children (a, d)
        b"\x01d\x01\x00"  # d: last root first
        b"\x01a\x02\x02"  # a: self 2, children b and c
        b"\x01c\x03\x00"
        b"\x01b\x05\x00"
    )
    data = treeformat.encode_stacks(stacks, 8192)
    assert data == expected
    assert read_tree(data) == [
        (("",), 0, 2),
        (("", "d"), 1, 0),
        (("", "a"), 2, 2),
        (("", "a", "c"), 3, 0),
        (("", "a", "b"), 5, 0),
    ]


def test_ties_at_the_limit_are_kept_and_other_merges_with_an_existing_other() -> None:
    stacks = [(("r", "x"), 4), (("r", "y"), 4), (("r", "z"), 1), (("r", "other"), 2)]
    got = treeformat.truncate(flamegraph.build_tree(stacks), 3)  # totals 11, 4, 4, 2, 1: the 3rd largest is 4
    assert sorted(got.children["r"].children) == ["other", "x", "y"]
    assert (got.children["r"].children["other"].self, got.children["r"].children["other"].total) == (3, 3)


def test_long_names_and_large_values_take_multi_byte_varints() -> None:
    name = "é" * 200
    data = treeformat.encode_stacks([((name,), 300_000)], 0)
    assert read_tree(data) == [(("",), 0, 1), (("", name), 300_000, 0)]


@pytest.mark.parametrize("data", [b"\x00\x00\x01\x05ab", b"\x00\x00\x01\x01a\xff", b"\x80" * 12])
def test_malformed_bytes_are_invalid_argument(data: bytes) -> None:
    with pytest.raises(InvalidArgument, match="malformed tree bytes"):
        treeformat.unmarshal(data)
