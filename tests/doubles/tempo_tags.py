"""The Tempo double's tag endpoints (``/api/v2/search/tags``, ``/api/v2/search/tag/{tag}/values``), written from what
the real Tempo answers (measured against grafana/tempo ad33aa8 with ``bench/differential.py``; the lists from
``pkg/search/util.go``, the scopes from ``tempodb/encoding/vparquet4/block_search_tags.go``) — independently of the
bridge's own (``bridge/store/tempo_tags.py``), so that one checks the other.

Keys and values come from the double's stored traces: attribute keys per scope (resource, span, event, link,
instrumentation), values typed string/int/float/bool; an unscoped ``.x`` reads resource, span and instrumentation;
``status``/``kind`` answer their fixed keyword lists; durations and ids none; an empty string value is sent without
``value``. A tag that is not a TraceQL identifier: 400 (the double words only the "unknown identifier" case as Tempo
does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

INTRINSICS: Final = (
    "duration", "name", "status", "statusMessage", "kind", "rootServiceName", "rootName", "traceDuration",
    "event:name", "event:timeSinceStart", "link:spanID", "link:traceID", "instrumentation:name",
    "instrumentation:version", "trace:id", "span:id", "span:parentID", "span:status", "span:statusMessage",
    "span:duration", "span:name", "span:kind", "trace:rootName", "trace:rootService", "trace:duration",
)  # fmt: skip
SCOPES: Final = ("resource", "span", "event", "link", "instrumentation")
_STATUS: Final = ("ok", "error", "unset")
_KIND: Final = ("client", "server", "producer", "consumer", "internal", "unspecified")
FIXED: Final = {
    "status": _STATUS, "span:status": _STATUS, "kind": _KIND, "span:kind": _KIND,
    "duration": (), "span:duration": (), "traceDuration": (), "trace:duration": (), "span:id": (), "trace:id": (),
    "span:parentID": (), "link:spanID": (), "link:traceID": (),
}  # fmt: skip


class BadTag(ValueError):
    pass


def _typed(value: Any) -> tuple[str, str] | None:
    which = value.WhichOneof("value")
    if which == "string_value":
        return "string", value.string_value
    if which == "int_value":
        return "int", str(value.int_value)
    if which == "double_value":
        text = repr(value.double_value)  # fine for the doubles' data (no exponents)
        return "float", text
    if which == "bool_value":
        return "bool", "true" if value.bool_value else "false"
    return None


def _items(raws: Iterable[bytes]) -> Iterator[tuple[str, str, Any]]:
    """(scope, key, AnyValue) of every attribute, and ("intrinsic", name, value text) of the listed intrinsics."""
    for raw in raws:
        rs = otlp_trace.ResourceSpans.FromString(raw)
        service = next((kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"), "")
        yield from (("resource", kv.key, kv.value) for kv in rs.resource.attributes)
        for ss in rs.scope_spans:
            yield from (("instrumentation", kv.key, kv.value) for kv in ss.scope.attributes)
            yield "intrinsic", "instrumentation:name", ss.scope.name
            yield "intrinsic", "instrumentation:version", ss.scope.version
            for span in ss.spans:
                yield from (("span", kv.key, kv.value) for kv in span.attributes)
                yield "intrinsic", "name", span.name
                yield "intrinsic", "statusMessage", span.status.message
                if not span.parent_span_id:
                    yield "intrinsic", "rootName", span.name
                    yield "intrinsic", "rootServiceName", service
                for event in span.events:
                    yield "intrinsic", "event:name", event.name
                    yield from (("event", kv.key, kv.value) for kv in event.attributes)
                for link in span.links:
                    yield from (("link", kv.key, kv.value) for kv in link.attributes)


def tags(raws: Iterable[bytes], scope: str) -> dict[str, Any]:
    if scope not in ("", "none", "intrinsic", "trace", *SCOPES):
        raise BadTag(f"invalid scope: {scope}")
    keys: dict[str, set[str]] = {}
    for where, key, _ in _items(raws):
        if where != "intrinsic" and scope in ("", "none", where):
            keys.setdefault(where, set()).add(key)
    scopes: list[dict[str, Any]] = [{"name": s, "tags": sorted(keys[s])} for s in SCOPES if s in keys]
    if scope in ("", "none", "intrinsic"):
        scopes.append({"name": "intrinsic", "tags": list(INTRINSICS)})
    return {"scopes": scopes, "metrics": {}}


def _where(tag: str) -> tuple[str, ...] | str:
    """The scopes an attribute tag reads, or the intrinsic's name."""
    aliases = {"span:name": "name", "span:statusMessage": "statusMessage", "trace:rootName": "rootName"}
    aliases |= {"trace:rootService": "rootServiceName"}
    if tag in INTRINSICS:
        return aliases.get(tag, tag)
    if tag.startswith("."):
        return ("resource", "span", "instrumentation")
    scope, dot, _ = tag.partition(".")
    if dot and scope in SCOPES:
        return (scope,)
    raise BadTag(
        f"please provide a valid tagName: failed to parse identifier {tag}: parse error at line 1, col 2: "
        f"unknown identifier: {scope}"
    )


def tag_values(raws: Iterable[bytes], tag: str) -> dict[str, Any]:
    if tag in FIXED:
        return {"tagValues": [{"type": "keyword", "value": v} for v in FIXED[tag]], "metrics": {}}
    where = _where(tag)
    found: set[tuple[str, str]] = set()
    for scope, key, value in _items(raws):
        if isinstance(where, str):
            if scope == "intrinsic" and key == where:
                found.add(("string", value))
        elif scope in where and f".{key}" == tag[tag.index(".") :]:
            typed = _typed(value)
            if typed is not None:
                found.add(typed)
    values = [{"type": t, "value": v} if v else {"type": t} for t, v in sorted(found, key=lambda x: (x[1], x[0]))]
    return {"tagValues": values, "metrics": {}}
