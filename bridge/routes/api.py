"""The bridge's own JSON API: one span's profile, in the scope and format asked for; the slowest recent requests.

``GET /api/v1/spans/{trace_id}/{span_id}/profile``

| parameter | values | default |
|---|---|---|
| ``scope`` | ``span`` (the resolver's answer) or ``request`` (plus every descendant local root, per service) | span |
| ``format`` | ``json``, ``pprof`` (gzipped ``google.v1.Profile``), ``collapsed`` (folded stacks) | json |
| ``profile_type`` | a Pyroscope profile type id ``name:sample_type:sample_unit:period_type:period_unit`` | setting |
| ``max_nodes`` | fold the flame graph to at most this many nodes (json) | none |

Every answer carries ``X-Profile-Bridge-Resolution`` (the mode), ``X-Profile-Bridge-Reason``,
``X-Profile-Bridge-Attribution`` (whose cost the total is: ``span``, ``request``, ``service`` or ``nothing``) and
``X-Profile-Bridge-Measure`` (that in words), all ASCII. Errors are
``{"error": {"code", "message"}}`` (the middleware): bad ids or parameters 400, unknown span 404, upstream failures
503/504.

``GET /api/v1/functions/spans``: the spans that burn a function (``bridge.burners``; parameters ``service``,
``function``, ``match``, ``from``, ``to``, ``profile_type``, ``limit``: ``docs/functions-and-compare.md``).

``GET /api/v1/spans/{trace_id}/{span_id}/compare``: the span against its endpoint's usual self (``bridge.compare``;
parameters ``baseline``, ``window``, ``format``, ``profile_type``).

``GET /api/v1/requests/slowest``: the index page's list as JSON (the Grafana app plugin's page reads it), each request
with its resolution mode. Parameters: ``since`` (``15m``, ``1h``, …; default 1h, at most 7 days), ``per_service``
(1..50, default 10), ``profile_type`` (default: the setting). A request whose resolution failed carries
``resolution: null`` and ``error {code, message}``; the list itself fails only when the trace search does.

``GET /api/v1/auth?need=read|ingest``: nginx in front (``deploy/nginx-front.conf``, ``auth_request``) asks whether
its caller's credentials may ``need``: 200 (empty) with ``X-Profile-Bridge-Tenant`` (the tenant to send upstream;
absent: none) and ``X-Profile-Bridge-Consumed: authorization`` when ``Authorization`` carried the bridge's token;
401/403 otherwise (the token gate, ``bridge.gate``). Without tokens configured: 200 and the caller's own tenant.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from bridge import flamegraph, ids
from bridge.answer import SCOPES, Answer, Scope, answer, answer_json
from bridge.auth import CONSUMED_HEADER, FRONT_AUTH_PATH, TENANT_ANSWER_HEADER, TENANT_HEADER
from bridge.burners import function_answer_json, spans_for_function
from bridge.call import CallContext
from bridge.compare import compare, compare_collapsed, compare_json, parse_compare_params
from bridge.errors import InvalidArgument
from bridge.functions import parse_function_query
from bridge.parsing import PERMISSIONS, parse_seconds
from bridge.pprof import encode_pprof
from bridge.profiletype import ProfileType
from bridge.recent import (
    INDEX_PER_SERVICE,
    IndexRow,
    RowResolution,
    recent_traces,
    resolve_rows,
    slowest_local_roots,
    span_path,
)
from bridge.resolution import Step, answer_headers
from bridge.sampling import sampling_json
from bridge.state import CLOCK, GRANT, SETTINGS, backends_of, call_context

FORMATS: Final = ("json", "pprof", "collapsed")
MAX_NODES_LIMIT: Final = 1_000_000
MAX_SINCE_S: Final = 7 * 86400.0
MAX_PER_SERVICE: Final = 50


@dataclass(frozen=True, slots=True)
class ProfileParams:
    trace_id: str
    span_id: str
    scope: Scope
    format: str
    profile_type: str
    max_nodes: int | None


def parse_params(request: web.Request, default_profile_type: str) -> ProfileParams:
    """Pure-ish: the path ids and query parameters, validated; ``InvalidArgument`` naming the bad one."""
    raw_trace, raw_span = request.match_info["trace_id"], request.match_info["span_id"]
    trace_id, span_id = ids.span_of_trace(raw_trace, raw_span)  # also SPAN:TRACE, as pyroscope.profile.id reads
    query = request.query
    scope = query.get("scope", "span")
    if scope not in SCOPES:
        raise InvalidArgument(f"scope {scope[:40]!r} is not one of: {', '.join(SCOPES)}")
    fmt = query.get("format", "json")
    if fmt not in FORMATS:
        raise InvalidArgument(f"format {fmt[:40]!r} is not one of: {', '.join(FORMATS)}")
    profile_type = query.get("profile_type", "") or default_profile_type
    ProfileType.parse(profile_type)  # BadProfileType: invalid_argument, naming the form
    max_nodes: int | None = None
    if query.get("max_nodes"):
        try:
            max_nodes = int(query["max_nodes"])
        except ValueError:
            max_nodes = 0
        if not 0 < max_nodes <= MAX_NODES_LIMIT:
            raise InvalidArgument(
                f"max_nodes {query['max_nodes'][:40]!r} is not a whole number in 1..{MAX_NODES_LIMIT}"
            )
    return ProfileParams(trace_id, span_id, "request" if scope == "request" else "span", fmt, profile_type, max_nodes)


async def answer_for(request: web.Request, params: ProfileParams, ctx: CallContext | None = None) -> Answer:
    settings = request.app[SETTINGS]
    return await answer(
        backends_of(request.app).resolver,
        params.trace_id,
        params.span_id,
        scope=params.scope,
        profile_type=params.profile_type,
        settings=settings,
        ctx=ctx or call_context(request),
        max_nodes=params.max_nodes,
    )


# --------------------------------------------------------------------------------------------- JSON shapes


NOSNIFF: Final = {"X-Content-Type-Options": "nosniff"}  # frame names are anyone's text: never read as HTML


def render(ans: Answer, fmt: str) -> web.Response:
    headers = {**answer_headers(ans.resolution, ans.measure), **NOSNIFF}
    base = f"{ans.span.span_id}-{ans.scope}"
    if fmt == "pprof":
        prof = encode_pprof(
            flamegraph.iter_stacks(ans.tree),
            ans.profile_type,
            duration_nanos=ans.span.duration_ns,
            time_nanos=ans.span.start_ns,
        )
        headers["Content-Disposition"] = f'attachment; filename="{base}.pb.gz"'
        return web.Response(
            body=gzip.compress(prof.SerializeToString()), content_type="application/octet-stream", headers=headers
        )
    if fmt == "collapsed":
        headers["Content-Disposition"] = f'inline; filename="{base}.folded"'
        return web.Response(
            text=flamegraph.to_collapsed(ans.tree), content_type="text/plain", charset="utf-8", headers=headers
        )
    return web.json_response(answer_json(ans), headers=headers)


async def span_profile(request: web.Request) -> web.Response:
    params = parse_params(request, request.app[SETTINGS].profile_type)
    return render(await answer_for(request, params), params.format)


# --------------------------------------------------------------------------------------------- slowest requests


@dataclass(frozen=True, slots=True)
class SlowestParams:
    since: str
    since_s: float
    per_service: int
    profile_type: str


def parse_slowest_params(query: Mapping[str, str], default_profile_type: str) -> SlowestParams:
    """Pure: ``since``, ``per_service`` and ``profile_type``, validated; ``InvalidArgument`` naming the bad one."""
    since = query.get("since", "") or "1h"
    try:
        since_s = parse_seconds(since)
    except ValueError as exc:
        raise InvalidArgument(f"since {since[:40]!r}: {exc}") from exc
    if since_s > MAX_SINCE_S:
        raise InvalidArgument(f"since {since[:40]!r} is longer than 7 days (Tempo searches at most 168 h)")
    text = query.get("per_service", "") or str(INDEX_PER_SERVICE)
    per_service = int(text) if text.isdigit() else 0
    if not 0 < per_service <= MAX_PER_SERVICE:
        raise InvalidArgument(f"per_service {text[:40]!r} is not a whole number in 1..{MAX_PER_SERVICE}")
    profile_type = query.get("profile_type", "") or default_profile_type
    ProfileType.parse(profile_type)  # BadProfileType: invalid_argument, naming the form
    return SlowestParams(since, since_s, per_service, profile_type)


def request_json(row: IndexRow, res: RowResolution) -> dict[str, Any]:
    span = row.span
    doc: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "service": span.service,
        "startTimeUnixNano": str(span.start_ns),
        "durationNanos": str(span.duration_ns),
        "duration": row.duration,
        "spansBelow": row.children,
        "resource": dict(span.resource),
        "links": {"span": row.href, "request": span_path(span, scope="request")},
        "resolution": None
        if res.step is None
        else {
            "mode": res.step.value,
            "reason": res.reason,
            "total": res.total,
            # how many samples make up the total, their 95 % interval and what they measure (docs/api.md)
            "sampling": sampling_json(res.sampling, row.span.duration_ns if res.step is Step.LINKED else None),
        },
    }
    if res.step is None:
        doc["error"] = {"code": res.error_code, "message": res.reason}
    return doc


async def slowest_requests(request: web.Request) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    params = parse_slowest_params(request.query, settings.profile_type)
    ctx = call_context(request)
    backends = backends_of(app)
    traces = await recent_traces(backends.traces, app[CLOCK].now(), params.since_s, ctx)
    services = slowest_local_roots(traces, per_service=params.per_service)
    rows = [row for _, service_rows in services for row in service_rows]
    resolutions = iter(
        await resolve_rows(
            backends.resolver,
            traces,
            [r.span for r in rows],
            profile_type=params.profile_type,
            settings=settings,
            ctx=ctx,
        )
    )
    return web.json_response(
        headers=NOSNIFF,
        data={
            "mode": settings.mode,
            "since": params.since,
            "sinceSeconds": params.since_s,
            "profileType": params.profile_type,
            "traces": len(traces),
            "services": [
                {"service": service, "requests": [request_json(row, next(resolutions)) for row in service_rows]}
                for service, service_rows in services
            ],
        },
    )


# --------------------------------------------------------------------------------------------- function → spans


async def function_spans(request: web.Request) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    query = parse_function_query(request.query, settings.profile_type, int(app[CLOCK].now() * 1000))
    backends = backends_of(app)
    ans = await spans_for_function(backends.functions, backends.resolver, query, settings, call_context(request))
    return web.json_response(function_answer_json(ans, backends.name))


# --------------------------------------------------------------------------------------------- compare with usual


async def span_compare(request: web.Request) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    params = parse_compare_params(request.match_info, request.query, settings.profile_type)
    cmp = await compare(
        backends_of(app).resolver, params, settings, call_context(request), int(app[CLOCK].now() * 1000)
    )
    headers = answer_headers(cmp.ans.resolution, cmp.ans.measure)
    if params.format == "collapsed":
        headers["Content-Disposition"] = f'inline; filename="{params.span_id}-compare.folded"'
        return web.Response(text=compare_collapsed(cmp), content_type="text/plain", charset="utf-8", headers=headers)
    return web.json_response(compare_json(cmp), headers=headers)


async def front_auth(request: web.Request) -> web.Response:
    """nginx's ``auth_request``: the gate has already refused a caller who may not ``need`` (see the docstring)."""
    if request.query.get("need") not in PERMISSIONS:
        raise InvalidArgument(f"need must be one of {', '.join(PERMISSIONS)}")
    grant = request.get(GRANT)
    tenant = grant.tenant if grant is not None else request.headers.get(TENANT_HEADER) or None
    headers = {"Cache-Control": "no-store"}  # nginx keeps it briefly on purpose (proxy_cache); nothing else should
    if tenant is not None:
        headers[TENANT_ANSWER_HEADER] = tenant
    if grant is not None and grant.drop_authorization:
        headers[CONSUMED_HEADER] = "authorization"
    return web.Response(status=200, headers=headers)


def setup(app: web.Application) -> None:
    app.router.add_get(FRONT_AUTH_PATH, front_auth)
    app.router.add_get("/api/v1/spans/{trace_id}/{span_id}/profile", span_profile)
    app.router.add_get("/api/v1/spans/{trace_id}/{span_id}/compare", span_compare)
    app.router.add_get("/api/v1/functions/spans", function_spans)
    app.router.add_get("/api/v1/requests/slowest", slowest_requests)
