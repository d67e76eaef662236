"""The Pyroscope TEST DOUBLE's own model of what Pyroscope computes — not Pyroscope, and never the bridge's code:
how an upload is split into series and how /ingest names and stamps it, label selectors, reading pprof, merging
stacks into Pyroscope's flame graph and diff flame graph, and building SelectHeatmap's answer. Written from
grafana/pyroscope v2.2.1 (680d072b): ``pkg/model/pprofsplit``, ``pkg/model/flamegraph.go`` ``NewFlameGraph``,
``pkg/model/flamegraph_diff.go`` ``NewFlamegraphDiff``, ``pkg/model/heatmap`` (``Builder``, ``RangeHeatmap``,
``TopSeries``) and ``pkg/querybackend/query_heatmap.go``; ``tests/doubles/pyroscope.py`` serves them."""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from google.protobuf.message import DecodeError

from bridge._proto import profile_pb2, push_pb2, querier_pb2, types_pb2


@dataclass(frozen=True, slots=True)
class StoredProfile:
    type_id: str
    labels: dict[str, str]
    time_ms: int
    samples: list[tuple[tuple[str, ...], int, dict[str, str]]]


_MATCHER = re.compile(r'\s*([\w.]+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def matches_selector(selector: str, labels: Mapping[str, str]) -> bool:
    """The double's own reading of a Prometheus-style selector (independent of the bridge's parser)."""
    body = selector.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    pos = 0
    while pos < len(body.strip()) and pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None:
            raise ValueError(f"parse error in label selector {selector!r}")
        name, op, value = m.group(1), m.group(2), m.group(3).encode().decode("unicode_escape")
        have = labels.get(name, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
        pos = m.end()
    return True


# ------------------------------------------------------------------------------------------- /ingest, as Pyroscope

# the display names Pyroscope reads pprof sample types by (its DefaultSampleTypeMapping)
_DISPLAY: Final = {"samples": "cpu", "goroutine": "goroutines", "contentions": "mutex_count", "delay": "mutex_duration"}
_BY_WORD: Final = (
    ("cpu", "process_cpu"),
    ("alloc_", "memory"),
    ("inuse_", "memory"),
    ("mutex_", "mutex"),
    ("block_", "block"),
    ("goroutines", "goroutines"),
)
_APP: Final = re.compile(r"^([^{}]+?)\s*(?:\{([^{}]*)\})?\s*$")
_YEAR_1971_NS: Final = 31_536_000 * 10**9


def ingest_metric_name(kinds: list[str]) -> str:
    """Pyroscope's ``metricName`` for an /ingest pprof, as this double reads it."""
    if any(k == "wall" for k in kinds):
        return "wall"
    shown = ""
    for kind in kinds:
        shown = _DISPLAY.get(kind, kind)
        for word, metric in _BY_WORD:
            if word in shown:
                return metric
        if shown in ("space", "objects"):
            return "memory"
    return shown


def app_and_tags(query: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The upload's ``name``: the application name and its tags (``__``-prefixed ones left out)."""
    match = _APP.match(query.get("name", ""))
    if match is None or not match.group(1).strip():
        raise ValueError("name must be app{k=v,...}")
    tags = {}
    for item in (match.group(2) or "").split(","):
        key, _, value = item.partition("=")
        if key.strip() and not key.strip().startswith("__"):
            tags[key.strip()] = value.strip()
    return match.group(1).strip(), tags


def ingested_profiles(query: Mapping[str, str], raw: bytes) -> list[StoredProfile]:
    """One stored profile per sample type of an /ingest pprof, named and stamped as Pyroscope does."""
    app, tags = app_and_tags(query)
    labels = {"service_name": app, "pyroscope_spy": query.get("spyName") or "unknown", **tags}
    try:
        profile = read_pprof(raw)
        kinds = sample_types(profile)
        ptype, punit = period_type(profile)
        samples = [[s for s in pprof_samples(profile, index) if s[1]] for index in range(len(kinds))]
    except (OSError, EOFError, zlib.error, DecodeError, LookupError) as exc:  # gzip, protobuf, dangling indexes
        raise ValueError(f"not a pprof profile: {exc!r}") from exc
    stamp = profile.time_nanos
    if stamp < _YEAR_1971_NS:  # zero or 1970: Pyroscope uses the upload's from (seconds), else "now"
        stamp = int(query.get("from") or 0) * 10**9
    name = ingest_metric_name([k for k, _ in kinds])
    return [
        stored
        for index, (stype, sunit) in enumerate(kinds)
        for stored in split_series(
            f"{relabeled(name, stype)}:{stype}:{sunit}:{ptype}:{punit}",
            dict(labels, __name_replaced__=name) if relabeled(name, stype) != name else labels,
            stamp // 1_000_000,
            samples[index],
        )
    ]


def relabeled(name: str, sample_type: str) -> str:
    """The series name after Pyroscope's default relabeling (``pkg/validation/relabeling.go``, applied first by every
    distributor): the ``cpu`` sample type of a ``wall`` profile becomes ``process_cpu`` (the old name is kept in the
    ``__name_replaced__`` label)."""
    return "process_cpu" if (name, sample_type) == ("wall", "cpu") else name


SAMPLE_ONLY_LABELS: Final = ("span_id", "trace_id")  # pprof labels Pyroscope keeps per sample, not as series labels


def split_series(
    type_id: str, labels: Mapping[str, str], time_ms: int, samples: list[tuple[tuple[str, ...], int, dict[str, str]]]
) -> list[StoredProfile]:
    """One pprof's samples as Pyroscope stores them (``pkg/model/pprofsplit`` ``VisitSampleSeries``): ``profile_id``
    renamed to ``span_id``; samples grouped by their labels other than ``span_id`` and ``trace_id``, each group a
    series of its own whose labels are the upload's plus the group's (the upload's win a clash)."""
    groups: dict[tuple[tuple[str, str], ...], list[tuple[tuple[str, ...], int, dict[str, str]]]] = {}
    for frames, value, sample_labels in samples:
        own = dict(sample_labels)
        if "profile_id" in own:
            own.setdefault("span_id", own.pop("profile_id"))
        key = tuple(sorted((k, v) for k, v in own.items() if k not in SAMPLE_ONLY_LABELS))
        groups.setdefault(key, []).append((frames, value, own))
    out = []
    for key, grouped in groups.items():
        series = dict(key)
        series.update(labels)
        out.append(StoredProfile(type_id, series, time_ms, grouped))
    return out or [StoredProfile(type_id, dict(labels), time_ms, [])]


def pushed_profiles(req: push_pb2.PushRequest) -> list[StoredProfile]:
    """A PushRequest as Pyroscope stores it: per series, pprof and sample type (``__name__`` and the pprof's types make
    its profile type), ``__delta__`` left out (``pkg/segmentwriter/memdb/head.go`` line 87), a sample whose value of
    the type is 0 left out (it adds nothing; ``pkg/pprof/pprof.go`` ``Normalize`` drops all-zero samples), split
    into series by their sample labels (``split_series``)."""
    out: list[StoredProfile] = []
    for series in req.series:
        labels = {lp.name: lp.value for lp in series.labels if lp.name != "__delta__"}
        name = labels.pop("__name__", "unknown")
        for raw in series.samples:
            profile = read_pprof(raw.raw_profile)
            ptype, punit = period_type(profile)
            for index, (stype, sunit) in enumerate(sample_types(profile)):
                samples = [s for s in pprof_samples(profile, index) if s[1]]
                type_id = f"{name}:{stype}:{sunit}:{ptype}:{punit}"
                out.extend(split_series(type_id, labels, profile.time_nanos // 1_000_000, samples))
    return out


async def multipart_parts(content_type: str, raw: bytes) -> dict[str, bytes]:
    """The parts of a multipart/form-data body, by name (parsed with the standard library's email parser)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    parts: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            parts[name] = payload
    return parts


# ------------------------------------------------------------------------------------- the double's own pprof


def read_pprof(raw: bytes) -> profile_pb2.Profile:
    """pprof bytes, gzip-compressed or plain."""
    return profile_pb2.Profile.FromString(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def sample_types(profile: profile_pb2.Profile) -> list[tuple[str, str]]:
    return [(profile.string_table[t.type], profile.string_table[t.unit]) for t in profile.sample_type]


def period_type(profile: profile_pb2.Profile) -> tuple[str, str]:
    return profile.string_table[profile.period_type.type], profile.string_table[profile.period_type.unit]


def pprof_samples(profile: profile_pb2.Profile, index: int) -> list[tuple[tuple[str, ...], int, dict[str, str]]]:
    """Every sample as (frames root first, its value of sample type ``index``, its string labels). A sample lists its
    locations leaf first; a location lists its inlined lines innermost first; a location without lines is named by
    its address in hex, as Pyroscope names it."""
    strings = profile.string_table
    function_name = {f.id: strings[f.name] for f in profile.function}
    location_frames = {
        loc.id: [function_name[line.function_id] for line in loc.line] or [f"{loc.address:x}"]
        for loc in profile.location
    }
    out = []
    for sample in profile.sample:
        leaf_first = [name for loc_id in sample.location_id for name in location_frames[loc_id]]
        labels = {strings[label.key]: strings[label.str] for label in sample.label if label.str}
        out.append((tuple(reversed(leaf_first)), sample.value[index], labels))
    return out


# ------------------------------------------------------------------------------------- the double's own flame graph


@dataclass(slots=True)
class Frame:
    """A node of the double's call tree: children by name, ``total`` = ``self`` + the children's totals."""

    name: str
    total: int = 0
    self: int = 0
    children: dict[str, Frame] = field(default_factory=dict)


def call_tree(stacks: Iterable[tuple[tuple[str, ...], int]]) -> Frame:
    """Stacks (root frame first) → a call tree. As Pyroscope's tree, it keeps only positive values and has no root
    frame of its own: a stack without frames adds nothing."""
    root = Frame("total")
    for frames, value in stacks:
        if value <= 0 or not frames:
            continue
        root.total += value
        node = root
        for name in frames:
            node = node.children.setdefault(name, Frame(name))
            node.total += value
        node.self += value
    return root


def fold_threshold(root: Frame, max_nodes: int) -> int:
    """Pyroscope's ``minValue``: with more than ``max_nodes`` nodes (the root not counted), the ``max_nodes``-th
    largest total; a node is kept when its total is at least that (so ties are all kept). 0: nothing folds."""
    totals: list[int] = []
    pending = list(root.children.values())
    while pending:
        node = pending.pop()
        totals.append(node.total)
        pending.extend(node.children.values())
    if max_nodes < 1 or len(totals) <= max_nodes:
        return 0
    return sorted(totals, reverse=True)[max_nodes - 1]


def encode_flamegraph(stacks: Iterable[tuple[tuple[str, ...], int]], max_nodes: int = 0) -> querier_pb2.FlameGraph:
    """Pyroscope's flame graph of merged stacks (grafana/pyroscope ``pkg/model/flamegraph.go``, as ``NewFlameGraph``
    writes it): ``names[0]`` is ``total``; one row per depth of ``[x delta, total, self, name index]``, the x of a
    node delta-encoded against the end of the previous node in its row. A node's own (self) width comes first, its
    children after it, by name; children below the fold threshold — and any child called ``other`` — are summed
    into one ``other`` child placed last."""
    root = call_tree(stacks)
    threshold = fold_threshold(root, max_nodes)
    rows: list[list[tuple[int, Frame]]] = []  # per depth: (x, node), in placing order

    def place(node: Frame, depth: int, x: int) -> None:
        if depth == len(rows):
            rows.append([])
        rows[depth].append((x, node))
        child_x = x + node.self
        other = 0
        for name in sorted(node.children):
            child = node.children[name]
            if child.total >= threshold and child.name != "other":
                place(child, depth + 1, child_x)
                child_x += child.total
            else:
                other += child.total
        if other:
            place(Frame("other", other, other), depth + 1, child_x)

    place(root, 0, 0)
    name_index = {"total": 0}  # a function called "total" shares the root's name, as in Pyroscope
    fg = querier_pb2.FlameGraph(total=root.total, max_self=max(node.self for row in rows for _, node in row))
    for row in rows:
        values: list[int] = []
        prev_end = 0
        for x, node in sorted(row, key=lambda placed: placed[0]):
            index = name_index.setdefault(node.name, len(name_index))
            values += [x - prev_end, node.total, node.self, index]
            prev_end = x + node.total
        fg.levels.add(values=values)
    fg.names.extend(name_index)  # a dict keeps insertion order: names[i] is the name of index i
    return fg


# ------------------------------------------------------------------------------------- the double's own diff


def encode_diff(
    left_stacks: Iterable[tuple[tuple[str, ...], int]],
    right_stacks: Iterable[tuple[tuple[str, ...], int]],
    max_nodes: int = 0,
) -> querier_pb2.FlameGraphDiff:
    """Pyroscope's diff flame graph of two merged sides, as ``NewFlamegraphDiff`` writes it: one tree holding both
    sides' nodes (a node one side lacks is there with zeros), children by name, each node's self width before its
    children; 7 values per node, ``[x, total, self]`` of the left side, the same of the right, the name index; each
    side's x delta-encoded against the end of the previous node of that side in its row. With ``max_nodes``, a
    child below the threshold on both sides joins one ``other`` child per parent, placed last."""
    left, right = call_tree(left_stacks), call_tree(right_stacks)
    merged: dict[tuple[str, ...], list[int]] = {}  # path → [left total, left self, right total, right self]

    def walk(node: Frame, path: tuple[str, ...], side: int) -> None:
        row = merged.setdefault(path, [0, 0, 0, 0])
        row[2 * side] += node.total
        row[2 * side + 1] += node.self
        for child in node.children.values():
            walk(child, (*path, child.name), side)

    walk(left, (), 0)
    walk(right, (), 1)
    totals = sorted((max(v[0], v[2]) for p, v in merged.items() if p), reverse=True)
    threshold = totals[max_nodes - 1] if 0 < max_nodes < len(totals) else 0
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for path in merged:
        if path:
            children.setdefault(path[:-1], []).append(path)
    out = querier_pb2.FlameGraphDiff(leftTicks=left.total, rightTicks=right.total, total=left.total + right.total)
    names: dict[str, int] = {"total": 0}
    rows: list[list[int]] = []
    ends: list[list[int]] = []

    def place(name: str, values: list[int], kids: list[tuple[str, ...]], depth: int, xl: int, xr: int) -> None:
        if depth == len(rows):
            rows.append([])
            ends.append([0, 0])
        lt, ls, rt, rs = values
        index = names.setdefault(name, len(names))
        rows[depth] += [xl - ends[depth][0], lt, ls, xr - ends[depth][1], rt, rs, index]
        ends[depth] = [xl + lt, xr + rt]
        out.max_self = max(out.max_self, ls, rs)
        xl, xr = xl + ls, xr + rs
        other = [0, 0, 0, 0]
        for kid in sorted(kids, key=lambda p: p[-1]):
            v = merged[kid]
            if max(v[0], v[2]) >= threshold and kid[-1] != "other":
                place(kid[-1], v, children.get(kid, []), depth + 1, xl, xr)
                xl, xr = xl + v[0], xr + v[2]
            else:
                other = [other[0] + v[0], other[1] + v[0], other[2] + v[2], other[3] + v[2]]
        if other[0] or other[2]:
            place("other", other, [], depth + 1, xl, xr)

    place("total", [left.total, 0, right.total, 0], children.get((), []), 0, 0, 0)
    out.levels.extend(querier_pb2.Level(values=row) for row in rows)
    out.names.extend(names)
    return out


# ------------------------------------------------------------------------------------- the double's own heatmap

Y_BUCKETS = 20  # pkg/model/heatmap/range.go DefaultYAxisBuckets


@dataclass(frozen=True, slots=True)
class HeatPoint:
    """One point of SelectHeatmap's raw report: a profile (individual) or a span's samples in one profile (span),
    merged per (timestamp, span, trace, profile) as ``pointsBuilder`` merges them."""

    timestamp: int  # ms: the profile's
    span_id: str  # 16 hex, "" for an individual profile
    trace_id: str  # 32 hex, "" when the samples carry none
    profile_id: str  # "" for span points
    value: int
    labels: tuple[tuple[str, str], ...]  # the point's labels: the series' own minus the group-by ones

    @property
    def order(self) -> tuple[int, int, bytes, str]:
        # pointsBuilder keeps its points sorted by timestamp, span id as a little-endian uint64, trace id, profile id
        span = int.from_bytes(bytes.fromhex(self.span_id), "little") if self.span_id else 0
        return self.timestamp, span, bytes.fromhex(self.trace_id) if self.trace_id else b"", self.profile_id


def _round_up(ts: int, start: int, step: int) -> int:
    mod = start % step
    ts -= mod
    if ts % step:
        ts = (ts // step + 1) * step
    return ts + mod


def _slot_of(ts: int, start: int, end: int, step: int) -> int:
    """The end of the step-wide bucket ``ts`` falls in: ``(start-step, start]``, ``(start, start+step]``, …"""
    ts, end = _round_up(ts, start, step), _round_up(end, start, step)
    return start if ts < start else end if ts > end else ts


def _buckets(low: int, high: int) -> list[tuple[int, int]]:
    size = (high - low) / Y_BUCKETS
    out = [(low + int(i * size), low + int((i + 1) * size)) for i in range(Y_BUCKETS)]
    out[-1] = (out[-1][0], high)
    return out


def _bucket_of(value: int, buckets: list[tuple[int, int]]) -> int:
    for i, (low, high) in enumerate(buckets):
        if low <= value < high:
            return i
    return len(buckets) - 1 if value >= buckets[-1][0] else -1


def range_heatmap(
    series: dict[tuple[tuple[str, str], ...], list[HeatPoint]], start: int, end: int, step: int, exemplars: bool
) -> list[types_pb2.HeatmapSeries]:
    """``RangeHeatmap``: the points of every series in time slots of ``step`` ms (each slot's timestamp is its end)
    and 20 value bands shared by all series (from the smallest to the largest point value); per slot and band a
    count, and with ``exemplars`` the highest point of the cell as its exemplar."""
    values = [p.value for points in series.values() for p in points]
    if not values:
        return []
    low, high = min(values), max(values)
    buckets = _buckets(low, high if high > low else low + 1)
    out: list[types_pb2.HeatmapSeries] = []
    for labels, points in series.items():
        cells: dict[tuple[int, int], list[HeatPoint]] = {}
        for point in sorted(points, key=lambda p: p.order):
            band = _bucket_of(point.value, buckets)
            if band >= 0:
                cells.setdefault((_slot_of(point.timestamp, start, end, step), band), []).append(point)
        hs = types_pb2.HeatmapSeries(labels=[types_pb2.LabelPair(name=k, value=v) for k, v in labels])
        for ts in sorted({ts for ts, _ in cells}):
            slot = hs.slots.add(timestamp=ts, y_min=[float(low) for low, _ in buckets], counts=[0] * len(buckets))
            for band in range(len(buckets)):
                cell = cells.get((ts, band))
                if not cell:
                    continue
                slot.counts[band] = len(cell)
                if exemplars:
                    best = cell[0]
                    for point in cell[1:]:
                        best = point if point.value > best.value else best
                    slot.exemplars.add(
                        timestamp=best.timestamp,
                        profile_id=best.profile_id,
                        span_id=best.span_id,
                        trace_id=best.trace_id,
                        value=best.value,
                        labels=[types_pb2.LabelPair(name=k, value=v) for k, v in best.labels],
                    )
        out.append(hs)
    return out


def top_series(series: list[types_pb2.HeatmapSeries], limit: int) -> list[types_pb2.HeatmapSeries]:
    """``TopSeries``: the ``limit`` series with the most points, ties by their labels."""
    if limit <= 0 or len(series) <= limit:
        return series

    def key(s: types_pb2.HeatmapSeries) -> tuple[int, list[tuple[str, str]]]:
        return -sum(sum(slot.counts) for slot in s.slots), [(lp.name, lp.value) for lp in s.labels]

    return sorted(series, key=key)[:limit]
