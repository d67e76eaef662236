"""bridge.enrich on real traces: the shop capture (OpenTelemetry SDK output) and Tempo's own JSON (vulture-trace.json),
in all four shapes Tempo answers with. Every span gets ``pyroscope.profile.id`` = its own id exactly once; nothing
else changes meaning — checked by decoding with OTLP's own ``ResourceSpans`` and comparing with the original."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.enrich import EnrichPolicy, Policy, UndecodableBody, enrich_trace_body
from bridge.spans import PROFILE_ID_ATTR, Trace, spans_from_otlp
from tests.doubles.shop import load_shop
from tests.doubles.tempo import trace_answer
from tests.paths import VULTURE_TRACE

ALL = EnrichPolicy()
SHAPES = [(2, True), (1, True), (2, False), (1, False)]
SHAPE_IDS = ["v2-protobuf", "v1-protobuf", "v2-json", "v1-json"]


# --------------------------------------------------------------------------------------------- helpers


def vulture_resource_spans() -> list[otlp_trace.ResourceSpans]:
    data = otlp_trace.TracesData()
    json_format.ParseDict(json.loads(VULTURE_TRACE.read_text()), data)
    return list(data.resource_spans)


def shop_resource_spans(role: str = "frontend-child") -> list[otlp_trace.ResourceSpans]:
    shop = load_shop()
    return shop.resource_spans(shop.pick(role).trace_id)


def decode_answer(body: bytes, version: int, protobuf: bool) -> list[otlp_trace.ResourceSpans]:
    """Any of the four shapes → OTLP ResourceSpans, decoded by software we did not write (protobuf/json_format)."""
    if protobuf:
        trace = tempo_pb2.TraceByIDResponse.FromString(body).trace if version == 2 else tempo_pb2.Trace.FromString(body)
        return [otlp_trace.ResourceSpans.FromString(raw) for raw in trace.resource_spans]
    doc = json.loads(body)
    items = doc["trace"].get("resourceSpans", []) if version == 2 else doc["batches"]
    out = []
    for item in items:
        rs = otlp_trace.ResourceSpans()
        json_format.ParseDict(item, rs)
        out.append(rs)
    return out


def all_spans(resource_spans: list[otlp_trace.ResourceSpans]) -> list[otlp_trace.Span]:
    return [span for rs in resource_spans for ss in rs.scope_spans for span in ss.spans]


def profile_attrs(span: otlp_trace.Span) -> list[common_pb2.KeyValue]:
    return [kv for kv in span.attributes if kv.key == PROFILE_ID_ATTR]


def strip_added(resource_spans: list[otlp_trace.ResourceSpans], original: list[otlp_trace.ResourceSpans]) -> None:
    """Remove the attribute from spans that did not have it in ``original`` (in place)."""
    had = {span.span_id for span in all_spans(original) if profile_attrs(span)}
    for span in all_spans(resource_spans):
        if span.span_id not in had:
            kept = [kv for kv in span.attributes if kv.key != PROFILE_ID_ATTR]
            del span.attributes[:]
            span.attributes.extend(kept)


def canonical(resource_spans: list[otlp_trace.ResourceSpans]) -> list[bytes]:
    return [rs.SerializeToString(deterministic=True) for rs in resource_spans]


# --------------------------------------------------------------------------------------------- every span, four shapes


@pytest.mark.parametrize(("version", "protobuf"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("source", ["shop", "vulture"])
def test_every_span_gets_its_own_id_once_and_nothing_else_changes(version: int, protobuf: bool, source: str) -> None:
    original = shop_resource_spans() if source == "shop" else vulture_resource_spans()
    body = trace_answer(original, version=version, protobuf=protobuf)

    result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=ALL)

    enriched = decode_answer(result.body, version, protobuf)
    spans = all_spans(enriched)
    assert len(spans) == len(all_spans(original)) == result.span_count
    for span in spans:
        attrs = profile_attrs(span)
        assert len(attrs) == 1, span.name
        assert attrs[0].value.string_value == span.span_id.hex()
    already = sum(1 for s in all_spans(original) if profile_attrs(s))
    assert result.added == len(spans) - already > 0
    # remove what was added: what is left is the original, field for field
    strip_added(enriched, original)
    assert canonical(enriched) == canonical(original)


def test_shop_capture_every_trace_all_shapes() -> None:
    shop = load_shop()
    for trace_id in shop.trace_ids():
        original = shop.resource_spans(trace_id)
        for version, protobuf in SHAPES:
            body = trace_answer(original, version=version, protobuf=protobuf)
            result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=ALL)
            spans = all_spans(decode_answer(result.body, version, protobuf))
            assert [len(profile_attrs(s)) for s in spans] == [1] * len(spans)
            assert {s.span_id.hex() for s in spans} == set(shop.trace(trace_id).spans)


@pytest.mark.parametrize("version", [2, 1])
def test_vulture_json_keeps_tempo_json_exactly_except_the_attribute(version: int) -> None:
    doc = json.loads(VULTURE_TRACE.read_text())
    wrapped: dict[str, Any] = (
        {"trace": doc, "metrics": {"inspectedBytes": "19301"}} if version == 2 else {"batches": doc["resourceSpans"]}
    )
    body = json.dumps(wrapped).encode()

    result = enrich_trace_body(body, version=version, protobuf=False, policy=ALL)

    out = json.loads(result.body)
    items = out["trace"]["resourceSpans"] if version == 2 else out["batches"]
    seen = 0
    for rs in items:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                added = span["attributes"].pop()
                own_id = base64.b64decode(span["spanId"]).hex()
                assert added == {"key": PROFILE_ID_ATTR, "value": {"stringValue": own_id}}
                assert len(own_id) == 16
                seen += 1
    assert seen == result.added == 6
    assert out == wrapped


# --------------------------------------------------------------------------------------------- unknown fields survive


def _with_unknown(message_bytes: bytes, field_number: int, payload: bytes) -> bytes:
    """Append a length-delimited field unknown to the schema."""
    tag = (field_number << 3) | 2
    return message_bytes + _varint(tag) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@pytest.mark.parametrize("version", [2, 1])
def test_unknown_protobuf_fields_survive_at_every_level(version: int) -> None:
    original = shop_resource_spans()
    # an unknown field inside every span, every scope span, every resource span and the outer message
    raws = []
    for rs in original:
        for ss in rs.scope_spans:
            spans = [
                otlp_trace.Span.FromString(_with_unknown(s.SerializeToString(), 900, b"span-extra")) for s in ss.spans
            ]
            del ss.spans[:]
            ss.spans.extend(spans)
        rs_with = otlp_trace.ResourceSpans.FromString(rs.SerializeToString())
        for ss in rs_with.scope_spans:
            ss.MergeFromString(_with_unknown(b"", 901, b"scope-extra"))
        raws.append(_with_unknown(rs_with.SerializeToString(), 902, b"resource-extra"))
    body = _with_unknown(trace_answer(raws, version=version, protobuf=True), 903, b"answer-extra")

    result = enrich_trace_body(body, version=version, protobuf=True, policy=ALL)

    outer = (
        tempo_pb2.TraceByIDResponse.FromString(result.body) if version == 2 else tempo_pb2.Trace.FromString(result.body)
    )
    assert [(f.field_number, f.data) for f in UnknownFieldSet(outer)] == [(903, b"answer-extra")]
    enriched = decode_answer(result.body, version, True)
    for rs in enriched:
        assert [(f.field_number, f.data) for f in UnknownFieldSet(rs)] == [(902, b"resource-extra")]
        for ss in rs.scope_spans:
            assert [(f.field_number, f.data) for f in UnknownFieldSet(ss)] == [(901, b"scope-extra")]
            for span in ss.spans:
                assert [(f.field_number, f.data) for f in UnknownFieldSet(span)] == [(900, b"span-extra")]
                assert len(profile_attrs(span)) == 1
    decoded_original = [otlp_trace.ResourceSpans.FromString(r) for r in raws]
    strip_added(enriched, decoded_original)
    assert canonical(enriched) == canonical(decoded_original)


def test_events_links_status_and_other_attributes_survive() -> None:
    span = otlp_trace.Span(
        trace_id=bytes.fromhex("0af7651916cd43dd8448eb211c80319c"),
        span_id=bytes.fromhex("b7ad6b7169203331"),
        parent_span_id=bytes.fromhex("00f067aa0ba902b7"),
        name="SELECT orders",
        kind=otlp_trace.Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=1,
        end_time_unix_nano=2,
        trace_state="congo=t61rcWkgMzE",
        flags=0x301,
        dropped_attributes_count=3,
        dropped_events_count=4,
        dropped_links_count=5,
    )
    span.attributes.add(key="db.statement", value=common_pb2.AnyValue(string_value="SELECT 1"))
    span.attributes.add(key="retries", value=common_pb2.AnyValue(int_value=-7))
    span.attributes.add(key="ratio", value=common_pb2.AnyValue(double_value=0.25))
    arr = span.attributes.add(key="tags").value.array_value
    arr.values.add(string_value="a")
    arr.values.add(bool_value=True)
    # the attribute's name inside an event and a link: not the span's own attribute
    event = span.events.add(time_unix_nano=1, name="exception")
    event.attributes.add(key=PROFILE_ID_ATTR, value=common_pb2.AnyValue(string_value="ffffffffffffffff"))
    link = span.links.add(trace_id=bytes(16), span_id=bytes.fromhex("1111111111111111"), flags=1)
    link.attributes.add(key="note", value=common_pb2.AnyValue(string_value=PROFILE_ID_ATTR))
    span.status.code = otlp_trace.Status.STATUS_CODE_ERROR
    span.status.message = "boom"
    rs = otlp_trace.ResourceSpans(schema_url="https://opentelemetry.io/schemas/1.21.0")
    rs.resource.attributes.add(key="service.name", value=common_pb2.AnyValue(string_value="db-client"))
    ss = rs.scope_spans.add(schema_url="s")
    ss.scope.name = "sqlalchemy"
    ss.scope.version = "2.0"
    ss.spans.append(span)

    for version, protobuf in SHAPES:
        body = trace_answer([rs], version=version, protobuf=protobuf)
        result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=ALL)
        (out,) = decode_answer(result.body, version, protobuf)
        out_span = out.scope_spans[0].spans[0]
        assert [kv.key for kv in out_span.attributes] == ["db.statement", "retries", "ratio", "tags", PROFILE_ID_ATTR]
        assert profile_attrs(out_span)[0].value.string_value == "b7ad6b7169203331"
        strip_added([out], [rs])
        assert out == rs, (version, protobuf)


# --------------------------------------------------------------------------------------------- existing attribute


@pytest.mark.parametrize(("version", "protobuf"), SHAPES, ids=SHAPE_IDS)
def test_existing_attribute_is_never_changed_nor_duplicated(version: int, protobuf: bool) -> None:
    original = shop_resource_spans()
    spans = all_spans(original)
    # the SDK tags local roots with their own id; give one span a foreign value and one an int value
    odd = spans[0]
    odd.attributes.add(key=PROFILE_ID_ATTR, value=common_pb2.AnyValue(string_value="cafebabecafebabe"))
    odd_int = spans[2]
    odd_int.attributes.add(key=PROFILE_ID_ATTR, value=common_pb2.AnyValue(int_value=42))
    body = trace_answer(original, version=version, protobuf=protobuf)

    result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=ALL)

    by_id = {s.span_id: s for s in all_spans(decode_answer(result.body, version, protobuf))}
    assert [kv.value.string_value for kv in profile_attrs(by_id[odd.span_id])] == ["cafebabecafebabe"]
    assert [kv.value.int_value for kv in profile_attrs(by_id[odd_int.span_id])] == [42]
    assert all(len(profile_attrs(s)) == 1 for s in by_id.values())
    # enriching the enriched answer changes nothing at all
    again = enrich_trace_body(result.body, version=version, protobuf=protobuf, policy=ALL)
    assert again.added == 0
    assert again.body == result.body
    cached = {s.span_id: s for s in again.spans()}
    assert cached[odd.span_id.hex()].profile_id == "cafebabecafebabe"


# --------------------------------------------------------------------------------------------- policies


@pytest.mark.parametrize(("version", "protobuf"), SHAPES, ids=SHAPE_IDS)
def test_policy_profiled_services_enriches_only_known_services(version: int, protobuf: bool) -> None:
    original = shop_resource_spans()
    body = trace_answer(original, version=version, protobuf=protobuf)
    policy = EnrichPolicy(Policy.PROFILED_SERVICES, frozenset({"shop-backend"}))

    result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=policy)

    shop = load_shop()
    for rs in decode_answer(result.body, version, protobuf):
        service = next(kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name")
        for span in all_spans([rs]):
            sdk_tagged = shop.role_of(span.span_id.hex()) in ("frontend-root", "backend-root")
            expected = 1 if service == "shop-backend" or sdk_tagged else 0
            assert len(profile_attrs(span)) == expected, (service, span.name)
    assert result.added == 1  # countPrimes; GET /price already carries its own id


@pytest.mark.parametrize(("version", "protobuf"), SHAPES, ids=SHAPE_IDS)
def test_policy_off_and_unknown_services_leave_the_body_byte_for_byte(version: int, protobuf: bool) -> None:
    body = trace_answer(shop_resource_spans(), version=version, protobuf=protobuf)
    for policy in (EnrichPolicy(Policy.OFF), EnrichPolicy(Policy.PROFILED_SERVICES, frozenset({"elsewhere"}))):
        result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=policy)
        assert result.body == body
        assert result.added == 0
        assert len(result.spans()) == 5  # the span cache is filled all the same


# --------------------------------------------------------------------------------------------- Tempo's other answers


@pytest.mark.parametrize("protobuf", [True, False], ids=["protobuf", "json"])
def test_partial_status_message_and_metrics_are_kept(protobuf: bool) -> None:
    metrics = tempo_pb2.TraceByIDMetrics(inspectedBytes=123, backendReads=2, backendBytes=99)
    metrics.additionalMetrics["cache_hits"] = 5
    body = trace_answer(
        shop_resource_spans(), version=2, protobuf=protobuf, partial="trace exceeds max size", metrics=metrics
    )

    result = enrich_trace_body(body, version=2, protobuf=protobuf, policy=ALL)

    assert result.added == 3
    if protobuf:
        msg = tempo_pb2.TraceByIDResponse.FromString(result.body)
        assert msg.status == tempo_pb2.PARTIAL
        assert msg.message == "trace exceeds max size"
        assert msg.metrics == metrics
    else:
        doc = json.loads(result.body)
        assert doc["status"] == "PARTIAL"
        assert doc["message"] == "trace exceeds max size"
        assert doc["metrics"] == {
            "inspectedBytes": "123",
            "backendReads": "2",
            "backendBytes": "99",
            "additionalMetrics": {"cache_hits": "5"},
        }
        assert list(doc) == ["trace", "metrics", "status", "message"]


@pytest.mark.parametrize(
    ("body", "protobuf"),
    [
        (trace_answer([], version=2, protobuf=True), True),
        (b"", True),
        (tempo_pb2.TraceByIDResponse(metrics=tempo_pb2.TraceByIDMetrics(inspectedBytes=7)).SerializeToString(), True),
        (trace_answer([], version=2, protobuf=False), False),
        (b'{"trace":null,"metrics":{}}', False),
        (b'{"metrics":{"inspectedBytes":"0"}}', False),
    ],
    ids=["pb-empty-trace", "pb-empty-body", "pb-metrics-only", "json-empty-trace", "json-null-trace", "json-no-trace"],
)
def test_v2_not_found_passes_through_as_it_is(body: bytes, protobuf: bool) -> None:
    result = enrich_trace_body(body, version=2, protobuf=protobuf, policy=ALL)
    assert result.body == body
    assert not result.found
    assert result.spans() == []


@pytest.mark.parametrize(
    ("body", "protobuf", "reason"),
    [
        (b"\xff\xfe this is not a Tempo answer \x00", True, "protobuf"),
        (b"<html>502 Bad Gateway</html>", True, "protobuf"),
        (b"<html>502 Bad Gateway</html>", False, "json"),
        (b"\xff\xfe\x00", False, "json"),
        (b"[1, 2, 3]", False, "json"),
        (b'{"trace": 5}', False, "json"),
        (b'{"trace": {"resourceSpans": {"not": "a list"}}}', False, "json"),
        (b'{"batches": ["not an object"]}', False, "json"),
        (b'{"batches": [{"scopeSpans": [{"spans": [{"spanId": "SyPeJdH7ZkE=", "attributes": 7}]}]}]}', False, "json"),
    ],
)
def test_bodies_that_cannot_be_decoded_raise_undecodable(body: bytes, protobuf: bool, reason: str) -> None:
    with pytest.raises(UndecodableBody) as caught:
        enrich_trace_body(body, version=2, protobuf=protobuf, policy=ALL)
    assert caught.value.reason == reason


# --------------------------------------------------------------------------------------------- odd but valid encodings


def test_span_id_read_from_any_field_order() -> None:
    span = otlp_trace.Span(span_id=bytes.fromhex("0011223344556677"), name="reordered", start_time_unix_nano=5)
    # name first, then span id, then trace id: valid protobuf, not the canonical order
    head = otlp_trace.Span(name="reordered").SerializeToString()
    raw_span = (
        head
        + otlp_trace.Span(span_id=span.span_id).SerializeToString()
        + otlp_trace.Span(trace_id=bytes(range(16)), start_time_unix_nano=5).SerializeToString()
    )
    no_trace_id = otlp_trace.Span(span_id=bytes.fromhex("8899aabbccddeeff"), name="no trace id").SerializeToString()
    no_span_id = otlp_trace.Span(trace_id=bytes(range(16)), name="no span id").SerializeToString()
    scope = b"\x12" + _varint(len(raw_span)) + raw_span
    scope += b"\x12" + _varint(len(no_trace_id)) + no_trace_id
    scope += b"\x12" + _varint(len(no_span_id)) + no_span_id
    rs = b"\x12" + _varint(len(scope)) + scope
    body = tempo_pb2.Trace(resource_spans=[rs]).SerializeToString()

    result = enrich_trace_body(body, version=1, protobuf=True, policy=ALL)

    spans = all_spans(decode_answer(result.body, 1, True))
    assert [(s.name, [kv.value.string_value for kv in profile_attrs(s)]) for s in spans] == [
        ("reordered", ["0011223344556677"]),
        ("no trace id", ["8899aabbccddeeff"]),
        ("no span id", []),  # nothing to point at: left as it is, never dropped
    ]
    assert result.added == 2


# --------------------------------------------------------------------------------------------- spans for the cache


@pytest.mark.parametrize(("version", "protobuf"), SHAPES, ids=SHAPE_IDS)
def test_spans_for_the_cache_match_the_sdk_spans(version: int, protobuf: bool) -> None:
    shop = load_shop()
    child = shop.pick("frontend-child")
    original = shop.resource_spans(child.trace_id)
    body = trace_answer(original, version=version, protobuf=protobuf)

    spans = enrich_trace_body(body, version=version, protobuf=protobuf, policy=ALL).spans()

    expected = {s.span_id: s for s in spans_from_otlp(original)}
    assert {s.span_id for s in spans} == set(expected)
    for span in spans:
        want = expected[span.span_id]
        got = (
            span.trace_id,
            span.parent_span_id,
            span.name,
            span.kind,
            span.service,
            span.start_ns,
            span.end_ns,
            span.flags,
            span.resource,
        )
        assert got == (
            want.trace_id,
            want.parent_span_id,
            want.name,
            want.kind,
            want.service,
            want.start_ns,
            want.end_ns,
            want.flags,
            want.resource,
        )
        assert span.profile_id == span.span_id  # SDK-tagged or enriched: the span's own id either way
    trace = Trace.from_spans(spans, child.trace_id)
    root = trace.local_root(child.span_id)
    assert root is not None and root.span_id == shop.in_trace(child.trace_id, "frontend-root").span_id
    client = shop.in_trace(child.trace_id, "frontend-client").span_id
    assert trace.local_root(client).span_id == root.span_id  # type: ignore[union-attr]
    backend_child = shop.in_trace(child.trace_id, "backend-child").span_id
    backend_root = shop.in_trace(child.trace_id, "backend-root").span_id
    assert trace.local_root(backend_child).span_id == backend_root  # type: ignore[union-attr]


def test_json_enrichment_does_not_touch_the_callers_document_copy() -> None:
    doc = json.loads(VULTURE_TRACE.read_text())
    before = copy.deepcopy(doc)
    body = json.dumps({"batches": doc["resourceSpans"]}).encode()
    enrich_trace_body(body, version=1, protobuf=False, policy=ALL)
    assert doc == before


def test_a_malformed_span_carrying_the_attribute_name_is_undecodable_not_a_crash() -> None:
    head = otlp_trace.Span(trace_id=bytes(range(16)), span_id=bytes(range(8))).SerializeToString()
    broken = head + b"\x4a\x30\x0a\x14" + PROFILE_ID_ATTR.encode() + b"\x12"  # field 9 claims 48 bytes, has 23
    scope = b"\x12" + _varint(len(broken)) + broken
    rs = b"\x12" + _varint(len(scope)) + scope
    body = tempo_pb2.Trace(resource_spans=[rs]).SerializeToString()
    with pytest.raises(UndecodableBody) as caught:
        enrich_trace_body(body, version=1, protobuf=True, policy=ALL)
    assert caught.value.reason == "protobuf"


def test_a_span_with_broken_wire_format_makes_the_body_undecodable() -> None:
    broken = otlp_trace.Span(span_id=bytes(range(8)), name="ok so far").SerializeToString() + b"\x2a\x7f\x01"
    scope = b"\x12" + _varint(len(broken)) + broken  # the span's last field claims 127 bytes and has 1
    rs = b"\x12" + _varint(len(scope)) + scope
    for version, body in (
        (1, tempo_pb2.Trace(resource_spans=[rs]).SerializeToString()),
        (2, trace_answer([rs], version=2, protobuf=True)),
    ):
        with pytest.raises(UndecodableBody) as caught:
            enrich_trace_body(body, version=version, protobuf=True, policy=ALL)
        assert caught.value.reason == "protobuf"


# --------------------------------------------------------------------------------------------- the carried trace id


@pytest.mark.parametrize(("version", "protobuf"), SHAPES, ids=SHAPE_IDS)
def test_with_the_trace_id_every_value_carries_it_and_sdk_values_are_extended_only_when_they_are_the_span_id(
    version: int, protobuf: bool
) -> None:
    original = shop_resource_spans()
    spans = all_spans(original)
    trace_id = spans[0].trace_id.hex()
    sdk_tagged = {s.span_id for s in spans if profile_attrs(s)}
    assert sdk_tagged  # pyroscope-otel tags local roots with their own id
    foreign = next(s for s in spans if not profile_attrs(s))
    foreign.attributes.add(key=PROFILE_ID_ATTR, value=common_pb2.AnyValue(string_value="cafebabecafebabe"))
    body = trace_answer(original, version=version, protobuf=protobuf)

    result = enrich_trace_body(body, version=version, protobuf=protobuf, policy=ALL, trace_id=trace_id)

    enriched = decode_answer(result.body, version, protobuf)
    for span in all_spans(enriched):
        values = [kv.value.string_value for kv in profile_attrs(span)]
        expected = "cafebabecafebabe" if span.span_id == foreign.span_id else f"{span.span_id.hex()}:{trace_id}"
        assert values == [expected], span.name
    assert result.extended == len(sdk_tagged)
    assert result.added == len(spans) - len(sdk_tagged) - 1
    # the span cache reads the same values
    assert {s.span_id: s.profile_id for s in result.spans()} == {
        s.span_id.hex(): profile_attrs(s)[0].value.string_value for s in all_spans(enriched)
    }
    # strip what the bridge added, cut the extended values back: the original, field for field
    for span in all_spans(enriched):
        if span.span_id in sdk_tagged:
            for kv in profile_attrs(span):
                kv.value.string_value = span.span_id.hex()
    strip_added(enriched, original)
    assert canonical(enriched) == canonical(original)
    # enriching the enriched answer again changes nothing
    again = enrich_trace_body(result.body, version=version, protobuf=protobuf, policy=ALL, trace_id=trace_id)
    assert not again.changed and again.body == result.body
