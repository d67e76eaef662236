"""The bridge's own pages (jinja2, rendered on the server, no front-end build).

- ``GET /``: the slowest recent local-root spans per service (from the trace source's search: Tempo in proxy mode,
  the store in standalone mode; ``bridge.recent``), each linking to its page.
- ``GET /spans/{trace_id}/{span_id}``: the span's header (service, name, duration, a badge for the resolution mode and
  its reason), its flame graph as server-rendered SVG (search and click-to-zoom in a few lines of plain JavaScript;
  ``?q=`` highlights on the server too), the trace's span tree with each local root's linked samples, the
  ``scope=span`` / ``scope=request`` toggle, downloads and, when ``PROFILE_BRIDGE_GRAFANA_URL`` is set, links that open
  the same query in Grafana Explore.

Everything but zoom and live search works without JavaScript. jinja2 autoescapes every string a user controls (span
names, services, frame names, the search text).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.answer import Answer, selector_for
from bridge.config import Settings, parse_seconds
from bridge.errors import CODE_TO_HTTP, BridgeError, InvalidArgument
from bridge.grafana import PYROSCOPE_DS_TYPE, TEMPO_DS_TYPE, explore_url, span_window
from bridge.profiletype import ProfileType
from bridge.recent import recent_traces, slowest_local_roots, span_path
from bridge.routes.api import ProfileParams, answer_for, parse_params
from bridge.spans import Span, Trace
from bridge.state import CLOCK, SETTINGS, Backends, backends_of, call_context
from bridge.units import format_duration_ns, format_value, share
from bridge.upstream.base import CallContext, ProfileSource

TEMPLATES: Final = Path(__file__).resolve().parent.parent / "templates"
SVG_WIDTH: Final = 1200
ROW_HEIGHT: Final = 18
CHAR_WIDTH: Final = 7.0  # 12 px monospace
MIN_FRAME_PX: Final = 2.0
MAX_RECTS: Final = 2500  # the size budget: ~300 bytes a frame → under 1 MB of SVG whatever the profile
MAX_TREE_QUERIES: Final = 64  # local roots whose linked samples the span tree shows
MAX_TREE_ROWS: Final = 1000  # spans listed in the span tree (a 10,000-span trace stays a readable page)

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(name: str, status: int = 200, **context: Any) -> web.Response:
    html = _env.get_template(name).render(**context)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


# --------------------------------------------------------------------------------------------- flame graph SVG


@dataclass(frozen=True, slots=True)
class Frame:
    """One bar as the template draws it."""

    x: float
    y: int
    width: float
    depth: int
    name: str
    label: str
    title: str
    fill: str
    match: bool
    folded: bool


@dataclass(frozen=True, slots=True)
class FlameSvg:
    frames: list[Frame]
    width: int
    height: int
    folded: int
    total: int
    matched_total: int
    min_width: float  # frames narrower than this many pixels are folded


def frame_colour(name: str, depth: int, folded: bool, service: bool = False) -> str:
    """Warm flame colours, stable per function name; the root and folded bars grey, service bars (request scope)
    blue."""
    if depth == 0:
        return "rgb(190,190,200)"
    if folded:
        return "rgb(205,205,205)"
    if service:
        return "rgb(160,190,230)"
    h = zlib.crc32(name.encode())
    r = 205 + (h & 0x3F) % 50
    g = 80 + ((h >> 8) & 0xFF) % 150
    b = 30 + ((h >> 16) & 0xFF) % 45
    return f"rgb({r},{g},{b})"


def fit_label(name: str, width: float) -> str:
    """As much of ``name`` as fits in ``width`` pixels, with an ellipsis; empty when not even three characters do."""
    room = int((width - 6) / CHAR_WIDTH)
    if room < 3:
        return ""
    return name if len(name) <= room else name[: room - 1] + "…"


def flame_svg(tree: flamegraph.Node, unit: str, query: str = "", services: frozenset[str] = frozenset()) -> FlameSvg:
    """The SVG-ready frames; ``services`` names the first-row bars that stand for a service (request scope)."""
    lay = flamegraph.layout(tree, SVG_WIDTH, MIN_FRAME_PX, max_rects=MAX_RECTS)
    total = tree.total
    needle = query.casefold()
    frames: list[Frame] = []
    matched_total = 0
    for rect in lay.rects:
        folded = rect.folded > 0
        if folded:
            title = (f"{rect.folded} frames too narrow to draw: "
                     f"{format_value(rect.total, unit)} ({share(rect.total, total)})")
        else:
            title = (f"{rect.name}\ntotal {format_value(rect.total, unit)} ({share(rect.total, total)}), "
                     f"self {format_value(rect.self, unit)} ({share(rect.self, total)})")
        match = bool(needle) and not folded and rect.depth > 0 and needle in rect.name.casefold()
        if match:
            matched_total += rect.self
        frames.append(Frame(
            x=round(rect.x, 2), y=rect.depth * ROW_HEIGHT, width=round(rect.width, 2), depth=rect.depth,
            name=rect.name, label=fit_label(rect.name, rect.width), title=title,
            fill=frame_colour(rect.name, rect.depth, folded, rect.depth == 1 and rect.name in services),
            match=match, folded=folded,
        ))
    return FlameSvg(frames, SVG_WIDTH, lay.depth * ROW_HEIGHT + 2, lay.folded, total, matched_total, lay.min_width)


# --------------------------------------------------------------------------------------------- links


def grafana_links(settings: Settings, ans: Answer) -> list[tuple[str, str]]:
    """"Open in Grafana Explore" links: the profile query Grafana itself would send for this span, and the trace."""
    if not settings.grafana_url:
        return []
    span = ans.span
    from_ms, to_ms = span_window(span)
    profiles = {
        "pb": {
            "datasource": settings.grafana_profiles_uid,
            "queries": [{
                "refId": "profile",
                "datasource": {"type": PYROSCOPE_DS_TYPE, "uid": settings.grafana_profiles_uid},
                "queryType": "profile",
                "profileTypeId": ans.profile_type,
                "labelSelector": ans.resolution.label_selector or selector_for(span, settings.label_map),
                "spanSelector": [span.span_id],
                "groupBy": [],
            }],
            "range": {"from": str(from_ms), "to": str(to_ms)},
        }
    }
    trace = {
        "pb": {
            "datasource": settings.grafana_tempo_uid,
            "queries": [{
                "refId": "A",
                "datasource": {"type": TEMPO_DS_TYPE, "uid": settings.grafana_tempo_uid},
                "queryType": "traceql",
                "query": span.trace_id,
            }],
            "range": {"from": str(from_ms), "to": str(to_ms)},
        }
    }
    return [
        ("span profile in Grafana Explore", explore_url(settings.grafana_url, profiles)),
        ("trace in Grafana Explore", explore_url(settings.grafana_url, trace)),
    ]


def utc_text(ms: int) -> str:
    """Milliseconds since the epoch as ``2026-11-29 09:41:23.120 UTC``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


# --------------------------------------------------------------------------------------------- span tree


@dataclass(frozen=True, slots=True)
class TreeRow:
    depth: int
    span: Span
    duration: str
    local_root: bool
    linked: str  # formatted linked samples of a local root, "" for in-process children
    current: bool
    href: str


async def linked_values(
    profiles: ProfileSource, trace: Trace, current: str, profile_type: str, settings: Settings, ctx: CallContext
) -> dict[str, int | None]:
    """Each local root's own linked samples (``SelectMergeSpanProfile`` with its id alone); None when the backend
    failed for that span. Children have none of their own: the SDKs record their CPU under the local root. At most
    ``MAX_TREE_QUERIES`` are asked: the current span's local root and the local roots below it first."""
    first = [trace.local_root(current), *trace.descendant_local_roots(current)]
    ordered = {s.span_id: s for s in first if s is not None}
    for s in trace.spans.values():
        if s.span_id not in ordered and trace.is_local_root(s):
            ordered[s.span_id] = s
    roots = list(ordered.values())[:MAX_TREE_QUERIES]
    limit = asyncio.Semaphore(8)

    async def one(span: Span) -> int | None:
        start, end = span_window(span)
        req = qpb.SelectMergeSpanProfileRequest(
            profile_typeID=profile_type, label_selector=selector_for(span, settings.label_map),
            span_selector=[span.span_id], start=start, end=end,
        )
        async with limit:
            try:
                resp = await profiles.select_merge_span_profile(req, ctx)
            except BridgeError:
                return None
        return int(resp.flamegraph.total) if resp.HasField("flamegraph") else 0

    values = await asyncio.gather(*(one(s) for s in roots))
    return {s.span_id: v for s, v in zip(roots, values, strict=True)}


def tree_rows(trace: Trace, current: str, values: Mapping[str, int | None], unit: str, scope: str,
              limit: int = MAX_TREE_ROWS) -> tuple[list[TreeRow], int]:
    """The trace's span tree, depth first, at most ``limit`` rows (the current span always among them), and how many
    rows were left out. A local root's linked samples: its value, ``?`` when the backend failed, ``—`` when it was not
    asked (over ``MAX_TREE_QUERIES``)."""
    rows: list[TreeRow] = []
    hidden = 0
    for depth, span in trace.walk():
        is_current = span.span_id == current
        if len(rows) >= limit and not is_current:
            hidden += 1
            continue
        is_root = trace.is_local_root(span)
        if not is_root:
            linked = ""
        elif span.span_id not in values:
            linked = "—"
        else:
            value = values[span.span_id]
            linked = "?" if value is None else format_value(value, unit)
        rows.append(TreeRow(depth, span, format_duration_ns(span.duration_ns), is_root, linked, is_current,
                            span_path(span, scope=scope if scope != "span" else "")))
    return rows, hidden


# --------------------------------------------------------------------------------------------- handlers


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
        values = await linked_values(backends_of(request.app).profiles, ans.trace, ans.span.span_id,
                                     params.profile_type, settings, ctx)
    except BridgeError as exc:
        return error_page(exc)
    return render_page("span.html", **span_context(ans, params, settings, values, query))


def span_context(ans: Answer, params: ProfileParams, settings: Settings, values: Mapping[str, int | None],
                 query: str) -> dict[str, Any]:
    unit = ProfileType.parse(params.profile_type).sample_unit
    span = ans.span
    rows, hidden = tree_rows(ans.trace, span.span_id, values, unit, params.scope)
    api = f"/api/v1/spans/{span.trace_id}/{span.span_id}/profile"
    base_q = {"scope": params.scope, "profile_type": params.profile_type}
    return {
        "span": span,
        "duration": format_duration_ns(span.duration_ns),
        "ans": ans,
        "mode": ans.mode.value,
        "reason": ans.resolution.reason,
        "reasons": ans.reasons,
        "scope": params.scope,
        "profile_type": params.profile_type,
        "default_profile_type": settings.profile_type,
        "query": query,
        "svg": flame_svg(ans.tree, unit, query, frozenset(s.label for s in ans.services)),
        "total": format_value(ans.tree.total, unit),
        "measure": ans.measure,
        "services": [(s.label, format_value(s.value, unit),
                      share(s.value, ans.attributed_total) if s.attributed else "not counted: fallback", s.spans)
                     for s in ans.services],
        "parts": [(p, format_value(p.value, unit)) for p in ans.parts],
        "tree": rows,
        "tree_hidden": hidden,
        "scope_links": [(s, span_path(span, scope=s if s != "span" else "",
                                      profile_type=params.profile_type if params.profile_type != settings.profile_type
                                      else "")) for s in ("span", "request")],
        "downloads": [(fmt, f"{api}?{urlencode({**base_q, 'format': fmt})}") for fmt in ("json", "pprof", "collapsed")],
        "grafana": grafana_links(settings, ans),
        "window": (utc_text(ans.resolution.window_ms[0]), utc_text(ans.resolution.window_ms[1]))
        if ans.resolution.window_ms else None,
        "covered": (utc_text(ans.resolution.covered_ms[0]), utc_text(ans.resolution.covered_ms[1]))
        if ans.resolution.covered_ms else None,
        "started": utc_text(span.start_ns // 1_000_000),
        "local_root": ans.resolution.local_root,
    }


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
        "index.html", services=slowest_local_roots(traces), since=since_text,
        traces=len(traces), mode=backends.name, choices=("15m", "1h", "6h", "24h"),
        send=send_data_hints(settings, backends, str(request.url.origin()), request.url.host or "localhost"),
    )


def send_data_hints(settings: Settings, backends: Backends, origin: str, host: str) -> dict[str, str]:
    """Where applications send their data, as the browser reached the bridge (the index page says it when there is
    no data yet): to this bridge when it keeps data — OTLP/HTTP and gRPC (the receiver's bound port, when it runs)
    traces and the Pyroscope server address — else to Tempo and Pyroscope."""
    if backends.ingest is None:
        return {"tempo": settings.tempo_url, "pyroscope": settings.pyroscope_url}
    hints = {"otlp_http": f"{origin}/v1/traces", "pyroscope": origin, "otlp_http_base": origin}
    if backends.grpc is not None:
        port = backends.grpc.port
        hints["otlp_grpc"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return hints


def setup(app: web.Application) -> None:
    app.router.add_get("/", index_page)
    app.router.add_get("/spans/{trace_id}/{span_id}", span_page)

