"""``doctor``'s checks of the trace hop, 1-4: Tempo reachable, the trace found, the span found (the one named, or one
``spanpick`` chose), and the span carrying ``pyroscope.profile.id`` — on the stored span, or added by the ``/tempo``
mount's enrichment (without it Grafana shows no "Profiles for this span" button)."""

from __future__ import annotations

from typing import Final

from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.commands.checks import Check, plural, reachable, skipped
from bridge.commands.hops import Hops
from bridge.commands.resolve import bridge_url
from bridge.commands.spanpick import Missing, pick_span
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.spans import PROFILE_ID_ATTR, Span

SPAN_FIX: Final = (
    "check the span id (16 hex characters from the trace view); the trace may be "
    "partial (over Tempo's max_bytes_per_trace) or still arriving"
)


async def tempo_reachable(hops: Hops, settings: Settings) -> Check:
    return await reachable("Tempo reachable", hops.tempo_where, hops.tempo_ready, _tempo_fix(settings))


async def span_checks(
    hops: Hops, settings: Settings, trace_id: str | None, span_id: str | None, now: float, profile_type: str
) -> tuple[list[Check], Span | None]:
    """Checks 2 and 3 (trace found, span found), and the span when both passed."""
    try:
        picked = await pick_span(hops, settings, trace_id, span_id, now, profile_type)
    except BridgeError as exc:
        picked = Missing("trace", exc.message)
    if isinstance(picked, Missing):
        if picked.what == "trace":
            return [
                Check("trace found", False, picked.message, _trace_fix(trace_id)),
                skipped("span found", "the trace"),
            ], None
        return [
            Check("trace found", True, f"trace {trace_id}"),
            Check("span found", False, picked.message, SPAN_FIX),
        ], None
    span, trace = picked.span, picked.trace
    size = f"{len(trace)} span{plural(len(trace))}"
    return [
        Check("trace found", True, f"trace {span.trace_id}, {size}{picked.note}"),
        Check(
            "span found",
            True,
            f"{span.span_id} {span.name!r} in {span.service or 'an unnamed service'} "
            f"({span.kind_name}, {span.duration_ns / 1e6:.1f} ms)",
        ),
    ], span


async def profile_id_check(hops: Hops, settings: Settings, span: Span, ctx: CallContext) -> Check:
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
        return await _profiled_service_check(hops, span, ctx)
    return Check(
        name,
        False,
        f"no {PROFILE_ID_ATTR} on the span and enrichment is off: Grafana shows no 'Profiles for this span' button",
        "set PROFILE_BRIDGE_ENRICH=all (the /tempo mount adds the attribute), or add pyroscope-otel's "
        "PyroscopeSpanProcessor / otel-profiling-go to the service",
    )


async def _profiled_service_check(hops: Hops, span: Span, ctx: CallContext) -> Check:
    """PROFILE_BRIDGE_ENRICH=profiled-services: the mount adds the attribute when Pyroscope knows the service."""
    name = f"span carries {PROFILE_ID_ATTR}"
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


def _tempo_fix(settings: Settings) -> str:
    if settings.is_standalone:
        return (
            "start the bridge (`profile-bridge serve`, standalone mode keeps traces in its store) or set "
            "PROFILE_BRIDGE_LISTEN to where it runs; or set PROFILE_BRIDGE_TEMPO_URL to use Tempo directly"
        )
    return (
        f"is Tempo running and is PROFILE_BRIDGE_TEMPO_URL right (now {settings.tempo_url})? "
        f"`curl {settings.tempo_url}/ready` must answer 'ready'"
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
