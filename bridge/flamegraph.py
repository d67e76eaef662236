"""Pure flame-graph functions: Pyroscope's level encoding ↔ a call tree, merging, folding, relabelling.

Encoding (grafana/pyroscope ``api/querier/v1/querier.proto`` ``message FlameGraph``, written by
``pkg/model/flamegraph.go`` ``NewFlameGraph``): ``names[0]`` is ``"total"``; ``levels[i].values`` holds one
4-tuple per node of row *i*, left to right: ``[x_offset_delta, total, self, name_index]``, the offset delta-encoded
against the end of the previous node in the same row. "No data" is a missing flame graph or one holding only
``total`` with a single ``[0,0,0,0]`` level. One level writer encodes both inputs: a call tree (``encode``) and
merged stacks (``encode_stacks``, the store's answers, without building the tree); ``max_nodes`` folds by one rule.

Exports: ``to_collapsed`` (folded stacks), ``layout`` (SVG-ready rectangles with narrow frames folded, for the
bridge's pages); pprof is ``bridge.pprof.encode_pprof`` of ``iter_stacks``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from bridge._proto import querier_pb2 as pb

ROOT_NAME: Final = "total"
OTHER_NAME: Final = "other"


class Node:
    """One frame of a call tree. Children are keyed by function name."""

    __slots__ = ("name", "total", "self", "children")

    def __init__(self, name: str, total: int = 0, self_value: int = 0) -> None:
        self.name = name
        self.total = total
        self.self = self_value
        self.children: dict[str, Node] = {}

    def child(self, name: str) -> Node:
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = Node(name)
        return node

    def count(self) -> int:
        """Number of nodes in this subtree, itself included."""
        return 1 + len(self.descendant_totals())

    def descendant_totals(self) -> list[int]:
        """The total of every node below this one (what ``max_nodes`` ranks), in no particular order."""
        totals: list[int] = []
        stack = list(self.children.values())
        while stack:
            node = stack.pop()
            totals.append(node.total)
            stack.extend(node.children.values())
        return totals

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node({self.name!r}, total={self.total}, self={self.self}, children={len(self.children)})"


def build_tree(stacks: Iterable[tuple[Sequence[str], int]]) -> Node:
    """Stacks given root frame first, with their value, → a call tree under a ``total`` root."""
    root = Node(ROOT_NAME)
    for frames, value in stacks:
        if value == 0:
            continue
        root.total += value
        node = root
        for name in frames:
            node = node.child(name)
            node.total += value
        node.self += value
    return root


def merge_into(dst: Node, src: Node) -> Node:
    """Add ``src`` (a tree) into ``dst`` in place and return ``dst``. Roots are merged whatever their names."""
    pairs = [(dst, src)]
    while pairs:
        d, s = pairs.pop()
        d.total += s.total
        d.self += s.self
        for name, sc in s.children.items():
            pairs.append((d.child(name), sc))
    return dst


def iter_stacks(root: Node) -> Iterator[tuple[tuple[str, ...], int]]:
    """Every stack with a non-zero self value, root frame first (the root itself excluded)."""
    stack: list[tuple[Node, tuple[str, ...]]] = [(c, (c.name,)) for c in reversed(_sorted_children(root))]
    while stack:
        node, path = stack.pop()
        if node.self:
            yield path, node.self
        for child in reversed(_sorted_children(node)):
            stack.append((child, (*path, child.name)))


def _sorted_children(node: Node) -> list[Node]:
    return [node.children[name] for name in sorted(node.children)]


def decode(fg: pb.FlameGraph | None) -> Node:
    """A flame graph message → a call tree. Nodes are matched to their parent by x-offset ranges."""
    root = Node(ROOT_NAME)
    if fg is None or not fg.levels:
        return root
    names = list(fg.names)
    prev_row: list[tuple[int, int, Node]] = []  # (x, end, node)
    for depth, level in enumerate(fg.levels):
        values = level.values
        row: list[tuple[int, int, Node]] = []
        x_end = 0
        parent_i = 0
        for i in range(0, len(values) - 3, 4):
            x = x_end + values[i]
            total, self_value, name_i = values[i + 1], values[i + 2], values[i + 3]
            x_end = x + total
            name = names[name_i] if 0 <= name_i < len(names) else f"<unknown name {name_i}>"
            if depth == 0:
                root.name, root.total, root.self = name, total, self_value
                row.append((x, x_end, root))
                continue
            while parent_i + 1 < len(prev_row) and prev_row[parent_i][1] <= x:
                parent_i += 1
            if not prev_row:
                break
            parent = prev_row[parent_i][2]
            node = parent.children.get(name)
            if node is None:
                node = parent.children[name] = Node(name)
            node.total += total
            node.self += self_value
            row.append((x, x_end, node))
        prev_row = row
        if not row:
            break
    return root


def encode(root: Node, max_nodes: int | None = None) -> pb.FlameGraph:
    """A call tree → Pyroscope's flame graph encoding (the request scope's merged trees, decoded answers). The root
    keeps its own name (a relabelled root reads its label); ``max_nodes`` folds as ``encode_stacks`` does."""
    threshold = fold_threshold(root.descendant_totals(), max_nodes)
    # pre-order, kept children by name; the children below the threshold are summed into one ``other`` child listed
    # last, which the writer places (after the kept children, as it places the ``other`` it folds itself)
    nodes: list[tuple[int, str, int, int]] = []
    work: list[tuple[Node, int]] = [(root, 0)]
    while work:
        node, depth = work.pop()
        if depth:
            nodes.append((depth, node.name, node.total, node.self))
        children = node.children
        if children:
            other = 0
            kept: list[tuple[Node, int]] = []
            for name in sorted(children, reverse=True):
                child = children[name]
                if child.total >= threshold:
                    kept.append((child, depth + 1))
                elif child.total > 0:
                    other += child.total
            if other:
                work.append((Node(OTHER_NAME, other, other), depth + 1))
            work += kept
    return _write_levels(nodes, root.name, root.total, root.self, threshold).message()


class Levels(NamedTuple):
    """A flame graph's encoding as plain lists (what ``FlameGraph`` holds): for answers that are not protobuf."""

    names: list[str]
    levels: list[list[int]]
    total: int
    max_self: int

    def message(self) -> pb.FlameGraph:
        return pb.FlameGraph(
            names=self.names, levels=[pb.Level(values=v) for v in self.levels], total=self.total, max_self=self.max_self
        )


def encode_stacks(stacks: Iterable[tuple[tuple[str, ...], int]], max_nodes: int | None = None) -> pb.FlameGraph:
    """Merged stacks (root frame first, with their value) → the flame graph ``encode(build_tree(stacks), max_nodes)``
    returns (``stack_levels`` as a message)."""
    return stack_levels(stacks, max_nodes).message()


def stack_levels(stacks: Iterable[tuple[tuple[str, ...], int]], max_nodes: int | None = None) -> Levels:
    """``encode_stacks`` as plain lists, without building the tree: stacks sorted by frames are the tree's
    pre-order with children sorted by name, so node totals come from one pass over them (the store encodes its
    merged rows this way)."""
    nodes: list[list[Any]] = []  # [depth, name, total, self] in pre-order
    path: list[int] = []  # indexes in ``nodes`` of the current stack's frames
    prev: tuple[str, ...] = ()
    root_total = root_self = 0
    for frames, value in sorted(stacks):
        if value == 0:
            continue
        root_total += value
        if not frames:
            root_self += value
            continue
        common = 0
        limit = min(len(prev), len(frames))
        while common < limit and prev[common] == frames[common]:
            common += 1
        del path[common:]
        for depth in range(common, len(frames)):
            path.append(len(nodes))
            nodes.append([depth + 1, frames[depth], 0, 0])
        for index in path:
            nodes[index][2] += value
        nodes[path[-1]][3] += value
        prev = frames
    threshold = fold_threshold([n[2] for n in nodes], max_nodes)
    return _write_levels(nodes, ROOT_NAME, root_total, root_self, threshold)


def fold_threshold(totals: list[int], max_nodes: int | None) -> int:
    """The smallest total a node may have and not be folded into ``other``, given every node's total (the root's
    excluded); 0 when nothing folds: Pyroscope's ``minValue`` (grafana/pyroscope ``pkg/model/tree.go``), the
    ``max_nodes``-th largest total — a node tied with it stays too, as in Pyroscope (measured: maxNodes 4 kept the five
    nodes of a chain whose last three tie)."""
    if not max_nodes or max_nodes <= 0 or len(totals) <= max_nodes:
        return 0
    return sorted(totals, reverse=True)[max_nodes - 1]


def _write_levels(
    nodes: Iterable[Sequence[Any]], root_name: str, root_total: int, root_self: int, threshold: int
) -> Levels:
    """The one level writer (grafana/pyroscope ``pkg/model/flamegraph.go``). ``nodes`` are ``(depth, name, total,
    self)`` in pre-order with children sorted by name (depth 1 = the root's children). A node with a total below
    ``threshold`` is added, with its subtree, to one ``other`` node per parent, placed after the parent's kept children;
    a node with a total of 0 or less is dropped with its subtree. Children start at their parent's x."""
    names: list[str] = [ROOT_NAME]
    name_index: dict[str, int] = {ROOT_NAME: 0}
    root_idx = name_index.setdefault(root_name, len(names))
    if root_idx == len(names):
        names.append(root_name)
    levels: list[list[int]] = [[0, root_total, root_self, root_idx]]
    prev_end: list[int] = [root_total]  # per row: where its last node ends
    max_self = root_self

    def place_other(depth: int, x: int, total: int) -> None:
        nonlocal max_self
        max_self = max(max_self, total)
        idx = name_index.setdefault(OTHER_NAME, len(names))
        if idx == len(names):
            names.append(OTHER_NAME)
        if depth == len(levels):
            levels.append([])
            prev_end.append(0)
        levels[depth] += (x - prev_end[depth], total, total, idx)
        prev_end[depth] = x + total

    # open parents, innermost last: [depth, x of its next child, total folded into its ``other``]
    open_: list[list[int]] = [[0, 0, 0]]
    skip_below = 0  # skip nodes deeper than this (inside a folded or empty subtree); 0 = skip nothing
    for depth, name, total, self_value in nodes:
        if skip_below:
            if depth > skip_below:
                continue
            skip_below = 0
        while open_[-1][0] >= depth:  # the root (depth 0) stays open: every node is deeper
            d, next_x, other = open_.pop()
            if other:
                place_other(d + 1, next_x, other)
        parent = open_[-1]
        if total < threshold or total <= 0:
            if total > 0:
                parent[2] += total
            skip_below = depth
            continue
        x = parent[1]
        parent[1] = x + total
        idx = name_index.get(name)
        if idx is None:
            idx = name_index[name] = len(names)
            names.append(name)
        if depth == len(levels):
            levels.append([x, total, self_value, idx])
            prev_end.append(x + total)
        else:
            levels[depth] += (x - prev_end[depth], total, self_value, idx)
            prev_end[depth] = x + total
        if self_value > max_self:
            max_self = self_value
        open_.append([depth, x, 0])
    while open_:
        d, next_x, other = open_.pop()
        if other:
            place_other(d + 1, next_x, other)
    return Levels(names, levels, root_total, max_self)


def empty(root_name: str = ROOT_NAME) -> pb.FlameGraph:
    """Pyroscope v2.2's "no data": only the root, one level ``[0,0,0,0]``."""
    return pb.FlameGraph(names=[root_name], levels=[pb.Level(values=[0, 0, 0, 0])], total=0, max_self=0)


def placeholder(root_name: str, leaf_name: str) -> pb.FlameGraph:
    """A two-row flame graph of one unit: the shape Grafana needs to draw anything inline (span details show a flame
    graph only when it has more than one row), for an answer that has no samples but a reason to show."""
    return pb.FlameGraph(
        names=[root_name, leaf_name],
        levels=[pb.Level(values=[0, 1, 0, 0]), pb.Level(values=[0, 1, 1, 1])],
        total=1,
        max_self=1,
    )


def is_empty(fg: pb.FlameGraph | None) -> bool:
    """True for both encodings of "no data" (grafana/pyroscope ``pkg/model/flamegraph.go``) and a zero total."""
    if fg is None or len(fg.levels) <= 1:
        return True
    return fg.total == 0


def relabel_root(fg: pb.FlameGraph, label: str) -> pb.FlameGraph:
    """A copy whose root bar reads ``label``. The root's name index is pointed at a name of its own, so a function
    that happens to share the root's name keeps its label."""
    out = pb.FlameGraph()
    out.CopyFrom(fg)
    if not out.levels or len(out.levels[0].values) < 4:
        out.levels.add().values.extend([0, out.total, 0, 0])
    root_idx = out.levels[0].values[3]
    shared = any(level.values[i] == root_idx for level in out.levels[1:] for i in range(3, len(level.values), 4))
    if not out.names:
        out.names.append(label)
        out.levels[0].values[3] = 0
    elif shared:
        out.names.append(label)
        out.levels[0].values[3] = len(out.names) - 1
    else:
        out.names[root_idx] = label
    return out


def root_label(reason: str) -> str:
    """The text Grafana shows on the root bar: ``total — <reason>``."""
    return f"{ROOT_NAME} — {reason}"


# --------------------------------------------------------------------------------------------- export formats


def to_collapsed(root: Node) -> str:
    """Folded stacks (Brendan Gregg's ``stackcollapse`` format, what ``flamegraph.pl`` and speedscope read): one line
    per stack with a non-zero self value, ``frame;frame;frame value``, root frame first, sorted. Semicolons and
    newlines inside a frame name are replaced so every line parses back to the same frames."""
    lines = [";".join(_collapsed_frame(name) for name in frames) + f" {value}\n" for frames, value in iter_stacks(root)]
    return "".join(lines)


def _collapsed_frame(name: str) -> str:
    return name.replace(";", ":").replace("\n", " ").replace("\r", " ")


# --------------------------------------------------------------------------------------------- SVG-ready layout

FOLDED_NAME: Final = "…"


@dataclass(frozen=True, slots=True)
class Rect:
    """One bar of a rendered flame graph. ``x`` and ``width`` are in pixels of the layout width; ``depth`` 0 is the
    root. ``folded`` counts the frames merged into a ``…`` bar (0 for a real frame)."""

    x: float
    width: float
    depth: int
    name: str
    total: int
    self: int
    folded: int = 0


@dataclass(frozen=True, slots=True)
class Layout:
    rects: list[Rect]
    width: float
    depth: int  # number of rows
    total: int
    min_width: float  # the threshold actually used (raised when the rectangle budget required it)
    folded: int  # frames not drawn individually


def layout(root: Node, width: float = 1200.0, min_width: float = 2.0, *, max_rects: int = 3000) -> Layout:
    """Place every frame wider than ``min_width`` pixels; siblings narrower than that are folded into one ``…`` bar
    per parent (drawn when the fold itself is wide enough), and their subtrees are dropped. Bars never overlap, so
    each row holds at most ``width / min_width`` of them. When more than ``max_rects`` would still be drawn, the
    threshold is doubled (while a row can still hold ~50 bars), then the depth is cut (deeper frames folded into one
    ``…`` bar under the last row drawn) until they fit — a 10,000-node tree renders within a fixed size budget."""
    threshold = max(min_width, 0.1)
    max_depth: int | None = None
    while True:
        rects, folded = _place(root, width, threshold, max_rects, max_depth)
        if rects is not None:
            depth = 1 + max((r.depth for r in rects), default=0)
            return Layout(rects, width, depth, root.total, threshold, folded)
        if threshold * 2 <= width / 50:
            threshold *= 2
        else:
            max_depth = max(1, (max_depth or max_rects) // 2)


def _place(
    root: Node, width: float, threshold: float, max_rects: int, max_depth: int | None
) -> tuple[list[Rect] | None, int]:
    if root.total <= 0:
        return [Rect(0.0, width, 0, root.name, 0, 0)], 0
    scale = width / root.total
    rects: list[Rect] = []
    folded = 0
    work: list[tuple[Node, int, float]] = [(root, 0, 0.0)]
    while work:
        node, depth, x = work.pop()
        rects.append(Rect(x, node.total * scale, depth, node.name, node.total, node.self))
        if len(rects) > max_rects:
            return None, 0
        if max_depth is not None and depth >= max_depth:
            below = node.count() - 1
            if below:
                folded += below
                deeper = node.total - node.self
                rects.append(Rect(x, deeper * scale, depth + 1, FOLDED_NAME, deeper, 0, below))
            continue
        child_x = x
        small_total = 0
        small_count = 0
        placed: list[tuple[Node, int, float]] = []
        for child in _sorted_children(node):
            if child.total <= 0:
                continue
            if child.total * scale < threshold:
                small_total += child.total
                small_count += child.count()
                continue
            placed.append((child, depth + 1, child_x))
            child_x += child.total * scale
        if small_count:
            folded += small_count
            if small_total * scale >= threshold:
                rects.append(Rect(child_x, small_total * scale, depth + 1, FOLDED_NAME, small_total, 0, small_count))
        work.extend(reversed(placed))
    return rects, folded
