"""``profile-bridge doctor`` against the Tempo and Pyroscope doubles: all hops fine, then each hop broken in turn — the
output names that hop with a fix, the exit code is 1, and checks that depend on it are skipped, not failed."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Callable
from typing import Any

import pytest

from bridge.commands.doctor import doctor
from bridge.config import Settings
from bridge.errors import Code
from tests.doubles.pyroscope import Faults as PyroscopeFaults
from tests.doubles.tempo import Faults as TempoFaults
from tests.doubles.tempo import refused_url
from tests.span_stack import CPU, Stack, linked_total, start_doubles


@pytest.fixture
async def stack(aiohttp_server: Any) -> Stack:
    return await start_doubles(aiohttp_server)


async def run(
    stack: Stack, settings: Settings | None = None, clock: Callable[[], float] | None = None, **kwargs: Any
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args: dict[str, Any] = {"trace_id": None, "span_id": None, "expect_function": None, "profile_type": CPU}
    args.update(kwargs)
    code = await doctor(settings or stack.settings, out=out, err=err, clock=clock or stack.capture_clock, **args)
    return code, out.getvalue(), err.getvalue()


def marks(output: str) -> dict[str, str]:
    """check name → ✓ / ✗ / ·"""
    found = {}
    for line in output.splitlines():
        m = re.match(r"^([✓✗·]) ([^:]+): ", line)
        if m:
            found[m.group(2)] = m.group(1)
    return found


def fix_after(output: str, check: str) -> str:
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"✗ {check}:"):
            assert lines[i + 1].startswith("    fix: "), output
            return lines[i + 1]
    raise AssertionError(f"no failed check {check!r} in:\n{output}")


def profiled_root(stack: Stack) -> Any:
    return stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)


ALL_CHECKS = [
    "Tempo reachable",
    "trace found",
    "span found",
    "span carries pyroscope.profile.id",
    "Pyroscope reachable",
    "profile type present",
    "samples linked to the span",
]


async def test_every_hop_passes_for_a_profiled_root_span(stack: Stack) -> None:
    root = profiled_root(stack)
    code, out, err = await run(stack, trace_id=root.trace_id, span_id=root.span_id, expect_function="render_json")
    assert code == 0, out
    assert err == ""
    assert marks(out) == {**dict.fromkeys(ALL_CHECKS, "✓"), "render_json in the answer": "✓"}
    assert "linked: samples linked to span " + root.span_id in out
    assert out.rstrip().endswith("all 8 checks passed")


async def test_without_ids_it_picks_the_slowest_recent_root_span_with_samples(stack: Stack) -> None:
    code, out, _ = await run(stack, expect_function="render_json")
    # GET /slow-io is slower (it sleeps 300 ms) but burns no CPU: the slowest GET /checkout is checked instead
    assert "(picked: the slowest recent root span with linked samples)" in out
    assert "'GET /checkout' in shop-frontend" in out
    assert code == 0, out


async def test_without_ids_and_no_linked_samples_it_checks_the_slowest_and_says_why(stack: Stack) -> None:
    stack.pyroscope.profiles = [p for p in stack.pyroscope.profiles if p.labels.get("service_name") != "shop-frontend"]
    code, out, _ = await run(stack)
    assert "(picked: the slowest recent root span; none of the 3 slowest endpoints has linked samples)" in out
    assert "'GET /slow-io'" in out
    assert code == 1 and marks(out)["samples linked to the span"] == "✗"


async def test_trace_id_alone_checks_its_root_span(stack: Stack) -> None:
    root = profiled_root(stack)
    code, out, _ = await run(stack, trace_id=root.trace_id)
    assert code == 0 and f"{root.span_id} 'GET /checkout'" in out


async def test_span_id_alone_is_found_by_search(stack: Stack) -> None:
    root = profiled_root(stack)
    code, out, _ = await run(stack, span_id=root.span_id)
    assert code == 0, out
    assert stack.tempo.search_calls and f"trace {root.trace_id}" in out


async def test_a_child_span_passes_through_its_local_root(stack: Stack) -> None:
    child = stack.shop.pick(
        "frontend-child", where=lambda r: linked_total(stack.shop.trace(r.trace_id).local_root(r.span_id).span_id) > 0
    )  # type: ignore[union-attr]
    code, out, _ = await run(stack, trace_id=child.trace_id, span_id=child.span_id)
    assert code == 0, out
    assert "local-root:" in out and "expected for a child span" in out
    # the child has no pyroscope.profile.id of its own: enrichment (on by default) adds it
    assert "the bridge's /tempo mount adds it (PROFILE_BRIDGE_ENRICH=all)" in out


async def test_a_backend_function_is_found_in_the_request_scope_of_a_client_span(stack: Stack) -> None:
    client = next(
        r
        for r in stack.shop.of_role("frontend-client")
        if any(linked_total(s.span_id) for s in stack.shop.trace(r.trace_id).descendant_local_roots(r.span_id))
    )
    code, out, _ = await run(stack, trace_id=client.trace_id, span_id=client.span_id, expect_function="count_primes")
    assert code == 0, out
    assert "in scope=request: shop-backend ran it" in out


# --------------------------------------------------------------------------------------------- each hop broken


def break_tempo_refused(stack: Stack) -> Settings:
    return Settings.for_tests(
        mode="proxy", tempo_url=refused_url(), pyroscope_url=stack.pyroscope.url, upstream_timeout=2.0
    )


def break_tempo_503(stack: Stack) -> Settings:
    stack.tempo.faults = TempoFaults(status=503, body="Tempo is starting")
    return stack.settings


def break_pyroscope_refused(stack: Stack) -> Settings:
    return Settings.for_tests(
        mode="proxy", tempo_url=stack.tempo.url, pyroscope_url=refused_url(), upstream_timeout=2.0
    )


def break_pyroscope_unavailable(stack: Stack) -> Settings:
    stack.pyroscope.faults = PyroscopeFaults(code=Code.UNAVAILABLE, message="no healthy ingesters")
    return stack.settings


BROKEN: list[tuple[str, Callable[[Stack], Settings], str, list[str], str]] = [
    (
        "tempo refused",
        break_tempo_refused,
        "Tempo reachable",
        ["trace found", "span found"],
        "PROFILE_BRIDGE_TEMPO_URL",
    ),
    ("tempo 503", break_tempo_503, "Tempo reachable", ["trace found", "span found"], "/ready"),
    (
        "pyroscope refused",
        break_pyroscope_refused,
        "Pyroscope reachable",
        ["profile type present", "samples linked to the span"],
        "PROFILE_BRIDGE_PYROSCOPE_URL",
    ),
    (
        "pyroscope unavailable",
        break_pyroscope_unavailable,
        "Pyroscope reachable",
        ["profile type present", "samples linked to the span"],
        "PROFILE_BRIDGE_PYROSCOPE_URL",
    ),
]


@pytest.mark.parametrize(("label", "breaker", "failed", "skipped", "fix_words"), BROKEN, ids=[b[0] for b in BROKEN])
async def test_a_broken_backend_is_named_and_dependent_checks_skipped(
    stack: Stack, label: str, breaker: Callable[[Stack], Settings], failed: str, skipped: list[str], fix_words: str
) -> None:
    root = profiled_root(stack)
    settings = breaker(stack)
    code, out, err = await run(
        stack, settings, trace_id=root.trace_id, span_id=root.span_id, expect_function="render_json"
    )
    assert code == 1
    assert err == "" and "Traceback" not in out
    got = marks(out)
    assert got[failed] == "✗", out
    assert [name for name, mark in got.items() if mark == "✗"] == [failed], out
    for name in skipped:
        assert got[name] == "·", out
    assert fix_words in fix_after(out, failed)
    assert f"1 of {len(got)} checks failed: {failed}" in out


async def test_an_unknown_trace_fails_trace_found(stack: Stack) -> None:
    code, out, _ = await run(stack, trace_id="0123456789abcdef0123456789abcdef", span_id="0123456789abcdef")
    assert code == 1
    assert marks(out)["trace found"] == "✗" and marks(out)["span found"] == "·"
    assert "not found" in out and "exports spans" in fix_after(out, "trace found")


async def test_a_span_missing_from_its_trace_fails_span_found(stack: Stack) -> None:
    root = profiled_root(stack)
    code, out, _ = await run(stack, trace_id=root.trace_id, span_id="0123456789abcdef")
    assert code == 1
    assert marks(out)["trace found"] == "✓" and marks(out)["span found"] == "✗"
    assert "is not in trace" in out


async def test_no_profile_id_and_enrichment_off_fails_that_hop(stack: Stack) -> None:
    child = stack.shop.pick("frontend-child")
    settings = Settings.for_tests(
        mode="proxy", tempo_url=stack.tempo.url, pyroscope_url=stack.pyroscope.url, enrich="off"
    )
    code, out, _ = await run(stack, settings, trace_id=child.trace_id, span_id=child.span_id)
    assert code == 1
    assert [n for n, m in marks(out).items() if m == "✗"] == ["span carries pyroscope.profile.id"]
    assert "PROFILE_BRIDGE_ENRICH=all" in fix_after(out, "span carries pyroscope.profile.id")


async def test_profiled_services_enrichment_checks_pyroscope_knows_the_service(stack: Stack) -> None:
    child = stack.shop.pick("frontend-child")
    settings = Settings.for_tests(
        mode="proxy", tempo_url=stack.tempo.url, pyroscope_url=stack.pyroscope.url, enrich="profiled-services"
    )
    code, out, _ = await run(stack, settings, trace_id=child.trace_id, span_id=child.span_id)
    assert marks(out)["span carries pyroscope.profile.id"] == "✓"
    assert "Pyroscope knows service 'shop-frontend'" in out
    assert stack.pyroscope.calls("LabelValues")


async def test_a_profile_type_without_data_fails_and_lists_the_ones_there(stack: Stack) -> None:
    root = profiled_root(stack)
    code, out, _ = await run(
        stack, trace_id=root.trace_id, span_id=root.span_id, profile_type="memory:alloc_space:bytes:space:bytes"
    )
    assert code == 1
    assert marks(out)["profile type present"] == "✗" and marks(out)["samples linked to the span"] == "·"
    assert CPU in out and "--profile-type" in fix_after(out, "profile type present")


def without_span_ids(stack: Stack, service: str) -> None:
    """The double's profiles of ``service`` as a profiler that does not link spans would send them."""
    stack.pyroscope.profiles = [
        dataclasses.replace(
            p,
            samples=[
                (frames, value, {k: v for k, v in labels.items() if k not in ("span_id", "trace_id")})
                for frames, value, labels in p.samples
            ],
        )
        if p.labels.get("service_name") == service
        else p
        for p in stack.pyroscope.profiles
    ]


async def test_an_unlinked_span_of_a_service_that_links_is_explained_not_fixed(stack: Stack) -> None:
    """GET /slow-io sleeps: no samples of its own. Other shop-frontend spans are linked, so the doctor says why and
    recommends nothing (it once told the demo, which uses PyroscopeSpanProcessor, to install it)."""
    io_span = stack.shop.pick("frontend-io")
    code, out, _ = await run(stack, trace_id=io_span.trace_id, span_id=io_span.span_id)
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("✓ samples linked"))
    assert "no samples of its own — 'GET /slow-io'" in line and "ran too little CPU to be sampled" in line
    assert "but shop-frontend links its spans ('GET /checkout'" in line and ": linked)" in line
    assert "the time-window fallback would answer" in line
    assert "fix:" not in out and "PyroscopeSpanProcessor" not in out
    queries = [call.query.get("q", "") for call in stack.tempo.search_calls]
    assert any('resource.service.name = "shop-frontend"' in q for q in queries), queries


async def test_an_unlinked_span_of_a_service_that_links_nothing_gets_the_fix(stack: Stack) -> None:
    without_span_ids(stack, "shop-frontend")
    io_span = stack.shop.pick("frontend-io")
    code, out, _ = await run(stack, trace_id=io_span.trace_id, span_id=io_span.span_id)
    assert code == 1
    assert [n for n, m in marks(out).items() if m == "✗"] == ["samples linked to the span"]
    line = next(x for x in out.splitlines() if x.startswith("✗ samples linked"))
    assert re.search(r"and none of \d+ other recent spans? of shop-frontend is linked either", line), line
    assert "time-window" in line
    assert fix_after(out, "samples linked to the span").startswith(
        "    fix: link profiles to spans: pyroscope-otel's PyroscopeSpanProcessor"
    )


async def test_a_span_too_young_for_its_profile_says_to_wait_not_to_fix(stack: Stack) -> None:
    """A span that ended 3 s ago: its capture window may not even be closed. The doctor says when to look again."""
    without_span_ids(stack, "shop-frontend")  # no linked samples to find, as before the upload
    io_span = stack.shop.pick("frontend-io")
    span = stack.shop.trace(io_span.trace_id).get(io_span.span_id)
    assert span is not None
    code, out, _ = await run(
        stack, trace_id=io_span.trace_id, span_id=io_span.span_id, clock=lambda: span.end_ns / 1e9 + 3
    )
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("✗ samples linked"))
    assert "no linked samples yet: the span ended 3 s ago, less than a capture window plus upload lag (20 s)" in line
    assert fix_after(out, "samples linked to the span") == (
        "    fix: rerun in 17 s (or check an older span: without --trace-id/--span-id doctor picks one)"
    )
    assert "PyroscopeSpanProcessor" not in out


def _checked_span_id(out: str) -> str:
    match = re.search(r"^✓ span found: ([0-9a-f]{16}) ", out, re.MULTILINE)
    assert match, out
    return match.group(1)


async def test_without_ids_it_picks_only_spans_whose_profile_had_time_to_arrive(stack: Stack) -> None:
    """No span is linked, so the slowest root span is checked — but only among those that ended a capture window
    (15 s) plus the upload lag (5 s) ago: 'now' is 21 s after the first root span ended, and the slowest root span
    of the capture ended later than that."""
    without_span_ids(stack, "shop-frontend")
    without_span_ids(stack, "shop-backend")
    roots = [s for s in stack.shop.all_spans() if not s.parent_span_id]
    now = min(s.end_ns for s in roots) / 1e9 + 21
    slowest = min(roots, key=lambda s: (-s.duration_ns, s.span_id))
    assert slowest.end_ns / 1e9 > now - 20  # the test needs the overall slowest to be too young
    code, out, _ = await run(stack, clock=lambda: now)
    picked = next(s for s in roots if s.span_id == _checked_span_id(out))
    assert picked.end_ns / 1e9 <= now - 20
    settled = [s for s in roots if s.end_ns / 1e9 <= now - 20]
    assert picked == min(settled, key=lambda s: (-s.duration_ns, s.span_id))
    assert "none of the" in out and "slowest endpoints has linked samples" in out
    assert code == 1


async def test_without_ids_it_searches_spans_old_enough_first(stack: Stack) -> None:
    """Tempo (and the store) answer a search with the newest traces first: on a busy service the last seconds alone
    fill the limit. So the search that picks a span ends a capture window plus the upload lag before 'now'."""
    now = stack.capture_clock()
    code, out, _ = await run(stack)
    first = stack.tempo.search_calls[0].query
    assert int(first["end"]) <= now - 20 and int(first["start"]) <= now - 3600
    assert code == 0, out


async def test_without_ids_and_only_young_spans_it_says_their_profiles_may_be_missing(stack: Stack) -> None:
    first_end = min(s.end_ns for s in stack.shop.all_spans() if not s.parent_span_id) / 1e9
    code, out, _ = await run(stack, clock=lambda: first_end + 1)
    assert (
        "(picked: the slowest recent root span; every recent root span ended less than 20 s ago — a capture "
        "window plus upload lag — so their profiles may not have arrived yet)"
    ) in out
    assert "PyroscopeSpanProcessor" not in out


async def test_a_missing_expected_function_fails_the_last_check(stack: Stack) -> None:
    root = profiled_root(stack)
    code, out, _ = await run(stack, trace_id=root.trace_id, span_id=root.span_id, expect_function="no_such_fn")
    assert code == 1
    assert [n for n, m in marks(out).items() if m == "✗"] == ["no_such_fn in the answer"]
    assert "hottest:" in out


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"trace_id": "xyz"}, "--trace-id 'xyz' is not 1-32 hex characters"),
        ({"span_id": "12"}, "--span-id '12' is not 16 hex characters"),
        ({"profile_type": "cpu"}, "name:sample_type:sample_unit:period_type:period_unit"),
    ],
)
async def test_bad_arguments_are_one_line_and_exit_2(stack: Stack, kwargs: dict[str, str], words: str) -> None:
    code, out, err = await run(stack, **kwargs)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err and err.startswith("profile-bridge doctor: ")
    assert not stack.tempo.requests and not stack.pyroscope.requests


async def test_standalone_mode_goes_through_the_running_bridge(stack: Stack, aiohttp_server: Any) -> None:
    """In standalone mode the doctor reaches the data through the bridge at PROFILE_BRIDGE_LISTEN. Here that bridge is
    a proxy-mode one in front of the doubles: the doctor must use its /readyz, /tempo, /pyroscope and API."""
    from bridge.app import create_app

    server = await aiohttp_server(create_app(stack.settings, wall_clock=stack.capture_clock))
    settings = Settings.for_tests(mode="standalone", listen_host="127.0.0.1", listen_port=server.port)
    root = profiled_root(stack)
    code, out, _ = await run(
        stack, settings, trace_id=root.trace_id, span_id=root.span_id, expect_function="render_json"
    )
    assert "standalone mode" in out.splitlines()[0]
    assert f"the bridge's store at http://127.0.0.1:{server.port}" in out
    assert marks(out)["Tempo reachable"] == "✓" and marks(out)["Pyroscope reachable"] == "✓"
    assert marks(out)["samples linked to the span"] == "✓", out
    assert code == 0, out


async def test_standalone_mode_without_a_running_bridge_says_to_start_it(stack: Stack) -> None:
    port = int(refused_url().rsplit(":", 1)[1])
    settings = Settings.for_tests(mode="standalone", listen_host="0.0.0.0", listen_port=port)
    code, out, _ = await run(stack, settings)
    assert code == 1
    assert marks(out)["Tempo reachable"] == "✗" and marks(out)["Pyroscope reachable"] == "✗"
    assert "profile-bridge serve" in fix_after(out, "Tempo reachable")
