"""The ``/tempo`` mount: what Grafana's Tempo data source talks to (``http://<bridge>:4041/tempo``).

What Grafana, its apps and Perses call under the mount (``bridge.wire.allowlist``; anything else is refused with 403
naming the setting that opens it) goes to ``settings.tempo_url`` as it came (streamed; tenant and auth headers kept;
hop-by-hop headers dropped; nothing outside the mount). Trace-by-ID answers (``GET /api/v2/traces/{id}``,
``GET /api/traces/{id}``) are fetched whole instead, decoded (gzip too), given ``pyroscope.profile.id`` on every span
(``bridge.enrich``, policy ``PROFILE_BRIDGE_ENRICH``), re-encoded (gzip when the client accepts it), and their spans
recorded in the span cache of the caller's tenant — after the answer has been sent — so a click on any span resolves
without Tempo's lagging search.

- A trace id that is not hex, or longer than 128 bits → 400 with Tempo's own message; Tempo is not asked.
- An answer that cannot be decoded → sent on unchanged; a warning in the log and ``enrich_failures{reason}``.
- Not-found answers (v1's 404, v2's empty trace) and every error answer pass through as they are.
- Standalone mode: the embedded store answers, enriched the same way. Which of the two answers is the backend's
  business (``Backends.tempo``); this module holds the handlers only.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Callable
from functools import partial
from typing import Final

import aiohttp
from aiohttp import web

from bridge import offload, tasks
from bridge.body import HOP_BY_HOP, end_to_end
from bridge.call import CallContext
from bridge.compression import EncodingError, accepts_gzip, undo_content_encoding
from bridge.enrich import Enriched, EnrichPolicy, UndecodableBody, enrich_encoded, enrich_trace_body, load_trace
from bridge.ids import tempo_trace_id
from bridge.middleware import ROUTE_LABEL
from bridge.offload import OFFLOAD
from bridge.services import enrich_policy
from bridge.spans import Trace
from bridge.state import METRICS, SETTINGS, SPAN_CACHE, backends_of, call_context
from bridge.upstream import peers
from bridge.wire.allowlist import mount_call
from bridge.wire.tempo import TempoAnswer, is_protobuf_answer, trace_request

log = logging.getLogger("bridge.tempo")

MOUNT: Final = "/tempo"
GZIP_LEVEL: Final = 1  # answers go to Grafana next door: speed over ratio
# answers this large (as received, usually gzipped: about 500 spans) are enriched in the helper process
# (bridge.offload); below it the work takes a few milliseconds and the round trip would cost more than it saves
ENRICH_IN_HELPER_BYTES: Final = 64 * 1024
_ANSWER_DROP: Final = HOP_BY_HOP | {"content-length", "content-encoding"}


async def handle(request: web.Request) -> web.StreamResponse:
    request[ROUTE_LABEL] = f"{MOUNT}/*"
    call = mount_call("tempo", request.method, request.raw_path, request.app[SETTINGS].upstream_allow)  # or 400/403
    ctx = call_context(request)
    found = trace_request(call.decoded[1:]) if request.method == "GET" else None
    if found is not None:
        version, raw_id = found
        request[ROUTE_LABEL] = f"{MOUNT}/api/v2/traces/{{id}}" if version == 2 else f"{MOUNT}/api/traces/{{id}}"
        trace_id = tempo_trace_id(raw_id)
        return await trace_by_id(request, call.decoded[1:], version, trace_id, ctx)
    return await backends_of(request.app).tempo.pass_on(request, call.decoded[1:], ctx)


async def trace_by_id(
    request: web.Request, path: str, version: int, trace_id: str, ctx: CallContext
) -> web.StreamResponse:
    app = request.app
    owner = await peers.forward(request, trace_id, ctx, app[SETTINGS])  # the worker that keeps this trace
    if owner is not None:
        return owner
    backends = backends_of(app)
    answer = await backends.tempo.trace_by_id(request, path, ctx)
    if answer.status != 200:
        return await _send(request, answer, None)  # v1's 404 and every error, as they are
    policy = await enrich_policy(app[SETTINGS].enrich, backends.profiled_services, ctx)
    protobuf = is_protobuf_answer(answer.headers.get("Content-Type", ""), request.headers.get("Accept", ""))
    metrics = app[METRICS]
    if len(answer.body) >= ENRICH_IN_HELPER_BYTES:
        return await _big_answer(request, answer, version, protobuf, policy, trace_id, ctx)
    carried = carried_trace_of(app, trace_id)
    try:
        plain = undo_content_encoding(answer.body, answer.encoding, app[SETTINGS].max_upstream_answer_bytes)
        enriched = enrich_trace_body(plain, version=version, protobuf=protobuf, policy=policy, trace_id=carried)
    except (EncodingError, UndecodableBody) as exc:
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


def carried_trace_of(app: web.Application, trace_id: str) -> str | None:
    """The trace id the written pyroscope.profile.id values carry (``<span id>:<trace id>``), or None when the
    setting asks for the plain span id (``PROFILE_BRIDGE_PROFILE_ID_FORM=span``: a Pyroscope data source that
    reaches Pyroscope directly would send the carried form to Pyroscope, which refuses it)."""
    return trace_id if app[SETTINGS].profile_id_form == "span-and-trace" else None


async def _send(request: web.Request, answer: TempoAnswer, enriched: Enriched | None) -> web.StreamResponse:
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
        body, encoding = _gunzip_or_raw(answer, enriched, request.app[SETTINGS].max_upstream_answer_bytes)
    else:
        body = answer.body
    if encoding and encoding.lower() != "identity":
        headers["Content-Encoding"] = encoding
    return await _write(request, web.Response(status=answer.status, body=body, headers=headers))


async def _write(request: web.Request, response: web.Response) -> web.Response:
    try:
        await response.prepare(request)
        await response.write_eof()
    except (ConnectionError, aiohttp.ClientConnectionResetError) as exc:
        log.info("tempo: client went away before the trace answer was sent (%s)", exc)
    return response


def _gunzip_or_raw(answer: TempoAnswer, enriched: Enriched | None, limit: int) -> tuple[bytes, str]:
    if enriched is not None:
        return enriched.body, ""  # the decompressed body, unchanged
    try:
        return undo_content_encoding(answer.body, answer.encoding, limit), ""
    except EncodingError:
        return answer.body, answer.encoding  # corrupt: as it came, nothing better to send


async def _big_answer(
    request: web.Request,
    answer: TempoAnswer,
    version: int,
    protobuf: bool,
    policy: EnrichPolicy,
    trace_id: str,
    ctx: CallContext,
) -> web.StreamResponse:
    """A big answer is decoded, enriched and gzipped in the helper process (``bridge.offload``): the event loop only
    moves bytes. Its spans are remembered as they were sent and parsed when a click needs them."""
    app = request.app
    metrics = app[METRICS]
    client_gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    limit = app[SETTINGS].max_upstream_answer_bytes
    done = await app[OFFLOAD].run(
        partial(
            enrich_encoded,
            version=version,
            protobuf=protobuf,
            policy=policy,
            trace_id=carried_trace_of(app, trace_id),
            gzip_level=GZIP_LEVEL if client_gzip else None,
            max_bytes=limit,
        ),
        answer.body,
        answer.encoding,
    )
    if done.failure:
        log.warning("tempo: trace %s answer passed through unchanged, it cannot be decoded (%s)", trace_id, done.detail)
        metrics.enrich_failures.labels(done.failure).inc()
        return await _send(request, answer, None)
    body, encoding = (answer.body, answer.encoding) if done.body is None else (done.body, done.encoding)
    headers = end_to_end(answer.headers, _ANSWER_DROP)
    if encoding and encoding.lower() != "identity":
        headers["Content-Encoding"] = encoding
        if done.changed and "accept-encoding" not in headers.get("Vary", "").lower():
            headers.add("Vary", "Accept-Encoding")
    response = await _write(request, web.Response(status=answer.status, body=body, headers=headers))
    if done.added:
        metrics.enriched_spans.inc(done.added)
    if done.span_count:
        load = partial(
            load_trace, body, encoding, version=version, protobuf=protobuf, trace_id=trace_id, max_bytes=limit
        )
        cache = app[SPAN_CACHE]
        cache.put_pending(ctx.cache_scope, trace_id, load, done.span_count, len(body))
        metrics.cache_entries.labels("spans").set(len(cache))
        if carried_trace_of(app, trace_id) is None:  # no click will carry the trace: index its spans now
            tasks.spawn(_index(app, ctx.cache_scope, trace_id, load), f"index trace {trace_id}")
    return response


async def _index(app: web.Application, scope: str, trace_id: str, load: Callable[[], Trace]) -> None:
    """Parse a big trace held pending (off the event loop) and index its spans, for clicks that name a span only."""
    if app[SPAN_CACHE].pending(scope, trace_id) is None:
        return  # parsed meanwhile, or gone
    trace = await asyncio.to_thread(load)
    if len(trace):
        app[SPAN_CACHE].put_trace(scope, trace)


def _remember(app: web.Application, ctx: CallContext, trace_id: str, enriched: Enriched) -> None:
    """Record the answer's spans in the caller's span cache. The answer is already sent: a failure here is
    logged, never turned into an error answer."""
    try:
        spans = enriched.spans()
        if not spans:
            return
        cache = app[SPAN_CACHE]
        cache.put_trace(ctx.cache_scope, Trace.from_spans(spans, trace_id))
    except Exception:  # noqa: BLE001 - the answer is out; the cache is an optimisation
        log.exception("tempo: spans of trace %s could not be recorded in the span cache", trace_id)
        return
    app[METRICS].cache_entries.labels("spans").set(len(cache))


def setup(app: web.Application) -> None:
    app.router.add_route("*", MOUNT + "/{tail:.*}", handle)
    app[METRICS].allow("route", f"{MOUNT}/*", f"{MOUNT}/api/v2/traces/{{id}}", f"{MOUNT}/api/traces/{{id}}")
    offload.setup(app)
