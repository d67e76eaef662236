"""Pure: what the bridge's pages show — the template environment, the flame graph as SVG bars within a size budget,
the span tree, Grafana Explore links, and each page's context. The handlers (``bridge.routes.pages``) fetch; this
module only shapes what they fetched.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import jinja2

from bridge import flamegraph, ids
from bridge.answer import Answer, Linked, selector_for
from bridge.burners import function_href
from bridge.config import Settings
from bridge.functions import MAX_PATTERN_CHARS
from bridge.grafana import PYROSCOPE_DS_TYPE, TEMPO_DS_TYPE, explore_url, span_window
from bridge.profiletype import ProfileType
from bridge.recent import span_path
from bridge.sampling import figure_text, range_text, sampling_text
from bridge.spans import Span, Trace
from bridge.state import Backends
from bridge.units import format_duration_ns, format_value, share

TEMPLATES: Final = Path(__file__).resolve().parent / "templates"
SVG_WIDTH: Final = 1200
ROW_HEIGHT: Final = 18
CHAR_WIDTH: Final = 7.0  # 12 px monospace
MIN_FRAME_PX: Final = 2.0
MAX_RECTS: Final = 2500  # the size budget: ~300 bytes a frame → under 1 MB of SVG whatever the profile
MAX_TREE_ROWS: Final = 1000  # spans listed in the span tree (a 10,000-span trace stays a readable page)
OFFER_MARGIN_MS: Final = 30 * 60_000  # "requests that burn this function" looks half an hour each side of the span

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_html(name: str, **context: Any) -> str:
    """A page template, rendered (autoescaped, strict). ``csp_nonce``: the nonce of the page's Content-Security-Policy
    (``bridge.routes.pages``) its script and style block carry."""
    context.setdefault("csp_nonce", "")
    return _env.get_template(name).render(**context)


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
            title = (
                f"{rect.folded} frames too narrow to draw: "
                f"{format_value(rect.total, unit)} ({share(rect.total, total)})"
            )
        else:
            title = (
                f"{rect.name}\ntotal {format_value(rect.total, unit)} ({share(rect.total, total)}), "
                f"self {format_value(rect.self, unit)} ({share(rect.self, total)})"
            )
        match = bool(needle) and not folded and rect.depth > 0 and needle in rect.name.casefold()
        if match:
            matched_total += rect.self
        frames.append(
            Frame(
                x=round(rect.x, 2),
                y=rect.depth * ROW_HEIGHT,
                width=round(rect.width, 2),
                depth=rect.depth,
                name=rect.name,
                label=fit_label(rect.name, rect.width),
                title=title,
                fill=frame_colour(rect.name, rect.depth, folded, rect.depth == 1 and rect.name in services),
                match=match,
                folded=folded,
            )
        )
    return FlameSvg(frames, SVG_WIDTH, lay.depth * ROW_HEIGHT + 2, lay.folded, total, matched_total, lay.min_width)


# --------------------------------------------------------------------------------------------- links


def grafana_links(settings: Settings, ans: Answer) -> list[tuple[str, str]]:
    """ "Open in Grafana Explore" links: the profile query Grafana itself would send for this span, and the trace."""
    if not settings.grafana_url:
        return []
    span = ans.span
    from_ms, to_ms = span_window(span)
    profiles = {
        "pb": {
            "datasource": settings.grafana_profiles_uid,
            "queries": [
                {
                    "refId": "profile",
                    "datasource": {"type": PYROSCOPE_DS_TYPE, "uid": settings.grafana_profiles_uid},
                    "queryType": "profile",
                    "profileTypeId": ans.profile_type,
                    "labelSelector": ans.resolution.label_selector or selector_for(span, settings.label_map),
                    "spanSelector": [ids.carried_profile_id(span.span_id, span.trace_id)],
                    "groupBy": [],
                }
            ],
            "range": {"from": str(from_ms), "to": str(to_ms)},
        }
    }
    trace = {
        "pb": {
            "datasource": settings.grafana_tempo_uid,
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": TEMPO_DS_TYPE, "uid": settings.grafana_tempo_uid},
                    "queryType": "traceql",
                    "query": span.trace_id,
                }
            ],
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
    linked: str  # a local root's linked samples with their interval and count, "" for in-process children
    current: bool
    href: str


def tree_rows(
    trace: Trace, current: str, values: Mapping[str, Linked | None], unit: str, scope: str, limit: int = MAX_TREE_ROWS
) -> tuple[list[TreeRow], int]:
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
            linked = "?" if value is None else figure_text(value.total, value.tally, unit)
        rows.append(
            TreeRow(
                depth,
                span,
                format_duration_ns(span.duration_ns),
                is_root,
                linked,
                is_current,
                span_path(span, scope=scope if scope != "span" else ""),
            )
        )
    return rows, hidden


def span_context(ans: Answer, settings: Settings, values: Mapping[str, Linked | None], query: str) -> dict[str, Any]:
    """What ``span.html`` shows of an answer (``values``: each local root's linked total, ``linked_totals``)."""
    scope, profile_type = ans.scope, ans.profile_type
    unit = ProfileType.parse(profile_type).sample_unit
    span = ans.span
    rows, hidden = tree_rows(ans.trace, span.span_id, values, unit, scope)
    api = f"/api/v1/spans/{span.trace_id}/{span.span_id}/profile"
    base_q = {"scope": scope, "profile_type": profile_type}
    return {
        "span": span,
        "duration": format_duration_ns(span.duration_ns),
        "ans": ans,
        "mode": ans.step.value,
        "reason": ans.resolution.reason,
        "reasons": ans.reasons,
        "scope": scope,
        "profile_type": profile_type,
        "default_profile_type": settings.profile_type,
        "query": query,
        "svg": flame_svg(ans.tree, unit, query, frozenset(s.label for s in ans.services)),
        "total": format_value(ans.tree.total, unit),
        "measure": ans.measure,
        "sampling": sampling_lines(ans, unit),
        "services": [
            (
                s.label,
                figure_text(s.value, s.tally, unit),
                share(s.value, ans.attributed_total) if s.attributed else "not counted: fallback",
                s.spans,
            )
            for s in ans.services
        ],
        "parts": [
            (p, figure_text(p.value, p.resolution.sampling.tally if p.resolution.sampling else None, unit))
            for p in ans.parts
        ],
        "tree": rows,
        "tree_hidden": hidden,
        "scope_links": [
            (
                s,
                span_path(
                    span,
                    scope=s if s != "span" else "",
                    profile_type=profile_type if profile_type != settings.profile_type else "",
                ),
            )
            for s in ("span", "request")
        ],
        "downloads": [(fmt, f"{api}?{urlencode({**base_q, 'format': fmt})}") for fmt in ("json", "pprof", "collapsed")],
        "grafana": grafana_links(settings, ans),
        "window": (utc_text(ans.resolution.window_ms[0]), utc_text(ans.resolution.window_ms[1]))
        if ans.resolution.window_ms
        else None,
        "covered": (utc_text(ans.resolution.covered_ms[0]), utc_text(ans.resolution.covered_ms[1]))
        if ans.resolution.covered_ms
        else None,
        "started": utc_text(span.start_ns // 1_000_000),
        "local_root": ans.resolution.local_root,
        # what clicking a frame offers: the requests that burn that function, in the frame's service, around the span
        "offer": {
            "service": span.service,
            "from": span.start_ns // 1_000_000 - OFFER_MARGIN_MS,
            "to": -(-span.end_ns // 1_000_000) + OFFER_MARGIN_MS,
            "profile_type": "" if profile_type == settings.profile_type else profile_type,
        },
        "frame_services": {s.label: s.service for s in ans.services if s.attributed},
        "query_href": function_href(
            span.service,
            re.escape(query),
            match="regex",
            start_ms=span.start_ns // 1_000_000 - OFFER_MARGIN_MS,
            end_ms=-(-span.end_ns // 1_000_000) + OFFER_MARGIN_MS,
            profile_type="" if profile_type == settings.profile_type else profile_type,
        )
        if query.strip() and len(re.escape(query)) <= MAX_PATTERN_CHARS
        else "",
        "compare_href": f"/spans/{span.trace_id}/{span.span_id}/compare"
        + ("" if profile_type == settings.profile_type else "?" + urlencode({"profile_type": profile_type})),
    }


def sampling_lines(ans: Answer, unit: str) -> dict[str, str]:
    """The headline's interval and the lines under it: how many samples, what they are, and the flag when the
    number is more than the span lasted beyond sampling noise (``bridge.sampling``)."""
    sampling = ans.sampling
    out = dict.fromkeys(("measure", "why", "sdk", "count", "interval", "counted_by", "exceeds"), "")
    if sampling is None:
        return out
    t = sampling.tally
    out.update(measure=sampling.measure, why=sampling.sampler.why, sdk=sampling.sampler.sdk)
    if t is not None and t.samples > 0:
        out["count"] = f"{t.samples:,} sample{'' if t.samples == 1 else 's'}"
        out["interval"] = range_text(t, unit)
        out["counted_by"] = t.source
    else:
        out["count"] = sampling_text(sampling)
    wall = ans.wall_ns
    if wall is not None and sampling.exceeds(wall):
        out["exceeds"] = f"{sampling.why_exceeds()} (wall time {format_duration_ns(wall)})"
    return out


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
