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
the slowest (``spanpick``: only spans old enough for their profile to have arrived). A span without linked samples is
not by itself a broken pipeline: check 7 asks whether other spans of its service are linked (``answer_checks``).

This module is the orchestration only: each hop's checks live beside it — ``tempo_checks`` (1-4, choosing the span
in ``spanpick``), ``pyroscope_checks`` (5-6), ``answer_checks`` (7-8), ``datasources`` (9) — what they talk to, per
mode, in ``hops`` (proxy mode: Tempo and Pyroscope directly; standalone: through the running bridge), and the verdicts
and their lines in ``checks``.

Exit codes: 0 every check passed; 1 a check failed; 2 bad ids or arguments (one line). Never a stack trace.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from bridge import ids
from bridge.commands.answer_checks import answer_check, function_check
from bridge.commands.checks import Check, format_checks, skipped
from bridge.commands.datasources import check_datasources
from bridge.commands.hops import Hops, call_context, open_hops, settle_seconds
from bridge.commands.pyroscope_checks import profile_type_check, pyroscope_reachable
from bridge.commands.resolve import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from bridge.commands.tempo_checks import profile_id_check, span_checks, tempo_reachable
from bridge.config import Settings
from bridge.errors import InvalidArgument
from bridge.profiletype import ProfileType
from bridge.spans import PROFILE_ID_ATTR


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
    """Checks 1-8 in order, each hop's in its module; a check whose input an earlier one failed to give is
    skipped."""
    ctx = call_context(settings)
    tempo = await tempo_reachable(hops, settings)  # 1
    checks = [tempo]
    if tempo.ok:  # 2-3
        found, span = await span_checks(hops, settings, trace_id, span_id, now, profile_type)
    else:
        found, span = [skipped("trace found", "Tempo"), skipped("span found", "Tempo")], None
    checks += found
    if span is None:  # 4
        checks.append(skipped(f"span carries {PROFILE_ID_ATTR}", "the span"))
    else:
        checks.append(await profile_id_check(hops, settings, span, ctx))
    pyroscope = await pyroscope_reachable(hops, settings)  # 5
    checks.append(pyroscope)
    if pyroscope.ok:  # 6
        types = await profile_type_check(hops, settings, ctx, span, now, profile_type)
    else:
        types = skipped("profile type present", "Pyroscope")
    checks.append(types)
    doc = None
    if span is None or not types.ok:  # 7
        checks.append(skipped("samples linked to the span", "the span and a profile type with data"))
    else:
        linked, doc = await answer_check(hops, ctx, span, now, settle_seconds(settings), profile_type)
        checks.append(linked)
    if expect_function:  # 8
        if doc is None or span is None:
            checks.append(skipped(f"{expect_function} in the answer", "an answer"))
        else:
            checks.append(await function_check(hops, doc, span, expect_function, profile_type))
    return checks


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
