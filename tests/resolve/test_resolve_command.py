"""``profile-bridge resolve``: the tables (pure), the command against the doubles in both modes, and the real CLI
in a subprocess."""

from __future__ import annotations

import asyncio
import io
import os
import re
import sys
from typing import Any

import pytest
from aiohttp import web

from bridge import flamegraph
from bridge.auth import TOKEN_HEADER
from bridge.commands.resolve import (
    fetch_compare_from_bridge,
    fetch_from_bridge,
    function_costs,
    resolve_report,
    top_table,
)
from bridge.config import Settings
from tests.doubles.tempo import refused_url
from tests.paths import ROOT
from tests.span_stack import CPU, Stack, linked_total, start_doubles


@pytest.fixture
async def stack(aiohttp_server: Any) -> Stack:
    return await start_doubles(aiohttp_server)


async def run(settings: Settings, trace_id: str, span_id: str, **kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args: dict[str, Any] = {"scope": "span", "top": 20, "profile_type": CPU}
    args.update(kwargs)
    code = await resolve_report(settings, trace_id, span_id, out=out, err=err, **args)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------------------------- pure


def test_function_costs_count_a_recursive_total_once_per_stack() -> None:
    tree = flamegraph.build_tree(
        [
            (("main", "walk", "walk", "walk"), 30),
            (("main", "walk"), 10),
            (("main", "io"), 60),
        ]
    )
    costs = {c.name: (c.self, c.total) for c in function_costs(tree)}
    assert costs == {"main": (0, 100), "walk": (40, 40), "io": (60, 60)}


def test_top_table_is_aligned_and_ranked() -> None:
    tree = flamegraph.build_tree([(("main", "a"), 3_000_000), (("main", "b"), 7_000_000)])
    lines = top_table(function_costs(tree), tree.total, "nanoseconds", "self", 2)
    assert lines[0].split() == ["self", "self%", "total", "total%", "function"]
    assert lines[1].split() == ["7.00", "ms", "70.0%", "7.00", "ms", "70.0%", "b"]
    assert lines[2].split()[-1] == "a"
    assert (
        len({line.index("function") if i == 0 else len(line) - len(line.split()[-1]) for i, line in enumerate(lines)})
        == 1
    )  # the function column starts at the same place on every row


# --------------------------------------------------------------------------------------------- against the doubles


async def test_resolve_prints_mode_reason_and_top_frames(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    code, out, err = await run(stack.settings, root.trace_id, root.span_id, top=5)
    assert code == 0 and err == ""
    assert re.search(r"^mode\s+linked$", out, re.M)
    assert re.search(rf"^reason\s+samples linked to span {root.span_id}$", out, re.M)
    assert "GET /checkout" in out and "shop-frontend" in out
    assert "top 5 functions by self" in out and "top 5 functions by total" in out
    by_self = out.split("top 5 functions by self")[1].split("top 5 functions by total")[0].strip().splitlines()
    assert len(by_self) == 1 + 5
    by_total = out.split("top 5 functions by total")[1].strip().splitlines()
    assert by_total[1].split()[-1] in ("<module>", "run")  # the outermost frames hold 100 %
    assert "100.0%" in by_total[1]


async def test_resolve_request_scope_lists_parts_and_services(stack: Stack) -> None:
    client = next(
        r
        for r in stack.shop.of_role("frontend-client")
        if any(linked_total(s.span_id) for s in stack.shop.trace(r.trace_id).descendant_local_roots(r.span_id))
    )
    code, out, _ = await run(stack.settings, client.trace_id, client.span_id, scope="request", top=40)
    assert code == 0
    assert re.search(r"^scope\s+request$", out, re.M)
    assert re.search(r"^  \+ shop-backend GET /price \[linked\]", out, re.M)
    assert "per service (shares of what is attributed to the request):" in out
    assert re.search(r"^  shop-backend\s", out, re.M)
    assert "count_primes" in out


async def test_resolve_of_a_span_without_samples_exits_1(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root")
    code, out, _ = await run(
        stack.settings, root.trace_id, root.span_id, profile_type="memory:alloc_space:bytes:space:bytes"
    )
    assert code == 1 and re.search(r"^mode\s+none$", out, re.M) and "no samples" in out


@pytest.mark.parametrize(
    ("trace_id", "span_id", "kwargs", "words"),
    [
        ("nothex", "1c60f2b8cd2d96d1", {}, "trace id 'nothex' is not 1-32 hex characters"),
        ("e19e0353f421bfce945f7d1514c6c9f1", "1c60", {}, "span id '1c60' is not 16 hex characters"),
        ("e19e0353f421bfce945f7d1514c6c9f1", "1c60f2b8cd2d96d1", {"top": 0}, "--top 0"),
        ("e19e0353f421bfce945f7d1514c6c9f1", "1c60f2b8cd2d96d1", {"profile_type": "x"}, "profile type 'x'"),
    ],
)
async def test_bad_arguments_are_one_line_and_exit_2(
    stack: Stack, trace_id: str, span_id: str, kwargs: dict[str, Any], words: str
) -> None:
    code, out, err = await run(stack.settings, trace_id, span_id, **kwargs)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err
    assert not stack.tempo.requests and not stack.pyroscope.requests


async def test_an_unknown_span_is_one_line_and_exit_1(stack: Stack) -> None:
    code, out, err = await run(stack.settings, "e19e0353f421bfce945f7d1514c6c9f1", "0123456789abcdef")
    assert code == 1 and out == "" and err.count("\n") == 1 and "was not found in trace" in err


async def test_an_unreachable_backend_is_one_line_and_exit_1(stack: Stack) -> None:
    settings = Settings.for_tests(mode="proxy", tempo_url=refused_url(), pyroscope_url=stack.pyroscope.url)
    code, out, err = await run(settings, "e19e0353f421bfce945f7d1514c6c9f1", "1c60f2b8cd2d96d1")
    assert code == 1 and out == "" and err.count("\n") == 1 and "tempo" in err.lower()
    assert "Traceback" not in err


async def test_standalone_mode_asks_the_running_bridge(stack: Stack, aiohttp_server: Any) -> None:
    from bridge.app import create_app

    server = await aiohttp_server(create_app(stack.settings, wall_clock=stack.capture_clock))
    settings = Settings.for_tests(mode="standalone", listen_host="0.0.0.0", listen_port=server.port)
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    code, out, _ = await run(settings, root.trace_id, root.span_id)
    assert code == 0 and re.search(r"^mode\s+linked$", out, re.M)
    assert server.app is not None


async def test_commands_send_the_token_to_every_bridge_api(aiohttp_server: Any) -> None:
    """``resolve`` and ``resolve --compare`` ask a standalone bridge's APIs with PROFILE_BRIDGE_TOKEN (the compare
    call once went without it, so a bridge with tokens answered it 401)."""
    seen: list[tuple[str, str | None]] = []

    async def api(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get(TOKEN_HEADER)))
        return web.json_response({"path": request.path})

    app = web.Application()
    app.router.add_get("/api/v1/spans/{trace}/{span}/{what}", api)
    server = await aiohttp_server(app)
    settings = Settings.for_tests(
        mode="standalone", listen_host="127.0.0.1", listen_port=server.port, client_token="s3cret"
    )
    trace, span = "e19e0353f421bfce945f7d1514c6c9f1", "1c60f2b8cd2d96d1"
    assert await fetch_from_bridge(settings, trace, span, scope="span", profile_type=CPU)
    assert await fetch_compare_from_bridge(settings, trace, span, window="1h", profile_type=CPU)
    assert seen == [
        (f"/api/v1/spans/{trace}/{span}/profile", "s3cret"),
        (f"/api/v1/spans/{trace}/{span}/compare", "s3cret"),
    ]


async def test_standalone_mode_without_a_bridge_says_to_start_one() -> None:
    port = int(refused_url().rsplit(":", 1)[1])
    settings = Settings.for_tests(mode="standalone", listen_host="127.0.0.1", listen_port=port)
    code, out, err = await run(settings, "e19e0353f421bfce945f7d1514c6c9f1", "1c60f2b8cd2d96d1")
    assert code == 1 and out == "" and "start `profile-bridge serve`" in err and err.count("\n") == 1


# --------------------------------------------------------------------------------------------- the real CLI


async def cli(*argv: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        *argv,
        cwd=str(ROOT),
        env={"PATH": os.environ.get("PATH", ""), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_cli_resolves_and_doctors_against_the_doubles(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    env = {
        "PROFILE_BRIDGE_TEMPO_URL": stack.tempo.url,
        "PROFILE_BRIDGE_PYROSCOPE_URL": stack.pyroscope.url,
        "PROFILE_BRIDGE_LOG_LEVEL": "warning",
    }
    code, out, err = await cli("resolve", root.trace_id, root.span_id, "--top", "3", env=env)
    assert code == 0, err
    assert re.search(r"^mode\s+linked$", out, re.M) and "top 3 functions by self" in out
    code, out, err = await cli(
        "doctor", "--trace-id", root.trace_id, "--span-id", root.span_id, "--expect-function", "render_json", env=env
    )
    assert code == 0, out + err
    assert out.rstrip().endswith("all 8 checks passed")
    code, out, err = await cli("doctor", "--trace-id", "not-a-trace", env=env)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0, "nanoseconds", "0"),
        (999, "nanoseconds", "999 ns"),
        (12_500, "nanoseconds", "12.5 µs"),
        (10_000_000, "nanoseconds", "10.0 ms"),
        (3_590_000_000, "nanoseconds", "3.59 s"),
        (250, "milliseconds", "250 ms"),
        (1536, "bytes", "1.50 KiB"),
        (12 * 1024**2, "bytes", "12.0 MiB"),
        (1234567, "count", "1,234,567"),
        (42, "objects", "42 objects"),
    ],
)
def test_values_read_in_human_units(value: int, unit: str, text: str) -> None:
    from bridge.units import format_value

    assert format_value(value, unit) == text


@pytest.mark.parametrize(
    ("span_arg", "ok"),
    [
        ("7f80395fd15dcdc9", True),
        ("7F80395FD15DCDC9", True),
        ("7f80395fd15dcdc9:" + "a" * 32, True),  # pyroscope.profile.id pasted as the /tempo mount writes it
        ("7f80395fd15dcdc9:" + "b" * 32, False),  # it carries another trace than the one given
        ("7f80395fd15dcdc", False),
    ],
)
def test_resolve_takes_a_span_id_or_the_carried_form(span_arg: str, ok: bool) -> None:
    from bridge.commands.resolve import check_args
    from bridge.errors import InvalidArgument

    if ok:
        assert check_args("a" * 32, span_arg, "span", 10, CPU)[1] == "7f80395fd15dcdc9"
    else:
        with pytest.raises(InvalidArgument):
            check_args("a" * 32, span_arg, "span", 10, CPU)
