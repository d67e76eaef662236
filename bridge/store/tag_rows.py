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


def typed(value: Any) -> tuple[str, str] | None:
    """An OTLP ``AnyValue`` as (Tempo's tag value type, its text), or None for what Tempo lists no value of."""
    which = value.WhichOneof("value")
    if which == "string_value":
        text = value.string_value
        return ("string", text) if len(text) <= MAX_TAG_VALUE else None
    if which == "int_value":
        return "int", str(value.int_value)
    if which == "double_value":
        return "float", encode_to_string(Static(T.FLOAT, value.double_value))
    if which == "bool_value":
        return "bool", "true" if value.bool_value else "false"
    return None


def add_attributes(out: set[TagRow], scope: str, attributes: Iterable[Any]) -> None:
    for kv in attributes:
        if len(kv.key) > MAX_TAG_KEY:
            continue
        tv = typed(kv.value)
        if tv is not None:
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
    add_intrinsic(out, "name", span.name)
    add_intrinsic(out, "statusMessage", span.status.message)
    add_intrinsic(out, "status", str(int(span.status.code)), "int")
    if not any(span.parent_span_id):
        add_intrinsic(out, "rootName", span.name)
        add_intrinsic(out, "rootServiceName", service)
    for event in span.events:
        add_intrinsic(out, "event:name", event.name)
        add_attributes(out, "event", event.attributes)
    for link in span.links:
        add_attributes(out, "link", link.attributes)
