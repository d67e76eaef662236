"""``doctor``'s checks of the profile hop, 5-6: Pyroscope reachable (the bridge's store in standalone mode), and the
profile type asked for having data around the span (around the last ``RECENT_S`` when there is no span)."""

from __future__ import annotations

from typing import Final

from bridge._proto import querier_pb2 as qpb
from bridge.call import CallContext
from bridge.commands.checks import Check, reachable
from bridge.commands.hops import RECENT_S, Hops
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.spans import Span

TYPE_FIX: Final = (
    "pass --profile-type (or set PROFILE_BRIDGE_PROFILE_TYPE and the Grafana data "
    "source's profileTypeId) to one that exists, or start the profiler (pyroscope-io, "
    "otel-profiling-go, the Java agent) in the service"
)


async def pyroscope_reachable(hops: Hops, settings: Settings) -> Check:
    return await reachable("Pyroscope reachable", hops.pyroscope_where, hops.pyroscope_ready, _pyroscope_fix(settings))


async def profile_type_check(
    hops: Hops, settings: Settings, ctx: CallContext, span: Span | None, now: float, profile_type: str
) -> Check:
    start_ms, end_ms = _around(span, now)
    try:
        types = await hops.profiles.profile_types(qpb.ProfileTypesRequest(start=start_ms, end=end_ms), ctx)
    except BridgeError as exc:
        return Check("profile type present", False, exc.message, _pyroscope_fix(settings))
    ids = sorted({t.ID for t in types.profile_types})
    if profile_type in ids:
        return Check("profile type present", True, f"{profile_type} has data")
    have = ", ".join(ids) if ids else "no profile types at all (is anything sending profiles?)"
    return Check(
        "profile type present", False, f"{profile_type} has no data around the span; Pyroscope has: {have}", TYPE_FIX
    )


def _around(span: Span | None, now: float) -> tuple[int, int]:
    if span is None:
        return int((now - RECENT_S) * 1000), int(now * 1000) + 60_000
    return span.start_ns // 1_000_000 - RECENT_S * 1000, span.end_ns // 1_000_000 + RECENT_S * 1000


def _pyroscope_fix(settings: Settings) -> str:
    if settings.is_standalone:
        return (
            "start the bridge (`profile-bridge serve`) or set PROFILE_BRIDGE_LISTEN to where it runs; or set "
            "PROFILE_BRIDGE_PYROSCOPE_URL to use Pyroscope directly"
        )
    return (
        f"is Pyroscope running and is PROFILE_BRIDGE_PYROSCOPE_URL right (now {settings.pyroscope_url})? "
        f"`curl {settings.pyroscope_url}/ready` must answer 'ready'"
    )
