"""``GET /api/v1/spans/{trace_id}/{span_id}/profile`` against the Tempo and Pyroscope doubles holding the shop capture:
every scope and format, and the errors."""

from __future__ import annotations

import gzip
from collections import Counter
from typing import Any

import pytest
from google.protobuf import json_format

from bridge import flamegraph
from bridge._proto import profile_pb2, querier_pb2
from bridge.errors import Code
from tests.doubles.pyroscope import Faults as PyroscopeFaults
from tests.doubles.tempo import Faults as TempoFaults
from tests.span_stack import CPU, Stack, linked_total
from tests.tools import go_pprof_top


def path(trace_id: str, span_id: str) -> str:
    return f"/api/v1/spans/{trace_id}/{span_id}/profile"


def tree_of(doc: dict[str, Any]) -> flamegraph.Node:
    return flamegraph.decode(json_format.ParseDict(doc["flamegraph"], querier_pb2.FlameGraph()))


def names(node: flamegraph.Node) -> set[str]:
    out = {node.name}
    for child in node.children.values():
        out |= names(child)
    return out


def a_client_span_calling_a_profiled_backend(stack: Stack) -> tuple[str, str, str]:
    """A frontend CLIENT span whose backend request (a descendant local root) has linked samples."""
    for role in stack.shop.of_role("frontend-client"):
        try:
            trace = stack.shop.trace(role.trace_id)
        except KeyError:
            continue
        backend = [s for s in trace.descendant_local_roots(role.span_id) if s.service == "shop-backend"]
        if backend and linked_total(backend[0].span_id) > 0:
            return role.trace_id, role.span_id, backend[0].span_id
    raise LookupError("the capture has no client span whose backend call was sampled")


# --------------------------------------------------------------------------------------------- scope=span


async def test_a_profiled_root_span_answers_linked_with_its_own_samples(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    resp = await stack.http.get(path(root.trace_id, root.span_id))
    assert resp.status == 200, await resp.text()
    assert resp.headers["X-Profile-Bridge-Resolution"] == "linked"
    doc = await resp.json()
    assert doc["scope"] == "span" and doc["mode"] == "linked"
    assert doc["traceId"] == root.trace_id and doc["spanId"] == root.span_id
    assert doc["span"]["service"] == "shop-frontend" and doc["span"]["name"] == "GET /checkout"
    assert doc["answeredBy"] == [root.span_id]
    assert doc["reasons"] == [doc["reason"]] and root.span_id in doc["reason"]
    assert doc["profileType"] == CPU
    assert doc["total"] == linked_total(root.span_id) == int(doc["flamegraph"]["total"])
    assert tree_of(doc).total == doc["total"]
    # the span's pyroscope.profile.id as the Tempo mount writes it (span:trace) names the same span
    carried = await stack.http.get(path(root.trace_id, f"{root.span_id}:{root.trace_id}"))
    assert carried.status == 200 and (await carried.json())["spanId"] == root.span_id


async def test_a_child_span_answers_local_root_and_names_it(stack: Stack) -> None:
    child = stack.shop.pick(
        "frontend-child", where=lambda r: linked_total(stack.shop.trace(r.trace_id).local_root(r.span_id).span_id) > 0
    )  # type: ignore[union-attr]
    root = stack.shop.trace(child.trace_id).local_root(child.span_id)
    assert root is not None
    resp = await stack.http.get(path(child.trace_id.upper(), child.span_id.upper()))  # ids in either case
    doc = await resp.json()
    assert resp.status == 200 and doc["mode"] == "local-root"
    assert doc["localRoot"]["spanId"] == root.span_id and doc["answeredBy"] == [root.span_id]
    assert doc["span"]["name"] == "renderCart"
    assert "render_json" in names(tree_of(doc))
    assert resp.headers["X-Profile-Bridge-Reason"].isascii()


async def test_max_nodes_folds_the_flame_graph(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    full = await (await stack.http.get(path(root.trace_id, root.span_id))).json()
    small = await (await stack.http.get(path(root.trace_id, root.span_id), params={"max_nodes": "3"})).json()
    assert small["total"] == full["total"]
    assert len(small["flamegraph"]["names"]) < len(full["flamegraph"]["names"])


# --------------------------------------------------------------------------------------------- scope=request


async def test_request_scope_of_a_client_span_holds_what_the_backend_burnt(stack: Stack) -> None:
    trace_id, client_id, backend_id = a_client_span_calling_a_profiled_backend(stack)
    resp = await stack.http.get(path(trace_id, client_id), params={"scope": "request"})
    assert resp.status == 200, await resp.text()
    doc = await resp.json()
    assert doc["scope"] == "request"
    assert doc["span"]["kind"] == "SPAN_KIND_CLIENT"
    tree = tree_of(doc)
    assert "count_primes" in names(tree)
    # the per-service breakdown, on the flame graph (one frame per service) and in the document
    assert set(tree.children) == {"shop-frontend", "shop-backend"}
    services = {s["service"]: s for s in doc["services"]}
    assert services["shop-backend"]["total"] == linked_total(backend_id) == tree.children["shop-backend"].total
    frontend_root = stack.shop.trace(trace_id).local_root(client_id)
    assert frontend_root is not None
    assert services["shop-frontend"]["total"] == linked_total(frontend_root.span_id)
    assert doc["total"] == services["shop-backend"]["total"] + services["shop-frontend"]["total"]
    assert sum(s["share"] for s in doc["services"]) == pytest.approx(1.0, abs=1e-3)
    parts = {p["spanId"]: p for p in doc["parts"]}
    assert parts[client_id]["mode"] == "local-root" and parts[client_id]["included"]
    assert parts[backend_id]["mode"] == "linked" and parts[backend_id]["included"]
    assert parts[backend_id]["service"] == "shop-backend"
    assert len(doc["reasons"]) == len(doc["parts"])


async def test_span_scope_of_the_same_client_span_does_not_hold_the_backend(stack: Stack) -> None:
    trace_id, client_id, _ = a_client_span_calling_a_profiled_backend(stack)
    doc = await (await stack.http.get(path(trace_id, client_id))).json()
    assert "count_primes" not in names(tree_of(doc))
    assert "services" not in doc and "parts" not in doc


async def test_request_scope_of_a_span_without_descendants_is_its_own_answer(stack: Stack) -> None:
    root = stack.shop.pick("backend-root", where=lambda r: linked_total(r.span_id) > 0)
    doc = await (await stack.http.get(path(root.trace_id, root.span_id), params={"scope": "request"})).json()
    assert [s["service"] for s in doc["services"]] == ["shop-backend"]
    assert doc["total"] == linked_total(root.span_id)
    assert [p["spanId"] for p in doc["parts"]] == [root.span_id]


# --------------------------------------------------------------------------------------------- formats


async def test_pprof_is_gzipped_and_parses_with_the_project_proto(stack: Stack) -> None:
    trace_id, client_id, _ = a_client_span_calling_a_profiled_backend(stack)
    resp = await stack.http.get(path(trace_id, client_id), params={"scope": "request", "format": "pprof"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert resp.headers["Content-Disposition"].endswith('.pb.gz"')
    assert resp.headers["X-Profile-Bridge-Resolution"] == "local-root"
    raw = await resp.read()
    assert raw[:2] == b"\x1f\x8b"
    prof = profile_pb2.Profile.FromString(gzip.decompress(raw))
    strings = list(prof.string_table)
    assert strings[0] == ""
    assert [(strings[t.type], strings[t.unit]) for t in prof.sample_type] == [("cpu", "nanoseconds")]
    assert (strings[prof.period_type.type], strings[prof.period_type.unit]) == ("cpu", "nanoseconds")
    functions = {f.id: strings[f.name] for f in prof.function}
    assert "count_primes" in functions.values()
    doc = await (await stack.http.get(path(trace_id, client_id), params={"scope": "request"})).json()
    assert sum(s.value[0] for s in prof.sample) == doc["total"]
    for sample in prof.sample:
        loc = next(loc for loc in prof.location if loc.id == sample.location_id[-1])
        assert functions[loc.line[0].function_id] in ("shop-frontend", "shop-backend")  # root frame: the service


async def test_collapsed_lists_folded_stacks_that_add_up(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    resp = await stack.http.get(path(root.trace_id, root.span_id), params={"format": "collapsed"})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
    assert resp.headers["X-Content-Type-Options"] == "nosniff"  # frame names are never read as HTML
    text = await resp.text()
    stacks = Counter[tuple[str, ...]]()
    for line in text.splitlines():
        frames, _, value = line.rpartition(" ")
        stacks[tuple(frames.split(";"))] += int(value)
    assert sum(stacks.values()) == linked_total(root.span_id)
    assert all(len(frames) >= 1 for frames in stacks)


async def test_profile_type_is_passed_to_pyroscope(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root")
    other = "memory:alloc_space:bytes:space:bytes"
    resp = await stack.http.get(path(root.trace_id, root.span_id), params={"profile_type": other})
    doc = await resp.json()
    assert resp.status == 200 and doc["profileType"] == other and doc["mode"] == "none"
    assert {c.message.profile_typeID for c in stack.pyroscope.calls("SelectMergeSpanProfile")} == {other}  # type: ignore[union-attr]


async def test_tenant_and_credentials_reach_both_backends(stack: Stack) -> None:
    root = stack.shop.pick("frontend-root")
    headers = {"X-Scope-OrgID": "team-a", "Authorization": "Bearer t0k"}
    assert (await stack.http.get(path(root.trace_id, root.span_id), headers=headers)).status == 200
    assert all(r.headers.get("X-Scope-OrgID") == "team-a" for r in stack.tempo.calls("/api/"))
    assert stack.pyroscope.requests and all(
        r.headers.get("X-Scope-OrgID") == "team-a" and r.headers.get("Authorization") == "Bearer t0k"
        for r in stack.pyroscope.requests
    )


# --------------------------------------------------------------------------------------------- errors

GOOD_TRACE = "e19e0353f421bfce945f7d1514c6c9f1"
GOOD_SPAN = "1c60f2b8cd2d96d1"


@pytest.mark.parametrize(
    ("trace_id", "span_id", "params", "status", "code", "words"),
    [
        ("not-hex", GOOD_SPAN, {}, 400, "invalid_argument", "trace id"),
        ("a" * 33, GOOD_SPAN, {}, 400, "invalid_argument", "trace id"),
        (GOOD_TRACE, "1c60f2b8", {}, 400, "invalid_argument", "span id"),
        (GOOD_TRACE, "zz60f2b8cd2d96d1", {}, 400, "invalid_argument", "span id"),
        (GOOD_TRACE, GOOD_SPAN + ":0123456789abcdef0123456789abcdef", {}, 400, "invalid_argument", "span id"),
        (GOOD_TRACE, GOOD_SPAN, {"scope": "trace"}, 400, "invalid_argument", "scope"),
        (GOOD_TRACE, GOOD_SPAN, {"format": "svg"}, 400, "invalid_argument", "format"),
        (GOOD_TRACE, GOOD_SPAN, {"profile_type": "cpu"}, 400, "invalid_argument", "profile type"),
        (GOOD_TRACE, GOOD_SPAN, {"max_nodes": "-1"}, 400, "invalid_argument", "max_nodes"),
        (GOOD_TRACE, GOOD_SPAN, {"max_nodes": "many"}, 400, "invalid_argument", "max_nodes"),
        (GOOD_TRACE, "0123456789abcdef", {}, 404, "not_found", "0123456789abcdef"),
        ("0123456789abcdef0123456789abcdef", GOOD_SPAN, {}, 404, "not_found", "not found"),
    ],
)
async def test_bad_requests_get_a_json_problem_with_the_right_status(
    stack: Stack, trace_id: str, span_id: str, params: dict[str, str], status: int, code: str, words: str
) -> None:
    resp = await stack.http.get(path(trace_id, span_id), params=params)
    assert resp.status == status
    assert resp.headers["Content-Type"].startswith("application/json")
    doc = await resp.json()
    assert set(doc) == {"error"} and doc["error"]["code"] == code
    assert words in doc["error"]["message"]
    assert "Traceback" not in doc["error"]["message"]


async def test_bad_ids_are_not_sent_upstream(stack: Stack) -> None:
    await stack.http.get(path("nothex", GOOD_SPAN))
    await stack.http.get(path(GOOD_TRACE, "short"))
    assert not stack.tempo.calls("/api/") and not stack.pyroscope.requests


@pytest.mark.parametrize(
    ("broken", "status", "code"),
    [("tempo", 503, Code.UNAVAILABLE), ("pyroscope", 503, Code.UNAVAILABLE)],
)
async def test_a_failing_backend_is_named_in_the_problem(stack: Stack, broken: str, status: int, code: Code) -> None:
    if broken == "tempo":
        stack.tempo.faults = TempoFaults(status=503, body="tempo is restarting")
    else:
        stack.pyroscope.faults = PyroscopeFaults(code=Code.UNAVAILABLE, message="ingesters are down")
    resp = await stack.http.get(path(GOOD_TRACE, GOOD_SPAN))
    doc = await resp.json()
    assert resp.status == status and doc["error"]["code"] == code.value
    assert broken in doc["error"]["message"].lower()


# --------------------------------------------------------------------------------------------- standalone mode


async def test_standalone_mode_answers_from_the_store(aiohttp_client: Any, tmp_path: Any) -> None:
    from tests.span_stack import start_standalone

    client, shop = await start_standalone(aiohttp_client, str(tmp_path / "data"))
    role = next(
        r
        for r in shop.of_role("frontend-client")
        if any(linked_total(s.span_id) for s in shop.trace(r.trace_id).descendant_local_roots(r.span_id))
    )
    resp = await client.get(path(role.trace_id, role.span_id), params={"scope": "request"})
    assert resp.status == 200, await resp.text()
    doc = await resp.json()
    assert doc["mode"] == "local-root"
    assert "count_primes" in names(tree_of(doc))
    assert {s["service"] for s in doc["services"]} == {"shop-frontend", "shop-backend"}
    resp = await client.get(path(role.trace_id, "0123456789abcdef"))
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


async def test_go_tool_pprof_opens_the_request_profile(stack: Stack, tmp_path: Any) -> None:
    trace_id, client_id, _ = a_client_span_calling_a_profiled_backend(stack)
    resp = await stack.http.get(path(trace_id, client_id), params={"scope": "request", "format": "pprof"})
    out = tmp_path / "request.pb.gz"
    out.write_bytes(await resp.read())
    top = go_pprof_top(out, tmp_path)
    assert "count_primes" in top and "Type: cpu" in top


@pytest.mark.parametrize("profile_type", [CPU, "memory:alloc_space:bytes:space:bytes"])
async def test_request_scope_fetches_the_trace_once(stack: Stack, profile_type: str) -> None:
    # with no data for the type, every descendant falls through to a lookup: the span cache must answer them
    trace_id, client_id, _ = a_client_span_calling_a_profiled_backend(stack)
    resp = await stack.http.get(path(trace_id, client_id), params={"scope": "request", "profile_type": profile_type})
    assert resp.status == 200
    assert len(stack.tempo.calls(f"/api/v2/traces/{trace_id}")) == 1
    assert not stack.tempo.search_calls
