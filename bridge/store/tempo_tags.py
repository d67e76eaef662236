"""Tempo's tag endpoints answered from the store's ``tags`` table (``store/tag_rows.py`` fills it), as the real Tempo
answers them (measured against Tempo ad33aa8 with ``bench/differential.py``; grafana/tempo cited per rule):

- ``/api/search/tags`` (v1): ``tagNames``, the attribute keys of every scope (``resource``, ``span``, ``event``,
  ``link``, ``instrumentation``); with ``scope=<one>`` that scope's; ``scope=intrinsic`` the intrinsic list, which
  v1 names only when asked (``modules/frontend/tag_handlers.go``);
- ``/api/v2/search/tags``: ``scopes``, one per scope holding keys, plus ``intrinsic`` (``pkg/search/util.go``
  ``GetVirtualIntrinsicValues``, in its order) unless another scope was asked for. A scope that is not one of
  ``AttributeScopeFromString``'s (``""``, ``none``, the five, ``trace``) or ``intrinsic``: 400 ``invalid scope: x``
  (``pkg/api/search_tags.go``);
- ``/api/v2/search/tag/<tag>/values``: the tag parsed as a TraceQL identifier (``traceql.ParseIdentifier``; else 400
  ``please provide a valid tagName: failed to parse identifier …``); ``status``/``kind`` answer their fixed keyword
  lists and the durations none (``GetVirtualTagValuesV2``, before any data is read); an intrinsic read from a column
  lists the stored values, any other none; an unscoped attribute (``.x``) reads resource, span and instrumentation,
  a scoped one its scope (``vparquet4/block_search_tags.go`` ``searchStandardTagValues``). Values typed
  ``string``/``int``/``float``/``bool``; an empty string is sent without ``value``, as Tempo's JSON omits it;
- ``/api/search/tag/<tag>/values`` (v1): the name as is — ``name``, ``status.code``, ``rootName``, ``rootServiceName``,
  ``root.name``, ``root.service.name``, ``trace:id``, ``span:id`` and the well-known resource/span keys translated
  (``translateTagToAttribute``, ``nonTraceQLAttributes``), anything else an unscoped attribute of that exact name;
  ``status.code`` and ``error`` start with their virtual values (``GetVirtualTagValues``); values as text.

``start`` (seconds) keeps what was seen since then; ``limit`` caps the values. Not done: ``q`` (Tempo narrows the
keys and values to the spans a query matches; the store lists them all — a superset), ``event:timeSinceStart`` and
``nestedSetParent`` values (none listed; see ``tag_rows``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from bridge.store.backend import Store
from bridge.store.tag_rows import INTRINSIC
from bridge.traceql.ast import Attribute, I, Pipeline, Scope, SpansetFilter
from bridge.traceql.errors import ParseError
from bridge.traceql.parser import parse

Answer = tuple[int, dict[str, str], bytes]

INTRINSIC_TAGS: Final = (
    "duration", "name", "status", "statusMessage", "kind", "rootServiceName", "rootName", "traceDuration",
    "event:name", "event:timeSinceStart", "link:spanID", "link:traceID", "instrumentation:name",
    "instrumentation:version", "trace:id", "span:id", "span:parentID", "span:status", "span:statusMessage",
    "span:duration", "span:name", "span:kind", "trace:rootName", "trace:rootService", "trace:duration",
)  # fmt: skip
ATTRIBUTE_SCOPES: Final = ("resource", "span", "event", "link", "instrumentation")
_SCOPES_OF: Final = {
    Scope.NONE: ("resource", "span", "instrumentation"),
    Scope.RESOURCE: ("resource",),
    Scope.SPAN: ("span",),
    Scope.EVENT: ("event",),
    Scope.LINK: ("link",),
    Scope.INSTRUMENTATION: ("instrumentation",),
}
_STATUS: Final = ("ok", "error", "unset")
_KIND: Final = ("client", "server", "producer", "consumer", "internal", "unspecified")
VIRTUAL_V2: Final[dict[str, tuple[str, ...]]] = {
    "status": _STATUS, "span:status": _STATUS, "kind": _KIND, "span:kind": _KIND,
    "duration": (), "span:duration": (), "traceDuration": (),
}  # fmt: skip
# the intrinsics Tempo lists values of (a column of their own), by the key tag_rows stores them under
_COLUMN_KEY: Final = {
    I.NAME: "name", I.STATUS_MESSAGE: "statusMessage", I.ROOT_NAME: "rootName", I.ROOT_SERVICE: "rootServiceName",
    I.EVENT_NAME: "event:name", I.INSTRUMENTATION_NAME: "instrumentation:name",
    I.INSTRUMENTATION_VERSION: "instrumentation:version", I.STATUS: "status",
}  # fmt: skip
_V1_VIRTUAL: Final = {"status.code": ("unset", "ok", "error"), "error": ("true",)}
_V1_INTRINSIC: Final = {
    "name": "name", "status.code": "status", "rootName": "rootName", "rootServiceName": "rootServiceName",
    "root.name": "rootName", "root.service.name": "rootServiceName", "trace:id": "", "span:id": "",
}  # fmt: skip
_V1_WELL_KNOWN: Final = dict.fromkeys(
    ("service.name", "cluster", "namespace", "pod", "container", "k8s.cluster.name", "k8s.namespace.name",
     "k8s.pod.name", "k8s.container.name"), "resource",
) | dict.fromkeys(("http.method", "http.url", "http.status_code"), "span")  # fmt: skip
MAX_VALUES: Final = 10_000


class TagError(Exception):
    """A request Tempo answers 400 with this text."""


def _json(doc: Any) -> Answer:
    return 200, {"Content-Type": "application/json"}, json.dumps(doc, separators=(",", ":")).encode()


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    """Tempo's parse of a numeric parameter (``ParseInt(s, 10, 32)``; ``limit``: ``ParseUint(s, 10, 32)``), with
    its error text."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    func = "ParseUint" if name == "limit" else "ParseInt"
    digits = raw[1:] if raw[:1] in "+-" and func == "ParseInt" else raw
    if not digits.isascii() or not digits.isdigit():
        raise TagError(f'invalid {name}: strconv.{func}: parsing "{raw}": invalid syntax')
    value = int(raw)
    low, high = (0, 2**32) if func == "ParseUint" else (-(2**31), 2**31)
    if not low <= value < high:
        raise TagError(f'invalid {name}: strconv.{func}: parsing "{raw}": value out of range')
    return value


def _window(query: Mapping[str, str]) -> tuple[int, int]:
    """(seen since, in ns; the most values) from ``start``, ``end`` and ``limit``."""
    start = _int_param(query, "start")
    _int_param(query, "end")
    limit = _int_param(query, "limit")
    since = max(0, start or 0) * 1_000_000_000
    return since, min(MAX_VALUES, limit) if limit else MAX_VALUES


async def tags(store: Store, tenant: str | None, query: Mapping[str, str], *, v2: bool) -> Answer:
    scope = query.get("scope", "")
    if scope not in ("", "none", "trace", INTRINSIC, *ATTRIBUTE_SCOPES):
        raise TagError(f"invalid scope: {scope}")
    since, _ = _window(query)
    wanted = ATTRIBUTE_SCOPES if scope in ("", "none") else (scope,) if scope in ATTRIBUTE_SCOPES else ()
    keys = await store.tag_keys(tenant, wanted, since) if wanted else {}
    intrinsic = scope == INTRINSIC or (v2 and scope in ("", "none"))
    if not v2:
        names = sorted({k for scope_keys in keys.values() for k in scope_keys})
        return _json({"tagNames": list(INTRINSIC_TAGS) if scope == INTRINSIC else names, "metrics": {}})
    scopes = [{"name": s, "tags": keys[s]} for s in ATTRIBUTE_SCOPES if keys.get(s)]
    if intrinsic:
        scopes.append({"name": INTRINSIC, "tags": list(INTRINSIC_TAGS)})
    return _json({"scopes": scopes, "metrics": {}})


def identifier(text: str) -> Attribute:
    """``traceql.ParseIdentifier``, with its errors' text."""
    try:
        root = parse("{" + text + "}", rewrite_ast=False)
    except ParseError as exc:
        raise TagError(f"failed to parse identifier {text}: {exc}") from None
    pipeline = root.single_pipeline()
    if not isinstance(pipeline, Pipeline):
        raise TagError(f"failed to parse identifier {text}: math expressions not supported")
    element = pipeline.elements[0] if pipeline.elements else None
    if not isinstance(element, SpansetFilter):
        raise TagError(f"failed to parse identifier {text}: expected SpansetFilter but got {_go_type(element)}")
    if not isinstance(element.expr, Attribute):
        raise TagError(f"failed to parse identifier {text}: expected Attribute but got {_go_type(element.expr)}")
    return element.expr


def _go_type(node: object) -> str:
    names = {"BinaryOp": "*traceql.BinaryOperation", "UnaryOp": "*traceql.UnaryOperation", "Static": "traceql.Static"}
    return names.get(type(node).__name__, f"traceql.{type(node).__name__}")


def _value(kind: str, value: str) -> dict[str, str]:
    return {"type": kind, "value": value} if value else {"type": kind}


async def tag_values(store: Store, tenant: str | None, tag: str, query: Mapping[str, str], *, v2: bool) -> Answer:
    if not tag:
        raise TagError("please provide a non-empty tagName")
    since, limit = _window(query)
    if v2:
        try:
            attr = identifier(tag)
        except TagError as exc:
            raise TagError(f"please provide a valid tagName: {exc}") from None
        if tag in VIRTUAL_V2:
            return _json({"tagValues": [{"type": "keyword", "value": v} for v in VIRTUAL_V2[tag]], "metrics": {}})
        if attr.intrinsic is not I.NONE:
            key = _COLUMN_KEY.get(attr.intrinsic)
            where = [(INTRINSIC, key)] if key else []
        else:
            where = [(scope, attr.name) for scope in _SCOPES_OF.get(attr.scope, ())]
        found = await store.tag_values(tenant, where, since, limit)
        return _json({"tagValues": [_value(kind, value) for kind, value in found], "metrics": {}})
    if tag in _V1_INTRINSIC:
        key = _V1_INTRINSIC[tag]
        where = [(INTRINSIC, key)] if key else []
    elif tag in _V1_WELL_KNOWN:
        where = [(_V1_WELL_KNOWN[tag], tag)]
    else:
        where = [(scope, tag) for scope in _SCOPES_OF[Scope.NONE]]
    values = list(_V1_VIRTUAL.get(tag, ()))
    for _, value in await store.tag_values(tenant, where, since, limit):
        if value not in values:
            values.append(value)
    return _json({"tagValues": values, "metrics": {}})
