"""What Tempo's tag endpoints list, collected from the spans as they are ingested (the ``tags`` table; the endpoints
themselves are ``store/tempo_tags.py``).

One row per (scope, key, type, value), the way Tempo's blocks hold them (grafana/tempo
``tempodb/encoding/vparquet4/block_search_tags.go``: ``searchTags`` lists attribute keys per scope,
``searchKeyValues`` reads a key's string, int, float and bool columns):

- attribute scopes ``resource``, ``span``, ``event``, ``link``, ``instrumentation``: every attribute whose value is a
  string, int, double or bool (arrays, maps and bytes are not listed, as Tempo's scalar columns hold none of them);
  the value as text the way Tempo prints it (``Static.EncodeToString``: a float ``12.0``, never ``12``; ``bridge
  .traceql.values``), typed ``string``/``int``/``float``/``bool`` (``pkg/traceql/util.go``
  ``MakeCollectTagValueFunc``);
- scope ``intrinsic``, for the intrinsics whose values Tempo reads from a column of its own
  (``intrinsicColumnLookups``): ``name``, ``statusMessage`` (an empty message included, as Tempo lists it), ``status``
  (the numeric code — v1's ``status.code`` lists it beside the words), ``rootName`` and ``rootServiceName`` (spans
  without a parent), ``event:name``, ``instrumentation:name`` and ``instrumentation:version``.

Not collected: ``event:timeSinceStart`` and ``nestedSetParent`` values (Tempo lists them; one number per event or per
span, nothing anyone picks from a list) — the endpoints answer none for them. Strings longer than ``MAX_TAG_VALUE``
are left out (a stack trace or a SQL text is no tag value to pick).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from bridge.traceql.values import Static, T, encode_to_string

MAX_TAG_VALUE: Final = 128
MAX_TAG_KEY: Final = 256
TagRow = tuple[str, str, str, str]  # (scope, key, type, value)

INTRINSIC: Final = "intrinsic"
_STATUS_TEXT: Final = {0: "0", 1: "1", 2: "2"}


def _float_text(f: float) -> str:
    """A double as Tempo prints it; Python's ``repr`` is the same digits where Go writes no exponent."""
    if 1e-4 <= abs(f) < 1e6:
        return repr(f)
    return encode_to_string(Static(T.FLOAT, f))


def typed(value: Any) -> tuple[str, str] | None:
    """An OTLP ``AnyValue`` as (Tempo's tag value type, its text), or None for what Tempo lists no value of."""
    which = value.WhichOneof("value")
    if which == "string_value":
        text = value.string_value
        return ("string", text) if len(text) <= MAX_TAG_VALUE else None
    if which == "int_value":
        return "int", str(value.int_value)
    if which == "double_value":
        return "float", _float_text(value.double_value)
    if which == "bool_value":
        return "bool", "true" if value.bool_value else "false"
    return None


def add_attributes(out: set[TagRow], scope: str, attributes: Iterable[Any]) -> None:
    for kv in attributes:  # the hot loop of span ingest: typed() inlined for strings, the common case
        value = kv.value
        if value.WhichOneof("value") == "string_value":
            text = value.string_value
            if len(text) <= MAX_TAG_VALUE and len(kv.key) <= MAX_TAG_KEY:
                out.add((scope, kv.key, "string", text))
            continue
        tv = typed(value)
        if tv is not None and len(kv.key) <= MAX_TAG_KEY:
            out.add((scope, kv.key, *tv))


def add_intrinsic(out: set[TagRow], key: str, value: str, kind: str = "string") -> None:
    if len(value) <= MAX_TAG_VALUE:
        out.add((INTRINSIC, key, kind, value))


def add_scope(out: set[TagRow], scope: Any) -> None:
    """An InstrumentationScope: its attributes, name and version."""
    add_attributes(out, "instrumentation", scope.attributes)
    add_intrinsic(out, "instrumentation:name", scope.name)
    add_intrinsic(out, "instrumentation:version", scope.version)


def add_span(out: set[TagRow], span: Any, service: str) -> None:
    """One span's attributes, events, links and the intrinsics listed from it."""
    add_attributes(out, "span", span.attributes)
    name, status = span.name, span.status
    if len(name) <= MAX_TAG_VALUE:
        out.add((INTRINSIC, "name", "string", name))
        if not span.parent_span_id:
            out.add((INTRINSIC, "rootName", "string", name))
    if not span.parent_span_id and len(service) <= MAX_TAG_VALUE:
        out.add((INTRINSIC, "rootServiceName", "string", service))
    message = status.message
    if len(message) <= MAX_TAG_VALUE:
        out.add((INTRINSIC, "statusMessage", "string", message))
    out.add((INTRINSIC, "status", "int", _STATUS_TEXT.get(status.code) or str(int(status.code))))
    for event in span.events:
        add_intrinsic(out, "event:name", event.name)
        add_attributes(out, "event", event.attributes)
    for link in span.links:
        add_attributes(out, "link", link.attributes)
