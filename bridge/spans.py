"""Pure span model: ``Span`` and ``Trace``; parsers for OTLP-shaped spans — protobuf ``ResourceSpans`` and their JSON
form, with hex (OTLP/JSON) or base64 (Tempo's JSON) ids; tree walks (local root, descendant local roots). Tempo's
answer shapes (trace by ID, search) are read in ``bridge.wire.tempo``.

A *local root* is the first span of a request inside one process: no parent, a parent that is remote (OTLP span
flags say so when the SDK sets them), a parent in another service or process, or a SERVER/CONSUMER span whose
parent is a CLIENT/PRODUCER. SDKs (``pyroscope-otel``, ``otel-profiling-go``) label CPU samples with the id of the
local root, so that is where a child span's CPU is found.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge.ids import from_base64, from_hex

PROFILE_ID_ATTR: Final = "pyroscope.profile.id"
SERVICE_NAME: Final = "service.name"

SPAN_KIND_UNSPECIFIED: Final = 0
SPAN_KIND_INTERNAL: Final = 1
SPAN_KIND_SERVER: Final = 2
SPAN_KIND_CLIENT: Final = 3
SPAN_KIND_PRODUCER: Final = 4
SPAN_KIND_CONSUMER: Final = 5
KIND_NAMES: Final = {
    0: "SPAN_KIND_UNSPECIFIED",
    1: "SPAN_KIND_INTERNAL",
    2: "SPAN_KIND_SERVER",
    3: "SPAN_KIND_CLIENT",
    4: "SPAN_KIND_PRODUCER",
    5: "SPAN_KIND_CONSUMER",
}
KIND_BY_NAME: Final = {name: num for num, name in KIND_NAMES.items()}

# OTLP Span.flags bits (trace.proto SpanFlags)
FLAG_HAS_IS_REMOTE: Final = 0x100
FLAG_IS_REMOTE: Final = 0x200

# resource attributes that tell two processes of one service apart
PROCESS_KEYS: Final = ("service.instance.id", "host.name", "process.pid", "k8s.pod.uid", "k8s.pod.name")

Attrs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str  # 32 lower-case hex
    span_id: str  # 16 lower-case hex
    parent_span_id: str  # "" for a root
    name: str
    kind: int
    service: str
    start_ns: int
    end_ns: int
    resource: Attrs = ()  # resource attributes as strings, shared between the spans of one resource
    profile_id: str = ""  # the span's own pyroscope.profile.id attribute, when it has one
    flags: int = 0
    attributes: Attrs = ()  # the span's own attributes as strings

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, "SPAN_KIND_UNSPECIFIED")

    def resource_value(self, key: str) -> str | None:
        for k, v in self.resource:
            if k == key:
                return v
        return None

    def process_key(self) -> tuple[str | None, ...]:
        return (self.service, *(self.resource_value(k) for k in PROCESS_KEYS))

    def to_json(self) -> dict[str, Any]:
        return {
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "parentSpanId": self.parent_span_id,
            "name": self.name,
            "kind": self.kind_name,
            "service": self.service,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(self.end_ns),
            "durationNanos": str(self.duration_ns),
            "resource": dict(self.resource),
        }


def starts_local_root(span: Span, parent: Span | None) -> bool:
    """Is ``span`` the local root of its request, given its parent (None when the parent is not known)?"""
    if not span.parent_span_id:
        return True
    if span.flags & FLAG_HAS_IS_REMOTE:
        return bool(span.flags & FLAG_IS_REMOTE)
    if parent is None:
        return True
    # spans decoded from one ResourceSpans share its attribute tuple: same object, same process
    if parent.resource is not span.resource and parent.process_key() != span.process_key():
        return True
    return span.kind in (SPAN_KIND_SERVER, SPAN_KIND_CONSUMER) and parent.kind in (
        SPAN_KIND_CLIENT,
        SPAN_KIND_PRODUCER,
    )


@dataclass(slots=True)
class Trace:
    """The spans of one trace, indexed for tree walks."""

    trace_id: str
    spans: dict[str, Span] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_spans(cls, spans: Iterable[Span], trace_id: str | None = None) -> Trace:
        trace = cls(trace_id or "")
        for span in spans:
            if not trace.trace_id:
                trace.trace_id = span.trace_id
            trace.spans[span.span_id] = span
        for span in trace.spans.values():
            if span.parent_span_id:
                trace.children.setdefault(span.parent_span_id, []).append(span.span_id)
        for kids in trace.children.values():
            kids.sort(key=lambda sid: (trace.spans[sid].start_ns, sid))
        return trace

    def __len__(self) -> int:
        return len(self.spans)

    def get(self, span_id: str) -> Span | None:
        return self.spans.get(span_id)

    def parent(self, span: Span) -> Span | None:
        return self.spans.get(span.parent_span_id) if span.parent_span_id else None

    def is_local_root(self, span: Span) -> bool:
        return starts_local_root(span, self.parent(span))

    def local_root(self, span_id: str) -> Span | None:
        """The local root of ``span_id`` (itself when it is one); None when the span is not in the trace."""
        span = self.spans.get(span_id)
        seen: set[str] = set()
        while span is not None and span.span_id not in seen:
            seen.add(span.span_id)
            parent = self.parent(span)
            if starts_local_root(span, parent):
                return span
            span = parent
        return span

    def local_roots(self) -> dict[str, str]:
        """span id → its local root's span id, for every span, in one top-down pass (O(spans))."""
        out: dict[str, str] = {}
        for _, span in self.walk():
            parent = self.parent(span)
            if parent is None or parent.span_id not in out or starts_local_root(span, parent):
                out[span.span_id] = span.span_id
            else:
                out[span.span_id] = out[parent.span_id]
        for span_id in self.spans.keys() - out.keys():  # unreachable from a root (a parent cycle)
            root = self.local_root(span_id)
            out[span_id] = root.span_id if root else span_id
        return out

    def roots(self) -> list[Span]:
        """Spans with no parent in this trace, earliest first."""
        found = [s for s in self.spans.values() if not s.parent_span_id or s.parent_span_id not in self.spans]
        return sorted(found, key=lambda s: (s.start_ns, s.span_id))

    def descendants(self, span_id: str) -> Iterator[Span]:
        """Every span below ``span_id``, depth first, in start order."""
        stack = list(reversed(self.children.get(span_id, [])))
        while stack:
            sid = stack.pop()
            span = self.spans[sid]
            yield span
            stack.extend(reversed(self.children.get(sid, [])))

    def descendant_local_roots(self, span_id: str) -> list[Span]:
        """Local roots below ``span_id``: the requests other processes served on its behalf."""
        return [s for s in self.descendants(span_id) if self.is_local_root(s)]

    def walk(self) -> Iterator[tuple[int, Span]]:
        """(depth, span) for every span, roots first, depth first, in start order."""
        stack = [(0, s) for s in reversed(self.roots())]
        while stack:
            depth, span = stack.pop()
            yield depth, span
            stack.extend((depth + 1, self.spans[c]) for c in reversed(self.children.get(span.span_id, [])))


# --------------------------------------------------------------------------------------------- attribute values


def any_value_to_str(value: Mapping[str, Any]) -> str:
    """An OTLP JSON AnyValue → its string form."""
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in value:
            v = value[key]
            return ("true" if v else "false") if key == "boolValue" else str(v)
    if "arrayValue" in value:
        return ",".join(any_value_to_str(v) for v in value["arrayValue"].get("values", []))
    if "bytesValue" in value:
        return str(value["bytesValue"])
    return ""


def pb_any_value_to_str(value: Any) -> str:
    """An OTLP protobuf AnyValue → its string form."""
    which = value.WhichOneof("value")
    if which is None:
        return ""
    if which == "bool_value":
        return "true" if value.bool_value else "false"
    if which == "array_value":
        return ",".join(pb_any_value_to_str(v) for v in value.array_value.values)
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    if which == "kvlist_value":
        return ",".join(f"{kv.key}={pb_any_value_to_str(kv.value)}" for kv in value.kvlist_value.values)
    return str(getattr(value, which))


# --------------------------------------------------------------------------------------------- parsers


def span_from_pb(fields: Any, service: str, resource: Attrs, *, profile_id: str = "", attributes: Attrs = ()) -> Span:
    """One span from protobuf fields named as OTLP's ``Span`` names them — the full message, or a lean view of it
    (``bridge._proto.spanview``: the enrichment's, with the name as bytes)."""
    name = fields.name if isinstance(fields.name, str) else fields.name.decode("utf-8", "replace")
    return Span(
        trace_id=fields.trace_id.hex().rjust(32, "0"),
        span_id=fields.span_id.hex(),
        parent_span_id=fields.parent_span_id.hex(),
        name=name,
        kind=int(fields.kind),
        service=service,
        start_ns=int(fields.start_time_unix_nano),
        end_ns=int(fields.end_time_unix_nano),
        resource=resource,
        profile_id=profile_id,
        flags=int(fields.flags),
        attributes=attributes,
    )


def span_from_json(s: Mapping[str, Any], service: str, resource: Attrs, *, ids: str = "base64") -> Span:
    """One span of OTLP-shaped JSON: ``ids="base64"`` for Tempo's answers, ``"hex"`` for OTLP/JSON. ``ValueError``
    (or ``TypeError``) when a field is malformed."""
    decode_id = from_base64 if ids == "base64" else from_hex
    attrs: Attrs = tuple(
        (str(kv.get("key", "")), any_value_to_str(kv.get("value") or {}))
        for kv in s.get("attributes") or ()
        if isinstance(kv, Mapping)
    )
    kind = s.get("kind", 0)
    return Span(
        trace_id=decode_id(s.get("traceId", "")).rjust(32, "0"),
        span_id=decode_id(s.get("spanId", "")),
        parent_span_id=decode_id(s.get("parentSpanId", "")),
        name=str(s.get("name", "")),
        kind=KIND_BY_NAME.get(kind, 0) if isinstance(kind, str) else int(kind),
        service=service,
        start_ns=int(s.get("startTimeUnixNano", 0)),
        end_ns=int(s.get("endTimeUnixNano", 0)),
        resource=resource,
        profile_id=dict(attrs).get(PROFILE_ID_ATTR, ""),
        flags=int(s.get("flags", 0)),
        attributes=attrs,
    )


def json_resource(rs: Mapping[str, Any]) -> tuple[str, Attrs]:
    """A JSON ResourceSpans' service name and resource attributes."""
    resource: Attrs = tuple(
        (str(kv.get("key", "")), any_value_to_str(kv.get("value") or {}))
        for kv in (rs.get("resource") or {}).get("attributes") or ()
        if isinstance(kv, Mapping)
    )
    return dict(resource).get(SERVICE_NAME, ""), resource


def json_spans_of(rs: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The span objects of a parsed JSON ResourceSpans (``scopeSpans``, or the older ``instrumentationLibrarySpans``),
    as the parsed document holds them (the enrichment edits them in place)."""
    for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans")) or ():
        if isinstance(ss, dict):
            for span in ss.get("spans") or ():
                if isinstance(span, dict):
                    yield span


def spans_from_otlp(resource_spans: Iterable[otlp_trace.ResourceSpans]) -> list[Span]:
    """OTLP / Tempo protobuf ResourceSpans → spans."""
    out: list[Span] = []
    for rs in resource_spans:
        resource: Attrs = tuple((kv.key, pb_any_value_to_str(kv.value)) for kv in rs.resource.attributes)
        service = dict(resource).get(SERVICE_NAME, "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                attrs: Attrs = tuple((kv.key, pb_any_value_to_str(kv.value)) for kv in s.attributes)
                out.append(
                    span_from_pb(
                        s, service, resource, profile_id=dict(attrs).get(PROFILE_ID_ATTR, ""), attributes=attrs
                    )
                )
    return out


def spans_from_json(resource_spans: Iterable[Mapping[str, Any]], *, ids: str = "base64") -> list[Span]:
    """OTLP-shaped JSON ResourceSpans → spans. ``ids="base64"`` for Tempo's answers, ``"hex"`` for OTLP/JSON."""
    out: list[Span] = []
    for rs in resource_spans:
        service, resource = json_resource(rs)
        out.extend(span_from_json(s, service, resource, ids=ids) for s in json_spans_of(rs))
    return out


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One span from a Tempo search answer (ids hex; resource attributes only those selected)."""

    trace_id: str
    span_id: str
    name: str
    service: str
    start_ns: int
    duration_ns: int
    root_service: str = ""
    root_name: str = ""
    attributes: Attrs = ()
