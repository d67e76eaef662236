"""Pure: two call trees side by side — per-request scaling, per-function self and total, Pyroscope's diff flame graph
encoding (``querier.v1.FlameGraphDiff``), differential folded stacks, and the SVG-ready layout of a diff.

``FlameGraphDiff`` (grafana/pyroscope ``api/querier/v1/querier.proto`` and ``pkg/model/flamegraph_diff.go``, read at
commit 0003648b / 14d05416): ``names[0]`` is ``total``; ``levels[i].values`` holds 7 values per node of row *i*, left to
right — ``[x_left, total_left, self_left, x_right, total_right, self_right, name_index]``. The two trees are merged
into one shape (a node missing on one side is there with zeros), children sorted by name, a node's own (self) width
placed before its children on each side, and each side's x delta-encoded against the end of the previous node of
the same side in its row. ``total`` is left + right, ``leftTicks`` / ``rightTicks`` each side's total, ``max_self`` the
largest self of either side. With ``max_nodes``, children whose totals on both sides are below the threshold (taken
from the larger side of each node) are summed into one ``other`` child per parent, last. Left is the baseline, right
the comparison, as in Pyroscope's and Grafana's diff views.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb

ROOT_NAME: Final = flamegraph.ROOT_NAME
OTHER_NAME: Final = flamegraph.OTHER_NAME


# --------------------------------------------------------------------------------------------- one tree


def per_request(tree: flamegraph.Node, requests: int) -> flamegraph.Node:
    """``tree`` divided by ``requests``: each node's self value divided and rounded to the nearest whole unit (half
    up), each total the sum of the rounded self values below it; nodes left at zero are dropped. One request: the
    tree itself."""
    if requests <= 1:
        return tree

    def scaled(node: flamegraph.Node) -> flamegraph.Node:
        return flamegraph.Node(node.name, 0, (node.self * 2 + requests) // (2 * requests))

    root = scaled(tree)
    order: list[tuple[flamegraph.Node, flamegraph.Node | None]] = []  # pre-order: (copy, its parent's copy)
    work: list[tuple[flamegraph.Node, flamegraph.Node, flamegraph.Node | None]] = [(tree, root, None)]
    while work:
        src, dst, parent = work.pop()
        order.append((dst, parent))
        work.extend((child, scaled(child), dst) for child in src.children.values())
    for dst, parent in reversed(order):  # children before their parents
        dst.total += dst.self
        if parent is not None and dst.total > 0:
            parent.children[dst.name] = dst
            parent.total += dst.total
    return root


def function_totals(tree: flamegraph.Node) -> dict[str, tuple[int, int]]:
    """Function name → (self, total) over the whole tree; a recursive function's total counted once per stack (as
    pprof's ``-top``). The root and folded ``other`` bars are not functions."""
    self_of: dict[str, int] = {}
    total_of: dict[str, int] = {}
    work: list[tuple[flamegraph.Node, frozenset[str]]] = [(c, frozenset()) for c in tree.children.values()]
    while work:
        node, above = work.pop()
        if node.name != OTHER_NAME:
            self_of[node.name] = self_of.get(node.name, 0) + node.self
            if node.name not in above:
                total_of[node.name] = total_of.get(node.name, 0) + node.total
        inner = above | {node.name}
        work.extend((c, inner) for c in node.children.values())
    return {name: (self_of[name], total_of.get(name, 0)) for name in self_of}


# --------------------------------------------------------------------------------------------- two trees


@dataclass(slots=True)
class DiffNode:
    """One frame of two trees merged into one shape: left (baseline) and right (comparison) values."""

    name: str
    left_total: int = 0
    left_self: int = 0
    right_total: int = 0
    right_self: int = 0
    children: dict[str, DiffNode] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return self.left_total + self.right_total


def combine(left: flamegraph.Node, right: flamegraph.Node) -> DiffNode:
    """The two trees in one shape, under a ``total`` root."""
    root = DiffNode(ROOT_NAME)
    work: list[tuple[DiffNode, flamegraph.Node | None, flamegraph.Node | None]] = [(root, left, right)]
    while work:
        node, lhs, rhs = work.pop()
        if lhs is not None:
            node.left_total, node.left_self = lhs.total, lhs.self
        if rhs is not None:
            node.right_total, node.right_self = rhs.total, rhs.self
        names = set(lhs.children if lhs is not None else ()) | set(rhs.children if rhs is not None else ())
        for name in names:
            child = node.children[name] = DiffNode(name)
            work.append(
                (
                    child,
                    lhs.children.get(name) if lhs is not None else None,
                    rhs.children.get(name) if rhs is not None else None,
                )
            )
    return root


def _threshold(root: DiffNode, max_nodes: int | None) -> int:
    if not max_nodes or max_nodes <= 0:
        return 0
    sizes: list[int] = []
    work = list(root.children.values())
    while work:
        node = work.pop()
        sizes.append(max(node.left_total, node.right_total))
        work.extend(node.children.values())
    if len(sizes) <= max_nodes:
        return 0
    return sorted(sizes, reverse=True)[max_nodes - 1]


def encode_diff(left: flamegraph.Node, right: flamegraph.Node, max_nodes: int | None = None) -> qpb.FlameGraphDiff:
    """``left`` (the baseline) and ``right`` (the comparison) → ``FlameGraphDiff`` (see the module's docstring)."""
    root = combine(left, right)
    threshold = _threshold(root, max_nodes)
    names: list[str] = [ROOT_NAME]
    index: dict[str, int] = {ROOT_NAME: 0}
    rows: list[list[int]] = []
    ends: list[tuple[int, int]] = []  # per row: where the last node of each side ends
    max_self = 0
    # pre-order; each entry: node, depth, x on the left, x on the right
    work: list[tuple[DiffNode, int, int, int]] = [(root, 0, 0, 0)]
    while work:
        node, depth, xl, xr = work.pop()
        if depth == len(rows):
            rows.append([])
            ends.append((0, 0))
        name_i = 0 if depth == 0 else index.get(node.name, -1)
        if name_i < 0:
            name_i = index[node.name] = len(names)
            names.append(node.name)
        end_l, end_r = ends[depth]
        rows[depth] += (
            xl - end_l,
            node.left_total,
            node.left_self,
            xr - end_r,
            node.right_total,
            node.right_self,
            name_i,
        )
        ends[depth] = (xl + node.left_total, xr + node.right_total)
        max_self = max(max_self, node.left_self, node.right_self)
        child_l, child_r = xl + node.left_self, xr + node.right_self
        placed: list[tuple[DiffNode, int, int, int]] = []
        other = DiffNode(OTHER_NAME)
        for name in sorted(node.children):
            child = node.children[name]
            if name != OTHER_NAME and max(child.left_total, child.right_total) >= threshold:
                placed.append((child, depth + 1, child_l, child_r))
                child_l += child.left_total
                child_r += child.right_total
            else:
                other.left_total += child.left_total
                other.right_total += child.right_total
        if other.width:
            other.left_self, other.right_self = other.left_total, other.right_total
            placed.append((other, depth + 1, child_l, child_r))
        work.extend(reversed(placed))
    return qpb.FlameGraphDiff(
        names=names,
        levels=[qpb.Level(values=row) for row in rows],
        total=root.width,
        max_self=max_self,
        leftTicks=root.left_total,
        rightTicks=root.right_total,
    )


def collapsed_diff(left: flamegraph.Node, right: flamegraph.Node) -> str:
    """Differential folded stacks (``difffolded.pl``'s format, what ``flamegraph.pl`` draws as a differential flame
    graph): one line per stack with self on either side, ``frame;frame <left> <right>``, root frame first, sorted."""
    lines: list[str] = []
    for frames, node in _walk(combine(left, right)):
        if node.left_self or node.right_self:
            lines.append(
                ";".join(f.replace(";", ":").replace("\n", " ") for f in frames)
                + f" {node.left_self} {node.right_self}\n"
            )
    return "".join(sorted(lines))


def _walk(root: DiffNode) -> Iterator[tuple[tuple[str, ...], DiffNode]]:
    work: list[tuple[tuple[str, ...], DiffNode]] = [((c.name,), c) for c in root.children.values()]
    while work:
        frames, node = work.pop()
        yield frames, node
        work.extend(((*frames, c.name), c) for c in node.children.values())


# --------------------------------------------------------------------------------------------- layout


@dataclass(frozen=True, slots=True)
class DiffRect:
    x: float
    width: float
    depth: int
    node: DiffNode
    folded: int = 0  # frames merged into a narrow "…" bar


def layout_diff(
    root: DiffNode, width: float, min_width: float = 2.0, max_rects: int = 2500
) -> tuple[list[DiffRect], int]:
    """Bars sized by left + right (both sides per request, so the wider side shows), narrow siblings folded into one
    ``…`` bar per parent, at most ``max_rects`` bars (the threshold doubles until they fit)."""
    threshold = min_width
    while True:
        rects, folded = _place(root, width, threshold, max_rects)
        if rects is not None or threshold >= width:
            return rects or [DiffRect(0.0, width, 0, root)], folded
        threshold *= 2


def _place(root: DiffNode, width: float, threshold: float, max_rects: int) -> tuple[list[DiffRect] | None, int]:
    if root.width <= 0:
        return [DiffRect(0.0, width, 0, root)], 0
    scale = width / root.width
    rects: list[DiffRect] = []
    folded = 0
    work: list[tuple[DiffNode, int, float]] = [(root, 0, 0.0)]
    while work:
        node, depth, x = work.pop()
        rects.append(DiffRect(x, node.width * scale, depth, node))
        if len(rects) > max_rects:
            return None, 0
        child_x = x + (node.left_self + node.right_self) * scale
        small = DiffNode("…")
        count = 0
        placed: list[tuple[DiffNode, int, float]] = []
        for name in sorted(node.children):
            child = node.children[name]
            if child.width * scale < threshold:
                small.left_total += child.left_total
                small.right_total += child.right_total
                count += 1
                continue
            placed.append((child, depth + 1, child_x))
            child_x += child.width * scale
        if count:
            folded += count
            if small.width * scale >= threshold:
                rects.append(DiffRect(child_x, small.width * scale, depth + 1, small, count))
        work.extend(reversed(placed))
    return rects, folded


def diff_colour(left: int, right: int) -> str:
    """Red when the right side (this span) holds more than the left (usual), green when less, grey when about the
    same (within 5 %); the stronger the difference, the deeper the colour."""
    big = max(left, right)
    if big <= 0:
        return "rgb(210,210,210)"
    change = (right - left) / big
    if abs(change) < 0.05:
        return "rgb(200,200,200)"
    depth = int(round(150 * min(1.0, abs(change))))
    return f"rgb(255,{200 - depth},{200 - depth})" if change > 0 else f"rgb({200 - depth},235,{200 - depth})"
