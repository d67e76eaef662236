"""Pure: a pprof profile as the DOT graph Pyroscope answers for ``PROFILE_FORMAT_DOT`` and ``/pyroscope/render?
format=dot`` — grafana/pyroscope ``pkg/frontend/dot`` (read at 3fe6a457), itself pprof's ``internal/graph`` and
``internal/report``: ``report.NewDefault(profile, Options{NodeCount: n})`` then ``GetDOT`` and ``ComposeDot``.

What that does, and so what this does:

- Nodes: one per function (name, file, line), ``flat`` (samples whose leaf it is) and ``cum`` (samples holding it,
  once per sample); edges caller → callee, once per sample, ``residual`` when they skip nodes that were dropped.
- Trimming (no node or edge fraction): nodes ordered by their entropy score (``EntropyOrder``), the first
  ``max_nodes`` kept and the graph rebuilt from the samples with only those, then ordered again; residual edges
  another path already explains removed (``RemoveRedundantEdges``).
- Values are formatted in the sample unit's base unit (``measurement.ScaledLabel`` with no output unit: nanoseconds
  as seconds with two decimals, bytes as ``B``, other units as plain numbers), percentages of the total of absolute
  sample values.
- The legend: the mapping's file, ``Type``, ``Time`` (UTC), ``Duration`` and total, what is shown, how many nodes
  of how many, and pprof's pointer to how to read the graph.

Pyroscope first truncates the merged pprof to 512 locations by its symbol resolver (``symdb``) before drawing it;
the store draws from the whole merged profile, so a graph of a very large profile may keep nodes Pyroscope's
would have folded first. Label and numeric tags (nodelets) are drawn by pprof from sample labels, which the
store's merged profiles do not carry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from bridge._proto import profile_pb2 as pb

DEFAULT_NODES: Final = 100  # Pyroscope's dot max nodes when the request gives none
SOURCE_NODES: Final = 512  # the pprof Pyroscope draws from (its location truncation, not done here)

_JAVA = re.compile(r"^(?:[a-z]\w*\.)*([A-Z][\w\$]*\.(?:<init>|[a-z][\w\$]*(?:\$\d+)?))(?:(?:\()|$)")
_GO = re.compile(r"^(?:[\w\-\.]+\/)+([^.]+\..+)")
_GO_VERSION = re.compile(r"^(.*?)/v(?:[2-9]|[1-9][0-9]+)([./].*)$")
_CPP = re.compile(r"^(?:[_a-zA-Z]\w*::)+(_*[A-Z]\w*::~?[_a-zA-Z]\w*(?:<.*>)?)")
_CPP_ANONYMOUS = re.compile(r"^\(anonymous namespace\)::")

# measurement.go's unit types: (canonical name, aliases, factor), the default unit
_UNITS: Final = (
    (
        (("B", ("b", "byte"), 1.0), ("kB", ("kb", "kbyte", "kilobyte"), float(1 << 10)),
         ("MB", ("mb", "mbyte", "megabyte"), float(1 << 20)), ("GB", ("gb", "gbyte", "gigabyte"), float(1 << 30)),
         ("TB", ("tb", "tbyte", "terabyte"), float(1 << 40)), ("PB", ("pb", "pbyte", "petabyte"), float(1 << 50))),
        ("B", 1.0),
    ),
    (
        (("ns", ("ns", "nanosecond"), 1.0), ("us", ("μs", "us", "microsecond"), 1e3),
         ("ms", ("ms", "millisecond"), 1e6), ("s", ("s", "sec", "second"), 1e9),
         ("hrs", ("hour", "hr"), 3600e9)),
        ("s", 1e9),
    ),
)  # fmt: skip


@dataclass(eq=False)
class _Node:
    name: str
    file: str
    line: int
    address: int
    flat: int = 0
    cum: int = 0
    into: dict[_Node, _Edge] = field(default_factory=dict)  # In: keyed by source
    out: dict[_Node, _Edge] = field(default_factory=dict)  # Out: keyed by destination

    @property
    def key(self) -> tuple[str, str, int, int]:
        return self.name, self.file, self.line, self.address

    def printable(self) -> str:
        return " ".join(_components(self.name, self.file, self.line, self.address))


@dataclass(eq=False)
class _Edge:
    src: _Node
    dest: _Node
    weight: int
    residual: bool


def _components(name: str, file: str, line: int, address: int) -> list[str]:
    out = [f"{address:016x}"] if address else []
    if name:
        out.append(name)
    if line:
        out.append(f"{file}:{line}")
    elif file:
        out.append(file)
    elif not name:
        out.append("<unknown>")
    return out


# --------------------------------------------------------------------------------------------- units


def _sniff(unit: str) -> tuple[int, tuple[str, float]] | None:
    unit = unit.lower()
    if len(unit) > 2 and unit.endswith("s"):
        unit = unit[:-1]
    for kind, (units, _) in enumerate(_UNITS):
        for canonical, aliases, factor in units:
            if unit in aliases:
                return kind, (canonical, factor)
    return None


def scale(value: int, from_unit: str, to_unit: str) -> tuple[float, str]:
    """``measurement.Scale``."""
    found = _sniff(from_unit)
    if found is not None:
        kind, (_, factor) = found
        units, default = _UNITS[kind]
        v = value * factor
        if to_unit in ("minimum", "auto"):
            best, name = 0.0, ""
            for canonical, _, f in units:
                if f >= best and v / f >= 1.0:
                    best, name = f, canonical
            return (v / best, name) if best else (v / default[1], default[0])
        target = _sniff(to_unit)
        if target is None or target[0] != kind:
            return v / default[1], default[0]
        return v / target[1][1], target[1][0]
    return float(value), "" if to_unit in ("count", "sample", "unit", "minimum", "auto") else to_unit


def scaled_label(value: int, from_unit: str, to_unit: str) -> str:
    v, unit = scale(value, from_unit, to_unit)
    text = f"{v:.2f}"
    text = text[:-3] if text.endswith(".00") else text
    return "0" if text in ("0", "-0") else text + unit


def percentage(value: int, total: int) -> str:
    ratio = abs(value / total) * 100 if total else 0.0
    if 99.95 <= ratio <= 100.05:
        return "  100%"
    if ratio >= 1.0:
        return f"{ratio:5.2f}%"
    return f"{ratio:5.2g}%"


# --------------------------------------------------------------------------------------------- the graph


def _locations(profile: pb.Profile) -> dict[int, list[tuple[str, str, int, int]]]:
    """Location id → its node keys, callee first within the location (its lines as pprof lists them)."""
    strings = list(profile.string_table)
    functions = {f.id: f for f in profile.function}

    def text(index: int) -> str:
        return strings[index] if 0 <= index < len(strings) else ""

    out: dict[int, list[tuple[str, str, int, int]]] = {}
    for loc in profile.location:
        keys = []
        for line in loc.line or [pb.Line()]:
            fn = functions.get(line.function_id)
            if fn is None:
                keys.append(("", "", 0, loc.address))
            else:
                keys.append((text(fn.name), text(fn.filename), int(line.line), loc.address))
        out[loc.id] = keys
    return out


def _build(
    profile: pb.Profile, locations: dict[int, list[tuple[str, str, int, int]]], kept: set[tuple[str, str, int, int]]
) -> list[_Node]:
    """``newGraph``: nodes and edges from every sample, only ``kept`` nodes (all when empty)."""
    nodes: dict[tuple[str, str, int, int], _Node] = {}
    index = len(profile.sample_type) - 1
    for sample in profile.sample:
        w = sample.value[index] if index < len(sample.value) else 0
        if w == 0:
            continue
        seen_nodes: set[int] = set()
        seen_edges: set[tuple[int, int]] = set()
        parent: _Node | None = None
        residual = False
        for loc_id in reversed(sample.location_id):
            for key in reversed(locations.get(loc_id, [])):
                if kept and key not in kept:
                    residual = True
                    continue
                node = nodes.get(key)
                if node is None:
                    node = nodes[key] = _Node(*key)
                if id(node) not in seen_nodes:
                    seen_nodes.add(id(node))
                    node.cum += w
                if parent is not None and node is not parent and (id(node), id(parent)) not in seen_edges:
                    seen_edges.add((id(node), id(parent)))
                    edge = parent.out.get(node)
                    if edge is None:
                        edge = parent.out[node] = node.into[parent] = _Edge(parent, node, 0, residual)
                    edge.weight += w
                    edge.residual = edge.residual or residual
                parent = node
                residual = False
        if parent is not None and not residual:
            parent.flat += w
    return [n for n in nodes.values() if n.cum or n.flat]


def _edge_entropy(edges: Iterable[_Edge], self_value: int) -> float:
    edges = list(edges)
    total = self_value + sum(abs(e.weight) for e in edges if e.weight > 0)
    score = 0.0
    if total:
        for e in edges:
            frac = abs(e.weight) / total
            score += -frac * math.log2(frac) if frac else 0.0
        if self_value > 0:
            frac = abs(self_value) / total
            score += -frac * math.log2(frac)
    return score


def _entropy_order(nodes: list[_Node]) -> list[_Node]:
    def score(n: _Node) -> int:
        s = 1.0 if not n.into else _edge_entropy(n.into.values(), 0)
        s += 1.0 if not n.out else _edge_entropy(n.out.values(), n.flat)
        return int(s * n.cum) + n.flat

    return sorted(nodes, key=lambda n: (-abs(score(n)), n.printable(), -abs(n.flat), str(n.key)))


def _edge_order(edges: Iterable[_Edge]) -> list[_Edge]:
    return sorted(edges, key=lambda e: (-abs(e.weight), e.src.printable(), e.dest.printable()))


def _remove_redundant_edges(nodes: list[_Node]) -> None:
    for node in reversed(nodes):
        for edge in reversed(_edge_order(node.into.values())):
            if not edge.residual:
                break
            if _redundant(edge):
                del edge.src.out[edge.dest]
                del edge.dest.into[edge.src]


def _redundant(edge: _Edge) -> bool:
    """Another path reaches the edge's destination from its source."""
    seen = {id(edge.dest)}
    queue = [edge.dest]
    while queue:
        n = queue.pop(0)
        for other in n.into.values():
            if other is edge or id(other.src) in seen:
                continue
            if other.src is edge.src:
                return True
            seen.add(id(other.src))
            queue.append(other.src)
    return False


# --------------------------------------------------------------------------------------------- DOT text


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\l")


def shorten(name: str) -> str:
    """pprof's ``ShortenFunctionName``."""
    name = _CPP_ANONYMOUS.sub("", name)
    name = _GO_VERSION.sub(r"\1\2", name)
    for pattern in (_GO, _JAVA, _CPP):
        match = pattern.search(name)
        if match is not None:
            return "".join(g or "" for g in match.groups())
    return name


def _multiline(node: _Node) -> str:
    name = _escape(shorten(node.name)).replace("::", "\\n").replace("[...]", "[…]").replace(".", "\\n")
    file = node.file.rsplit("/", 1)[-1] if node.file else ""
    return "\\n".join(_components(name, file, node.line, node.address)) + "\\n"


def _colour(score: float, background: bool) -> str:
    saturation, value = (0.1, 0.93) if background else (1.0, 0.7)
    score = max(-1.0, min(1.0, score))
    if abs(score) < 0.2:
        saturation *= abs(score) / 0.2
    if score > 0.0:
        score = score ** (1.0 - 0.7)
    if score < 0.0:
        score = -((-score) ** (1.0 - 0.7))
    if score < 0.0:
        g, r = value, value * (1 + saturation * score)
    else:
        r, g = value, value * (1 - saturation * score)
    b = value * (1 - saturation)
    return "#{:02x}{:02x}{:02x}".format(*(int(c * 255.0) & 0xFF for c in (r, g, b)))


def _legend(
    profile: pb.Profile, total: int, fmt: Callable[[int], str], shown: list[_Node], orig: int
) -> tuple[str, list[str]]:
    strings = list(profile.string_table)
    st = profile.sample_type[-1]
    sample_type = strings[st.type] if st.type < len(strings) else ""
    unit = (strings[st.unit] if st.unit < len(strings) else "").lower()
    labels: list[str] = []
    title = ""
    if profile.mapping:
        file = strings[profile.mapping[0].filename] if profile.mapping[0].filename < len(strings) else ""
        if file:
            title = file.rsplit("/", 1)[-1]
            labels.append("File: " + title)
    if sample_type:
        labels.append("Type: " + sample_type)
    if profile.time_nanos:
        when = datetime.fromtimestamp(profile.time_nanos // 1_000_000_000, UTC)  # Go's layout, in UTC
        noon = "pm" if when.hour >= 12 else "am"
        labels.append(f"Time: {when:%b} {when.day}, {when.year} at {when.hour % 12 or 12}:{when:%M}{noon} (UTC)")
    if profile.duration_nanos:
        duration = scaled_label(profile.duration_nanos, "nanoseconds", "auto")
        nanos, scaled_unit = scale(total, unit, "nanoseconds")
        ratio = f"({percentage(int(nanos), profile.duration_nanos)})" if scaled_unit == "ns" and nanos else ""
        labels.append(f"Duration: {duration}, Total samples = {fmt(total)} {ratio}")
    flat_sum = sum(n.flat for n in shown)
    share = percentage(flat_sum, total).strip()
    labels.append(f"Showing nodes accounting for {fmt(flat_sum)}, {share} of {fmt(total)} total")
    if total and 0 < len(shown) < orig:
        labels.append(f"Showing top {len(shown)} nodes out of {orig}")
    labels.append("\nSee https://git.io/JfYMW for how to read the graph")
    return title, labels


def from_profile(profile: pb.Profile, max_nodes: int = DEFAULT_NODES) -> str:
    """The DOT text of ``profile`` (its last sample type), at most ``max_nodes`` nodes."""
    if not profile.sample_type:
        return 'digraph "unnamed" {\nnode [style=filled fillcolor="#f8f8f8"]\n}\n'
    strings = list(profile.string_table)
    unit_index = profile.sample_type[-1].unit
    unit = (strings[unit_index] if unit_index < len(strings) else "").lower()
    index = len(profile.sample_type) - 1
    total = sum(abs(s.value[index]) for s in profile.sample if index < len(s.value))

    def fmt(v: int) -> str:
        return scaled_label(v, unit, "")

    locations = _locations(profile)
    nodes = _entropy_order(_build(profile, locations, set()))
    orig = len(nodes)
    if 0 < max_nodes < len(nodes):
        kept = {n.key for n in nodes[:max_nodes]}
        nodes = _entropy_order(_build(profile, locations, kept))
    _remove_redundant_edges(nodes)
    title, labels = _legend(profile, total, fmt, nodes, orig)
    return _compose(nodes, title, labels, total, fmt)


def _compose(nodes: list[_Node], title: str, labels: list[str], total: int, fmt: Callable[[int], str]) -> str:
    lines = [f'digraph "{title or "unnamed"}" {{', 'node [style=filled fillcolor="#f8f8f8"]']
    legend = f'subgraph cluster_L {{ "{_escape(labels[0])}" [shape=box fontsize=16'
    legend += ' label="' + "\\l".join(_escape(label) for label in labels) + '\\l"'
    if title:
        legend += f' tooltip="{title}"'
    lines.append(legend + "] }")
    ids = {id(n): i + 1 for i, n in enumerate(nodes)}
    max_flat = float(max((abs(n.flat) for n in nodes), default=0))
    for n in nodes:
        lines.append(_node_line(n, ids[id(n)], max_flat, total, fmt))
    for e in _edge_order(e for n in nodes for e in n.out.values()):
        lines.append(_edge_line(e, ids[id(e.src)], ids[id(e.dest)], total, fmt))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_line(n: _Node, node_id: int, max_flat: float, total: int, fmt: Callable[[int], str]) -> str:
    label = _multiline(n)
    flat_value = fmt(n.flat)
    label += f"{flat_value} ({percentage(n.flat, total).strip()})" if n.flat else "0"
    cum_value = flat_value
    if n.cum != n.flat:
        label += "\\n" if n.flat else " "
        cum_value = fmt(n.cum)
        label += f"of {cum_value} ({percentage(n.cum, total).strip()})"
    size = 8
    if max_flat and n.flat and abs(n.flat) <= max_flat:
        size += math.ceil(16.0 * math.sqrt(abs(n.flat) / max_flat))
    share = n.cum / abs(total) if total else 0.0
    return (
        f'N{node_id} [label="{label}" id="node{node_id}" fontsize={size} shape=box '
        f'tooltip="{_escape(n.printable())} ({cum_value})" color="{_colour(share, False)}" '
        f'fillcolor="{_colour(share, True)}"]'
    )


def _edge_line(e: _Edge, src: int, dest: int, total: int, fmt: Callable[[int], str]) -> str:
    w = fmt(e.weight)
    attr = f'label=" {w}"'
    if total:
        weight = 1 + min(abs(_div(e.weight * 100, total)), 100)
        if weight > 1:
            attr += f" weight={weight}"
        width = 1 + min(abs(_div(e.weight * 5, total)), 5)
        if width > 1:
            attr += f" penwidth={width}"
        attr += f' color="{_colour(e.weight / abs(total), False)}"'
    arrow = "..." if e.residual else "->"
    tooltip = f'"{_escape(e.src.printable())} {arrow} {_escape(e.dest.printable())} ({w})"'
    attr += f" tooltip={tooltip} labeltooltip={tooltip}"
    if e.residual:
        attr += ' style="dotted"'
    return f"N{src} -> N{dest} [{attr}]"


def _div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q
