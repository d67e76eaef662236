"""A TEST DOUBLE of Grafana Pyroscope's query API — not Pyroscope. A real aiohttp app (serve it on 127.0.0.1, port 0,
with pytest-aiohttp's ``aiohttp_server``) speaking Connect unary (``application/proto`` and ``application/json``,
gzip request bodies, gzip answers when accepted, Connect error JSON), answering from real pprof samples and
recording every request it was asked. Serve it with ``aiohttp_server(double.app, auto_decompress=False)`` to record
request bodies exactly as they arrived (gzip included).

Data: the shop capture's Push bodies (``tests/fixtures/shop-capture/*_push*.bin``, real pyroscope-io output).
Each pprof is stored as Pyroscope stores it: split into one series per set of sample labels other than ``span_id``
and ``trace_id`` (``span_name`` becomes a series label, grafana/pyroscope ``pkg/model/pprofsplit/pprof_split.go``),
each with its one timestamp (the pprof ``time_nanos``, the start of its capture window, in ms) and its samples, which
keep their ``span_id`` and ``trace_id`` (``pkg/model/profile.go`` line 93: a span id is 16 hex characters).

- ``SelectMergeStacktraces`` / ``SelectMergeSpanProfile``: profiles of the profile type whose series labels match
  the label selector and whose timestamp is in ``[start, end]`` (inclusive), samples filtered by ``span_selector``
  (each entry must be 16 hex, else ``invalid span id length``; an EMPTY selector filters nothing, as in Pyroscope),
  merged into a flame graph by the double's own encoder (``encode_flamegraph``, written from Pyroscope's
  ``NewFlameGraph``, never the bridge's), ``max_nodes`` honoured. No data → v2.2's ``total``-only flame graph
  (``empty_style="v2.2"``) or no ``flamegraph`` at all (``"v2.0"``). Pyroscope < 2.2 ignores
  ``SelectMergeStacktraces.span_selector``: ``ignores_stacktraces_span_selector=True``.
- ``ProfileTypes``, ``LabelNames``, ``LabelValues``, ``Series`` (with ``__name__`` and ``__profile_type__``, as
  Pyroscope answers), ``SelectSeries`` from the same data; ``/ready``.
- ``read_path`` plays Pyroscope's two read paths (grafana/pyroscope v2.2.1): ``"v2"`` (the query frontend over the
  v2 storage, ``pkg/frontend/readpath/queryfrontend``) or ``"v1"`` (the old querier, ``pkg/querier/querier.go``).
- ``SelectSeries``: v2 (``query_select_time_series.go``, ``pkg/model/timeseries/range.go``) sums the profiles from
  one step before ``start`` to ``end`` into the first point (``start`` + k·step) at or after each, always a sum,
  the stack trace selector unread; ``EXEMPLAR_TYPE_INDIVIDUAL``: one exemplar per point, its largest profile (by a
  profile id of the double's own); ``EXEMPLAR_TYPE_SPAN``: the backend's Unimplemented "exemplar type span is not
  implemented", relayed as ``unknown`` (HTTP 500). v1 steps from the epoch, honours the call site (root-first
  prefix) and refuses any exemplars (``unimplemented``, "exemplars are not supported in SelectSeries API, use the v2
  query API instead").
- ``SelectHeatmap`` (v2 only; v1: ``unimplemented``, "SelectHeatmap not implemented in old querier"): individual
  profiles or span points (a span's samples in one profile, ``pkg/querybackend/query_heatmap.go``), in slots of
  ``step`` and 20 value bands, one exemplar per non-empty cell — its highest point, with span id and trace id
  (``pkg/model/heatmap``; ``tests/doubles/pyroscope_model.py``), Pyroscope's validation messages.
- ``Diff``: both sides merged as ``SelectMergeStacktraces`` would (format ignored), diffed by the double's own
  encoder; a span id in either side that is not 16 hex is refused as everywhere.
- A span selector entry must be 16 hex characters: ``invalid span id length: "…"``, or Go's ``encoding/hex:
  invalid byte: U+007A 'z'`` (``pkg/model/profile.go`` ``NewSpanSelector``), as v2 relays its query backend's
  errors (``pyroscope_checks.BackendError``: ``unknown``, HTTP 500, ``rpc error: code = Unknown desc = …``) — and
  only when the range holds data, as v2's frontend answers an empty range before the backend checks anything
  (``holds_data``); sixteen zeros is a span id like any other.
- ``POST /ingest`` (``format=pprof``, raw or multipart ``profile`` part, as ``@pyroscope/nodejs`` and the Go SDK
  upload): stored as Pyroscope stores it, by this double's own reading of Pyroscope's rules
  (``pkg/og/convert/pprof/profile.go``): one ``__name__`` for every sample type — ``wall`` when any sample type is
  ``wall``, else by display name (``cpu`` → ``process_cpu``, …) — labels ``service_name`` (the app name),
  ``pyroscope_spy`` (``spyName``, else ``unknown``) and the name's tags; the one timestamp is the pprof's own
  ``time_nanos`` (an END stamp for ``@datadog/pprof``), replaced by ``from`` only when zero or in 1970.
- ``POST /ingest?format=jfr`` (the Java agent's upload: multipart ``jfr`` and ``labels`` parts, or a raw body),
  converted as Pyroscope converts it — with grafana/jfr-parser, the library Pyroscope calls — by
  ``tests/doubles/pyroscope_jfr.py``, which says what it models.
- Faults (``double.faults``): ``delay`` seconds, ``code`` (answer with that Connect error), ``reset`` (drop the
  connection before answering), ``garbage`` (200 with bytes that are not the message), ``paths`` prefix filter.
  ``refused_url()`` (from the Tempo double) gives a URL where nothing listens.

Independence: the double reads pprof and encodes its answers with code of its own (``read_pprof``,
``pprof_samples``, ``encode_flamegraph``, ``encode_diff``, ``range_heatmap`` in ``tests/doubles/pyroscope_model.py``);
it imports the bridge's generated protobuf classes (the wire contract) and
its Connect error codes, nothing of ``bridge.flamegraph``, ``bridge.pprof`` or ``bridge.store``.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from bridge._proto import push_pb2, querier_pb2, types_pb2
from bridge.errors import Code
from tests.doubles.pyroscope_checks import BackendError, check_profile_type, check_span_ids, heatmap_exemplars
from tests.doubles.pyroscope_model import (
    Frame,
    HeatPoint,
    StoredProfile,
    app_and_tags,
    call_tree,
    encode_diff,
    encode_flamegraph,
    fold_threshold,
    ingest_metric_name,
    ingested_profiles,
    matches_selector,
    multipart_parts,
    period_type,
    pprof_samples,
    pushed_profiles,
    range_heatmap,
    read_pprof,
    relabeled,
    sample_types,
    top_series,
)
from tests.paths import SHOP_CAPTURE

__all__ = [  # the model's functions stay importable from here, as they always were
    "Frame",
    "StoredProfile",
    "app_and_tags",
    "ingest_metric_name",
    "ingested_profiles",
    "matches_selector",
    "call_tree",
    "encode_flamegraph",
    "fold_threshold",
    "period_type",
    "pprof_samples",
    "pushed_profiles",
    "read_pprof",
    "relabeled",
    "sample_types",
]

QUERIER: Final = "/querier.v1.QuerierService/"
GARBAGE: Final = b"\x07\xff\xff\xff this is not a Connect answer"
_HEX = re.compile(r"[0-9a-fA-F]*")


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
        out += pushed_profiles(push_pb2.PushRequest.FromString(path.read_bytes()))
    return tuple(out)


@dataclass(slots=True)
class PyroscopeDouble:
    """A test double of Pyroscope's querier. Not Pyroscope."""

    profiles: list[StoredProfile] = field(default_factory=load_push_profiles)
    requests: list[Recorded] = field(default_factory=list)
    faults: Faults = field(default_factory=Faults)
    empty_style: str = "v2.2"
    ignores_stacktraces_span_selector: bool = False
    read_path: str = "v2"  # "v2" (the query frontend over v2 storage) or "v1" (the old querier)
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
        self,
        type_id: str,
        selector: str,
        start: int,
        end: int,
        span_ids: Iterable[str] | None,
        call_site: tuple[str, ...] = (),
    ) -> list[tuple[tuple[str, ...], int]]:
        wanted = {s.lower() for s in span_ids} if span_ids else None
        stacks: list[tuple[tuple[str, ...], int]] = []
        for p in self.profiles:
            if p.type_id != type_id or not start <= p.time_ms <= end:
                continue
            if not matches_selector(selector, p.labels):
                continue
            for frames, value, labels in p.samples:
                if wanted is not None and labels.get("span_id", "").lower() not in wanted:
                    continue
                if frames[: len(call_site)] != call_site:
                    continue
                stacks.append((frames, value))
        return stacks

    def holds_data(self, lo: int, hi: int) -> bool:
        """Whether v2 would find blocks for ``[lo, hi]`` (ms): only then does its query backend run, and check."""
        return self.read_path != "v2" or any(lo <= p.time_ms <= hi for p in self.profiles)

    def _checked_spans(self, ids: Iterable[str], lo: int, hi: int) -> list[str] | None:
        """A span selector as the query backend checks it (``NewSpanSelector``), or None when empty or when the
        backend would not run."""
        ids = list(ids)
        return check_span_ids(ids) if ids and self.holds_data(lo, hi) else None

    def profile_id(self, profile: StoredProfile) -> str:
        """The double's own id of a stored profile (Pyroscope gives each a UUID at ingest)."""
        return str(uuid.uuid5(uuid.NAMESPACE_OID, f"{self.profiles.index(profile)}:{profile.type_id}"))

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
        if request.content_type.startswith("multipart/") and request.query.get("format") == "pprof":
            # Pyroscope reads the body as a bare pprof then (pkg/ingester/pyroscope/ingest_handler.go): a form's
            # leading "--" is protobuf field 5 (Function) with wire type 5
            message = "parsing IngestInput-pprof failed invalid_argument: proto: wrong wireType = 5 for field Function"
            return web.json_response({"code": "unknown", "message": message}, status=422)
        if request.content_type.startswith("multipart/"):
            form = await multipart_parts(request.headers["Content-Type"], raw)
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

        try:
            self.profiles.extend(
                await ingested_jfr_profiles(request.query_string, request.headers.get("Content-Type", ""), raw)
            )
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
        except BackendError as exc:
            return _error(exc.connect_code, exc.text)
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
        check_profile_type(req.profile_typeID)
        spans: list[str] | None = None
        if req.span_selector and not self.ignores_stacktraces_span_selector:
            spans = self._checked_spans(req.span_selector, req.start, req.end)
        if spans and req.HasField("stack_trace_selector") and self.read_path == "v1":
            raise NotImplementedError(
                "combining span_selector with stack_trace_selector is only supported with the v2 query backend"
            )
        call_site = tuple(loc.name for loc in req.stack_trace_selector.call_site)
        stacks = self.select(req.profile_typeID, req.label_selector, req.start, req.end, spans, call_site)
        fg = self.flame(stacks, req.max_nodes if req.HasField("max_nodes") else None)
        out = querier_pb2.SelectMergeStacktracesResponse()
        if fg is not None:
            out.flamegraph.CopyFrom(fg)
        return out

    def select_merge_span_profile(self, req: querier_pb2.SelectMergeSpanProfileRequest) -> Message:
        check_profile_type(req.profile_typeID)
        spans = self._checked_spans(req.span_selector, req.start, req.end)  # empty: unfiltered, as in v2
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
        """v2 (``query_select_time_series.go``, ``pkg/model/timeseries/range.go``): the profiles from one step before
        ``start`` to ``end``, each summed into the first point (``start`` + k·step, up to ``end``) at or after it;
        always summed; the stack trace selector not read; one INDIVIDUAL exemplar per point, its largest profile.
        v1 (the old querier): steps from the epoch, the call site honoured, no exemplars."""
        kind = req.exemplar_type
        if self.read_path == "v1":
            if kind not in types_pb2.ExemplarType.values():
                raise ValueError(f"unknown exemplar type: {kind}")
            if kind in (types_pb2.EXEMPLAR_TYPE_INDIVIDUAL, types_pb2.EXEMPLAR_TYPE_SPAN):
                raise NotImplementedError(
                    "exemplars are not supported in SelectSeries API, use the v2 query API instead"
                )
        check_profile_type(req.profile_typeID)
        if req.step < 0.001:
            raise ValueError("step must be >= 1ms")
        step_ms = int(req.step * 1000)
        v2 = self.read_path == "v2"
        lo = req.start - step_ms if v2 else req.start
        if not self.holds_data(lo, req.end):
            return querier_pb2.SelectSeriesResponse()
        if kind == types_pb2.EXEMPLAR_TYPE_SPAN:
            raise BackendError("Unimplemented", "exemplar type span is not implemented")
        if kind not in types_pb2.ExemplarType.values():
            raise BackendError("InvalidArgument", f"unknown exemplar type: {kind}")
        call_site = () if v2 else tuple(loc.name for loc in req.stack_trace_selector.call_site)
        groups: dict[tuple[tuple[str, str], ...], dict[int, list[tuple[StoredProfile, int]]]] = {}
        for p in self.profiles:
            if p.type_id != req.profile_typeID or not lo <= p.time_ms <= req.end:
                continue
            if not matches_selector(req.label_selector, p.labels):
                continue
            value = sum(v for frames, v, _ in p.samples if frames[: len(call_site)] == call_site)
            if v2:
                ts = req.start + max(0, -(-(p.time_ms - req.start) // step_ms)) * step_ms
            else:
                ts = p.time_ms - p.time_ms % step_ms
            if value and ts <= req.end:
                key = tuple((g, p.labels.get(g, "")) for g in req.group_by)
                groups.setdefault(key, {}).setdefault(ts, []).append((p, value))
        out = querier_pb2.SelectSeriesResponse()
        for key, points in sorted(groups.items()):
            series = out.series.add(labels=[types_pb2.LabelPair(name=k, value=v) for k, v in key])
            for ts, profiles in sorted(points.items()):
                point = series.points.add(value=float(sum(v for _, v in profiles)), timestamp=ts)
                if kind == types_pb2.EXEMPLAR_TYPE_INDIVIDUAL:
                    p, value = max(profiles, key=lambda pv: pv[1])
                    point.exemplars.add(
                        timestamp=p.time_ms,
                        profile_id=self.profile_id(p),
                        value=value,
                        labels=[types_pb2.LabelPair(name=k, value=v) for k, v in sorted(p.labels.items())],
                    )
        return out

    def select_heatmap(self, req: querier_pb2.SelectHeatmapRequest) -> Message:
        """As ``pkg/frontend/readpath/queryfrontend/query_heatmap.go`` and ``pkg/querybackend/query_heatmap.go``."""
        if self.read_path == "v1":
            raise NotImplementedError("SelectHeatmap not implemented in old querier")
        if req.step < 0.001:
            raise ValueError(f"step must be >= 1ms, got {req.step:f}")
        if req.HasField("limit") and req.limit < 0:
            raise ValueError(f"limit must be non-negative, got {req.limit}")
        if req.start >= req.end:
            raise ValueError(f"start time must be before end time, got start={req.start} end={req.end}")
        check_profile_type(req.profile_typeID)
        step_ms = int(req.step * 1000)
        if not self.holds_data(req.start - step_ms, req.end):
            return querier_pb2.SelectHeatmapResponse()
        exemplars = heatmap_exemplars(req.query_type, req.exemplar_type)
        series: dict[tuple[tuple[str, str], ...], list[HeatPoint]] = {}
        merged: dict[tuple[tuple[tuple[str, str], ...], int, str, str, str], HeatPoint] = {}
        for p in self.profiles:
            if p.type_id != req.profile_typeID or not req.start - step_ms <= p.time_ms <= req.end:
                continue
            if not matches_selector(req.label_selector, p.labels):
                continue
            key = tuple((g, p.labels[g]) for g in req.group_by if g in p.labels)
            own = tuple(sorted((k, v) for k, v in p.labels.items() if k not in req.group_by))
            for span, trace, profile_id, value in self._heat_rows(p, req.query_type):
                at = (key, p.time_ms, span, trace, profile_id)
                have = merged.get(at)
                merged[at] = HeatPoint(p.time_ms, span, trace, profile_id, value + (have.value if have else 0), own)
        for (key, *_), point in merged.items():
            series.setdefault(key, []).append(point)
        answer = range_heatmap(dict(sorted(series.items())), req.start, req.end, step_ms, exemplars)
        return querier_pb2.SelectHeatmapResponse(series=top_series(answer, req.limit))

    def _heat_rows(self, p: StoredProfile, query_type: int) -> list[tuple[str, str, str, int]]:
        """(span id, trace id, profile id, value) rows of one profile: the profile itself, or each sample with a
        span id (Pyroscope's span column: 16 hex, else no span; its trace column: 32 hex, else none)."""
        if query_type == querier_pb2.HEATMAP_QUERY_TYPE_INDIVIDUAL:
            return [("", "", self.profile_id(p), sum(v for _, v, _ in p.samples))]
        rows = []
        for _, value, labels in p.samples:
            span, trace = labels.get("span_id", ""), labels.get("trace_id", "")
            if len(span) != 16 or not _HEX.fullmatch(span) or not span.strip("0"):
                continue
            trace = trace.lower() if len(trace) == 32 and _HEX.fullmatch(trace) and trace.strip("0") else ""
            rows.append((span.lower(), trace, "", value))
        return rows

    def diff(self, req: querier_pb2.DiffRequest) -> Message:
        sides = []
        for side in (req.left, req.right):
            check_profile_type(side.profile_typeID)
            try:
                spans = self._checked_spans(side.span_selector, side.start, side.end)
            except BackendError as exc:  # Diff asks its sides of the frontend, which wraps their error
                raise ValueError(f"unknown: {exc.text}") from None
            call_site = tuple(loc.name for loc in side.stack_trace_selector.call_site)
            sides.append(self.select(side.profile_typeID, side.label_selector, side.start, side.end, spans, call_site))
        max_nodes = max(req.left.max_nodes, req.right.max_nodes) or 8192
        return querier_pb2.DiffResponse(flamegraph=encode_diff(sides[0], sides[1], max_nodes))

    def _in_range(self, start: int, end: int, matchers: Iterable[str]) -> list[StoredProfile]:
        found = []
        for p in self.profiles:
            if start and end and not start <= p.time_ms <= end:
                continue
            # Pyroscope's series index holds the profile type's labels too (``__name__``, ``__profile_type__``)
            labels = {**p.labels, "__name__": p.type_id.split(":")[0], "__profile_type__": p.type_id}
            if all(matches_selector(m, labels) for m in matchers):
                found.append(p)
        return found


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
    return web.Response(  # as Pyroscope writes a Connect error: code and message, no details
        status=CONNECT_STATUS[code.value],
        body=json.dumps({"code": code.value, "message": message}).encode(),
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
    "SelectHeatmap": (querier_pb2.SelectHeatmapRequest, PyroscopeDouble.select_heatmap),
    "Diff": (querier_pb2.DiffRequest, PyroscopeDouble.diff),
}
