"""The ``/pyroscope`` mount is transparent for what it does not resolve (issue 20, goal 1): a span-capable request
it leaves alone reaches Pyroscope byte for byte; one whose span selector it has to cut back (the carried
``<span id>:<trace id>`` form, junk entries) keeps every field and enum value the bridge's .proto does not know —
protobuf through upb's unknown fields, JSON by editing the document; a ``Diff`` with a span side is resolved side by
side. Against the Pyroscope double (which records every body as it arrived) and the Tempo double, shop capture."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, json_format
from google.protobuf.descriptor import Descriptor

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.config import DEFAULT_PROFILE_TYPE
from bridge.wire.pyroscope import SPAN_RPCS
from tests.doubles.pyroscope import Recorded
from tests.proxy.test_pyroscope_mount import QUERIER, Client, Server, Stack, decode, make_stack, shop_span, span_request

# protobuf fields no querier.v1 message has (what a later Pyroscope might add): varint 101, bytes 102
UNKNOWN_PB = bytes([0xA8, 0x06, 0x05]) + bytes([0xB2, 0x06, 0x03]) + b"new"
FUTURE_FORMAT = "PROFILE_FORMAT_FUNCTIONS"  # not in grafana/pyroscope's ProfileFormat at v2.2.1; Drilldown names it


@pytest.fixture
async def stack(aiohttp_server: Server, aiohttp_client: Client) -> Stack:
    return await make_stack(aiohttp_server, aiohttp_client)


async def post(stack: Stack, method: str, body: bytes, ctype: str, *, gzipped: bool = False) -> tuple[int, Any, bytes]:
    headers = {"Content-Type": ctype, "Connect-Protocol-Version": "1"}
    if gzipped:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    resp = await stack.client.post(QUERIER + method, data=body, headers=headers, auto_decompress=False)
    raw = await resp.read()
    if resp.headers.get("Content-Encoding") == "gzip":
        raw = gzip.decompress(raw)
    return resp.status, resp.headers, raw


def arrived(stack: Stack, method: str) -> Recorded:
    [seen] = stack.pyroscope.calls(method)
    return seen


def plain_body(seen: Recorded) -> bytes:
    return gzip.decompress(seen.body) if seen.headers.get("Content-Encoding") == "gzip" else seen.body


def linked_span(stack: Stack) -> Any:
    linked = stack.linked_ids()
    return shop_span("frontend-root", lambda s: s.span_id in linked)


def stacktraces_doc(span: Any, **extra: Any) -> dict[str, Any]:
    req = span_request(span)
    return {
        "profileTypeID": req.profile_typeID,
        "labelSelector": req.label_selector,
        "start": str(req.start),
        "end": str(req.end),
        **extra,
    }


# --------------------------------------------------------------------------------------------- which RPCs


def _has_selector(desc: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    if "span_selector" in desc.fields_by_name:
        return True
    return any(
        f.message_type is not None
        and f.message_type.full_name not in seen
        and _has_selector(f.message_type, seen | {desc.full_name})
        for f in desc.fields
    )


def test_every_rpc_whose_request_can_carry_a_span_selector_is_handled() -> None:
    """Read from querier.proto itself, at any depth: what the mount decodes is exactly that set."""
    service = qpb.DESCRIPTOR.services_by_name["QuerierService"]
    carrying = {m.name for m in service.methods if _has_selector(m.input_type)}
    assert carrying == set(SPAN_RPCS) == {"SelectMergeSpanProfile", "SelectMergeStacktraces", "Diff"}
    assert SPAN_RPCS["Diff"][1] == ("left", "right")
    proto = descriptor_pb2.FileDescriptorProto()
    qpb.DESCRIPTOR.CopyToProto(proto)
    assert {m.name for m in proto.service[0].method} >= {"SelectHeatmap", "GetProfileStats", "AnalyzeQuery"}


# --------------------------------------------------------------------------------------------- as it came


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize(
    "case",
    ["json: a format our proto lacks", "json: a plain diff", "proto: an unknown field", "proto: an unknown format"],
)
async def test_a_request_the_bridge_does_not_change_reaches_pyroscope_byte_for_byte(
    stack: Stack, case: str, gzipped: bool
) -> None:
    span = linked_span(stack)
    if case == "json: a format our proto lacks":  # a span selector too: still not a flame graph, not resolved
        method, ctype = "SelectMergeStacktraces", "application/json"
        body = json.dumps(stacktraces_doc(span, format=FUTURE_FORMAT, spanSelector=[span.span_id]), indent=2).encode()
    elif case == "json: a plain diff":
        method, ctype = "Diff", "application/json"
        side = stacktraces_doc(span, futureField={"x": [1, 2.50]})
        body = json.dumps({"left": side, "right": side}).encode()
    else:
        method, ctype = "SelectMergeStacktraces", "application/proto"
        req = qpb.SelectMergeStacktracesRequest(
            profile_typeID=DEFAULT_PROFILE_TYPE,
            label_selector=f'{{service_name="{span.service}"}}',
            start=span.start_ns // 1_000_000 - 60_000,
            end=span.end_ns // 1_000_000 + 60_000,
            span_selector=[span.span_id],
        )
        body = req.SerializeToString() + (UNKNOWN_PB if case == "proto: an unknown field" else bytes([0x30, 0x09]))
    sent = gzip.compress(body, mtime=0) if gzipped else body
    headers = {"Content-Type": ctype, **({"Content-Encoding": "gzip"} if gzipped else {})}
    resp = await stack.client.post(QUERIER + method, data=sent, headers=headers, auto_decompress=False)
    status = resp.status
    assert "X-Profile-Bridge-Resolution" not in resp.headers  # not resolved
    seen = arrived(stack, method)
    assert seen.body == sent and plain_body(seen) == body  # as sent, gzip and all
    assert (seen.headers.get("Content-Encoding") == "gzip") is gzipped
    assert status in (200, 400)  # whatever Pyroscope (the double) answers, it answered it


NO_SELECTOR: dict[str, Any] = {  # the span-capable list, whose requests have no span_selector in querier.proto
    "SelectMergeProfile": qpb.SelectMergeProfileRequest(max_nodes=16),
    "SelectSeries": qpb.SelectSeriesRequest(step=10.0, group_by=["span_name"]),
    "SelectHeatmap": qpb.SelectHeatmapRequest(
        step=10.0,
        query_type=qpb.HEATMAP_QUERY_TYPE_SPAN,
        exemplar_type=tpb.EXEMPLAR_TYPE_SPAN,
        group_by=["span_name"],
    ),
}


@pytest.mark.parametrize("method", sorted(NO_SELECTOR))
@pytest.mark.parametrize("codec", ["proto", "json"])
async def test_the_rpcs_without_a_span_selector_reach_pyroscope_as_sent(stack: Stack, method: str, codec: str) -> None:
    """Never decoded: a field our .proto lacks — even a span selector in the carried form, as a later Pyroscope might
    add — reaches Pyroscope as it was sent, for Pyroscope to answer."""
    span = linked_span(stack)
    msg = type(NO_SELECTOR[method])()
    msg.CopyFrom(NO_SELECTOR[method])
    msg.profile_typeID, msg.start, msg.end = DEFAULT_PROFILE_TYPE, span.start_ns // 10**6, span.end_ns // 10**6
    msg.label_selector = f'{{service_name="{span.service}"}}'
    if codec == "proto":
        body, ctype = msg.SerializeToString() + UNKNOWN_PB, "application/proto"
    else:
        doc = json.loads(json_format.MessageToJson(msg)) | {"spanSelector": [f"{span.span_id}:{span.trace_id}"]}
        body, ctype = json.dumps(doc).encode(), "application/json"
    status, headers, _ = await post(stack, method, body, ctype)
    assert arrived(stack, method).body == body
    assert "X-Profile-Bridge-Resolution" not in headers
    assert status in (200, 400, 501)  # the double's own answer (it does not serve SelectMergeProfile: 501)


# --------------------------------------------------------------------------------------------- changed, nothing lost


@pytest.mark.parametrize("key", ["spanSelector", "span_selector"])
async def test_a_json_request_with_a_carried_id_is_edited_in_its_document(stack: Stack, key: str) -> None:
    span = linked_span(stack)
    carried = f"{span.span_id}:{span.trace_id}"
    doc = stacktraces_doc(span, format=FUTURE_FORMAT, futureField={"nested": [1, "two", None, True]}, maxNodes="64")
    doc[key] = [carried, carried.upper()]
    status, headers, _ = await post(
        stack, "SelectMergeStacktraces", json.dumps(doc).encode(), "application/json", gzipped=True
    )
    assert status == 200 and "X-Profile-Bridge-Resolution" not in headers
    seen = arrived(stack, "SelectMergeStacktraces")
    assert "Content-Encoding" not in seen.headers  # re-encoded plain
    assert json.loads(seen.body) == {**doc, key: [span.span_id]}  # the format name and the unknown field survive


async def test_a_protobuf_request_with_a_carried_id_keeps_unknown_fields_and_enum_values(stack: Stack) -> None:
    span = linked_span(stack)
    req = span_request(span, selector=[f"{span.span_id}:{span.trace_id}"])
    body = req.SerializeToString() + bytes([0x38, 0x09]) + UNKNOWN_PB  # format (field 7) = 9: not in our enum
    status, headers, _ = await post(stack, "SelectMergeSpanProfile", body, "application/proto")
    assert status == 200 and "X-Profile-Bridge-Resolution" not in headers
    raw = arrived(stack, "SelectMergeSpanProfile").body
    got = qpb.SelectMergeSpanProfileRequest.FromString(raw)
    assert list(got.span_selector) == [span.span_id] and got.format == 9
    assert UNKNOWN_PB in raw  # upb kept both unknown fields, bytes and all


@pytest.mark.parametrize("fmt", [qpb.PROFILE_FORMAT_TREE, qpb.PROFILE_FORMAT_DOT, qpb.PROFILE_FORMAT_PPROF])
async def test_other_formats_and_selectors_go_on_with_the_carried_id_cut_back(stack: Stack, fmt: int) -> None:
    span = linked_span(stack)
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{span.service}"}}',
        start=span.start_ns // 1_000_000 - 60_000,
        end=span.end_ns // 1_000_000 + 60_000,
        span_selector=[f"{span.span_id}:{span.trace_id}"],
        format=fmt,
    )
    await post(stack, "SelectMergeStacktraces", req.SerializeToString(), "application/proto")
    got = arrived(stack, "SelectMergeStacktraces").message
    assert isinstance(got, qpb.SelectMergeStacktracesRequest)
    assert list(got.span_selector) == [span.span_id] and got.format == fmt


async def test_a_span_query_with_selectors_the_resolver_cannot_honour_goes_on_cleaned(stack: Stack) -> None:
    """A stack-trace selector beside the span selector: Pyroscope's v2 read path answers it, the resolver cannot."""
    span = linked_span(stack)
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{span.service}"}}',
        start=span.start_ns // 1_000_000 - 60_000,
        end=span.end_ns // 1_000_000 + 60_000,
        span_selector=[f"{span.span_id}:{span.trace_id}"],
        stack_trace_selector=tpb.StackTraceSelector(call_site=[tpb.Location(name="<module>")]),
    )
    status, headers, raw = await post(stack, "SelectMergeStacktraces", req.SerializeToString(), "application/proto")
    assert status == 200 and "X-Profile-Bridge-Resolution" not in headers
    got = arrived(stack, "SelectMergeStacktraces").message
    assert isinstance(got, qpb.SelectMergeStacktracesRequest)
    assert list(got.span_selector) == [span.span_id] and got.stack_trace_selector == req.stack_trace_selector
    assert decode(qpb.SelectMergeStacktracesResponse, raw).flamegraph.total > 0


def test_pyroscope_itself_refuses_the_carried_form() -> None:
    """Why it is cut back: the double says what Pyroscope says (``pkg/model/profile.go``)."""
    from tests.doubles.pyroscope import PyroscopeDouble
    from tests.doubles.pyroscope_checks import BackendError

    double = PyroscopeDouble()
    everything = {"profile_typeID": DEFAULT_PROFILE_TYPE, "start": 0, "end": 2**62}
    with pytest.raises(BackendError, match='invalid span id length: "0123456789abcdef:0af7'):
        double.select_merge_span_profile(
            qpb.SelectMergeSpanProfileRequest(
                span_selector=["0123456789abcdef:0af7651916cd43dd8448eb211c80319c"], **everything
            )
        )
    with pytest.raises(BackendError, match="encoding/hex: invalid byte: U\\+007A 'z'"):
        double.select_merge_span_profile(
            qpb.SelectMergeSpanProfileRequest(span_selector=["z123456789abcdef"], **everything)
        )


# --------------------------------------------------------------------------------------------- Diff


def diff_request(span: Any, left_selector: list[str]) -> qpb.DiffRequest:
    window = (span.start_ns // 1_000_000 - 60_000, span.end_ns // 1_000_000 + 60_000)
    service = f'{{service_name="{span.service}"}}'
    left = qpb.SelectMergeStacktracesRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE, label_selector=service, start=window[0], end=window[1]
    )
    left.span_selector.extend(left_selector)
    right = qpb.SelectMergeStacktracesRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE, label_selector=service, start=window[0], end=window[1]
    )
    return qpb.DiffRequest(left=left, right=right)


@pytest.mark.parametrize("codec", ["proto", "json"])
async def test_a_diff_with_a_span_side_is_resolved_side_by_side(stack: Stack, codec: str) -> None:
    span = linked_span(stack)
    req = diff_request(span, [f"{span.span_id}:{span.trace_id}"])
    ctype = "application/proto" if codec == "proto" else "application/json"
    body = req.SerializeToString() if codec == "proto" else json_format.MessageToJson(req).encode()
    status, headers, raw = await post(stack, "Diff", body, ctype)
    assert status == 200, raw
    assert headers["X-Profile-Bridge-Resolution"] == "linked"
    assert not stack.pyroscope.calls("Diff")  # answered by the bridge
    got = decode(qpb.DiffResponse, raw, codec).flamegraph
    # what Pyroscope itself answers for the same two sides, once the span side names the span as Pyroscope wants it
    plain = qpb.DiffRequest()
    plain.CopyFrom(req)
    plain.left.span_selector[:] = [span.span_id]
    want = stack.pyroscope.diff(plain).flamegraph  # type: ignore[attr-defined]
    assert (got.leftTicks, got.rightTicks, got.total) == (want.leftTicks, want.rightTicks, want.total)
    assert got == want
    [right] = [r.message for r in stack.pyroscope.calls("SelectMergeStacktraces")]
    assert isinstance(right, qpb.SelectMergeStacktracesRequest) and not right.span_selector


async def test_a_diff_side_the_resolver_cannot_honour_sends_the_whole_diff_on_cleaned(stack: Stack) -> None:
    span = linked_span(stack)
    req = diff_request(span, [f"{span.span_id}:{span.trace_id}"])
    req.left.profile_id_selector.append("7c9e6679-7425-40de-944b-e07fc1f90ae7")
    body = req.SerializeToString() + UNKNOWN_PB
    status, headers, _ = await post(stack, "Diff", body, "application/proto")
    assert status == 200 and "X-Profile-Bridge-Resolution" not in headers
    raw = arrived(stack, "Diff").body
    got = qpb.DiffRequest.FromString(raw)
    assert list(got.left.span_selector) == [span.span_id]
    assert list(got.left.profile_id_selector) == list(req.left.profile_id_selector) and got.right == req.right
    assert raw.endswith(UNKNOWN_PB)


async def test_a_diff_with_junk_only_in_a_side_is_refused_as_a_span_query_is(stack: Stack) -> None:
    span = linked_span(stack)
    status, _, raw = await post(
        stack, "Diff", diff_request(span, ["not-a-span"]).SerializeToString(), "application/proto"
    )
    assert status == 400 and json.loads(raw)["code"] == "invalid_argument" and "16 hex" in json.loads(raw)["message"]
    assert stack.pyroscope.requests == []
