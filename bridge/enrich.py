"""Pure: give every span of a Tempo trace-by-ID answer the attribute ``pyroscope.profile.id``, so Grafana shows
"Profiles for this span" on every span (grafana/grafana ``public/app/features/explore/TraceView/createSpanLink.tsx``,
``pyroscopeProfileIdTagKey``: the trace view offers it only for a span with that tag). Its value is the span's id and
its trace's, ``<16 hex span id>:<32 hex trace id>`` (``bridge.ids.carried_profile_id``): Grafana sends it back verbatim
as the span selector, so whichever bridge process (worker or replica) gets the click knows the trace without the span
cache of the process that served the trace, and without Tempo's lagging search. The ``/pyroscope`` mount strips the
trace part before anything reaches Pyroscope. (Without a trace id given, the value is the span id alone.)

Four shapes, as Tempo answers them (grafana/tempo ``pkg/tempopb/tempo.proto``
``TraceByIDResponse``, ``pkg/api/http.go`` lines 83 and 100): v2 ``TraceByIDResponse`` / v1 ``Trace``
protobuf, and v2 ``{"trace":{"resourceSpans":…}}`` / v1 ``{"batches":…}`` JSON with base64 ids.

Rules: a span that already has the attribute keeps it as it is (never duplicated), with one exception: a value that is
exactly the span's own id (``pyroscope-otel`` tags local roots so) gets the trace id appended — after the mount strips
it, Pyroscope sees the very value the SDK wrote. No span is ever dropped; everything else means exactly what it
meant — other attributes, events, links, status, unknown protobuf fields, ``PARTIAL`` status and message, metrics.
An answer with no spans (v2's "not found") comes back byte for byte; so does one where no span needed the attribute.

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

from bridge import ids
from bridge._proto import spanview_pb2 as svpb
from bridge._proto import tempo_pb2
from bridge.compression import EncodingError, undo_content_encoding
from bridge.spans import (
    PROFILE_ID_ATTR,
    SERVICE_NAME,
    Attrs,
    Span,
    Trace,
    json_resource,
    json_spans_of,
    pb_any_value_to_str,
    span_from_json,
    span_from_pb,
)
from bridge.wire.tempo import json_resource_spans

ATTR_KEY: Final = PROFILE_ID_ATTR.encode()


def _attr_head(value_len: int) -> bytes:
    """Span field 9 (attributes): KeyValue{key = 1: "pyroscope.profile.id", value = 2: AnyValue{string_value = 1:
    <value>}}, up to the value. Appending it and the value to a span's bytes merges one more repeated element into
    that span. Every length here is below 128: one-byte varints."""
    any_value = 2 + value_len
    key_value = 2 + len(ATTR_KEY) + 2 + any_value
    return bytes((0x4A, key_value, 0x0A, len(ATTR_KEY))) + ATTR_KEY + bytes((0x12, any_value, 0x0A, value_len))


_SHORT: Final = 16  # <span id>
_CARRIED: Final = len(ids.carried_profile_id("0" * 16, "0" * 32))  # <span id>:<trace id>
_HEADS: Final = {n: _attr_head(n) for n in (_SHORT, _CARRIED)}
assert len(_HEADS[_SHORT]) + _SHORT == 0x2A + 2


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
    extended: int = 0  # SDK values that were the span's own id and got the trace id appended

    @property
    def changed(self) -> bool:
        return self.added > 0 or self.extended > 0

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


def enrich_trace_body(
    body: bytes, *, version: int, protobuf: bool, policy: EnrichPolicy, trace_id: str | None = None
) -> Enriched:
    """Enrich one trace-by-ID answer body (already decompressed). ``version`` 2 for ``/api/v2/traces``, 1 for
    ``/api/traces``; ``protobuf`` from the answer's content type; ``trace_id`` (32 hex), the trace asked for, is
    carried in every value the bridge writes. Raises ``UndecodableBody``."""
    if version not in (1, 2):
        raise ValueError(f"version must be 1 or 2, not {version!r}")
    if protobuf:
        return enrich_protobuf(body, version=version, policy=policy, trace_id=trace_id)
    return enrich_json(body, policy=policy, trace_id=trace_id)


def _value(span_hex: str, trace_id: str | None) -> str:
    return ids.carried_profile_id(span_hex, trace_id) if trace_id else span_hex


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
    for length, head in _HEADS.items():
        if raw_span[-length - len(head) : -length] == head:  # the attribute this module appended
            return raw_span[-length:].decode("ascii", "replace")
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


def _extend_own_id(raw_span: bytes, span_hex: str, trace_id: str) -> bytes | None:
    """The span's bytes with its ``pyroscope.profile.id`` extended by the trace id, when that value is exactly the
    span's own id; None otherwise (another value stays as it is). Only the attribute's string changes: every other
    field of the span stays as it came (upb keeps what the view does not name)."""
    view = svpb.SpanAttributesView.FromString(raw_span)
    for kv in view.attributes:
        if kv.key == ATTR_KEY:
            if kv.value.string_value.lower() != span_hex.encode():
                return None
            kv.value.string_value = ids.carried_profile_id(span_hex, trace_id).encode()
            return view.SerializeToString()
    return None


def enrich_protobuf(body: bytes, *, version: int, policy: EnrichPolicy, trace_id: str | None = None) -> Enriched:
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
    added = extended = 0
    count = 0
    head = _HEADS[_CARRIED if trace_id else _SHORT]
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
                sid = span.span_id
                if may_have:
                    try:
                        raw_span = span.SerializeToString()
                        if _has_attr(raw_span):
                            if (
                                trace_id
                                and len(sid) == 8
                                and (longer := _extend_own_id(raw_span, sid.hex(), trace_id)) is not None
                            ):
                                span.Clear()
                                span.MergeFromString(longer)
                                extended += 1
                                changed += 1
                            continue
                    except DecodeError as exc:
                        raise UndecodableBody("protobuf", f"a span is not an OTLP Span: {exc}") from exc
                if len(sid) != 8:  # no usable id: leave the span as it is
                    continue
                span.MergeFromString(head + _value(sid.hex(), trace_id).encode())
                added += 1
                changed += 1
        final = view.SerializeToString() if changed else raw
        new_raw.append(final)
        resources.append((view.resource, final))

    if added or extended:
        del trace.resource_spans[:]
        trace.resource_spans.extend(new_raw)
        body = outer.SerializeToString()
    return Enriched(body, added, count, _ProtoSpans(resources), extended=extended)


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


def enrich_json(body: bytes, *, policy: EnrichPolicy, trace_id: str | None = None) -> Enriched:
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
    added = extended = 0
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
            elif (kv := next((kv for kv in attrs if isinstance(kv, dict) and kv.get("key") == attr), None)) is not None:
                if trace_id and _extend_json(kv, span, trace_id):
                    extended += 1
                continue
            sid = _b64_hex(span.get("spanId"))
            if sid is None or len(sid) != 16:
                if not attrs:
                    del span["attributes"]
                continue
            attrs.append({"key": attr, "value": {"stringValue": _value(sid, trace_id)}})
            added += 1
    if added or extended:
        body = json.dumps(doc, separators=(",", ":")).encode()
    return Enriched(body, added, count, _JsonSpans(resource_spans), extended=extended)


def _extend_json(kv: dict[str, Any], span: dict[str, Any], trace_id: str) -> bool:
    """``_extend_own_id`` for a JSON span: a string value that is the span's own id gets the trace id appended."""
    value = kv.get("value")
    own = _b64_hex(span.get("spanId"))
    if not isinstance(value, dict) or own is None or len(own) != 16:
        return False
    current = value.get("stringValue")
    if not isinstance(current, str) or current.lower() != own:
        return False
    value["stringValue"] = ids.carried_profile_id(own, trace_id)
    return True


# ============================================================================================= whole answers

OFF: Final = EnrichPolicy(Policy.OFF)


@dataclass(frozen=True, slots=True)
class EncodedAnswer:
    """``enrich_encoded``'s result, small to hand between processes: the bytes to send (None: the upstream's own
    bytes, as they came), their ``Content-Encoding`` and the counts; or why the answer could not be decoded."""

    body: bytes | None
    encoding: str
    added: int = 0
    extended: int = 0
    span_count: int = 0
    failure: str = ""  # a metrics reason ("encoding", "protobuf", "json") when the answer passes through unchanged
    detail: str = ""

    @property
    def changed(self) -> bool:
        return self.added > 0 or self.extended > 0


def enrich_encoded(
    body: bytes,
    encoding: str,
    *,
    version: int,
    protobuf: bool,
    policy: EnrichPolicy,
    trace_id: str | None,
    gzip_level: int | None,
    max_bytes: int,
) -> EncodedAnswer:
    """A whole trace-by-ID answer as it came (``encoding``: its Content-Encoding) → what to send: enriched and, with
    ``gzip_level``, gzipped; an unchanged answer comes back as None (send the upstream's bytes), or plain when they
    were gzipped and the client takes no gzip (``gzip_level`` None). The Tempo mount runs this in a helper process
    for big answers (``bridge.offload``)."""
    import gzip

    try:
        plain = undo_content_encoding(body, encoding, max_bytes)
        enriched = enrich_trace_body(plain, version=version, protobuf=protobuf, policy=policy, trace_id=trace_id)
    except EncodingError as exc:
        return EncodedAnswer(None, encoding, failure="encoding", detail=str(exc))
    except UndecodableBody as exc:
        return EncodedAnswer(None, encoding, failure=exc.reason, detail=str(exc))
    counts = (enriched.added, enriched.extended, enriched.span_count)
    compressed = encoding.strip().lower() in ("gzip", "x-gzip")
    if enriched.changed:
        if gzip_level is None:
            return EncodedAnswer(enriched.body, "", *counts)
        return EncodedAnswer(gzip.compress(enriched.body, compresslevel=gzip_level), "gzip", *counts)
    if compressed and gzip_level is None:
        return EncodedAnswer(plain, "", *counts)
    return EncodedAnswer(None, encoding, *counts)


def load_trace(body: bytes, encoding: str, *, version: int, protobuf: bool, trace_id: str, max_bytes: int) -> Trace:
    """The spans of an answer as it was sent (``encoding``: its Content-Encoding), for the span cache: what
    ``Enriched.spans()`` gives, from the bytes. Raises ``EncodingError`` / ``UndecodableBody``."""
    plain = undo_content_encoding(body, encoding, max_bytes)
    enriched = enrich_trace_body(plain, version=version, protobuf=protobuf, policy=OFF)
    return Trace.from_spans(enriched.spans(), trace_id)
