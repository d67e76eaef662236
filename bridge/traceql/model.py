"""Pure: the spans a TraceQL query runs over, built from OTLP, with what Tempo's block format derives from a whole
trace (``tempodb/encoding/vparquet5``): the nested-set numbers of each span (``nested_set_model.go``: depth-first
from each root, left/right bounds, the parent's left bound as ``nestedSetParent``, -1 for a root, all zero for a span
whose parent is missing), child counts, and the trace's root name and service and its duration.

Values are ``Static`` as TraceQL types them: OTLP status and kind renumbered to TraceQL's, ids as Tempo prints them
(``span:id`` zero-padded to 16 hex digits, ``trace:id`` without leading zeros), ``event:timeSinceStart`` from the
span's start. An event- or link-scoped attribute reads the event (link) under evaluation (``Span.event``), or the
first that has it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge.traceql.values import (
    NIL,
    OTLP_KIND_TO_TRACEQL,
    OTLP_STATUS_TO_TRACEQL,
    Static,
    T,
)


def trace_id_hex(raw: bytes) -> str:
    """``util.TraceIDToHexString``: hex without leading zeros."""
    return raw.hex().lstrip("0")


def span_id_hex(raw: bytes) -> str:
    """``util.SpanIDToHexString``: hex, zero-padded to 16 digits."""
    return raw.hex().lstrip("0").rjust(16, "0")


_ARRAY_TYPES: Final = {"string_value": T.STRING_ARRAY, "int_value": T.INT_ARRAY, "double_value": T.FLOAT_ARRAY}


def static_of(value: common_pb2.AnyValue) -> Static:
    which = value.WhichOneof("value")
    if which == "string_value":
        return Static(T.STRING, value.string_value)
    if which == "int_value":
        return Static(T.INT, value.int_value)
    if which == "double_value":
        return Static(T.FLOAT, value.double_value)
    if which == "bool_value":
        return Static(T.BOOLEAN, value.bool_value)
    if which == "array_value":
        items = value.array_value.values
        kinds = {v.WhichOneof("value") for v in items}
        if len(kinds) == 1:
            kind = kinds.pop()
            if kind == "bool_value":
                return Static(T.BOOLEAN_ARRAY, tuple(v.bool_value for v in items))
            if kind in _ARRAY_TYPES:
                return Static(_ARRAY_TYPES[kind], tuple(getattr(v, kind) for v in items))
    return NIL


def attrs_of(kvs: Iterable[common_pb2.KeyValue]) -> dict[str, Static]:
    out: dict[str, Static] = {}
    for kv in kvs:
        s = static_of(kv.value)
        if s.type is not T.NIL and kv.key not in out:
            out[kv.key] = s
    return out


@dataclass(slots=True)
class Event:
    name: str
    since_start_ns: int
    attrs: dict[str, Static]


@dataclass(slots=True)
class Link:
    trace_id: str
    span_id: str
    attrs: dict[str, Static]


@dataclass(slots=True)
class Scope:
    """A resource's or an instrumentation scope's attributes (shared by its spans)."""

    attrs: dict[str, Static]
    name: str = ""
    version: str = ""


@dataclass(slots=True, eq=False)
class TraceInfo:
    trace_id: bytes
    root_name: str = ""
    root_service: str = ""
    start_ns: int = 0
    end_ns: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def id_hex(self) -> str:
        return trace_id_hex(self.trace_id)


@dataclass(slots=True, eq=False)
class Span:
    """One span as the engine sees it. ``order`` is its place in the trace as stored (Tempo keeps a trace's spans in
    the order they were written); ``event`` / ``link`` are the ones a filter is looking at, when it looks at them."""

    trace: TraceInfo
    span_id: bytes
    parent_id: bytes
    start_ns: int
    duration_ns: int
    name: str
    status: int  # TraceQL numbering
    kind: int  # TraceQL numbering
    status_message: str
    attrs: dict[str, Static]
    resource: Scope
    scope: Scope
    events: list[Event] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    order: int = 0
    left: int = 0
    right: int = 0
    nested_parent: int = 0
    child_count: int = 0
    service: str = ""
    event: Event | None = None
    link: Link | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def span_from_otlp(
    s: otlp_trace.Span, trace: TraceInfo, resource: Scope, scope: Scope, service: str, order: int
) -> Span:
    start = int(s.start_time_unix_nano)
    return Span(
        trace=trace,
        span_id=bytes(s.span_id),
        parent_id=bytes(s.parent_span_id),
        start_ns=start,
        duration_ns=max(0, int(s.end_time_unix_nano) - start),
        name=s.name,
        status=OTLP_STATUS_TO_TRACEQL.get(int(s.status.code), 2),
        kind=OTLP_KIND_TO_TRACEQL.get(int(s.kind), 0),
        status_message=s.status.message,
        attrs=attrs_of(s.attributes),
        resource=resource,
        scope=scope,
        events=[Event(e.name, int(e.time_unix_nano) - start, attrs_of(e.attributes)) for e in s.events],
        links=[
            Link(trace_id_hex(bytes(k.trace_id)), span_id_hex(bytes(k.span_id)), attrs_of(k.attributes))
            for k in s.links
        ],
        order=order,
        service=service,
    )


def finish_trace(spans: list[Span]) -> None:
    """Trace-level facts every span can read: nested sets, child counts, root name and service, bounds."""
    if not spans:
        return
    trace = spans[0].trace
    trace.start_ns = min(s.start_ns for s in spans)
    trace.end_ns = max(s.start_ns + s.duration_ns for s in spans)
    roots = [s for s in spans if _is_root(s)]
    # the trace's root: the last parentless span without an OpenTracing child_of link (vparquet5 schema.go)
    named = [s for s in roots if not _child_of_link(s)]
    root = named[-1] if named else None
    trace.root_name, trace.root_service = (root.name, root.service) if root is not None else ("", "")
    _assign_nested_sets(spans, roots)


def _is_root(s: Span) -> bool:
    return not s.parent_id


def _child_of_link(s: Span) -> bool:
    own = s.trace.id_hex
    return any(
        k.trace_id == own and k.attrs.get("opentracing.ref_type") == Static(T.STRING, "child_of") for k in s.links
    )


def _id_key(raw: bytes) -> bytes:
    """``util.SpanIDToUint64``: up to 8 bytes, shorter ids padded."""
    return raw[:8] if len(raw) >= 8 else raw.rjust(8, b"\0")


def _assign_nested_sets(spans: list[Span], roots: list[Span]) -> None:
    by_id: dict[bytes, list[Span]] = {}
    for s in spans:
        s.left = s.right = s.nested_parent = s.child_count = 0
        by_id.setdefault(_id_key(s.span_id), []).append(s)
    if not roots or any(len(nodes) > 2 for nodes in by_id.values()):
        return
    children: dict[int, list[Span]] = {}
    for s in spans:
        parent = None if _is_root(s) else _find_parent(by_id, s)
        if parent is not None:
            children.setdefault(id(parent), []).append(s)
    for s in spans:
        s.child_count = len(children.get(id(s), ()))
    bound = 1
    for root in roots:
        root.left, root.nested_parent = bound, -1
        bound += 1
        stack: list[tuple[Span, int]] = [(root, 0)]
        while stack:
            node, next_child = stack[-1]
            kids = children.get(id(node), ())
            if next_child < len(kids):
                stack[-1] = (node, next_child + 1)
                child = kids[next_child]
                child.left, child.nested_parent = bound, node.left
                bound += 1
                stack.append((child, 0))
            else:
                node.right = bound
                bound += 1
                stack.pop()


def _find_parent(by_id: dict[bytes, list[Span]], s: Span) -> Span | None:
    nodes = by_id.get(_id_key(s.parent_id), [])
    if len(nodes) == 1:
        return nodes[0]
    if len(nodes) == 2:  # zipkin: client and server spans share an id; a server's parent is the client
        want = 2 if s.kind == 3 else 3  # TraceQL kinds: client 2, server 3
        for n in nodes:
            if n.kind == want:
                return n
    return None


@dataclass(slots=True, eq=False)
class Spanset:
    """A set of spans of one trace and what the pipeline said about it (``Spanset``)."""

    trace: TraceInfo
    spans: list[Span]
    scalar: Static = NIL
    attributes: list[tuple[str, Static]] = field(default_factory=list)

    def clone(self) -> Spanset:
        return Spanset(self.trace, self.spans, self.scalar, list(self.attributes))
