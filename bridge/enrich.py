"""Pure: give every span of a Tempo trace-by-ID answer the attribute ``pyroscope.profile.id`` = its own span id, so
Grafana shows "Profiles for this span" on every span (``../shared/contracts/grafana.md`` §1).

Four shapes, as Tempo answers them (``../shared/contracts/tempo.md`` §1): v2 ``TraceByIDResponse`` / v1 ``Trace``
protobuf, and v2 ``{"trace":{"resourceSpans":…}}`` / v1 ``{"batches":…}`` JSON with base64 ids.

Rules: a span that already has the attribute keeps it as it is (never changed, never duplicated); no span is ever
dropped; everything else means exactly what it meant — other attributes, events, links, status, unknown protobuf
fields, ``PARTIAL`` status and message, metrics. An answer with no spans (v2's "not found") comes back byte for byte;
so does one where no span needed the attribute.

How it stays cheap (``bench/enrich.py``):

- Protobuf: each ResourceSpans is decoded through a partial view (``_proto/spanview.proto``): every span is parsed
  — its wire format checked — but only its id is read; everything else stays upb's unknown fields, copied, never
  re-encoded. A span that needs the attribute gets one encoded ``attributes`` entry (field 9) merged in. Only spans
  of a ResourceSpans whose bytes contain the attribute's name are checked for an existing one, exactly.
  ResourceSpans with no change keep their original bytes.
- JSON: one ``json.loads``, one walk, one ``json.dumps``.
- The span list for the span cache (``Enriched.spans()``) is parsed only when asked for — the Tempo mount asks
  after the answer has been sent.
"""

from __future__ import annotations

import binascii
import enum
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.resource.v1 import resource_pb2

from bridge._proto import spanview_pb2 as svpb
from bridge._proto import tempo_pb2
from bridge.spans import (
    PROFILE_ID_ATTR,
    SERVICE_NAME,
    Attrs,
    Span,
    json_resource,
    json_spans_of,
    pb_any_value_to_str,
    span_from_json,
    span_from_pb,
)
from bridge.wire.tempo import json_resource_spans

ATTR_KEY: Final = PROFILE_ID_ATTR.encode()
# Span field 9 (attributes), length 42: KeyValue{key = 1: "pyroscope.profile.id", value = 2: AnyValue{string_value =
# 1: <16 hex>}}. Appending it to a span's bytes merges one more repeated element into that span.
_ATTR_HEAD: Final = b"\x4a\x2a\x0a\x14" + ATTR_KEY + b"\x12\x12\x0a\x10"
_ADDED_LEN: Final = len(_ATTR_HEAD) + 16  # the whole appended field
assert len(ATTR_KEY) == 0x14 and _ADDED_LEN == 0x2A + 2


class Policy(enum.StrEnum):
    ALL = "all"
    PROFILED_SERVICES = "profiled-services"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class EnrichPolicy:
    """Which spans get the attribute: all, only those of ``services`` (the services Pyroscope knows), or none."""

    policy: Policy = Policy.ALL
    services: frozenset[str] = frozenset()

    def covers(self, service: str) -> bool:
        if self.policy is Policy.ALL:
            return True
        if self.policy is Policy.OFF:
            return False
        return service in self.services

    @property
    def off(self) -> bool:
        return self.policy is Policy.OFF


class UndecodableBody(ValueError):
    """The answer is not the shape it claims to be; the Tempo mount passes it through unchanged.
    ``reason`` labels ``metrics.enrich_failures``."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(slots=True)
class Enriched:
    """The result: the body to send, how many spans got the attribute, and the spans for the span cache."""

    body: bytes
    added: int
    span_count: int
    _source: _SpanSource = field(repr=False)
    _spans: list[Span] | None = field(default=None, repr=False)

    @property
    def changed(self) -> bool:
        return self.added > 0

    @property
    def found(self) -> bool:
        """False for the "not found" shapes (no spans at all)."""
        return self.span_count > 0

    def spans(self) -> list[Span]:
        """Every span of the answer as the span cache records it (parsed on first call)."""
        if self._spans is None:
            self._spans = list(self._source.spans())
        return self._spans


class _SpanSource:
    def spans(self) -> Iterator[Span]:
        raise NotImplementedError


# ============================================================================================= entry point


def enrich_trace_body(body: bytes, *, version: int, protobuf: bool, policy: EnrichPolicy) -> Enriched:
    """Enrich one trace-by-ID answer body (already decompressed). ``version`` 2 for ``/api/v2/traces``, 1 for
    ``/api/traces``; ``protobuf`` from the answer's content type. Raises ``UndecodableBody``."""
    if version not in (1, 2):
        raise ValueError(f"version must be 1 or 2, not {version!r}")
    if protobuf:
        return enrich_protobuf(body, version=version, policy=policy)
    return enrich_json(body, policy=policy)


# ============================================================================================= protobuf


class _ProtoSpans(_SpanSource):
    def __init__(self, resources: list[tuple[bytes, bytes]]) -> None:
        self.resources = resources  # (Resource bytes, ResourceSpans bytes as sent)

    def spans(self) -> Iterator[Span]:
        for resource_bytes, rs_bytes in self.resources:
            try:
                resource = resource_pb2.Resource.FromString(resource_bytes)
                view = svpb.ResourceSpansView.FromString(rs_bytes)
            except DecodeError:
                continue
            attrs: Attrs = tuple((kv.key, pb_any_value_to_str(kv.value)) for kv in resource.attributes)
            service = _service_of(attrs)
            for scope in view.scope_spans:
                for raw in scope.spans:
                    try:
                        f = svpb.SpanFieldsView.FromString(raw)
                    except DecodeError:
                        continue
                    if len(f.span_id) != 8:
                        continue
                    yield span_from_pb(f, service, attrs, profile_id=_profile_id_of(raw))


def _profile_id_of(raw_span: bytes) -> str:
    if raw_span[-_ADDED_LEN:-16] == _ATTR_HEAD:  # the attribute this module appended
        return raw_span[-16:].decode("ascii", "replace")
    return _existing_profile_id(raw_span) if ATTR_KEY in raw_span else ""


def _existing_profile_id(raw_span: bytes) -> str:
    """The value of the span's own ``pyroscope.profile.id`` attribute (the first one), or "" without it."""
    try:
        view = svpb.SpanAttributesView.FromString(raw_span)
    except DecodeError:
        return ""
    for kv in view.attributes:
        if kv.key == ATTR_KEY:
            return kv.value.string_value.decode("utf-8", "replace")
    return ""


def _has_attr(raw_span: bytes) -> bool:
    if ATTR_KEY not in raw_span:  # fast: the name appears nowhere in the span
        return False
    view = svpb.SpanAttributesView.FromString(raw_span)
    return any(kv.key == ATTR_KEY for kv in view.attributes)


def enrich_protobuf(body: bytes, *, version: int, policy: EnrichPolicy) -> Enriched:
    outer: tempo_pb2.TraceByIDResponse | tempo_pb2.Trace
    try:
        if version == 2:
            response = tempo_pb2.TraceByIDResponse.FromString(body)
            outer, trace = response, response.trace
        else:
            trace = tempo_pb2.Trace.FromString(body)
            outer = trace
        raw_list = list(trace.resource_spans)
        views = [svpb.ResourceSpansIdView.FromString(raw) for raw in raw_list]
    except DecodeError as exc:
        what = "TraceByIDResponse" if version == 2 else "Trace"
        raise UndecodableBody("protobuf", f"not a tempopb {what} of OTLP spans: {exc}") from exc

    resources: list[tuple[bytes, bytes]] = []  # (resource, final ResourceSpans bytes) for the span cache
    new_raw: list[bytes] = []
    added = 0
    count = 0
    for raw, view in zip(raw_list, views, strict=True):
        covered = not policy.off and (policy.policy is Policy.ALL or policy.covers(_proto_service(view.resource)))
        may_have = ATTR_KEY in raw  # else no span of this resource can have the attribute
        changed = 0
        for scope in view.scope_spans:
            spans = scope.spans
            count += len(spans)
            if not covered:
                continue
            for span in spans:
                if may_have:
                    try:
                        if _has_attr(span.SerializeToString()):
                            continue
                    except DecodeError as exc:
                        raise UndecodableBody("protobuf", f"a span is not an OTLP Span: {exc}") from exc
                sid = span.span_id
                if len(sid) != 8:  # no usable id: leave the span as it is
                    continue
                span.MergeFromString(_ATTR_HEAD + sid.hex().encode())
                changed += 1
        final = view.SerializeToString() if changed else raw
        added += changed
        new_raw.append(final)
        resources.append((view.resource, final))

    if added:
        del trace.resource_spans[:]
        trace.resource_spans.extend(new_raw)
        body = outer.SerializeToString()
    return Enriched(body, added, count, _ProtoSpans(resources))


def _proto_service(resource_bytes: bytes) -> str:
    try:
        resource = resource_pb2.Resource.FromString(resource_bytes)
    except DecodeError:
        return ""
    for kv in resource.attributes:
        if kv.key == SERVICE_NAME:
            return pb_any_value_to_str(kv.value)
    return ""


def _service_of(attrs: Attrs) -> str:
    for key, value in attrs:
        if key == SERVICE_NAME:
            return value
    return ""


# ============================================================================================= JSON

_a2b = binascii.a2b_base64


def _b64_hex(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return _a2b(value, strict_mode=True).hex()
    except (binascii.Error, ValueError):
        return None


class _JsonSpans(_SpanSource):
    def __init__(self, resource_spans: list[Any]) -> None:
        self.resource_spans = resource_spans

    def spans(self) -> Iterator[Span]:
        for rs in self.resource_spans:
            if not isinstance(rs, dict):
                continue
            service, resource = json_resource(rs)
            for raw in json_spans_of(rs):
                try:
                    span = span_from_json(raw, service, resource)
                except (TypeError, ValueError):
                    continue  # a malformed span: the cache skips it, the answer went out as it was
                if len(span.span_id) == 16:
                    yield span


def enrich_json(body: bytes, *, policy: EnrichPolicy) -> Enriched:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UndecodableBody("json", f"not JSON: {exc}") from exc
    try:
        resource_spans = json_resource_spans(doc)
    except ValueError as exc:
        raise UndecodableBody("json", str(exc)) from exc
    if not resource_spans:
        return Enriched(body, 0, 0, _JsonSpans([]))
    added = 0
    count = 0
    attr = PROFILE_ID_ATTR
    for rs in resource_spans:
        if not isinstance(rs, dict):
            raise UndecodableBody("json", "a ResourceSpans entry is not an object")
        covered = not policy.off and (policy.policy is Policy.ALL or policy.covers(json_resource(rs)[0]))
        for span in json_spans_of(rs):
            count += 1
            if not covered:
                continue
            attrs = span.get("attributes")
            if attrs is None:
                attrs = span["attributes"] = []
            elif not isinstance(attrs, list):
                raise UndecodableBody("json", "a span's 'attributes' is not a list")
            elif any(isinstance(kv, dict) and kv.get("key") == attr for kv in attrs):
                continue
            sid = _b64_hex(span.get("spanId"))
            if sid is None or len(sid) != 16:
                if not attrs:
                    del span["attributes"]
                continue
            attrs.append({"key": attr, "value": {"stringValue": sid}})
            added += 1
    if added:
        body = json.dumps(doc, separators=(",", ":")).encode()
    return Enriched(body, added, count, _JsonSpans(resource_spans))
