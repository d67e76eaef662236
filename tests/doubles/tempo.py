"""A TEST DOUBLE of Grafana Tempo's HTTP query API — not Tempo. A real aiohttp app (serve it on 127.0.0.1, port 0, with
pytest-aiohttp's ``aiohttp_server``) that answers from traces given to it, in Tempo's own wire shapes
(grafana/tempo ``pkg/api/http.go`` lines 83–100, ``pkg/tempopb/tempo.proto``; checked against a real Tempo with
``bench/differential.py``), and records every request it was asked.

- ``GET /api/v2/traces/{id}``: ``TraceByIDResponse`` protobuf when ``Accept`` contains ``application/protobuf``,
  else gogo-jsonpb JSON ``{"trace":{"resourceSpans":[…]},"metrics":{…}}`` (base64 ids, string int64s, enum names,
  defaults omitted). Unknown trace → 200 with an empty trace. ``partial`` knob → ``status: PARTIAL`` + message.
- ``GET /api/traces/{id}``: bare ``Trace`` protobuf / ``{"batches":[…]}``; unknown trace → 404.
- A non-hex or oversized id → 400 with Tempo's plain-text message (``util.HexStringToTraceID``).
- ``GET /api/search``: TraceQL subset — ``{ span:id = "…" }``, ``{ trace:id = "…" }``, ``{ resource.service.name =
  "…" }``, ``{ span:name = "…" }``, joined by ``&&``, optional ``| select(…)``; Tempo's search JSON (hex ids,
  ``traceID`` with leading zeros stripped, ``durationNanos`` strings, ``traces: []`` when nothing matched).
- ``GET /api/v2/search/tags``, ``GET /api/v2/search/tag/{tag}/values`` (``tempo_tags``), ``/ready``, ``/api/echo``,
  ``/api/status/buildinfo``; anything else → Go's ``404 page not found``.
- ``gzip`` knob: gzip the body when the client accepts it. ``faults``: slow, error status, refuse (drop the
  connection before answering), reset mid-body, garbage body, search lag (the next N searches find nothing),
  optionally only under a path prefix.
- ``refused_url()``: a URL where nothing listens (connection refused).

    tempo = TempoDouble()
    tempo.add_shop()                     # every trace of tests/fixtures/shop-capture
    server = await aiohttp_server(tempo.app)
    tempo.url = str(server.make_url("")).rstrip("/")
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.wire import tempo as tempo_wire
from tests.doubles import tempo_tags
from tests.paths import VULTURE_TRACE
from tests.serving import closed_port

SEARCH_ROOT_PENDING: Final = "<root span not yet received>"
BUILD_INFO: Final = {
    "version": "2.10.8-test-double",
    "revision": "test-double",
    "branch": "",
    "buildUser": "",
    "buildDate": "",
    "goVersion": "",
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class Faults:
    """What goes wrong. Applies to requests whose path starts with ``paths`` ("" = every path)."""

    delay: float = 0.0  # seconds to wait before answering (slow Tempo)
    status: int | None = None  # answer with this HTTP status and ``body`` instead of the real answer
    body: str = "too many outstanding requests"
    refuse: bool = False  # drop the connection before answering anything
    reset: bool = False  # send headers and part of a body, then drop the connection
    garbage: bool = False  # 200 with bytes that are neither protobuf nor JSON of the right shape
    search_lag: int = 0  # the next N searches find nothing (Tempo's search lags ingest by 15–30 s)
    paths: str = ""


GARBAGE: Final = b"\xff\xfe this is not a Tempo answer \x00\x01\x02" + bytes(range(0xF0, 0x100))


def hex_string_to_trace_id(raw: str) -> str:
    """Tempo's ``util.HexStringToTraceID``: any hex up to 128 bits, left-padded; ValueError with Tempo's message."""
    for pos, char in enumerate(raw):
        if not ("0" <= char <= "9" or "a" <= char <= "f" or "A" <= char <= "F"):
            raise ValueError(
                f"trace IDs can only contain hex characters: invalid character '{char}' at position {pos + 1}"
            )
    text = "0" + raw if len(raw) % 2 == 1 else raw
    if len(text) > 32:
        raise ValueError("trace IDs can't be larger than 128 bits")
    return text.lower().rjust(32, "0")


def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (the port was just bound and released)."""
    return f"http://127.0.0.1:{closed_port()}"


def resource_spans_to_json(rs: otlp_trace.ResourceSpans) -> dict[str, Any]:
    """One ResourceSpans as Tempo's gogo jsonpb writes it (json_format on OTLP gives exactly that shape)."""
    return json_format.MessageToDict(rs)


def trace_answer(
    raw: Iterable[bytes | otlp_trace.ResourceSpans],
    *,
    version: int,
    protobuf: bool,
    partial: str | None = None,
    metrics: tempo_pb2.TraceByIDMetrics | None = None,
) -> bytes:
    """A trace-by-ID answer body exactly as Tempo writes it: v2 ``TraceByIDResponse`` / v1 ``Trace`` protobuf, or
    v2 ``{"trace":{"resourceSpans":…},"metrics":…}`` / v1 ``{"batches":…}`` JSON. ``partial`` (v2 only) sets
    ``status: PARTIAL`` and the message. An empty ``raw`` gives v2's "not found" (v1 answers 404 instead)."""
    items = [r if isinstance(r, bytes) else r.SerializeToString() for r in raw]
    if metrics is None:
        size = sum(len(r) for r in items)
        metrics = tempo_pb2.TraceByIDMetrics(inspectedBytes=size) if size else tempo_pb2.TraceByIDMetrics()
    if protobuf:
        if version == 1:
            return tempo_pb2.Trace(resource_spans=items).SerializeToString()
        msg = tempo_pb2.TraceByIDResponse(trace=tempo_pb2.Trace(resource_spans=items), metrics=metrics)
        if partial is not None:
            msg.status = tempo_pb2.PARTIAL
            msg.message = partial
        return msg.SerializeToString()
    as_json = [resource_spans_to_json(otlp_trace.ResourceSpans.FromString(r)) for r in items]
    if version == 1:
        return _dumps({"batches": as_json})
    doc: dict[str, Any] = {"trace": {"resourceSpans": as_json} if as_json else {}}
    doc["metrics"] = json_format.MessageToDict(metrics)
    if partial is not None:
        doc["status"] = "PARTIAL"
        doc["message"] = partial
    return _dumps(doc)


class TempoDouble:
    """A test double of Tempo's query API. Not Tempo."""

    def __init__(self) -> None:
        self.traces: dict[str, list[bytes]] = {}  # trace id (32 hex) → serialized ResourceSpans
        self.requests: list[RecordedRequest] = []
        self.partial: str | None = None  # v2 answers carry status PARTIAL and this message
        self.gzip = False
        self.faults = Faults()
        # trace id → (status, headers, body) answered as is, for both versions (bodies no Tempo would send)
        self.raw_answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.url = ""
        self.app = web.Application()
        self.app.router.add_get("/api/v2/traces/{trace_id}", self._trace_v2)
        self.app.router.add_get("/api/traces/{trace_id}", self._trace_v1)
        self.app.router.add_get(tempo_wire.SEARCH_PATH, self._search)
        self.app.router.add_get("/api/v2/search/tags", self._tags)
        self.app.router.add_get("/api/v2/search/tag/{tag}/values", self._tag_values)
        self.app.router.add_get("/ready", self._ready)
        self.app.router.add_get("/api/echo", self._echo)
        self.app.router.add_get("/api/status/buildinfo", self._buildinfo)
        self.app.router.add_route("*", "/{tail:.*}", self._not_found)

    # ------------------------------------------------------------------------------------------- data

    def add_trace(self, trace_id: str, resource_spans: Iterable[otlp_trace.ResourceSpans | bytes]) -> str:
        """Hold a trace; ``resource_spans`` as messages or raw bytes (raw bytes may carry unknown fields)."""
        tid = hex_string_to_trace_id(trace_id)
        self.traces[tid] = [rs if isinstance(rs, bytes) else rs.SerializeToString() for rs in resource_spans]
        return tid

    def add_shop(self, trace_ids: Iterable[str] | None = None) -> list[str]:
        """Hold traces of the shop capture (all of them by default)."""
        from tests.doubles.shop import load_shop

        shop = load_shop()
        ids = list(trace_ids) if trace_ids is not None else shop.trace_ids()
        for tid in ids:
            self.add_trace(tid, shop.resource_spans(tid))
        return ids

    def add_vulture(self) -> str:
        """Hold Tempo's own test trace (``vulture-trace.json``); returns its trace id."""
        data = otlp_trace.TracesData()
        json_format.ParseDict(json.loads(VULTURE_TRACE.read_text()), data)
        trace_id = data.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
        return self.add_trace(trace_id, data.resource_spans)

    def trace_answer_for(self, trace_id: str, *, version: int, protobuf: bool) -> bytes:
        """The body this double answers for ``trace_id`` (uncompressed), to compare with what went through."""
        raw = self.traces.get(hex_string_to_trace_id(trace_id), [])
        return trace_answer(raw, version=version, protobuf=protobuf, partial=self.partial if raw else None)

    def decoded(self, trace_id: str) -> list[otlp_trace.ResourceSpans]:
        return [otlp_trace.ResourceSpans.FromString(raw) for raw in self.traces.get(trace_id, [])]

    # ------------------------------------------------------------------------------------------- what it was asked

    def calls(self, prefix: str = "/") -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith(prefix)]

    @property
    def search_calls(self) -> list[RecordedRequest]:
        return self.calls(tempo_wire.SEARCH_PATH)

    # ------------------------------------------------------------------------------------------- plumbing

    async def _record(self, request: web.Request) -> None:
        body = await request.read() if request.can_read_body else b""
        self.requests.append(
            RecordedRequest(request.method, request.path, dict(request.query), dict(request.headers), body)
        )

    async def _faulted(self, request: web.Request) -> web.StreamResponse | None:
        await self._record(request)
        f = self.faults
        if not request.path.startswith(f.paths):
            return None
        if f.delay:
            await asyncio.sleep(f.delay)
        if f.status is not None:
            return web.Response(status=f.status, text=f.body + "\n", content_type="text/plain", charset="utf-8")
        if f.refuse:
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=503)  # never sent: the connection is gone
        if f.reset:
            response = web.StreamResponse(status=200, headers={"Content-Length": "100000"})
            response.content_type = "application/json"
            await response.prepare(request)
            await response.write(b'{"trace":{"resourceSpans":[')
            if request.transport is not None:
                request.transport.close()
            return response
        if f.garbage and "/traces/" in request.path:
            ctype = tempo_wire.PROTOBUF if _wants_protobuf(request) else tempo_wire.JSON
            return self._answer(request, 200, GARBAGE, ctype)
        return None

    def _answer(self, request: web.Request, status: int, body: bytes, content_type: str) -> web.Response:
        headers = {"Content-Type": content_type}
        if self.gzip and "gzip" in request.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        return web.Response(status=status, body=body, headers=headers)

    @staticmethod
    def _text(status: int, message: str) -> web.Response:
        # Go's http.Error
        return web.Response(
            status=status,
            text=message + "\n",
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    # ------------------------------------------------------------------------------------------- trace by id

    def _lookup(self, request: web.Request) -> tuple[str, list[bytes] | None] | web.Response:
        try:
            tid = hex_string_to_trace_id(request.match_info["trace_id"])
        except ValueError as exc:
            return self._text(400, str(exc))
        if tid in self.raw_answers:
            status, headers, body = self.raw_answers[tid]
            return web.Response(status=status, body=body, headers=headers)
        return tid, self.traces.get(tid)

    async def _trace_v2(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        looked = self._lookup(request)
        if isinstance(looked, web.Response):
            return looked
        _, raw = looked
        protobuf = _wants_protobuf(request)
        body = trace_answer(raw or [], version=2, protobuf=protobuf, partial=self.partial if raw else None)
        return self._answer(request, 200, body, tempo_wire.PROTOBUF if protobuf else tempo_wire.JSON)

    async def _trace_v1(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        looked = self._lookup(request)
        if isinstance(looked, web.Response):
            return looked
        _, raw = looked
        if not raw:  # Tempo's frontend: 404 without a body (modules/frontend/combiner/trace_by_id.go)
            return web.Response(status=404)
        protobuf = _wants_protobuf(request)
        body = trace_answer(raw, version=1, protobuf=protobuf)
        return self._answer(request, 200, body, tempo_wire.PROTOBUF if protobuf else tempo_wire.JSON)

    # ------------------------------------------------------------------------------------------- search

    async def _search(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        q = request.query.get("q", "{}")
        try:
            conditions, selected = parse_traceql(q)
            limit = int(request.query.get("limit", "20"))
            spss = int(request.query.get("spss", "3"))
            start = int(request.query["start"]) if "start" in request.query else None
            end = int(request.query["end"]) if "end" in request.query else None
        except ValueError as exc:
            return self._text(400, str(exc))
        lagging = self.faults.search_lag > 0 and request.path.startswith(self.faults.paths)
        if lagging:
            self.faults.search_lag -= 1
        traces = [] if lagging else self._matching(conditions, selected, start, end, limit, spss)
        doc: dict[str, Any] = {"traces": traces}  # [] when nothing matched, as Tempo answers
        doc["metrics"] = {
            "inspectedBytes": str(sum(len(r) for raws in self.traces.values() for r in raws)),
            "completedJobs": 1,
            "totalJobs": 1,
        }
        return self._answer(request, 200, _dumps(doc), "application/json")

    def _matching(
        self,
        conditions: list[tuple[str, str]],
        selected: list[str],
        start: int | None,
        end: int | None,
        limit: int,
        spss: int,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for tid, raws in self.traces.items():
            spans = list(_iter_spans(tid, raws))
            if not spans:
                continue
            t_start = min(s.start_time_unix_nano for s, _ in spans)
            t_end = max(s.end_time_unix_nano for s, _ in spans)
            if start is not None and t_end < start * 1_000_000_000:
                continue
            if end is not None and t_start > end * 1_000_000_000:
                continue
            matched = [(s, svc) for s, svc in spans if all(_cond(s, svc, tid, k, v) for k, v in conditions)]
            if not matched:
                continue
            root = next((p for p in spans if not p[0].parent_span_id), None)
            shown = matched[:spss]
            out.append(
                {
                    "traceID": tid.lstrip("0") or "0",
                    "rootServiceName": root[1] if root else SEARCH_ROOT_PENDING,
                    **({"rootTraceName": root[0].name} if root else {}),
                    "startTimeUnixNano": str(t_start),
                    "durationMs": (t_end - t_start) // 1_000_000,
                    "spanSet": _span_set(shown, len(matched), conditions, selected),
                    "spanSets": [_span_set(shown, len(matched), conditions, selected)],
                }
            )
            if len(out) >= limit:
                break
        return out

    async def _tags(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        raws = [raw for raws in self.traces.values() for raw in raws]
        try:
            doc = tempo_tags.tags(raws, request.query.get("scope", ""))
        except tempo_tags.BadTag as exc:
            return self._text(400, str(exc))
        return self._answer(request, 200, _dumps(doc), "application/json")

    async def _tag_values(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        raws = [raw for raws in self.traces.values() for raw in raws]
        try:
            doc = tempo_tags.tag_values(raws, request.match_info["tag"])
        except tempo_tags.BadTag as exc:
            return self._text(400, str(exc))
        return self._answer(request, 200, _dumps(doc), "application/json")

    # ------------------------------------------------------------------------------------------- misc

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        return web.Response(text="ready", content_type="text/plain")

    async def _echo(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        return web.Response(text="echo", content_type="text/plain")

    async def _buildinfo(self, request: web.Request) -> web.StreamResponse:
        if (faulted := await self._faulted(request)) is not None:
            return faulted
        return self._answer(request, 200, _dumps(BUILD_INFO), "application/json")

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        return self._text(404, "404 page not found")


# ----------------------------------------------------------------------------------------------- helpers


def _wants_protobuf(request: web.Request) -> bool:
    return tempo_wire.wants_protobuf(request.headers.get("Accept", ""))


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


_COND = re.compile(r'\s*([\w.:]+)\s*=\s*"([^"]*)"\s*')
_SELECT = re.compile(r"select\(([^)]*)\)")


def parse_traceql(query: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The TraceQL subset the double understands: ``{ a = "x" && b = "y" } | select(c, d)``."""
    text = query.strip()
    head, _, tail = text.partition("|")
    head = head.strip()
    if not (head.startswith("{") and head.endswith("}")):
        raise ValueError(f"parse error: unexpected query {query!r} (test double understands a subset)")
    body = head[1:-1].strip()
    conditions: list[tuple[str, str]] = []
    if body:
        for part in body.split("&&"):
            m = _COND.fullmatch(part)
            if m is None:
                raise ValueError(f"parse error: unsupported condition {part.strip()!r} (test double)")
            conditions.append((m.group(1), m.group(2)))
    selected: list[str] = []
    if tail.strip():
        m = _SELECT.search(tail)
        if m is None:
            raise ValueError(f"parse error: unsupported pipeline {tail.strip()!r} (test double)")
        selected = [s.strip() for s in m.group(1).split(",") if s.strip()]
    return conditions, selected


def _iter_spans(trace_id: str, raws: list[bytes]) -> Iterable[tuple[otlp_trace.Span, str]]:
    del trace_id
    for raw in raws:
        rs = otlp_trace.ResourceSpans.FromString(raw)
        svc = next((kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"), "")
        for ss in rs.scope_spans:
            for span in ss.spans:
                yield span, svc


def _cond(span: otlp_trace.Span, service: str, trace_id: str, key: str, value: str) -> bool:
    if key == "span:id":
        return span.span_id.hex() == value
    if key == "trace:id":
        return trace_id == value.lower().rjust(32, "0")
    if key in ("span:name", "name"):
        return span.name == value
    if key in ("resource.service.name", ".service.name"):
        return service == value
    attr = key.removeprefix("span.").removeprefix(".")
    return any(kv.key == attr and kv.value.string_value == value for kv in span.attributes)


def _span_set(
    matched: list[tuple[otlp_trace.Span, str]], count: int, conditions: list[tuple[str, str]], selected: list[str]
) -> dict[str, Any]:
    keys = {k for k, _ in conditions} | set(selected)
    spans = []
    for span, svc in matched:
        item: dict[str, Any] = {"spanID": span.span_id.hex()}
        if keys & {"span:name", "name"}:
            item["name"] = span.name
        item["startTimeUnixNano"] = str(span.start_time_unix_nano)
        item["durationNanos"] = str(span.end_time_unix_nano - span.start_time_unix_nano)
        attrs = []
        if keys & {"resource.service.name", ".service.name"}:
            attrs.append({"key": "service.name", "value": {"stringValue": svc}})
        for key in sorted(keys):
            if key.startswith("span.") and not key.startswith("span:"):
                name = key.removeprefix("span.")
                for kv in span.attributes:
                    if kv.key == name:
                        attrs.append({"key": name, "value": json_format.MessageToDict(kv.value)})
        if attrs:
            item["attributes"] = attrs
        spans.append(item)
    return {"spans": spans, "matched": count}


def b64_id(hex_id: str) -> str:
    """A hex id as Tempo's JSON writes it (standard base64 of the bytes)."""
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def json_headers(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {"Accept": "application/json", **(extra or {})}
