"""``profile-bridge resolve TRACE_ID SPAN_ID``: one span's answer on the terminal — the mode, the reasons and the top
frames by self and by total time.

How it reaches the data:

- **proxy mode**: Tempo and Pyroscope directly (``PROFILE_BRIDGE_TEMPO_URL`` / ``PROFILE_BRIDGE_PYROSCOPE_URL``) with
  the same resolver the service runs — no bridge needs to be running.
- **standalone mode**: the data lives in the running bridge's store, so it asks that bridge's API
  (``GET /api/v1/spans/…/profile`` at ``PROFILE_BRIDGE_LISTEN``; ``0.0.0.0`` is reached as ``127.0.0.1``).

``--compare`` adds the span against its endpoint's usual requests (``bridge.compare``): the most unusual functions,
the same list the compare page and ``GET /api/v1/spans/…/compare`` give.

Exit codes: 0 an answer with samples; 1 no samples (mode ``none``) or a backend failed (one line on stderr); 2 bad ids
or arguments (one line on stderr). Never a stack trace.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TextIO

import aiohttp
from google.protobuf import json_format

from bridge import flamegraph, ids
from bridge._proto import querier_pb2 as qpb
from bridge.answer import SCOPES, Scope, answer, answer_json
from bridge.auth import TOKEN_HEADER
from bridge.call import CallContext, Deadline
from bridge.compare import compare, compare_json, parse_compare_params
from bridge.config import Settings
from bridge.errors import BridgeError, InvalidArgument, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.profiletype import ProfileType
from bridge.resolve import Resolver
from bridge.spancache import SpanCache
from bridge.units import format_duration_ns, format_value, share
from bridge.upstream.http import open_clients

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


# --------------------------------------------------------------------------------------------- pure: the tables


@dataclass(frozen=True, slots=True)
class FunctionCost:
    name: str
    self: int
    total: int  # counted once per stack even when the function recurses


def function_costs(root: flamegraph.Node) -> list[FunctionCost]:
    """Self and total time per function name over the whole tree (a recursive function's total is counted once per
    stack, as pprof's ``-top`` does). The root and folded ``other`` bars are not functions."""
    self_of: dict[str, int] = {}
    total_of: dict[str, int] = {}
    work: list[tuple[flamegraph.Node, frozenset[str]]] = [(c, frozenset()) for c in root.children.values()]
    while work:
        node, above = work.pop()
        self_of[node.name] = self_of.get(node.name, 0) + node.self
        if node.name not in above:
            total_of[node.name] = total_of.get(node.name, 0) + node.total
        inner = above | {node.name}
        work.extend((c, inner) for c in node.children.values())
    return [FunctionCost(name, self_of[name], total_of.get(name, 0)) for name in self_of]


def top_table(costs: list[FunctionCost], whole: int, unit: str, key: str, top: int) -> list[str]:
    ranked = sorted(costs, key=lambda c: (-getattr(c, key), c.name))[:top]
    rows = [("self", "self%", "total", "total%", "function")]
    rows += [
        (format_value(c.self, unit), share(c.self, whole), format_value(c.total, unit), share(c.total, whole), c.name)
        for c in ranked
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  " + "  ".join(r[i].rjust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]


def figure_of(total: int, sampling: Mapping[str, Any] | None, unit: str) -> str:
    """``830 ms (95 %: 670 ms – 1.03 s; 83 samples)`` from an API ``sampling`` object; the bare value when it is not
    a count."""
    samples = (sampling or {}).get("samples")
    interval = (sampling or {}).get("interval95")
    if not samples or not interval:
        return format_value(total, unit)
    low, high = format_value(int(interval["low"]), unit), format_value(int(interval["high"]), unit)
    return f"{format_value(total, unit)} (95 %: {low} – {high}; {samples:,} sample{'' if samples == 1 else 's'})"


def sampling_lines(sampling: Mapping[str, Any] | None, unit: str) -> list[str]:
    """What the number is and how sure: the count with its 95 % interval, the sampler, the wall-time flag."""
    if not sampling:
        return []
    samples, interval = sampling.get("samples"), sampling.get("interval95")
    if samples and interval:
        low, high = format_value(int(interval["low"]), unit), format_value(int(interval["high"]), unit)
        counted = (
            f"{samples:,} sample{'' if samples == 1 else 's'}, 95 % interval {low} – {high} ({sampling['countedBy']})"
        )
    elif samples == 0:
        counted = "0 samples"
    else:
        counted = str(sampling.get("countedBy") or "not a count of samples") + ": no sampling interval"
    lines = [f"samples  {counted}"]
    if sampling.get("why"):
        lines.append(f"sampler  {sampling['sdk'] + ': ' if sampling.get('sdk') else ''}{sampling['why']}")
    if sampling.get("exceedsWall"):
        lines.append(f"flag     {sampling['exceedsWallWhy']}")
    return lines


def format_report(doc: Mapping[str, Any], top: int) -> str:
    """The terminal report for one answer, from the API's JSON document (both modes produce it)."""
    span = doc["span"]
    profile_type = str(doc["profileType"])
    unit = ProfileType.parse(profile_type).sample_unit
    fg = json_format.ParseDict(doc["flamegraph"], qpb.FlameGraph(), ignore_unknown_fields=True)
    tree = flamegraph.decode(fg)
    total = int(doc.get("total", tree.total))
    lines = [
        f"span     {span['spanId']}  {span['name']}  ({span['service'] or 'unknown service'}, {span['kind']}, "
        f"{format_duration_ns(int(span['durationNanos']))})",
        f"trace    {span['traceId']}",
        f"scope    {doc['scope']}",
        f"mode     {doc['mode']}",
        f"reason   {doc['reason']}",
    ]
    measure = doc.get("measure") or {}
    if measure:
        own = "" if measure.get("own") else "  [not this span's own cost]"
        lines.append(f"measure  {measure['text']}{own}")
    lines += sampling_lines(doc.get("sampling"), unit)
    if doc["scope"] == "request":
        lines.append("parts:")
        for part in doc.get("parts", []):
            mark = "+" if part["included"] else "-"
            lines.append(
                f"  {mark} {part['service']} {part['name']} [{part['mode']}] "
                f"{figure_of(int(part['total']), part.get('sampling'), unit)}: {part['note']}"
            )
        lines.append("per service (shares of what is attributed to the request):")
        attributed = int(doc.get("attributedTotal", total))
        for svc in doc.get("services", []):
            counted = share(int(svc["total"]), attributed) if svc.get("attributed", True) else "not counted: fallback"
            lines.append(
                f"  {svc.get('frame') or svc['service']}  {figure_of(int(svc['total']), svc.get('sampling'), unit)}  "
                f"{counted}  ({svc['spans']} span{'' if svc['spans'] == 1 else 's'})"
            )
    lines.append(f"profile  {profile_type}: {figure_of(total, doc.get('sampling'), unit)}")
    if total <= 0:
        lines.append("no samples: nothing to list")
        return "\n".join(lines) + "\n"
    if doc["scope"] == "request":  # the first row is one frame per service, not functions
        inner = flamegraph.Node(flamegraph.ROOT_NAME)
        for service in tree.children.values():
            flamegraph.merge_into(inner, service)
        tree = inner
    costs = function_costs(tree)
    lines.append("")
    lines.append(f"top {top} functions by self")
    lines += top_table(costs, total, unit, "self", top)
    lines.append("")
    lines.append(f"top {top} functions by total")
    lines += top_table(costs, total, unit, "total", top)
    return "\n".join(lines) + "\n"


def format_compare(doc: Mapping[str, Any]) -> str:
    """The ``--compare`` section, from the compare API's JSON document (both modes produce it)."""
    unit = ProfileType.parse(str(doc["profileType"])).sample_unit
    here, baseline = doc["here"], doc["baseline"]
    lines = ["", f"compare  {doc['headline']}"]
    if baseline["requests"]:
        lines.append(
            f"         here {figure_of(int(here['total']), here.get('sampling'), unit)}, usually "
            f"{format_value(round(float(baseline['perRequest'])), unit)} per request"
        )
    for note in doc.get("notes", []):
        lines.append(f"note     {note}")
    test = doc.get("test")
    if test:
        lines.append(f"test     {test['name']}, p < {test['alpha']:g}")
    if doc["unusual"]:
        lines.append(f"most unusual functions (self, per request; {baseline['requests']} usual requests)")
        lines += [f"  {item['text']}" for item in doc["unusual"]]
    elif test:
        lines.append("nothing differs beyond sampling noise")
    else:
        lines.append("nothing tested: the values are not counts of samples")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- I/O


def bridge_url(settings: Settings) -> str:
    """Where the running bridge answers, from its listen address (a wildcard host is reached on loopback)."""
    host = settings.listen_host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.listen_port}"


def bridge_headers(settings: Settings) -> dict[str, str]:
    """What a command sends the running bridge: its token (``PROFILE_BRIDGE_TOKEN``) when one is set."""
    return {TOKEN_HEADER: settings.client_token} if settings.client_token else {}


def client_timeout(settings: Settings) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=settings.max_request_timeout, connect=settings.connect_timeout)


async def _bridge_json(settings: Settings, path: str, params: dict[str, str]) -> dict[str, Any]:
    """Standalone mode: GET one of the running bridge's APIs (its store holds the data), with the token when set."""
    base = bridge_url(settings)
    try:
        async with (
            aiohttp.ClientSession(timeout=client_timeout(settings)) as session,
            session.get(f"{base}{path}", params=params, headers=bridge_headers(settings)) as resp,
        ):
            body = await resp.json(content_type=None)
            if resp.status != 200:
                err = body.get("error", {}) if isinstance(body, dict) else {}
                raise BridgeError(
                    f"the bridge at {base} answered HTTP {resp.status}: {err.get('message', 'no message')}"
                )
            return dict(body)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise UpstreamUnavailable(
            "bridge",
            f"no bridge answered at {base} ({type(exc).__name__}: {exc}); standalone mode keeps the data "
            "in the running service: start `profile-bridge serve`, or set PROFILE_BRIDGE_LISTEN to where it runs",
        ) from exc


async def fetch_from_bridge(
    settings: Settings, trace_id: str, span_id: str, *, scope: str, profile_type: str
) -> dict[str, Any]:
    """Standalone mode: the running bridge's profile API."""
    return await _bridge_json(
        settings,
        f"/api/v1/spans/{trace_id}/{span_id}/profile",
        {"scope": scope, "profile_type": profile_type, "format": "json"},
    )


async def fetch_compare_from_bridge(
    settings: Settings, trace_id: str, span_id: str, *, window: str, profile_type: str
) -> dict[str, Any]:
    """Standalone mode: the running bridge's compare API."""
    return await _bridge_json(
        settings,
        f"/api/v1/spans/{trace_id}/{span_id}/compare",
        {"window": window, "profile_type": profile_type, "format": "json"},
    )


async def compare_direct(
    settings: Settings, trace_id: str, span_id: str, *, window: str, profile_type: str, clock: Callable[[], float]
) -> dict[str, Any]:
    """Proxy mode: Tempo and Pyroscope directly, through the service's own comparison."""
    params = parse_compare_params(
        {"trace_id": trace_id, "span_id": span_id},
        {"window": window, "profile_type": profile_type},
        settings.profile_type,
    )
    metrics = Metrics()
    ctx = CallContext(deadline=Deadline.start(None, settings.max_request_timeout))
    async with open_clients(settings, metrics) as (tempo, pyroscope):
        resolver = Resolver(tempo, pyroscope, SpanCache(1000, 16 * 1024**2, 60.0), settings, metrics, clock=clock)
        return compare_json(await compare(resolver, params, settings, ctx, int(clock() * 1000)))


async def answer_direct(
    settings: Settings, trace_id: str, span_id: str, *, scope: Scope, profile_type: str
) -> dict[str, Any]:
    """Proxy mode: Tempo and Pyroscope directly, through the service's own resolver."""
    metrics = Metrics()
    ctx = CallContext(deadline=Deadline.start(None, settings.max_request_timeout))
    async with open_clients(settings, metrics) as (tempo, pyroscope):
        resolver = Resolver(tempo, pyroscope, SpanCache(1000, 16 * 1024**2, 60.0), settings, metrics)
        ans = await answer(
            resolver, trace_id, span_id, scope=scope, profile_type=profile_type, settings=settings, ctx=ctx
        )
        return answer_json(ans)


async def fetch_answer(
    settings: Settings, trace_id: str, span_id: str, *, scope: Scope, profile_type: str
) -> dict[str, Any]:
    if settings.is_standalone:
        return await fetch_from_bridge(settings, trace_id, span_id, scope=scope, profile_type=profile_type)
    return await answer_direct(settings, trace_id, span_id, scope=scope, profile_type=profile_type)


def check_args(trace_id: str, span_id: str, scope: str, top: int, profile_type: str) -> tuple[str, str, Scope]:
    """Validated, normalised arguments; ``InvalidArgument`` with the one line to print."""
    tid, sid = ids.span_of_trace(trace_id, span_id)  # a span id, or pyroscope.profile.id's <span>:<trace> as it is
    if scope not in SCOPES:
        raise InvalidArgument(f"scope {scope!r} is not one of: {', '.join(SCOPES)}")
    if top <= 0:
        raise InvalidArgument(f"--top {top} must be a positive number")
    ProfileType.parse(profile_type)  # BadProfileType: invalid_argument, naming the form
    return tid, sid, "request" if scope == "request" else "span"


async def resolve_report(
    settings: Settings,
    trace_id: str,
    span_id: str,
    *,
    scope: str,
    top: int,
    profile_type: str,
    out: TextIO,
    err: TextIO,
    compare_window: str | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """``compare_window``: also compare the span with its endpoint's usual requests in that window (``--compare``)."""
    try:
        tid, sid, checked_scope = check_args(trace_id, span_id, scope, top, profile_type)
        if compare_window is not None:
            parse_compare_params({"trace_id": tid, "span_id": sid}, {"window": compare_window}, profile_type)
    except InvalidArgument as exc:
        print(f"profile-bridge resolve: {exc.message}", file=err)
        return EXIT_USAGE
    try:
        doc = await fetch_answer(settings, tid, sid, scope=checked_scope, profile_type=profile_type)
    except BridgeError as exc:
        print(f"profile-bridge resolve: {exc.message}", file=err)
        return EXIT_FAILED
    out.write(format_report(doc, top))
    if compare_window is not None:
        try:
            if settings.is_standalone:
                compared = await fetch_compare_from_bridge(
                    settings, tid, sid, window=compare_window, profile_type=profile_type
                )
            else:
                compared = await compare_direct(
                    settings, tid, sid, window=compare_window, profile_type=profile_type, clock=clock
                )
        except BridgeError as exc:
            print(f"profile-bridge resolve: compare: {exc.message}", file=err)
            return EXIT_FAILED
        out.write(format_compare(compared))
    return EXIT_OK if doc["mode"] != "none" else EXIT_FAILED


def run_resolve(
    settings: Settings,
    trace_id: str,
    span_id: str,
    *,
    scope: str,
    top: int,
    profile_type: str,
    out: TextIO,
    err: TextIO = sys.stderr,
    compare_window: str | None = None,
) -> int:
    try:
        return asyncio.run(
            resolve_report(
                settings,
                trace_id,
                span_id,
                scope=scope,
                top=top,
                profile_type=profile_type,
                out=out,
                err=err,
                compare_window=compare_window,
            )
        )
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: one line, never a stack trace
        print(f"profile-bridge resolve: internal error: {type(exc).__name__}: {exc}", file=err)
        return EXIT_FAILED
