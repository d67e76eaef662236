"""A TEST DOUBLE of Grafana Pyroscope's query API — not Pyroscope. A real aiohttp app (serve it on 127.0.0.1, port 0,
with pytest-aiohttp's ``aiohttp_server``) speaking Connect unary (``application/proto`` and ``application/json``,
gzip request bodies, gzip answers when accepted, Connect error JSON), answering from real pprof samples and
recording every request it was asked. Serve it with ``aiohttp_server(double.app, auto_decompress=False)`` to record
request bodies exactly as they arrived (gzip included).

Data: the shop capture's Push bodies (``tests/fixtures/shop-capture/*_push*.bin``, real pyroscope-io output).
Each pprof is one stored profile: its series labels, its one timestamp (the pprof ``time_nanos``, the start of its
capture window, in ms) and its samples with their ``span_id`` labels (``../shared/contracts/pyroscope.md`` §5, §6).

- ``SelectMergeStacktraces`` / ``SelectMergeSpanProfile``: profiles of the profile type whose series labels match
  the label selector and whose timestamp is in ``[start, end]`` (inclusive), samples filtered by ``span_selector``
  (each entry must be 16 hex, else ``invalid span id length``; an EMPTY selector filters nothing, as in Pyroscope),
  merged into a flame graph (``bridge.flamegraph``), ``max_nodes`` honoured. No data → v2.2's ``total``-only flame
  graph (``empty_style="v2.2"``) or no ``flamegraph`` at all (``"v2.0"``). Pyroscope < 2.2 ignores
  ``SelectMergeStacktraces.span_selector``: ``ignores_stacktraces_span_selector=True``.
- ``ProfileTypes``, ``LabelNames``, ``LabelValues``, ``Series`` (with ``__name__`` and ``__profile_type__``, as
  Pyroscope answers), ``SelectSeries`` from the same data; ``/ready``.
- ``POST /ingest`` (``format=pprof``, raw or multipart ``profile`` part, as ``@pyroscope/nodejs`` and the Go SDK
  upload): stored as Pyroscope stores it, by this double's own reading of Pyroscope's rules
  (``pkg/og/convert/pprof/profile.go``): one ``__name__`` for every sample type — ``wall`` when any sample type is
  ``wall``, else by display name (``cpu`` → ``process_cpu``, …) — labels ``service_name`` (the app name),
  ``pyroscope_spy`` (``spyName``, else ``unknown``) and the name's tags; the one timestamp is the pprof's own
  ``time_nanos`` (an END stamp for ``@datadog/pprof``), replaced by ``from`` only when zero or in 1970.
- Faults (``double.faults``): ``delay`` seconds, ``code`` (answer with that Connect error), ``reset`` (drop the
  connection before answering), ``garbage`` (200 with bytes that are not the message), ``paths`` prefix filter.
  ``refused_url()`` (from the Tempo double) gives a URL where nothing listens.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from bridge import flamegraph
from bridge._proto import push_pb2, querier_pb2, types_pb2
from bridge.errors import CODE_TO_HTTP, Code
from bridge.pprof import decode_pprof, iter_samples, period_type, sample_types
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
                profile = decode_pprof(raw.raw_profile)
                ptype, punit = period_type(profile)
                for index, (stype, sunit) in enumerate(sample_types(profile)):
                    out.append(
                        StoredProfile(
                            type_id=f"{name}:{stype}:{sunit}:{ptype}:{punit}",
                            labels=dict(labels),
                            time_ms=profile.time_nanos // 1_000_000,
                            samples=list(iter_samples(profile, index)),
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
        tree = flamegraph.build_tree(stacks)
        if tree.total == 0:
            return None if self.empty_style == "v2.0" else flamegraph.empty()
        return flamegraph.encode(tree, max_nodes or None)

    # ------------------------------------------------------------------------------------------- handlers

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(Recorded(request.path, None, "", dict(request.headers), b""))
        if (faulted := await self._fault(request)) is not None:
            return faulted
        return web.Response(text="ready\n", headers={"Set-Cookie": self.cookie} if self.cookie else None)

    async def _ingest(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(Recorded(request.path, None, "", dict(request.headers), raw))
        if request.query.get("format", "pprof") != "pprof":
            return web.Response(status=400, text="this double ingests format=pprof only\n")
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
        body = gzip.decompress(raw) if request.headers.get("Content-Encoding") == "gzip" and raw[:2] == b"\x1f\x8b" \
            else raw
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
            out.profile_types.add(ID=type_id, name=name, sample_type=stype, sample_unit=sunit, period_type=ptype,
                                  period_unit=punit)
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
            labels = tuple(sorted((k, v) for k, v in every.items()
                                  if not req.label_names or k in req.label_names))
            if labels not in seen:
                seen.add(labels)
                out.labels_set.add().labels.extend(types_pb2.LabelPair(name=k, value=v) for k, v in labels)
        return out

    def select_series(self, req: querier_pb2.SelectSeriesRequest) -> Message:
        groups: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
        step_ms = max(1, int(req.step * 1000)) if req.step else 15_000
        for p in self.profiles:
            if p.type_id != req.profile_typeID or not req.start <= p.time_ms <= req.end:
                continue
            if not matches_selector(req.label_selector, p.labels):
                continue
            key = tuple((g, p.labels.get(g, "")) for g in req.group_by)
            bucket = p.time_ms - p.time_ms % step_ms
            points = groups.setdefault(key, {})
            points[bucket] = points.get(bucket, 0.0) + sum(v for _, v, _ in p.samples)
        out = querier_pb2.SelectSeriesResponse()
        for key, points in sorted(groups.items()):
            series = out.series.add()
            series.labels.extend(types_pb2.LabelPair(name=k, value=v) for k, v in key)
            for ts, value in sorted(points.items()):
                series.points.add(value=value, timestamp=ts)
        return out

    def _in_range(self, start: int, end: int, matchers: Iterable[str]) -> list[StoredProfile]:
        found = []
        for p in self.profiles:
            if start and end and not start <= p.time_ms <= end:
                continue
            if all(matches_selector(m, p.labels) for m in matchers):
                found.append(p)
        return found


# ------------------------------------------------------------------------------------------- /ingest, as Pyroscope

# the display names Pyroscope reads pprof sample types by (its DefaultSampleTypeMapping)
_DISPLAY: Final = {"samples": "cpu", "goroutine": "goroutines", "contentions": "mutex_count", "delay": "mutex_duration"}
_BY_WORD: Final = (("cpu", "process_cpu"), ("alloc_", "memory"), ("inuse_", "memory"), ("mutex_", "mutex"),
                   ("block_", "block"), ("goroutines", "goroutines"))
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


def ingested_profiles(query: Mapping[str, str], raw: bytes) -> list[StoredProfile]:
    """One stored profile per sample type of an /ingest pprof, named and stamped as Pyroscope does."""
    match = _APP.match(query.get("name", ""))
    if match is None or not match.group(1).strip():
        raise ValueError("name must be app{k=v,...}")
    labels = {"service_name": match.group(1).strip(), "pyroscope_spy": query.get("spyName") or "unknown"}
    for item in (match.group(2) or "").split(","):
        key, _, value = item.partition("=")
        if key.strip() and not key.strip().startswith("__"):
            labels[key.strip()] = value.strip()
    try:
        profile = decode_pprof(raw)
    except Exception as exc:  # the bridge's decoder raises its own error type; the double answers 400 either way
        raise ValueError(f"not a pprof profile: {exc}") from exc
    stamp = profile.time_nanos
    if stamp < _YEAR_1971_NS:  # zero or 1970: Pyroscope uses the upload's from (seconds), else "now"
        stamp = int(query.get("from") or 0) * 10**9
    kinds = sample_types(profile)
    name = ingest_metric_name([k for k, _ in kinds])
    ptype, punit = period_type(profile)
    return [
        StoredProfile(type_id=f"{name}:{stype}:{sunit}:{ptype}:{punit}", labels=dict(labels),
                      time_ms=stamp // 1_000_000, samples=[s for s in iter_samples(profile, index) if s[1]])
        for index, (stype, sunit) in enumerate(kinds)
    ]


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


def _error(code: Code, message: str) -> web.Response:
    import json

    return web.Response(
        status=CODE_TO_HTTP[code],
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
