"""``profile-bridge doctor``: check every hop from the application to the flame graph, say which one is broken and how
to fix it.

Checks, in order (a check whose input a failed check should have given is skipped, not failed again):

1. Tempo reachable              5. Pyroscope reachable
2. trace found                  6. profile type present
3. span found                   7. samples linked to the span (or which fallback would answer)
4. span carries pyroscope.profile.id (or the bridge's enrichment adds it)
8. the expected function in the answer (``--expect-function``)
9. Grafana's data sources: not Tempo through the bridge with its profiles straight to Pyroscope while the bridge
   writes ``<span id>:<trace id>`` (``bridge.commands.datasources``; a note instead when none can be read)

Without ``--trace-id``/``--span-id`` it picks a recent root span itself: the slowest one with linked samples, else
the slowest (``--trace-id`` alone: that trace's root span; ``--span-id`` alone: found by Tempo's search). It only
picks spans that ended at least a capture window plus the upload lag ago (``settle_seconds``): a profile is uploaded
when its capture window closes, so a younger span may simply not have its samples yet.

A span without linked samples is not by itself a broken pipeline: short and waiting spans burn too little CPU to be
sampled. Before recommending a span processor, check 7 asks about other recent spans of the same service; if any of
them is linked, linking works and the time-window answer is the expected one for this span.

How it reaches the data:

- **proxy mode**: Tempo and Pyroscope directly (``PROFILE_BRIDGE_TEMPO_URL``, ``PROFILE_BRIDGE_PYROSCOPE_URL``) with
  the clients and the resolver the service itself uses; no bridge needs to be running.
- **standalone mode**: the data lives in the running bridge's store, so it goes through that bridge at
  ``PROFILE_BRIDGE_LISTEN``: ``/readyz`` for reachability, the ``/tempo`` mount for traces, the ``/pyroscope`` mount
  for profile types, and the span API for the answer (the mounts' own span-selector answers are already resolved,
  so only the API tells which mode answered).

Exit codes: 0 every check passed; 1 a check failed; 2 bad ids or arguments (one line). Never a stack trace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import aiohttp
from google.protobuf import json_format

from bridge import flamegraph, ids
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.answer import Scope
from bridge.call import CallContext, Deadline
from bridge.commands.checks import Check
from bridge.commands.datasources import check_datasources
from bridge.commands.resolve import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    answer_direct,
    bridge_headers,
    bridge_url,
    client_timeout,
    fetch_from_bridge,
)
from bridge.config import Settings
from bridge.errors import BridgeError, InvalidArgument, UpstreamUnavailable
from bridge.metrics import Metrics
from bridge.profiletype import ProfileType
from bridge.sources import ProfileSource, TraceSource
from bridge.spans import PROFILE_ID_ATTR, SearchHit, Span, Trace
from bridge.upstream.http import open_clients

OK: Final = "✓"
FAIL: Final = "✗"
SKIP: Final = "·"
RECENT_S: Final = 3600  # where "a recent root span" is looked for
SPAN_SEARCH_S: Final = 24 * 3600  # how far back --span-id alone is searched
PICK_LIMIT: Final = 50  # traces the search for "a recent root span" asks for
PICK_TRACES: Final = 20  # of those, fetched to find the slowest root span
PICK_PROBES: Final = 5  # endpoints whose slowest root span is asked whether it has linked samples
SERVICE_PROBE_LIMIT: Final = 20  # traces searched for other spans of a service (does the service link at all?)
# Seconds from the end of a capture window to its samples being queryable: the SDK uploads when the window closes
# (pyroscope-io, the Go and Java SDKs: at the window boundary), then one HTTP request and the ingester's or the store's
# write. A few seconds on a healthy pipeline; 5 s leaves room for a busy one.
UPLOAD_LAG_S: Final = 5.0


def settle_seconds(settings: Settings) -> float:
    """How long after a span ends its CPU samples can be expected: the capture window that holds its end closes at
    most ``PROFILE_BRIDGE_CAPTURE_WINDOW`` later, and its upload takes ``UPLOAD_LAG_S`` more."""
    return settings.capture_window + UPLOAD_LAG_S


Answerer = Callable[[str, str, Scope, str], Awaitable[dict[str, Any]]]


@dataclass(slots=True)
class Hops:
    """What the checks talk to, whichever mode: a trace source, a profile source, two readiness probes and the
    resolver's answer (the API document) for a span."""

    traces: TraceSource
    profiles: ProfileSource
    tempo_ready: Callable[[], Awaitable[str]]
    pyroscope_ready: Callable[[], Awaitable[str]]
    answer: Answerer
    tempo_where: str
    pyroscope_where: str


# --------------------------------------------------------------------------------------------- the checks


def _ctx(settings: Settings) -> CallContext:
    # standalone: the mounts are the running bridge's, which may want its token; never sent to Tempo or Pyroscope
    extra = bridge_headers(settings) if settings.is_standalone else {}
    return CallContext(deadline=Deadline.start(None, settings.max_request_timeout), extra_headers=extra)


@dataclass(frozen=True, slots=True)
class Missing:
    what: str  # "trace" or "span"
    message: str


@dataclass(frozen=True, slots=True)
class Picked:
    span: Span
    trace: Trace
    note: str = ""  # how the span was chosen, when the user did not name it


async def _pick_span(
    hops: Hops, settings: Settings, trace_id: str | None, span_id: str | None, now: float, profile_type: str
) -> Picked | Missing:
    """The span to check, or which of trace and span was not found and why."""
    ctx = _ctx(settings)
    if trace_id is None and span_id is not None:
        hit = await hops.traces.find_span(span_id, int(now) - SPAN_SEARCH_S, int(now) + 60, ctx)
        if hit is None:
            return Missing(
                "trace",
                f"span {span_id} not found by Tempo's search in the last "
                f"{SPAN_SEARCH_S // 3600} h (search lags ingest by 15-30 s; give --trace-id too)",
            )
        trace_id = hit.trace_id
    if trace_id is None:
        return await _pick_recent(hops, ctx, now, profile_type, settle_seconds(settings))
    trace = await hops.traces.trace_by_id(trace_id, ctx)
    if trace is None or not len(trace):
        return Missing("trace", f"trace {trace_id} not found")
    if span_id is None:
        roots = trace.roots() or sorted(trace.spans.values(), key=lambda s: (s.start_ns, s.span_id))
        return Picked(roots[0], trace, " (its root span)")
    span = trace.get(span_id)
    if span is None:
        return Missing("span", f"span {span_id} is not in trace {trace_id} ({len(trace)} spans)")
    return Picked(span, trace)


async def _pick_recent(hops: Hops, ctx: CallContext, now: float, profile_type: str, settle: float) -> Picked | Missing:
    """The slowest recent root span with linked samples (the one a healthy pipeline answers best), probing the
    slowest span of each endpoint (service, span name), slowest first; when none of those has any, the slowest root
    span (the checks then say why). Only root spans that ended ``settle`` seconds ago or earlier are candidates:
    younger ones may not have their profile uploaded yet. When there are only younger ones, the slowest of them, and
    the note says so."""
    # searches answer the newest traces first: ask for settled ones, or a busy service's last seconds fill the limit
    hits = await hops.traces.search("{ }", int(now) - RECENT_S, int(now - settle), PICK_LIMIT, ctx, spss=1)
    if not hits:
        hits = await hops.traces.search("{ }", int(now - settle), int(now) + 1, PICK_LIMIT, ctx, spss=1)
    if not hits:
        return Missing("trace", f"no traces in the last {RECENT_S // 60} minutes")
    roots: list[tuple[Span, Trace]] = []
    for tid in list(dict.fromkeys(h.trace_id for h in hits))[:PICK_TRACES]:
        trace = await hops.traces.trace_by_id(tid, ctx)
        if trace is not None:
            roots.extend((root, trace) for root in trace.roots())
    if not roots:
        return Missing("trace", "the recent traces Tempo's search found could not be fetched by ID")
    roots.sort(key=lambda st: (-st[0].duration_ns, st[0].span_id))
    settled = [(span, trace) for span, trace in roots if _settled(span, now, settle)]
    if not settled:
        span, trace = roots[0]
        return Picked(
            span,
            trace,
            f" (picked: the slowest recent root span; every recent root span ended less than "
            f"{settle:g} s ago — a capture window plus upload lag — so their profiles may not "
            "have arrived yet)",
        )
    endpoints: dict[tuple[str, str], tuple[Span, Trace]] = {}  # the slowest span of each endpoint, slowest first
    for span, trace in settled:
        endpoints.setdefault((span.service, span.name), (span, trace))
    probes = list(endpoints.values())[:PICK_PROBES]
    for span, trace in probes:
        try:
            doc = await hops.answer(span.trace_id, span.span_id, "span", profile_type)
        except BridgeError:
            break  # the checks below name the failing hop
        if doc.get("mode") == "linked":
            return Picked(span, trace, " (picked: the slowest recent root span with linked samples)")
    return Picked(
        *settled[0],
        f" (picked: the slowest recent root span; none of the {len(probes)} slowest endpoints has linked samples)",
    )


def _settled(span: Span, now: float, settle: float) -> bool:
    """Did ``span`` end long enough ago for its profile to have arrived?"""
    return span.end_ns <= (now - settle) * 1e9


@dataclass(frozen=True, slots=True)
class ServiceLinks:
    """Whether other recent spans of a service have linked samples: how many were asked, and one that has."""

    probed: int
    example: tuple[str, str, str] | None = None  # (span name, span id, mode)


async def service_links(
    hops: Hops, ctx: CallContext, span: Span, now: float, settle: float, profile_type: str
) -> ServiceLinks:
    """Ask the resolver about other spans of ``span``'s service around its time (one per span name, slowest first,
    ``PICK_PROBES`` at most, only settled ones): a ``linked`` or ``local-root`` answer for any of them means the
    service's profiles are linked to its spans."""
    if not span.service:
        return ServiceLinks(0)
    start = span.start_ns // 1_000_000_000 - RECENT_S
    end = min(int(now - settle), span.end_ns // 1_000_000_000 + RECENT_S)
    if end <= start:
        return ServiceLinks(0)
    query = f"{{ resource.service.name = {json.dumps(span.service)} }} | select(span:name)"
    try:
        hits = await hops.traces.search(query, start, end, SERVICE_PROBE_LIMIT, ctx, spss=3)
    except BridgeError:
        return ServiceLinks(0)
    names: dict[str, SearchHit] = {}
    for hit in sorted(hits, key=lambda h: (-h.duration_ns, h.span_id)):
        if hit.span_id != span.span_id and (hit.start_ns + hit.duration_ns) <= (now - settle) * 1e9:
            names.setdefault(hit.name, hit)
    probes = list(names.values())[:PICK_PROBES]
    for hit in probes:
        try:
            doc = await hops.answer(hit.trace_id, hit.span_id, "span", profile_type)
        except BridgeError:
            continue
        mode = str(doc.get("mode"))
        if mode in ("linked", "local-root"):
            return ServiceLinks(len(probes), (hit.name, hit.span_id, mode))
    return ServiceLinks(len(probes))


async def diagnose(
    hops: Hops,
    settings: Settings,
    *,
    trace_id: str | None,
    span_id: str | None,
    expect_function: str | None,
    profile_type: str,
    now: float,
) -> list[Check]:
    checks: list[Check] = []
    ctx = _ctx(settings)

    def skip(name: str, needs: str) -> None:
        checks.append(Check(name, None, f"skipped: needs {needs}"))

    # 1. Tempo reachable
    try:
        status = await hops.tempo_ready()
        checks.append(Check("Tempo reachable", True, f"{hops.tempo_where} answered: {status}"))
        tempo_ok = True
    except BridgeError as exc:
        checks.append(Check("Tempo reachable", False, exc.message, _tempo_fix(settings, hops)))
        tempo_ok = False

    # 2-3. trace and span
    span: Span | None = None
    trace: Trace | None = None
    if not tempo_ok:
        skip("trace found", "Tempo")
        skip("span found", "Tempo")
    else:
        try:
            picked = await _pick_span(hops, settings, trace_id, span_id, now, profile_type)
        except BridgeError as exc:
            picked = Missing("trace", exc.message)
        if isinstance(picked, Missing):
            if picked.what == "trace":
                checks.append(Check("trace found", False, picked.message, _trace_fix(trace_id)))
                skip("span found", "the trace")
            else:
                checks.append(Check("trace found", True, f"trace {trace_id}"))
                checks.append(
                    Check(
                        "span found",
                        False,
                        picked.message,
                        "check the span id (16 hex characters from the trace view); the trace may be "
                        "partial (over Tempo's max_bytes_per_trace) or still arriving",
                    )
                )
        else:
            span, trace, how = picked.span, picked.trace, picked.note
            size = f"{len(trace)} span{_plural(len(trace))}"
            checks.append(Check("trace found", True, f"trace {span.trace_id}, {size}{how}"))
            checks.append(
                Check(
                    "span found",
                    True,
                    f"{span.span_id} {span.name!r} in {span.service or 'an unnamed service'} "
                    f"({span.kind_name}, {span.duration_ns / 1e6:.1f} ms)",
                )
            )

    # 4. pyroscope.profile.id
    if span is None:
        skip(f"span carries {PROFILE_ID_ATTR}", "the span")
    else:
        checks.append(await _profile_id_check(hops, settings, span, ctx))

    # 5. Pyroscope reachable
    try:
        status = await hops.pyroscope_ready()
        checks.append(Check("Pyroscope reachable", True, f"{hops.pyroscope_where} answered: {status}"))
        pyro_ok = True
    except BridgeError as exc:
        checks.append(Check("Pyroscope reachable", False, exc.message, _pyroscope_fix(settings, hops)))
        pyro_ok = False

    # 6. profile type
    type_ok = False
    if not pyro_ok:
        skip("profile type present", "Pyroscope")
    else:
        start_ms, end_ms = _around(span, now)
        try:
            types = await hops.profiles.profile_types(qpb.ProfileTypesRequest(start=start_ms, end=end_ms), ctx)
            ids = sorted({t.ID for t in types.profile_types})
            type_ok = profile_type in ids
            if type_ok:
                checks.append(Check("profile type present", True, f"{profile_type} has data"))
            else:
                have = ", ".join(ids) if ids else "no profile types at all (is anything sending profiles?)"
                checks.append(
                    Check(
                        "profile type present",
                        False,
                        f"{profile_type} has no data around the span; Pyroscope has: {have}",
                        "pass --profile-type (or set PROFILE_BRIDGE_PROFILE_TYPE and the Grafana data "
                        "source's profileTypeId) to one that exists, or start the profiler (pyroscope-io, "
                        "otel-profiling-go, the Java agent) in the service",
                    )
                )
        except BridgeError as exc:
            checks.append(Check("profile type present", False, exc.message, _pyroscope_fix(settings, hops)))

    # 7. samples linked
    doc: dict[str, Any] | None = None
    if span is None or not (pyro_ok and type_ok):
        skip("samples linked to the span", "the span and a profile type with data")
    else:
        try:
            doc = await hops.answer(span.trace_id, span.span_id, "span", profile_type)
            checks.append(await _linked_check(hops, ctx, doc, span, now, settle_seconds(settings), profile_type))
        except BridgeError as exc:
            checks.append(
                Check(
                    "samples linked to the span",
                    False,
                    exc.message,
                    "the resolver could not answer: fix the hop it names above",
                )
            )

    # 8. expected function
    if expect_function:
        if doc is None or span is None:
            skip(f"{expect_function} in the answer", "an answer")
        else:
            checks.append(await _function_check(hops, doc, span, expect_function, profile_type))
    return checks


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def _around(span: Span | None, now: float) -> tuple[int, int]:
    if span is None:
        return int((now - RECENT_S) * 1000), int(now * 1000) + 60_000
    return span.start_ns // 1_000_000 - RECENT_S * 1000, span.end_ns // 1_000_000 + RECENT_S * 1000


async def _profile_id_check(hops: Hops, settings: Settings, span: Span, ctx: CallContext) -> Check:
    name = f"span carries {PROFILE_ID_ATTR}"
    if span.profile_id:
        return Check(name, True, f"{PROFILE_ID_ATTR}={span.profile_id}")
    if settings.is_standalone or settings.enrich == "all":
        return Check(
            name,
            True,
            f"not on the stored span, but the bridge's /tempo mount adds it "
            f"(PROFILE_BRIDGE_ENRICH={settings.enrich}): Grafana's Tempo data source must point "
            f"at {bridge_url(settings)}/tempo to see it",
        )
    if settings.enrich == "profiled-services":
        try:
            known = await hops.profiles.label_values(tpb.LabelValuesRequest(name="service_name"), ctx)
        except BridgeError as exc:
            return Check(
                name,
                False,
                f"cannot tell whether Pyroscope knows {span.service!r}: {exc.message}",
                "fix Pyroscope's reachability, or set PROFILE_BRIDGE_ENRICH=all",
            )
        if span.service in known.names:
            return Check(
                name,
                True,
                f"not on the stored span; the /tempo mount adds it because Pyroscope knows "
                f"service {span.service!r} (PROFILE_BRIDGE_ENRICH=profiled-services)",
            )
        return Check(
            name,
            False,
            f"no {PROFILE_ID_ATTR}, and Pyroscope has no service_name={span.service!r}, so "
            "PROFILE_BRIDGE_ENRICH=profiled-services does not add it (Grafana shows no button)",
            f"profile {span.service!r} (its service_name label must equal the span's service.name), or set "
            "PROFILE_BRIDGE_ENRICH=all",
        )
    return Check(
        name,
        False,
        f"no {PROFILE_ID_ATTR} on the span and enrichment is off: Grafana shows no 'Profiles for this span' button",
        "set PROFILE_BRIDGE_ENRICH=all (the /tempo mount adds the attribute), or add pyroscope-otel's "
        "PyroscopeSpanProcessor / otel-profiling-go to the service",
    )


LINK_FIX: Final = (
    "link profiles to spans: pyroscope-otel's PyroscopeSpanProcessor (Python), otel-profiling-go (Go) "
    "or the Java agent's OTel extension in the service, with the same service.name as the profiler's "
    "application name; pull/eBPF profiling cannot link (time-window is the best answer)"
)
NO_SAMPLES_FIX: Final = (
    "no samples in the span's window either: is the profiler running in this service, and does "
    "its service_name label match the span's service.name (see PROFILE_BRIDGE_LABEL_MAP)?"
)


async def _linked_check(
    hops: Hops, ctx: CallContext, doc: dict[str, Any], span: Span, now: float, settle: float, profile_type: str
) -> Check:
    name = "samples linked to the span"
    mode, reason = str(doc["mode"]), str(doc["reason"])
    if mode == "linked":
        return Check(name, True, f"linked: {reason}")
    if mode == "local-root":
        return Check(name, True, f"local-root: {reason} (expected for a child span: SDKs label only the local root)")
    answer = (
        f"the time-window fallback would answer ({reason.removeprefix('time-window fallback: ')})"
        if mode == "time-window"
        else f"no answer at all: {reason}"
    )
    if not _settled(span, now, settle):
        age = max(0.0, now - span.end_ns / 1e9)
        wait = max(1, round(settle - age))
        return Check(
            name,
            False,
            f"no linked samples yet: the span ended {age:.0f} s ago, less than a capture window "
            f"plus upload lag ({settle:g} s), so its profile may not have arrived; {answer}",
            f"rerun in {wait} s (or check an older span: without --trace-id/--span-id doctor picks one)",
        )
    links = await service_links(hops, ctx, span, now, settle, profile_type)
    service = span.service or "an unnamed service"
    if links.example is not None:
        other, other_id, other_mode = links.example
        why = (
            "ran too little CPU to be sampled (a 100 Hz profiler takes one sample per 10 ms of CPU)"
            if mode == "time-window"
            else "had nothing on CPU in its window"
        )
        return Check(
            name,
            True,
            f"no samples of its own — {span.name!r} ({_ms(span)}) {why} — but {service} links "
            f"its spans ({other!r} {other_id}: {other_mode}), so nothing is missing; {answer}",
        )
    compared = (
        f"and none of {links.probed} other recent span{_plural(links.probed)} of {service} is linked either"
        if links.probed
        else f"and there is no other recent span of {service} to compare with"
    )
    if mode == "time-window":
        detail = f"no samples carry span_id {span.span_id} or its local root's id, {compared}; {answer}"
        fix = LINK_FIX if links.probed else f"if {service} does not link profiles to spans yet, {LINK_FIX}"
        return Check(name, False, detail, fix)
    return Check(name, False, f"{answer}, {compared}", NO_SAMPLES_FIX)


def _ms(span: Span) -> str:
    return f"{span.duration_ns / 1e6:.1f} ms"


async def _function_check(hops: Hops, doc: dict[str, Any], span: Span, function: str, profile_type: str) -> Check:
    name = f"{function} in the answer"
    tree = flamegraph.decode(json_format.ParseDict(doc["flamegraph"], qpb.FlameGraph(), ignore_unknown_fields=True))
    found = _frames_matching(tree, function)
    if found:
        return Check(
            name, True, f"{len(found)} frames ({', '.join(sorted(set(found))[:3])}) in the {doc['mode']} answer"
        )
    try:
        request_doc = await hops.answer(span.trace_id, span.span_id, "request", profile_type)
        request_tree = flamegraph.decode(
            json_format.ParseDict(request_doc["flamegraph"], qpb.FlameGraph(), ignore_unknown_fields=True)
        )
        in_request = _frames_matching(request_tree, function)
    except BridgeError:
        in_request = []
    if in_request:
        services = sorted(s for s, child in request_tree.children.items() if _frames_matching(child, function))
        return Check(
            name,
            True,
            f"not in the span's own samples, but in scope=request: {', '.join(services)} ran it "
            "on this span's behalf (open the span page with scope=request)",
        )
    top = sorted(_self_by_name(tree).items(), key=lambda kv: -kv[1])[:3]
    have = ", ".join(n for n, _ in top) or "no frames"
    return Check(
        name,
        False,
        f"{function!r} is not among the answer's {tree.count() - 1} frames (hottest: {have})",
        "is the function running inside this span's request? Check --profile-type, and that the span "
        "is the one whose work you expect (a CLIENT span's callee shows with scope=request)",
    )


def _frames_matching(tree: flamegraph.Node, needle: str) -> list[str]:
    out: list[str] = []
    stack = list(tree.children.values())
    while stack:
        node = stack.pop()
        if needle in node.name:
            out.append(node.name)
        stack.extend(node.children.values())
    return out


def _self_by_name(tree: flamegraph.Node) -> dict[str, int]:
    out: dict[str, int] = {}
    stack = list(tree.children.values())
    while stack:
        node = stack.pop()
        out[node.name] = out.get(node.name, 0) + node.self
        stack.extend(node.children.values())
    return out


def _tempo_fix(settings: Settings, hops: Hops) -> str:
    if settings.is_standalone:
        return (
            "start the bridge (`profile-bridge serve`, standalone mode keeps traces in its store) or set "
            "PROFILE_BRIDGE_LISTEN to where it runs; or set PROFILE_BRIDGE_TEMPO_URL to use Tempo directly"
        )
    return (
        f"is Tempo running and is PROFILE_BRIDGE_TEMPO_URL right (now {settings.tempo_url})? "
        f"`curl {settings.tempo_url}/ready` must answer 'ready'"
    )


def _pyroscope_fix(settings: Settings, hops: Hops) -> str:
    if settings.is_standalone:
        return (
            "start the bridge (`profile-bridge serve`) or set PROFILE_BRIDGE_LISTEN to where it runs; or set "
            "PROFILE_BRIDGE_PYROSCOPE_URL to use Pyroscope directly"
        )
    return (
        f"is Pyroscope running and is PROFILE_BRIDGE_PYROSCOPE_URL right (now {settings.pyroscope_url})? "
        f"`curl {settings.pyroscope_url}/ready` must answer 'ready'"
    )


def _trace_fix(trace_id: str | None) -> str:
    if trace_id is None:
        return (
            "send traces (OTLP to Tempo, or to the bridge in standalone mode), or pass --trace-id/--span-id; "
            "Tempo's search only sees a trace 15-30 s after it ends"
        )
    return (
        "check the trace id; a trace is visible by ID as soon as Tempo holds it, so check that the service "
        "exports spans to the Tempo this bridge reads (and the tenant, X-Scope-OrgID)"
    )


# --------------------------------------------------------------------------------------------- output


def format_checks(checks: list[Check]) -> str:
    lines: list[str] = []
    for check in checks:
        mark = SKIP if check.ok is None else OK if check.ok else FAIL
        lines.append(f"{mark} {check.name}: {check.detail}")
        if check.ok is False and check.fix:
            lines.append(f"    fix: {check.fix}")
    failed = [c.name for c in checks if c.ok is False]
    lines.append("")
    lines.append(
        f"{len(failed)} of {len(checks)} checks failed: {', '.join(failed)}"
        if failed
        else f"all {len(checks)} checks passed"
    )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- wiring per mode


@asynccontextmanager
async def open_hops(settings: Settings) -> AsyncIterator[Hops]:

    if not settings.is_standalone:
        async with open_clients(settings, Metrics()) as (tempo, pyroscope):

            async def answer(trace_id: str, span_id: str, scope: Scope, profile_type: str) -> dict[str, Any]:
                return await answer_direct(settings, trace_id, span_id, scope=scope, profile_type=profile_type)

            yield Hops(
                tempo,
                pyroscope,
                lambda: tempo.ready(_ctx(settings)),
                lambda: pyroscope.ready(_ctx(settings)),
                answer,
                settings.tempo_url,
                settings.pyroscope_url,
            )
        return

    base = bridge_url(settings)
    via = dataclasses.replace(settings, mode="proxy", tempo_url=f"{base}/tempo", pyroscope_url=f"{base}/pyroscope")
    async with (
        open_clients(via, Metrics()) as (tempo, pyroscope),
        aiohttp.ClientSession(timeout=client_timeout(settings)) as session,
    ):

        async def readyz(upstream: str) -> str:
            return await _bridge_ready(session, base, upstream)

        async def answer(trace_id: str, span_id: str, scope: Scope, profile_type: str) -> dict[str, Any]:
            return await fetch_from_bridge(settings, trace_id, span_id, scope=scope, profile_type=profile_type)

        yield Hops(
            tempo,
            pyroscope,
            lambda: readyz("tempo"),
            lambda: readyz("pyroscope"),
            answer,
            f"the bridge's store at {base} (standalone)",
            f"the bridge's store at {base} (standalone)",
        )


async def _bridge_ready(session: aiohttp.ClientSession, base: str, upstream: str) -> str:
    try:
        async with session.get(f"{base}/readyz") as resp:
            doc = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise UpstreamUnavailable(
            "bridge", f"no bridge answered at {base}/readyz ({type(exc).__name__}: {exc})"
        ) from exc
    detail = (doc.get("upstreams") or {}).get(upstream) or {}
    if detail.get("status") != "ready":
        raise UpstreamUnavailable(
            "bridge",
            f"the bridge at {base} says {upstream} is "
            f"{detail.get('status', 'unknown')}: {detail.get('message', '')}".rstrip(),
        )
    return str(detail.get("detail", "ready"))


# --------------------------------------------------------------------------------------------- entry points


def check_ids(trace_id: str | None, span_id: str | None, profile_type: str) -> tuple[str | None, str | None]:
    tid = sid = None
    if trace_id is not None:
        tid = ids.trace_id(trace_id)
        if tid is None:
            raise InvalidArgument(f"--trace-id {trace_id[:80]!r} is not 1-32 hex characters")
    if span_id is not None:
        sid = ids.span_id(span_id)
        if sid is None:
            raise InvalidArgument(f"--span-id {span_id[:80]!r} is not 16 hex characters")
    ProfileType.parse(profile_type)  # BadProfileType: invalid_argument, naming the form
    return tid, sid


async def doctor(
    settings: Settings,
    *,
    trace_id: str | None,
    span_id: str | None,
    expect_function: str | None,
    profile_type: str,
    out: TextIO,
    err: TextIO,
    hops: Hops | None = None,
    clock: Callable[[], float] = time.time,
    datasources: Path | None = None,
    grafana_token_file: Path | None = None,
) -> int:
    try:
        tid, sid = check_ids(trace_id, span_id, profile_type)
    except InvalidArgument as exc:
        print(f"profile-bridge doctor: {exc.message}", file=err)
        return EXIT_USAGE
    out.write(f"profile-bridge doctor ({settings.mode} mode, profile type {profile_type})\n")
    wiring = await check_datasources(settings, datasources, grafana_token_file)
    if isinstance(wiring, str):
        out.write(f"  ({wiring})\n")
    if hops is not None:
        checks = await diagnose(
            hops,
            settings,
            trace_id=tid,
            span_id=sid,
            expect_function=expect_function,
            profile_type=profile_type,
            now=clock(),
        )
    else:
        async with open_hops(settings) as opened:
            checks = await diagnose(
                opened,
                settings,
                trace_id=tid,
                span_id=sid,
                expect_function=expect_function,
                profile_type=profile_type,
                now=clock(),
            )
    if not isinstance(wiring, str):
        checks.append(wiring)
    out.write(format_checks(checks))
    return EXIT_FAILED if any(c.ok is False for c in checks) else EXIT_OK


def run_doctor(
    settings: Settings,
    *,
    trace_id: str | None,
    span_id: str | None,
    expect_function: str | None,
    profile_type: str,
    out: TextIO,
    err: TextIO = sys.stderr,
    datasources: Path | None = None,
    grafana_token_file: Path | None = None,
) -> int:
    try:
        return asyncio.run(
            doctor(
                settings,
                trace_id=trace_id,
                span_id=span_id,
                expect_function=expect_function,
                profile_type=profile_type,
                out=out,
                err=err,
                datasources=datasources,
                grafana_token_file=grafana_token_file,
            )
        )
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: one line, never a stack trace
        print(f"profile-bridge doctor: internal error: {type(exc).__name__}: {exc}", file=err)
        return EXIT_FAILED
