"""``doctor``'s checks of the bridge's own answer, 7-8: samples linked to the span (or which fallback would answer,
and whether that is expected), and the function ``--expect-function`` names being in the answer.

A span without linked samples is not by itself a broken pipeline: short and waiting spans burn too little CPU to be
sampled. Before recommending a span processor, check 7 asks about other recent spans of the same service
(``service_links``); if any of them is linked, linking works and the time-window answer is the expected one for this
span."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import json_format

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.commands.checks import Check, plural
from bridge.commands.hops import RECENT_S, Hops, settled
from bridge.commands.spanpick import PICK_PROBES
from bridge.errors import BridgeError
from bridge.spans import SearchHit, Span

SERVICE_PROBE_LIMIT: Final = 20  # traces searched for other spans of a service (does the service link at all?)
LINK_FIX: Final = (
    "link profiles to spans: pyroscope-otel's PyroscopeSpanProcessor (Python), otel-profiling-go (Go) "
    "or the Java agent's OTel extension in the service, with the same service.name as the profiler's "
    "application name; pull/eBPF profiling cannot link (time-window is the best answer)"
)
NO_SAMPLES_FIX: Final = (
    "no samples in the span's window either: is the profiler running in this service, and does "
    "its service_name label match the span's service.name (see PROFILE_BRIDGE_LABEL_MAP)?"
)


async def answer_check(
    hops: Hops, ctx: CallContext, span: Span, now: float, settle: float, profile_type: str
) -> tuple[Check, dict[str, Any] | None]:
    """Check 7, and the resolver's answer for the span (``None`` when it could not answer)."""
    doc: dict[str, Any] | None = None
    try:
        doc = await hops.answer(span.trace_id, span.span_id, "span", profile_type)
        return await _linked_check(hops, ctx, doc, span, now, settle, profile_type), doc
    except BridgeError as exc:
        fix = "the resolver could not answer: fix the hop it names above"
        return Check("samples linked to the span", False, exc.message, fix), doc


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
    if not settled(span, now, settle):
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
    return _unlinked_check(name, mode, answer, span, links)


def _unlinked_check(name: str, mode: str, answer: str, span: Span, links: ServiceLinks) -> Check:
    """A settled span without samples of its own: expected when other spans of its service are linked."""
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
        f"and none of {links.probed} other recent span{plural(links.probed)} of {service} is linked either"
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


async def function_check(hops: Hops, doc: dict[str, Any], span: Span, function: str, profile_type: str) -> Check:
    name = f"{function} in the answer"
    tree = _tree(doc)
    found = _frames_matching(tree, function)
    if found:
        return Check(
            name, True, f"{len(found)} frames ({', '.join(sorted(set(found))[:3])}) in the {doc['mode']} answer"
        )
    try:
        request_tree = _tree(await hops.answer(span.trace_id, span.span_id, "request", profile_type))
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


def _tree(doc: dict[str, Any]) -> flamegraph.Node:
    """The flame graph of an API answer document."""
    return flamegraph.decode(json_format.ParseDict(doc["flamegraph"], qpb.FlameGraph(), ignore_unknown_fields=True))


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
