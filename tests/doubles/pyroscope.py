"""A TEST DOUBLE of Grafana Pyroscope's query API — not Pyroscope. A real aiohttp app (serve it on 127.0.0.1, port 0,
with pytest-aiohttp's ``aiohttp_server``) speaking Connect unary (``application/proto`` and ``application/json``,
gzip request bodies, gzip answers when accepted, Connect error JSON), answering from real pprof samples and
recording every request it was asked. Serve it with ``aiohttp_server(double.app, auto_decompress=False)`` to record
request bodies exactly as they arrived (gzip included).

Data: the shop capture's Push bodies (``tests/fixtures/shop-capture/*_push*.bin``, real pyroscope-io output).
Each pprof is one stored profile: its series labels, its one timestamp (the pprof ``time_nanos``, the start of its
capture window, in ms) and its samples with their ``span_id`` labels (grafana/pyroscope
``pkg/model/pprofsplit/pprof_split.go``: ``span_id`` samples; ``pkg/model/profile.go`` line 93: a span id is 16 hex
characters).

- ``SelectMergeStacktraces`` / ``SelectMergeSpanProfile``: profiles of the profile type whose series labels match
  the label selector and whose timestamp is in ``[start, end]`` (inclusive), samples filtered by ``span_selector``
  (each entry must be 16 hex, else ``invalid span id length``; an EMPTY selector filters nothing, as in Pyroscope),
  merged into a flame graph by the double's own encoder (``encode_flamegraph``, written from Pyroscope's
  ``NewFlameGraph``, never the bridge's), ``max_nodes`` honoured. No data → v2.2's ``total``-only flame graph
  (``empty_style="v2.2"``) or no ``flamegraph`` at all (``"v2.0"``). Pyroscope < 2.2 ignores
  ``SelectMergeStacktraces.span_selector``: ``ignores_stacktraces_span_selector=True``.
- ``ProfileTypes``, ``LabelNames``, ``LabelValues``, ``Series`` (with ``__name__`` and ``__profile_type__``, as
  Pyroscope answers), ``SelectSeries`` from the same data; ``/ready``.
- ``SelectSeries`` honours ``stack_trace_selector.call_site`` (root-first prefix: only samples whose stack starts
  with those frames count) and answers ``exemplar_type = EXEMPLAR_TYPE_SPAN`` with span exemplars per point: the
  ``exemplars_per_point`` spans whose samples added most to it, by the double's own sums (exemplar labels: the
  profile's series labels; no trace id). ``span_exemplars`` plays other Pyroscopes: ``"ignored"`` (one that does not
  know field 10: points, no exemplars) or ``"unimplemented"`` (v2's query backend: Connect ``unimplemented``,
  "exemplar type span is not implemented").
- ``POST /ingest`` (``format=pprof``, raw or multipart ``profile`` part, as ``@pyroscope/nodejs`` and the Go SDK
  upload): stored as Pyroscope stores it, by this double's own reading of Pyroscope's rules
  (``pkg/og/convert/pprof/profile.go``): one ``__name__`` for every sample type — ``wall`` when any sample type is
  ``wall``, else by display name (``cpu`` → ``process_cpu``, …) — labels ``service_name`` (the app name),
  ``pyroscope_spy`` (``spyName``, else ``unknown``) and the name's tags; the one timestamp is the pprof's own
  ``time_nanos`` (an END stamp for ``@datadog/pprof``), replaced by ``from`` only when zero or in 1970.
- ``POST /ingest?format=jfr`` (the Java agent's upload: multipart ``jfr`` and ``labels`` parts, or a raw body),
  read with the JDK's ``jfr`` tool by ``tests/doubles/pyroscope_jfr.py``, which says what it models.
- Faults (``double.faults``): ``delay`` seconds, ``code`` (answer with that Connect error), ``reset`` (drop the
  connection before answering), ``garbage`` (200 with bytes that are not the message), ``paths`` prefix filter.
  ``refused_url()`` (from the Tempo double) gives a URL where nothing listens.

Independence: the double reads pprof and encodes its answers with code of its own (``read_pprof``,
``pprof_samples``, ``encode_flamegraph``); it imports the bridge's generated protobuf classes (the wire contract) and
its Connect error codes, nothing of ``bridge.flamegraph``, ``bridge.pprof`` or ``bridge.store``.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from bridge._proto import profile_pb2, push_pb2, querier_pb2, types_pb2
from bridge.errors import Code
from tests.paths import SHOP_CAPTURE

QUERIER: Final = "/querier.v1.QuerierService/"
GARBAGE: Final = b"\x07\xff\xff\xff this is not a Connect answer"
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")


@dataclass(frozen=True, slots=True)
class StoredProfile:
    type_id: str
    labels: dict[str, str]
    time_ms: int
    samples: list[tuple[tuple[str, ...], int, dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Recorded:
    method: str  # RPC name, or the path for non-RPC requests
    message: Message | None
    codec: str
    headers: dict[str, str]
    body: bytes  # as received (still gzip when it was sent gzipped)


@dataclass(slots=True)
class Faults:
    delay: float = 0.0
    code: Code | None = None
    message: str = "test double failure"
    reset: bool = False
    garbage: bool = False
    paths: str = ""  # only requests whose path starts with this ("" = all)


def load_push_profiles(directory: Path = SHOP_CAPTURE) -> list[StoredProfile]:
    """Every pprof of the capture's Push bodies, as Pyroscope would store it (parsed once; treat as read-only)."""
    return list(_load(directory))


@functools.lru_cache(maxsize=4)
def _load(directory: Path) -> tuple[StoredProfile, ...]:
    out: list[StoredProfile] = []
    for path in sorted(directory.glob("*_push*.bin")):
        req = push_pb2.PushRequest.FromString(path.read_bytes())
        for series in req.series:
            labels = {lp.name: lp.value for lp in series.labels}
            name = labels.pop("__name__", "unknown")
            for raw in series.samples:
                profile = read_pprof(raw.raw_profile)
                ptype, punit = period_type(profile)
                for index, (stype, sunit) in enumerate(sample_types(profile)):
                    out.append(
                        StoredProfile(
                            type_id=f"{name}:{stype}:{sunit}:{ptype}:{punit}",
                            labels=dict(labels),
                            time_ms=profile.time_nanos // 1_000_000,
                            samples=pprof_samples(profile, index),
                        )
                    )
    return tuple(out)


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


@dataclass(slots=True)
class PyroscopeDouble:
    """A test double of Pyroscope's querier. Not Pyroscope."""

    profiles: list[StoredProfile] = field(default_factory=load_push_profiles)
    requests: list[Recorded] = field(default_factory=list)
    faults: Faults = field(default_factory=Faults)
    empty_style: str = "v2.2"
    ignores_stacktraces_span_selector: bool = False
    span_exemplars: str = "span"  # "span", "ignored" (no exemplars) or "unimplemented" (a Connect error)
    exemplars_per_point: int = 10
    cookie: str = ""  # /ready answers with this Set-Cookie when set
    url: str = ""
    app: web.Application = field(init=False)

    def __post_init__(self) -> None:
        self.app = web.Application(client_max_size=64 * 1024**2)
        self.app.router.add_post(QUERIER + "{method}", self._rpc)
        self.app.router.add_get("/ready", self._ready)
        self.app.router.add_post("/ingest", self._ingest)
        self.app.router.add_route("*", "/{tail:.*}", self._not_found)

    # ------------------------------------------------------------------------------------------- what it was asked

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method]

    # ------------------------------------------------------------------------------------------- the data

    def select(
        self, type_id: str, selector: str, start: int, end: int, span_ids: Iterable[str] | None
    ) -> list[tuple[tuple[str, ...], int]]:
        wanted = {s.lower() for s in span_ids} if span_ids else None
        stacks: list[tuple[tuple[str, ...], int]] = []
        for p in self.profiles:
            if p.type_id != type_id or not start <= p.time_ms <= end:
                continue
            if not matches_selector(selector, p.labels):
                continue
            for frames, value, labels in p.samples:
                if wanted is not None and labels.get("span_id") not in wanted:
                    continue
                stacks.append((frames, value))
        return stacks

    def flame(self, stacks: list[tuple[tuple[str, ...], int]], max_nodes: int | None) -> querier_pb2.FlameGraph | None:
        fg = encode_flamegraph(stacks, max_nodes or 0)
        if fg.total == 0 and self.empty_style == "v2.0":
            return None
        return fg  # with no samples: v2.2's "no data", names ["total"] and one level [0, 0, 0, 0]

    # ------------------------------------------------------------------------------------------- handlers

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(Recorded(request.path, None, "", dict(request.headers), b""))
        if (faulted := await self._fault(request)) is not None:
            return faulted
        return web.Response(text="ready\n", headers={"Set-Cookie": self.cookie} if self.cookie else None)

    async def _ingest(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(Recorded(request.path, None, "", dict(request.headers), raw))
        if request.query.get("format", "pprof") == "jfr":
            return await self._ingest_jfr(request, raw)
        if request.query.get("format", "pprof") != "pprof":
            return web.Response(status=400, text="this double ingests format=pprof and jfr only\n")
        if request.content_type.startswith("multipart/"):
            form = await _multipart_parts(request.headers["Content-Type"], raw)
            raw = form.get("profile", b"")
        if request.headers.get("Content-Encoding") == "gzip" and raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)  # the HTTP body encoding; the pprof itself may be gzipped too
        try:
            self.profiles.extend(ingested_profiles(request.query, raw))
        except ValueError as exc:
            return web.Response(status=400, text=f"{exc}\n")
        return web.Response(status=200)

    async def _ingest_jfr(self, request: web.Request, raw: bytes) -> web.StreamResponse:
        from tests.doubles.pyroscope_jfr import ingested_jfr_profiles  # it builds on this module's StoredProfile

        labels = b""
        if request.content_type.startswith("multipart/"):
            form = await _multipart_parts(request.headers["Content-Type"], raw)
            if "jfr" not in form:
                return web.Response(status=400, text="jfr field is required\n")
            raw, labels = form["jfr"], form.get("labels", b"")
        try:
            self.profiles.extend(await ingested_jfr_profiles(request.query, raw, labels))
        except ValueError as exc:
            return web.Response(status=400, text=f"{exc}\n")
        return web.Response(status=200)

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(Recorded(request.path, None, "", dict(request.headers), await request.read()))
        return web.Response(status=404, text="404 page not found\n")

    async def _fault(self, request: web.Request) -> web.StreamResponse | None:
        f = self.faults
        if not request.path.startswith(f.paths):
            return None
        if f.delay:
            await asyncio.sleep(f.delay)
        if f.reset:
            if request.transport is not None:
                request.transport.abort()
            await asyncio.sleep(0.05)
            return web.Response(status=500)
        if f.code is not None:
            return _error(f.code, f.message)
        if f.garbage:
            return web.Response(body=GARBAGE, content_type="application/proto")
        return None

    async def _rpc(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        method = request.match_info["method"]
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        body = (
            gzip.decompress(raw)
            if request.headers.get("Content-Encoding") == "gzip" and raw[:2] == b"\x1f\x8b"
            else raw
        )
        handler = _HANDLERS.get(method)
        msg: Message | None = None
        if handler is not None and ctype in ("application/proto", "application/json"):
            msg = handler[0]()
            try:
                if ctype == "application/proto":
                    msg.ParseFromString(body)
                else:
                    json_format.Parse(body or b"{}", msg, ignore_unknown_fields=True)
            except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
                self.requests.append(Recorded(method, None, ctype, dict(request.headers), raw))
                return _error(Code.INVALID_ARGUMENT, f"cannot decode request: {exc}")
        self.requests.append(Recorded(method, msg, ctype, dict(request.headers), raw))
        if (faulted := await self._fault(request)) is not None:
            return faulted
        if handler is None or msg is None:
            if handler is None:
                return _error(Code.UNIMPLEMENTED, f"{method} is not implemented by the test double")
            return web.Response(status=415, text="unsupported content type")
        try:
            answer = handler[1](self, msg)
        except ValueError as exc:
            return _error(Code.INVALID_ARGUMENT, str(exc))
        except NotImplementedError as exc:
            return _error(Code.UNIMPLEMENTED, str(exc))
        if ctype == "application/proto":
            data = answer.SerializeToString()
        else:
            data = json_format.MessageToJson(answer, indent=None).encode()
        headers = {"Content-Type": ctype}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=data, headers=headers)

    # ------------------------------------------------------------------------------------------- RPCs

    def select_merge_stacktraces(self, req: querier_pb2.SelectMergeStacktracesRequest) -> Message:
        spans: list[str] | None = None
        if req.span_selector and not self.ignores_stacktraces_span_selector:
            spans = _check_span_ids(req.span_selector)
        stacks = self.select(req.profile_typeID, req.label_selector, req.start, req.end, spans)
        fg = self.flame(stacks, req.max_nodes if req.HasField("max_nodes") else None)
        out = querier_pb2.SelectMergeStacktracesResponse()
        if fg is not None:
            out.flamegraph.CopyFrom(fg)
        return out

    def select_merge_span_profile(self, req: querier_pb2.SelectMergeSpanProfileRequest) -> Message:
        spans = _check_span_ids(req.span_selector) if req.span_selector else None  # empty: unfiltered, as in v2
        stacks = self.select(req.profile_typeID, req.label_selector, req.start, req.end, spans)
        fg = self.flame(stacks, req.max_nodes if req.HasField("max_nodes") else None)
        out = querier_pb2.SelectMergeSpanProfileResponse()
        if fg is not None:
            out.flamegraph.CopyFrom(fg)
        return out

    def profile_types(self, req: querier_pb2.ProfileTypesRequest) -> Message:
        out = querier_pb2.ProfileTypesResponse()
        for type_id in sorted({p.type_id for p in self.profiles}):
            name, stype, sunit, ptype, punit = type_id.split(":")
            out.profile_types.add(
                ID=type_id, name=name, sample_type=stype, sample_unit=sunit, period_type=ptype, period_unit=punit
            )
        return out

    def label_names(self, req: types_pb2.LabelNamesRequest) -> Message:
        names = {"__name__"} | {k for p in self._in_range(req.start, req.end, req.matchers) for k in p.labels}
        return types_pb2.LabelNamesResponse(names=sorted(names))

    def label_values(self, req: types_pb2.LabelValuesRequest) -> Message:
        values = {p.labels[req.name] for p in self._in_range(req.start, req.end, req.matchers) if req.name in p.labels}
        return types_pb2.LabelValuesResponse(names=sorted(values))

    def series(self, req: querier_pb2.SeriesRequest) -> Message:
        out = querier_pb2.SeriesResponse()
        seen: set[tuple[tuple[str, str], ...]] = set()
        for p in self._in_range(req.start, req.end, req.matchers):
            every = {**p.labels, "__name__": p.type_id.split(":")[0], "__profile_type__": p.type_id}
            labels = tuple(sorted((k, v) for k, v in every.items() if not req.label_names or k in req.label_names))
            if labels not in seen:
                seen.add(labels)
                out.labels_set.add().labels.extend(types_pb2.LabelPair(name=k, value=v) for k, v in labels)
        return out

    def select_series(self, req: querier_pb2.SelectSeriesRequest) -> Message:
        span_wanted = req.exemplar_type == types_pb2.EXEMPLAR_TYPE_SPAN
        if span_wanted and self.span_exemplars == "unimplemented":
            raise NotImplementedError("exemplar type span is not implemented")
        call_site = (
            tuple(loc.name for loc in req.stack_trace_selector.call_site)
            if req.HasField("stack_trace_selector")
            else ()
        )
        groups: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
        by_span: dict[tuple[tuple[str, str], ...], dict[int, dict[str, tuple[int, int, dict[str, str]]]]] = {}
        step_ms = max(1, int(req.step * 1000)) if req.step else 15_000
        for p in self.profiles:
            if p.type_id != req.profile_typeID or not req.start <= p.time_ms <= req.end:
                continue
            if not matches_selector(req.label_selector, p.labels):
                continue
            key = tuple((g, p.labels.get(g, "")) for g in req.group_by)
            bucket = p.time_ms - p.time_ms % step_ms
            points = groups.setdefault(key, {})
            picked = [(v, labels) for frames, v, labels in p.samples if frames[: len(call_site)] == call_site]
            if not picked:
                continue
            points[bucket] = points.get(bucket, 0.0) + sum(v for v, _ in picked)
            spans = by_span.setdefault(key, {}).setdefault(bucket, {})
            for value, labels in picked:
                span = labels.get("span_id")
                if span:
                    have, _, _ = spans.get(span, (0, 0, {}))
                    spans[span] = (have + value, p.time_ms, p.labels)
        out = querier_pb2.SelectSeriesResponse()
        for key, points in sorted(groups.items()):
            if not points:
                continue
            series = out.series.add()
            series.labels.extend(types_pb2.LabelPair(name=k, value=v) for k, v in key)
            for ts, value in sorted(points.items()):
                point = series.points.add(value=value, timestamp=ts)
                if span_wanted and self.span_exemplars == "span":
                    ranked = sorted(by_span.get(key, {}).get(ts, {}).items(), key=lambda kv: (-kv[1][0], kv[0]))
                    for span, (total, stamp, labels) in ranked[: self.exemplars_per_point]:
                        point.exemplars.add(
                            timestamp=stamp,
                            span_id=span,
                            value=total,
                            labels=[types_pb2.LabelPair(name=k, value=v) for k, v in sorted(labels.items())],
                        )
        return out

    def _in_range(self, start: int, end: int, matchers: Iterable[str]) -> list[StoredProfile]:
        found = []
        for p in self.profiles:
            if start and end and not start <= p.time_ms <= end:
                continue
            if all(matches_selector(m, p.labels) for m in matchers):
                found.append(p)
        return found


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
        StoredProfile(
            type_id=f"{relabeled(name, stype)}:{stype}:{sunit}:{ptype}:{punit}",
            labels=dict(labels, __name_replaced__=name) if relabeled(name, stype) != name else dict(labels),
            time_ms=stamp // 1_000_000,
            samples=samples[index],
        )
        for index, (stype, sunit) in enumerate(kinds)
    ]


def relabeled(name: str, sample_type: str) -> str:
    """The series name after Pyroscope's default relabeling (``pkg/validation/relabeling.go``, applied first by every
    distributor): the ``cpu`` sample type of a ``wall`` profile becomes ``process_cpu`` (the old name is kept in the
    ``__name_replaced__`` label)."""
    return "process_cpu" if (name, sample_type) == ("wall", "cpu") else name


async def _multipart_parts(content_type: str, raw: bytes) -> dict[str, bytes]:
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


def _check_span_ids(ids: Iterable[str]) -> list[str]:
    out = []
    for sid in ids:
        if not _HEX16.match(sid):
            raise ValueError(f'invalid span id length: "{sid}"')
        out.append(sid.lower())
    return out


# Connect's status per code, as the contract lists it (Pyroscope §1), written here rather than taken from the bridge
CONNECT_STATUS: Final = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}


def _error(code: Code, message: str) -> web.Response:
    return web.Response(
        status=CONNECT_STATUS[code.value],
        body=json.dumps({"code": code.value, "message": message, "details": []}).encode(),
        content_type="application/json",
    )


_HANDLERS: Final[dict[str, tuple[type[Message], Any]]] = {
    "SelectMergeStacktraces": (querier_pb2.SelectMergeStacktracesRequest, PyroscopeDouble.select_merge_stacktraces),
    "SelectMergeSpanProfile": (querier_pb2.SelectMergeSpanProfileRequest, PyroscopeDouble.select_merge_span_profile),
    "ProfileTypes": (querier_pb2.ProfileTypesRequest, PyroscopeDouble.profile_types),
    "LabelNames": (types_pb2.LabelNamesRequest, PyroscopeDouble.label_names),
    "LabelValues": (types_pb2.LabelValuesRequest, PyroscopeDouble.label_values),
    "Series": (querier_pb2.SeriesRequest, PyroscopeDouble.series),
    "SelectSeries": (querier_pb2.SelectSeriesRequest, PyroscopeDouble.select_series),
}
