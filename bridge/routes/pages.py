"""The bridge's own pages (jinja2, rendered on the server, no front-end build).

- ``GET /``: the slowest recent local-root spans per service (from the trace source's search: Tempo in proxy mode,
  the store in standalone mode; ``bridge.recent``), each linking to its page.
- ``GET /functions/spans``: the spans that burn a function, with bars proportional to their value (``bridge.burners``);
  with a service but no function yet, the service's top functions to pick from.
- ``GET /spans/{trace_id}/{span_id}/compare``: the span against its endpoint's usual requests — a diff flame graph
  (more than usual in red, less in green) and the most unusual functions in words (``bridge.compare``).
- ``GET /spans/{trace_id}/{span_id}``: the span's header (service, name, duration, a badge for the resolution mode and
  its reason), its flame graph as server-rendered SVG (search and click-to-zoom in a few lines of plain JavaScript;
  ``?q=`` highlights on the server too), the trace's span tree with each local root's linked samples, the
  ``scope=span`` / ``scope=request`` toggle, downloads and, when ``PROFILE_BRIDGE_GRAFANA_URL`` is set, links that open
  the same query in Grafana Explore.

Everything but zoom and live search works without JavaScript. jinja2 autoescapes every string a user controls (span
names, services, frame names, the search text).
"""

from __future__ import annotations

import secrets
from typing import Any, Final

from aiohttp import web

from bridge.answer import linked_totals
from bridge.burners import function_href, page_rows, spans_for_function, top_functions
from bridge.compare import compare, compare_context, parse_compare_params
from bridge.errors import CODE_TO_HTTP, BridgeError, InvalidArgument
from bridge.functions import MATCH_KINDS, parse_function_query, parse_range
from bridge.parsing import parse_seconds
from bridge.recent import recent_traces, slowest_local_roots
from bridge.routes.api import answer_for, parse_params
from bridge.state import CLOCK, SETTINGS, backends_of, call_context
from bridge.views import render_html, send_data_hints, span_context

BAR_WIDTH: Final = 240  # px of the function page's widest bar


def render_page(name: str, status: int = 200, **context: Any) -> web.Response:
    """A page, with its own script/style nonce and the headers that keep it from being framed, sniffed or fed
    foreign scripts (``page_headers``)."""
    nonce = secrets.token_urlsafe(18)
    return web.Response(
        text=render_html(name, csp_nonce=nonce, **context),
        status=status,
        content_type="text/html",
        charset="utf-8",
        headers=page_headers(nonce),
    )


def page_headers(nonce: str) -> dict[str, str]:
    """Pure: a page's security headers. Its one inline script and its style block carry ``nonce``; nothing else runs
    or styles (no ``unsafe-inline``); nothing loads from elsewhere; no site may frame it (the Grafana app plugin opens
    pages in a new tab, never a frame); forms and links stay on this origin's paths."""
    csp = "; ".join(
        (
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            f"style-src 'nonce-{nonce}'",
            "img-src 'self' data:",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        )
    )
    return {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
    }


def error_page(exc: BridgeError) -> web.Response:
    return render_page("error.html", status=CODE_TO_HTTP[exc.code], code=exc.code.value, message=exc.message)


async def span_page(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    query = request.query.get("q", "")[:200]
    try:
        params = parse_params(request, settings.profile_type)
        if params.format != "json":
            raise InvalidArgument("the page has no format parameter; download pprof or collapsed from the API")
        ctx = call_context(request)  # one budget for the whole page
        ans = await answer_for(request, params, ctx)
        values = await linked_totals(
            backends_of(request.app).resolver, ans.trace, ans.span.span_id, params.profile_type, settings, ctx
        )
    except BridgeError as exc:
        return error_page(exc)
    return render_page("span.html", **span_context(ans, settings, values, query))


# --------------------------------------------------------------------------------------------- index


async def index_page(request: web.Request) -> web.Response:
    app = request.app
    since_text = request.query.get("since", "1h")
    try:
        try:
            since = parse_seconds(since_text)
        except ValueError as exc:
            raise InvalidArgument(f"since {since_text[:40]!r}: {exc}") from exc
        since = min(since, 7 * 86400.0)
        ctx = call_context(request)
        traces = await recent_traces(backends_of(app).traces, app[CLOCK].now(), since, ctx)
    except BridgeError as exc:
        return error_page(exc)
    settings = app[SETTINGS]
    backends = backends_of(app)
    return render_page(
        "index.html",
        services=slowest_local_roots(traces),
        since=since_text,
        traces=len(traces),
        mode=backends.name,
        choices=("15m", "1h", "6h", "24h"),
        send=send_data_hints(settings, backends, str(request.url.origin()), request.url.host or "localhost"),
    )


# --------------------------------------------------------------------------------------------- function → spans


async def functions_page(request: web.Request) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    params = request.query
    now_ms = int(app[CLOCK].now() * 1000)
    form = {k: params.get(k, "") for k in ("service", "function", "match", "from", "to", "profile_type", "limit")}
    context: dict[str, Any] = {
        "form": form,
        "kinds": MATCH_KINDS,
        "ans": None,
        "rows": [],
        "top": [],
        "hint": "",
        "default_profile_type": settings.profile_type,
        "bar_width": BAR_WIDTH,
    }
    try:
        ctx = call_context(request)
        backends = backends_of(app)
        if not form["service"] or not form["function"]:
            if form["service"]:
                start, end = parse_range(params, now_ms)
                profile_type = form["profile_type"] or settings.profile_type
                context["top"] = await top_functions(
                    backends.profiles, form["service"], profile_type, start, end, settings, ctx
                )
                context["hint"] = (
                    f"{form['service']}'s functions with the most self time: pick one, or type a "
                    "name. Clicking a frame on any flame graph of the bridge brings you here too."
                )
            else:
                context["hint"] = "Give a service and a function (as the flame graph names it)."
            return render_page("functions.html", 200, **context)
        query = parse_function_query(params, settings.profile_type, now_ms)
        ans = await spans_for_function(backends.functions, backends.resolver, query, settings, ctx)
    except BridgeError as exc:
        return error_page(exc)
    context.update(
        ans=ans,
        rows=page_rows(ans),
        unit_type=query.profile_type,
        api="/api/v1/functions/spans?" + request.query_string,
        widen=function_href(
            query.service,
            query.match.text,
            match="prefix",
            start_ms=query.start_ms,
            end_ms=query.end_ms,
            profile_type=form["profile_type"],
        )
        if query.match.kind == "exact"
        else "",
    )
    return render_page("functions.html", 200, **context)


async def compare_page(request: web.Request) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    try:
        params = parse_compare_params(request.match_info, request.query, settings.profile_type)
        if params.format != "json":
            raise InvalidArgument("the page has no format parameter; download json or collapsed from the API")
        cmp = await compare(
            backends_of(app).resolver, params, settings, call_context(request), int(app[CLOCK].now() * 1000)
        )
    except BridgeError as exc:
        return error_page(exc)
    return render_page("compare.html", 200, **compare_context(cmp, settings, request.query.get("window") or "1h"))


def setup(app: web.Application) -> None:
    app.router.add_get("/", index_page)
    app.router.add_get("/functions/spans", functions_page)
    app.router.add_get("/spans/{trace_id}/{span_id}/compare", compare_page)
    app.router.add_get("/spans/{trace_id}/{span_id}", span_page)
