"""Pure: Pyroscope's tree format — ``SelectMergeStacktracesResponse.tree`` for ``PROFILE_FORMAT_TREE``, and the
trees ``Diff`` compares — as grafana/pyroscope writes it (``pkg/model/tree.go``, read at 3fe6a457:
``MarshalTruncate``, ``minValue``, ``UnmarshalTree``; ``FunctionNameI`` nodes).

Truncation: with more nodes than ``max_nodes``, the smallest total a node may have is the ``max_nodes``-th largest
node total (``minValue``; ties are kept); a node's children below it are summed into one child named ``other``
(its self and total both that sum), merged into an ``other`` child the node already has. Truncation is applied
to every node, the roots' parent included.

Bytes: nodes in depth-first order starting with a virtual root (empty name, self 0), each written as
``uvarint(len(name)) name uvarint(self) uvarint(number of children)`` after its children were truncated; the
children are visited from a stack, so the last child (by name) comes first. An empty tree is no bytes at all.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Final

from bridge.errors import InvalidArgument
from bridge.flamegraph import OTHER_NAME, ROOT_NAME, Node, build_tree

MAX_TREE_BYTES: Final = 256 * 1024 * 1024


def min_value(root: Node, max_nodes: int) -> int:
    """``minValue``: 0 when the tree (its root not counted) has at most ``max_nodes`` nodes; else the
    ``max_nodes``-th largest node total."""
    if max_nodes < 1:
        return 0
    totals: list[int] = []
    work = list(root.children.values())
    while work:
        node = work.pop()
        totals.append(node.total)
        work.extend(node.children.values())
    if len(totals) <= max_nodes:
        return 0
    return heapq.nlargest(max_nodes, totals)[-1]


def truncate(root: Node, max_nodes: int) -> Node:
    """A copy of ``root`` truncated as ``MarshalTruncate`` does."""
    threshold = min_value(root, max_nodes)
    out = Node(root.name, root.total, root.self)
    work: list[tuple[Node, Node]] = [(root, out)]
    while work:
        src, dst = work.pop()
        other = 0
        for name in sorted(src.children):
            child = src.children[name]
            if child.total >= threshold or name == OTHER_NAME:
                copy = dst.child(name)
                copy.total += child.total
                copy.self += child.self
                work.append((child, copy))
            else:
                other += child.total
        if other > 0:
            folded = dst.child(OTHER_NAME)
            folded.total += other
            folded.self += other
    return out


def _uvarint(value: int, out: bytearray) -> None:
    value = max(0, value)
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def marshal(root: Node, max_nodes: int) -> bytes:
    """The tree's bytes, truncated to ``max_nodes``; ``b""`` for a tree without nodes."""
    if not root.children:
        return b""
    tree = truncate(root, max_nodes)
    out = bytearray()
    stack: list[tuple[str, Node, int]] = [("", tree, 0)]  # the virtual root: no name, no self value
    while stack:
        name, node, self_value = stack.pop()
        raw = name.encode("utf-8", "surrogateescape")
        _uvarint(len(raw), out)
        out += raw
        _uvarint(self_value, out)
        children = sorted(node.children)
        _uvarint(len(children), out)
        stack.extend((child, node.children[child], node.children[child].self) for child in children)
    return bytes(out)


def encode_stacks(stacks: Iterable[tuple[tuple[str, ...], int]], max_nodes: int) -> bytes:
    """Merged stacks (root frame first) → tree bytes (values ≤ 0 are dropped, as ``InsertStack`` drops them)."""
    return marshal(build_tree((frames, value) for frames, value in stacks if value > 0 and frames), max_nodes)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise InvalidArgument("malformed tree bytes")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def unmarshal(data: bytes) -> Node:
    """Tree bytes → a call tree under a ``total`` root (totals summed from the self values, as ``UnmarshalTree``)."""
    root = Node(ROOT_NAME)
    if len(data) < 2:
        return root
    if len(data) > MAX_TREE_BYTES:
        raise InvalidArgument(f"tree of {len(data)} bytes is larger than {MAX_TREE_BYTES}")
    pos = 0
    virtual = Node("")
    path: list[Node] = [virtual]  # from above the virtual root to the node whose children are being read
    pending: list[int] = [1]  # children still to read under each node of the path
    while pending:
        if pending[-1] == 0:
            pending.pop()
            path.pop()
            continue
        pending[-1] -= 1
        size, pos = _read_uvarint(data, pos)
        if pos + size > len(data):
            raise InvalidArgument("malformed tree bytes")
        name = data[pos : pos + size].decode("utf-8", "surrogateescape")
        pos += size
        self_value, pos = _read_uvarint(data, pos)
        count, pos = _read_uvarint(data, pos)
        node = path[-1].child(name)
        node.self += self_value
        for ancestor in path[1:]:
            ancestor.total += self_value
        node.total += self_value
        path.append(node)
        pending.append(count)
    top = virtual.children.get("")
    if top is not None:
        root.children = top.children
        root.total = sum(child.total for child in root.children.values())
    return root
