"""The ``/tempo`` mount: what Grafana's Tempo data source talks to (``http://<bridge>:4041/tempo``).

Everything under the mount goes to ``settings.tempo_url`` as it came (streamed; tenant and auth headers kept;
hop-by-hop headers dropped; nothing outside the mount). Trace-by-ID answers (``GET /api/v2/traces/{id}``,
``GET /api/traces/{id}``) are fetched whole instead, decoded (gzip too), given ``pyroscope.profile.id`` on every span
(``bridge.enrich``, policy ``PROFILE_BRIDGE_ENRICH``), re-encoded (gzip when the client accepts it), and their spans
recorded in the span cache of the caller's tenant — after the answer has been sent — so a click on any span resolves
without Tempo's lagging search.

- A trace id that is not hex, or longer than 128 bits → 400 with Tempo's own message; Tempo is not asked.
- An answer that cannot be decoded → sent on unchanged; a warning in the log and ``enrich_failures{reason}``.
- Not-found answers (v1's 404, v2's empty trace) and every error answer pass through as they are.
- Standalone mode: the embedded store answers (``extras["tempo_local"]``), enriched the same way.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from bridge import app as appmod
from bridge._proto import types_pb2 as tpb
from bridge.compression import GzipError, accepts_gzip, gunzip
from bridge.config import Settings
from bridge.enrich import Enriched, EnrichPolicy, Policy, UndecodableBody, enrich_trace_body
from bridge.errors import BridgeError, InvalidArgument, UpstreamError
from bridge.ids import tempo_trace_id
from bridge.middleware import ROUTE_LABEL
from bridge.spans import Trace
from bridge.upstream.base import CallContext
from bridge.upstream.faults import map_client_error
from bridge.upstream.proxy import CHUNK, HOP_BY_HOP, end_to_end, stream_through, target_url
from bridge.wire.tempo import is_protobuf_answer, trace_request

log = logging.getLogger("bridge.tempo")

MOUNT: Final = "/tempo"
MAX_ANSWER_BYTES: Final = 256 * 1024**2  # a trace-by-ID answer larger than this is refused, not buffered
GZIP_LEVEL: Final = 1  # answers go to Grafana next door: speed over ratio
SERVICE_LABEL: Final = "service_name"
SERVICES_LOOKBACK_MS: Final = 7 * 24 * 3600 * 1000
# request headers not forwarded when the bridge fetches a trace itself (it asks for gzip on its own)
_TRACE_REQUEST_DROP: Final = HOP_BY_HOP | {"host", "accept-encoding", "content-length", "expect"}
_ANSWER_DROP: Final = HOP_BY_HOP | {"content-length", "content-encoding"}

TempoLocal = Callable[
    [str, str, Mapping[str, str], Mapping[str, str], CallContext], Awaitable[tuple[int, dict[str, str], bytes]]
]


# --------------------------------------------------------------------------------------------- pure parts


class AnswerEncodingError(ValueError):
    """The answer's Content-Encoding cannot be undone (unknown coding, corrupt or oversized gzip)."""


def undo_encoding(body: bytes, encoding: str, max_bytes: int) -> bytes:
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "x-gzip"):
        raise AnswerEncodingError(f"Content-Encoding {encoding!r} is not one the bridge decodes")
    try:
        return gunzip(body, max_bytes)
    except GzipError as exc:
        raise AnswerEncodingError(f"answer is {exc}") from exc


@dataclass(slots=True)
class Answer:
    """An upstream answer as received: status, headers, body (still in its Content-Encoding)."""

    status: int
    headers: CIMultiDict[str]
    body: bytes

    @property
    def encoding(self) -> str:
        return self.headers.get("Content-Encoding", "")


# --------------------------------------------------------------------------------------------- services Pyroscope knows


@dataclass(slots=True)
class KnownServices:
    """``profiled-services``: the service names Pyroscope has profiles for, per tenant, for ``ttl`` seconds."""

    ttl: float
    clock: Callable[[], float] = time.monotonic
    _entries: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def get(self, app: web.Application, ctx: CallContext) -> frozenset[str] | None:
        """The set, or None when Pyroscope could not say (and nothing was known before)."""
        key = ctx.tenant_key
        entry = self._entries.get(key)
        if entry is not None and self.clock() - entry[0] < self.ttl:
            return entry[1]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._entries.get(key)
            if entry is not None and self.clock() - entry[0] < self.ttl:
                return entry[1]
            now_ms = int(app[appmod.CLOCK].now() * 1000)
            label = service_label(app[appmod.SETTINGS])
            req = tpb.LabelValuesRequest(name=label, start=now_ms - SERVICES_LOOKBACK_MS, end=now_ms)
            try:
                answer = await appmod.profiles_of(app).label_values(req, ctx)
            except BridgeError as exc:
                log.warning("enrich=profiled-services: cannot ask Pyroscope for its services (%s); %s",
                            exc.message, "using the last known set" if entry else "enriching every span")
                return entry[1] if entry else None
            names = frozenset(answer.names)
            self._entries[key] = (self.clock(), names)
            return names


def service_label(settings: Settings) -> str:
    """The profile label that holds ``service.name`` (``PROFILE_BRIDGE_LABEL_MAP``; ``service_name`` by default)."""
    return dict(settings.label_map).get("service.name", SERVICE_LABEL)


def known_services(app: web.Application) -> KnownServices:
    extras = app[appmod.BACKENDS].extras
    found = extras.get("tempo_known_services")
    if not isinstance(found, KnownServices):
        found = KnownServices(app[appmod.SETTINGS].services_cache_ttl)
        extras["tempo_known_services"] = found
    return found


async def policy_for(app: web.Application, ctx: CallContext) -> EnrichPolicy:
    setting = Policy(app[appmod.SETTINGS].enrich)
    if setting is not Policy.PROFILED_SERVICES:
        return EnrichPolicy(setting)
    services = await known_services(app).get(app, ctx)
    if services is None:
        return EnrichPolicy(Policy.ALL)
    return EnrichPolicy(Policy.PROFILED_SERVICES, services)


# --------------------------------------------------------------------------------------------- handlers


def _timeout(settings: Settings, ctx: CallContext) -> aiohttp.ClientTimeout:
    left = max(0.001, ctx.deadline.remaining())
    return aiohttp.ClientTimeout(
        total=left, connect=min(settings.connect_timeout, left), sock_read=min(settings.upstream_timeout, left)
    )


async def handle(request: web.Request) -> web.StreamResponse:
    settings = request.app[appmod.SETTINGS]
    tail = request.match_info["tail"]  # percent-decoded: "..%2f" has become "../" here
    if any(segment in (".", "..") for segment in tail.split("/")):
        raise InvalidArgument(f"path {request.raw_path.partition('?')[0]!r} has a '.' or '..' segment; not forwarded")
    ctx = appmod.call_context(request)
    found = trace_request(tail) if request.method == "GET" else None
    if found is not None:
        version, raw_id = found
        request[ROUTE_LABEL] = f"{MOUNT}/api/v2/traces/{{id}}" if version == 2 else f"{MOUNT}/api/traces/{{id}}"
        trace_id = tempo_trace_id(raw_id)
        return await trace_by_id(request, version, trace_id, ctx)
    request[ROUTE_LABEL] = f"{MOUNT}/*"
    if settings.is_standalone:
        answer = await _ask_local(request, tail, ctx)
        return _plain_response(answer)
    return await _forward(request, ctx)


async def _forward(request: web.Request, ctx: CallContext) -> web.StreamResponse:
    settings = request.app[appmod.SETTINGS]
    traces = appmod.traces_of(request.app)
    session: aiohttp.ClientSession = traces.session  # type: ignore[attr-defined]
    base_url: str = getattr(traces, "base_url", settings.tempo_url)
    url = target_url(base_url, request, MOUNT)
    return await stream_through(request, session, url, upstream="tempo", timeout=_timeout(settings, ctx))


async def _fetch(request: web.Request, ctx: CallContext) -> Answer:
    """The trace-by-ID answer from Tempo, whole, still in its Content-Encoding (the bridge asks for gzip)."""
    settings = request.app[appmod.SETTINGS]
    traces = appmod.traces_of(request.app)
    session: aiohttp.ClientSession = traces.session  # type: ignore[attr-defined]
    base_url: str = getattr(traces, "base_url", settings.tempo_url)
    url = target_url(base_url, request, MOUNT)
    headers = end_to_end(request.headers, _TRACE_REQUEST_DROP)
    headers["Accept-Encoding"] = "gzip"
    timeout = _timeout(settings, ctx)
    metrics = request.app[appmod.METRICS]
    started = time.perf_counter()
    outcome = "ok"
    try:
        async with session.get(url, headers=headers, timeout=timeout, allow_redirects=False,
                               auto_decompress=False) as resp:
            if resp.content_length is not None and resp.content_length > MAX_ANSWER_BYTES:
                raise UpstreamError("tempo", f"tempo answered {resp.content_length} bytes, over the bridge's "
                                             f"limit of {MAX_ANSWER_BYTES}")
            parts: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(CHUNK):
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise UpstreamError("tempo", f"tempo answered over the bridge's limit of {MAX_ANSWER_BYTES} "
                                                 "bytes")
                parts.append(chunk)
            body = b"".join(parts)
            outcome = "ok" if resp.status < 400 else str(resp.status)
            return Answer(resp.status, CIMultiDict(resp.headers), body)
    except UpstreamError as exc:
        outcome = exc.code.value
        raise
    except Exception as exc:  # noqa: BLE001 - the one boundary where client failures are mapped
        err = map_client_error("tempo", exc, timeout.total)
        outcome = err.code.value
        raise err from exc
    finally:
        metrics.upstream_seconds.labels("tempo", "trace_by_id", outcome).observe(time.perf_counter() - started)


async def _ask_local(request: web.Request, tail: str, ctx: CallContext) -> Answer:
    local: TempoLocal | None = request.app[appmod.BACKENDS].extras.get("tempo_local")
    if local is None:
        raise UpstreamError("tempo", "standalone mode has no trace store to answer /tempo (not started?)")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    status, answer_headers, body = await local(request.method, tail, dict(request.query), headers, ctx)
    return Answer(status, CIMultiDict(answer_headers), body)


def _plain_response(answer: Answer) -> web.Response:
    headers = end_to_end(answer.headers, HOP_BY_HOP | {"content-length"})
    return web.Response(status=answer.status, body=answer.body, headers=headers)


async def trace_by_id(request: web.Request, version: int, trace_id: str, ctx: CallContext) -> web.StreamResponse:
    app = request.app
    settings = app[appmod.SETTINGS]
    if settings.is_standalone:
        answer = await _ask_local(request, request.match_info["tail"], ctx)
    else:
        answer = await _fetch(request, ctx)
    if answer.status != 200:
        return await _send(request, answer, None)  # v1's 404 and every error, as they are
    policy = await policy_for(app, ctx)
    protobuf = is_protobuf_answer(answer.headers.get("Content-Type", ""), request.headers.get("Accept", ""))
    metrics = app[appmod.METRICS]
    try:
        plain = undo_encoding(answer.body, answer.encoding, MAX_ANSWER_BYTES)
        enriched = enrich_trace_body(plain, version=version, protobuf=protobuf, policy=policy)
    except (AnswerEncodingError, UndecodableBody) as exc:
        reason = exc.reason if isinstance(exc, UndecodableBody) else "encoding"
        log.warning("tempo: trace %s answer passed through unchanged, it cannot be decoded (%s)", trace_id, exc)
        metrics.enrich_failures.labels(reason).inc()
        return await _send(request, answer, None)
    response = await _send(request, answer, enriched)
    # the answer is out: now remember its spans for the click that may follow (no await below: nothing runs
    # between the last byte and the cache holding every span)
    if enriched.added:
        metrics.enriched_spans.inc(enriched.added)
    _remember(app, ctx, trace_id, enriched)
    return response


async def _send(request: web.Request, answer: Answer, enriched: Enriched | None) -> web.StreamResponse:
    """Write the answer now: the enriched body when spans changed, else the upstream's own bytes; gzip when the
    client accepts it (the bridge asked Tempo for gzip, so a client that does not accept it gets it undone)."""
    client_gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    headers = end_to_end(answer.headers, _ANSWER_DROP)
    encoding = answer.encoding.strip()
    if enriched is not None and enriched.changed:
        body, encoding = enriched.body, ""
        if client_gzip:
            body, encoding = gzip.compress(body, compresslevel=GZIP_LEVEL), "gzip"
            if "accept-encoding" not in headers.get("Vary", "").lower():
                headers.add("Vary", "Accept-Encoding")
    elif encoding.lower() in ("gzip", "x-gzip") and not client_gzip:
        body, encoding = _gunzip_or_raw(answer, enriched)
    else:
        body = answer.body
    if encoding and encoding.lower() != "identity":
        headers["Content-Encoding"] = encoding
    response = web.Response(status=answer.status, body=body, headers=headers)
    try:
        await response.prepare(request)
        await response.write_eof()
    except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
        log.info("tempo: client went away before the trace answer was sent (%s)", exc)
    return response


def _gunzip_or_raw(answer: Answer, enriched: Enriched | None) -> tuple[bytes, str]:
    if enriched is not None:
        return enriched.body, ""  # the decompressed body, unchanged
    try:
        return undo_encoding(answer.body, answer.encoding, MAX_ANSWER_BYTES), ""
    except AnswerEncodingError:
        return answer.body, answer.encoding  # corrupt: as it came, nothing better to send


def _remember(app: web.Application, ctx: CallContext, trace_id: str, enriched: Enriched) -> None:
    """Record the answer's spans in the caller's span cache. The answer is already sent: a failure here is
    logged, never turned into an error answer."""
    try:
        spans = enriched.spans()
        if not spans:
            return
        cache = app[appmod.SPAN_CACHE]
        cache.put_trace(ctx.tenant, Trace.from_spans(spans, trace_id))
    except Exception:  # noqa: BLE001 - the answer is out; the cache is an optimisation
        log.exception("tempo: spans of trace %s could not be recorded in the span cache", trace_id)
        return
    app[appmod.METRICS].cache_entries.labels("spans").set(len(cache))


def setup(app: web.Application) -> None:
    app.router.add_route("*", MOUNT + "/{tail:.*}", handle)
