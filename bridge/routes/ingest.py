"""Ingest on the bridge's HTTP port, at the root paths the SDKs use (standalone mode only).

- ``POST /v1/traces``: OTLP/HTTP traces, ``application/x-protobuf`` or ``application/json`` (hex ids), optionally
  gzip. Answers ``ExportTraceServiceResponse`` in the request's encoding (``partial_success`` when spans were
  rejected); bad input → 400 with a ``google.rpc.Status`` body, as OTLP/HTTP specifies.
- ``POST /push.v1.PusherService/Push``: Pyroscope's Connect push (``application/proto`` or JSON, gzip) — what
  ``pyroscope-io`` sends. Errors are Connect errors.
- ``POST /ingest``: Pyroscope's legacy HTTP ingest, ``name=app[.type]{k=v}&from&until&format=pprof|folded|lines&
  sampleRate&spyName``; pprof as the Go SDK sends it (multipart/form-data with a ``profile`` part, optional
  ``sample_type_config``) or as a raw body (``@pyroscope/nodejs``); folded text lines ``a;b;c 12``; ``lines``, one
  sample per line. 200 with an empty body, or 4xx with a message. Named and stamped as Pyroscope does
  (``docs/contracts/pyroscope-ingest.md``), except that the store keeps each profile at the true start of its
  capture window; ``spyName`` becomes the ``pyroscope_spy`` label. ``format=jfr``: a JDK Flight Recorder recording
  as Pyroscope's Java SDK sends it (multipart ``jfr`` part and optional ``labels`` part, each gzipped or not, or a
  raw body), converted as Pyroscope converts it (``bridge/store/decode_jfr.py``, ``bridge/jfr/``).

Each request is decoded whole before anything is written, then written in one transaction and acknowledged only
after it has committed: a malformed body stores nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from aiohttp import BodyPartReader, web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge._proto import push_pb2
from bridge.body import PROTOBUF_TYPES, read_body
from bridge.compression import Budget
from bridge.connect import Codec, decode_request, decompress, encode_response
from bridge.errors import BridgeError, Code, InvalidArgument, ResourceExhausted, Unimplemented
from bridge.limits import DECODE_IN_THREAD_BYTES, RANGE_TEXT, unix_ns_ok
from bridge.middleware import ROUTE_LABEL
from bridge.routes.otlp import error_status, status_response
from bridge.state import CLOCK, METRICS, SETTINGS, IngestSink, backends_of
from bridge.store import decode, decode_jfr, decode_spans

T = TypeVar("T")

OTLP_JSON: Final = "application/json"
INGEST_FORMATS: Final = ("pprof", "folded", "lines", "jfr")


DECODE_SLOTS: Final = 2  # decodes on worker threads at once: more only multiplies memory (the GIL serialises them)


class DecodeSlots:
    """The app's worker-thread decodes, at most ``DECODE_SLOTS`` at a time: each may hold its request's whole
    decompression budget, so this bounds what concurrent uploads cost together, not only each one."""

    def __init__(self) -> None:
        self._semaphore: asyncio.Semaphore | None = None  # made in the running loop, on first use

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(DECODE_SLOTS)
        async with self._semaphore:
            return await asyncio.to_thread(fn, *args)


SLOTS = web.AppKey("decode_slots", DecodeSlots)


async def off_loop(request: web.Request, size: int, fn: Callable[..., T], *args: Any, inflates: bool = False) -> T:
    """Decode a body: inline when small, on a worker thread when large — or when it may inflate (``inflates``: a
    gzipped payload inside, which a small body can carry) — so one upload does not stall every other request on
    the event loop."""
    if size >= DECODE_IN_THREAD_BYTES or inflates:
        return await request.app[SLOTS].run(fn, *args)
    return fn(*args)


def _sink(request: web.Request) -> IngestSink:
    sink = backends_of(request.app).ingest
    if sink is None:
        raise Unimplemented("this bridge keeps no data (proxy mode): send traces to Tempo and profiles to Pyroscope")
    return sink


async def _body(request: web.Request, max_bytes: int, budget: Budget) -> bytes:
    """The whole body, bounded by ``max_bytes`` also after gzip (charged to the request's ``budget``)."""
    raw, encoding = await read_body(request, max_bytes)
    return decompress(raw, encoding, max_bytes, budget)


def _budget(request: web.Request) -> Budget:
    """The request's one decompression budget: its body and every gzipped payload inside it."""
    return Budget.for_body_limit(request.app[SETTINGS].max_body_bytes)


def _tenant(request: web.Request) -> str | None:
    return request.headers.get("X-Scope-OrgID") or None


def _now_ns(request: web.Request) -> int:
    return int(request.app[CLOCK].now() * 1_000_000_000)


# --------------------------------------------------------------------------------------------- OTLP traces


def decode_traces(body: bytes, as_json: bool) -> decode_spans.SpanBatch:
    if as_json:
        req = decode_spans.parse_export_json(body)
    else:
        req = otlp_trace_svc.ExportTraceServiceRequest()
        try:
            req.ParseFromString(body)
        except DecodeError as exc:
            raise InvalidArgument(f"request body is not a valid OTLP ExportTraceServiceRequest ({exc})") from exc
    return decode_spans.rows_from_export(req)


async def v1_traces(request: web.Request) -> web.Response:
    request[ROUTE_LABEL] = "/v1/traces"
    settings = request.app[SETTINGS]
    metrics = request.app[METRICS]
    content_type = request.content_type.lower()
    as_json = content_type == OTLP_JSON
    if content_type not in PROTOBUF_TYPES and not as_json:
        metrics.ingest_rejected.labels("/v1/traces").inc()
        return status_response(
            Code.INVALID_ARGUMENT,
            f"unsupported Content-Type {request.content_type!r}: send application/x-protobuf or application/json",
            False,
            http_status=415,
        )
    try:
        body = await _body(request, settings.max_body_bytes, _budget(request))
        batch = await off_loop(request, len(body), decode_traces, body, as_json)
        await _sink(request).ingest_spans(batch, _tenant(request))
    except BridgeError as exc:
        metrics.ingest_rejected.labels("/v1/traces").inc()
        return error_status(exc, as_json)
    resp = otlp_trace_svc.ExportTraceServiceResponse()
    if batch.rejected:
        resp.partial_success.rejected_spans = batch.rejected
        resp.partial_success.error_message = batch.message
    if as_json:
        return web.Response(body=json_format.MessageToJson(resp, indent=None).encode(), content_type=OTLP_JSON)
    return web.Response(body=resp.SerializeToString(), content_type="application/x-protobuf")


# --------------------------------------------------------------------------------------------- Pyroscope push


def decode_push(
    raw: bytes,
    content_type: str | None,
    encoding: str | None,
    max_bytes: int,
    now_ns: int,
    budget: Budget | None = None,
) -> tuple[Codec, list[decode.ProfileRecord]]:
    """A Push body → records; the body and every gzipped pprof in it inflate within one ``budget``."""
    budget = budget if budget is not None else Budget.for_body_limit(max_bytes)
    req, codec = decode_request(raw, content_type, encoding, push_pb2.PushRequest, max_bytes, budget)
    return codec, decode.records_from_push(req, now_ns=now_ns, budget=budget)


async def push(request: web.Request) -> web.Response:
    request[ROUTE_LABEL] = "/push.v1.PusherService/Push"
    settings = request.app[SETTINGS]
    try:
        raw, encoding = await read_body(request, settings.max_body_bytes)
        codec, records = await off_loop(
            request,
            len(raw),
            decode_push,
            raw,
            request.headers.get("Content-Type"),
            encoding,
            settings.max_body_bytes,
            _now_ns(request),
            _budget(request),
            inflates=True,  # its pprofs are gzipped
        )
        await _sink(request).ingest_profiles(records, _tenant(request))
    except BridgeError:
        request.app[METRICS].ingest_rejected.labels("/push.v1.PusherService/Push").inc()
        raise
    body, headers = encode_response(push_pb2.PushResponse(), codec, request.headers.get("Accept-Encoding"))
    return web.Response(body=body, headers=headers)


# --------------------------------------------------------------------------------------------- legacy /ingest


def _opt_int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgument(f"{name}={raw[:40]!r} is not a whole number") from None


def _opt_time(request: web.Request, name: str) -> int | None:
    """``from`` / ``until``: a Unix time in s, ms, µs or ns (told apart by size, as Pyroscope does), 1970–2200."""
    value = _opt_int(request, name)
    if value is not None and not (value >= 0 and unix_ns_ok(decode.epoch_to_ns(value))):
        raise InvalidArgument(
            f"{name}={str(value)[:40]} is not a Unix time {RANGE_TEXT} (seconds, milliseconds, "
            "microseconds or nanoseconds)"
        )
    return value


async def _read_part(request: web.Request, part: BodyPartReader, max_bytes: int, inflate: Budget) -> bytes:
    """One part, at most ``max_bytes`` as sent, its transfer and content encodings undone — a gzipped part inflates
    within the request's ``inflate`` budget (aiohttp's own ``part.decode`` would cut it at 64 KiB without a word)."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await part.read_chunk():
        size += len(chunk)
        if size > max_bytes:
            raise ResourceExhausted(f"multipart body is over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    name = part.name or "(unnamed)"
    transfer = part.headers.get("Content-Transfer-Encoding", "").strip().lower()
    if transfer == "base64":
        try:
            data = base64.b64decode(data, validate=False)
        except ValueError as exc:
            raise InvalidArgument(f"multipart part {name!r} is not valid base64 ({exc})") from exc
    elif transfer == "quoted-printable":
        data = binascii.a2b_qp(data)
    elif transfer not in ("", "binary", "8bit", "7bit"):
        raise InvalidArgument(f"multipart part {name!r} has Content-Transfer-Encoding {transfer!r}: send binary")
    encoding = (part.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding == "identity":
        return data
    if encoding != "gzip":
        raise InvalidArgument(f"multipart part {name!r} has Content-Encoding {encoding!r}: send gzip or identity")
    return await off_loop(request, len(data), decompress, data, encoding, inflate.limit, inflate, inflates=True)


async def _multipart_parts(request: web.Request, max_bytes: int, inflate: Budget) -> dict[str, bytes]:
    """Every named part of a multipart/form-data body (the last of a name wins), together at most ``max_bytes``."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise ResourceExhausted(f"request body of {request.content_length} bytes is over the limit of {max_bytes}")
    try:
        reader = await request.multipart()
    except (ValueError, AssertionError) as exc:
        raise InvalidArgument(f"multipart body cannot be read ({exc})") from exc
    parts: dict[str, bytes] = {}
    budget = max_bytes
    while True:
        part = await reader.next()
        if part is None:
            return parts
        if not isinstance(part, BodyPartReader):
            raise InvalidArgument("nested multipart bodies are not accepted")
        data = await _read_part(request, part, budget, inflate)
        budget -= len(data)
        if part.name:
            parts[part.name] = bytes(data)


async def _multipart_profile(
    request: web.Request, max_bytes: int, inflate: Budget
) -> tuple[bytes, set[str] | None, dict[str, str] | None]:
    """The ``profile`` part, and from ``sample_type_config`` (when sent) the sample types to keep and their display
    names (Pyroscope names the profile by them)."""
    parts = await _multipart_parts(request, max_bytes, inflate)
    profile = parts.get("profile")
    if profile is None:
        raise InvalidArgument("multipart body has no 'profile' part")
    if "sample_type_config" not in parts:
        return profile, None, None
    try:
        config = json.loads(parts["sample_type_config"] or b"{}")
    except ValueError as exc:
        raise InvalidArgument(f"sample_type_config is not JSON ({exc})") from exc
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        raise InvalidArgument(
            "sample_type_config must be a JSON object keyed by sample type, each value an "
            'object such as {"display-name": "cpu", "units": "samples"}'
        )
    return profile, set(config), {k: str(v.get("display-name") or "") for k, v in config.items()}


async def ingest(request: web.Request) -> web.Response:
    request[ROUTE_LABEL] = "/ingest"
    try:
        records = await _decode_ingest(request)
        await _sink(request).ingest_profiles(records, _tenant(request))
    except BridgeError as exc:
        request.app[METRICS].ingest_rejected.labels("/ingest").inc()
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return web.Response(status=exc.http_status, text=exc.message + "\n", headers=headers)
    return web.Response(status=200)


async def _decode_ingest(request: web.Request) -> list[decode.ProfileRecord]:
    settings = request.app[SETTINGS]
    name_param = request.query.get("name", "")
    if not name_param.strip():
        raise InvalidArgument("query parameter 'name' is required (e.g. name=myapp.cpu{env=prod})")
    name = decode.parse_legacy_name(name_param)
    from_s = _opt_time(request, "from")
    until_s = _opt_time(request, "until")
    rate = _opt_int(request, "sampleRate")
    sample_rate = 100 if rate is None else rate  # Pyroscope's default; an explicit 0 keeps counts as samples
    spy = request.query.get("spyName", "").strip()
    multipart = request.content_type.startswith("multipart/")
    fmt = request.query.get("format", "").strip().lower() or ("pprof" if multipart else "folded")
    if fmt not in INGEST_FORMATS:
        raise InvalidArgument(
            f"format={fmt!r} is not accepted in standalone mode: send format=pprof, jfr, folded or lines"
        )
    now = _now_ns(request)
    inflate = _budget(request)
    if fmt == "jfr":
        return await _decode_jfr(request, name, multipart, from_s, until_s, sample_rate, spy, now, inflate)
    if multipart:
        if fmt != "pprof":
            raise InvalidArgument(
                "a multipart body must carry a pprof profile (format=pprof) or a JFR recording (format=jfr)"
            )
        profile, only_types, display_names = await _multipart_profile(request, settings.max_body_bytes, inflate)
        return await off_loop(
            request,
            len(profile),
            functools.partial(
                decode.records_from_legacy_pprof,
                profile,
                name,
                from_s=from_s,
                until_s=until_s,
                now_ns=now,
                only_types=only_types,
                display_names=display_names,
                spy=spy,
                budget=inflate,
            ),
            inflates=True,
        )
    body = await _body(request, settings.max_body_bytes, inflate)
    if not body:
        raise InvalidArgument("request body is empty")
    if fmt == "pprof":
        return await off_loop(
            request,
            len(body),
            functools.partial(
                decode.records_from_legacy_pprof,
                body,
                name,
                from_s=from_s,
                until_s=until_s,
                now_ns=now,
                spy=spy,
                budget=inflate,
            ),
            inflates=True,
        )
    return await off_loop(
        request,
        len(body),
        functools.partial(
            decode.records_from_folded,
            body,
            name,
            from_s=from_s,
            until_s=until_s,
            sample_rate=sample_rate,
            now_ns=now,
            lines=fmt == "lines",
            spy=spy,
        ),
    )


async def _decode_jfr(
    request: web.Request,
    name: decode.LegacyName,
    multipart: bool,
    from_s: int | None,
    until_s: int | None,
    sample_rate: int,
    spy: str,
    now_ns: int,
    inflate: Budget,
) -> list[decode.ProfileRecord]:
    """``format=jfr``: the Java SDK's multipart body (``jfr`` and ``labels`` parts) or a raw recording."""
    max_bytes = request.app[SETTINGS].max_body_bytes
    labels: bytes | None = None
    if multipart:
        parts = await _multipart_parts(request, max_bytes, inflate)
        if "jfr" not in parts:
            raise InvalidArgument("multipart body has no 'jfr' part (the recording; 'labels' is optional)")
        recording, labels = parts["jfr"], parts.get("labels")
    else:
        recording = await _body(request, max_bytes, inflate)
    if not recording:
        raise InvalidArgument("the JFR recording is empty")
    return await off_loop(
        request,
        len(recording),
        functools.partial(
            decode_jfr.records_from_jfr,
            recording,
            name,
            labels_raw=labels,
            from_s=from_s,
            until_s=until_s,
            sample_rate=sample_rate,
            now_ns=now_ns,
            spy=spy,
            max_bytes=max_bytes,
            budget=inflate,
        ),
        inflates=True,
    )


def setup(app: web.Application) -> None:
    """Register the ingest routes (``create_app`` does when the mode keeps data)."""
    app[SLOTS] = DecodeSlots()
    app.router.add_post("/v1/traces", v1_traces)
    app.router.add_post("/push.v1.PusherService/Push", push)
    app.router.add_post("/ingest", ingest)
