"""Pure: a field expression (``.a > 3 && kind = server``) compiled once into a function of a span
(``ast_execute.go`` ``execute``; the values as ``model`` builds them).

Attribute lookups follow Tempo's span (``vparquet5/block_traceql.go`` ``AttributeFor``): a scoped attribute reads its
scope only; an unscoped ``.name`` reads the span's attributes, then the resource's (the two scopes Tempo fetches it
from). Comparisons go through ``ops.binary`` (Tempo's type rules); the common shapes — an
attribute against a constant — take a shorter path with the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from bridge.traceql.ast import Attribute, BinaryOp, I, Op, Scope, UnaryOp
from bridge.traceql.errors import EvalError
from bridge.traceql.model import Span, span_id_hex
from bridge.traceql.ops import binary, compile_regex, unary
from bridge.traceql.values import FALSE, NIL, TRUE, Static, T

Getter = Callable[[Span], Static]


def _event_attr(name: str) -> Getter:
    def get(s: Span) -> Static:
        if s.event is not None:
            return s.event.attrs.get(name, NIL)
        for e in s.events:
            v = e.attrs.get(name)
            if v is not None:
                return v
        return NIL

    return get


def _link_attr(name: str) -> Getter:
    def get(s: Span) -> Static:
        if s.link is not None:
            return s.link.attrs.get(name, NIL)
        for k in s.links:
            v = k.attrs.get(name)
            if v is not None:
                return v
        return NIL

    return get


def _unscoped(name: str) -> Getter:
    """An unscoped ``.name``: the span's attribute, else the resource's (what Tempo fetches for it)."""

    def get(s: Span) -> Static:
        v = s.attrs.get(name)
        if v is not None:
            return v
        return s.resource.attrs.get(name, NIL)

    return get


def _event_name(s: Span) -> Static:
    e = s.event if s.event is not None else (s.events[0] if s.events else None)
    return Static(T.STRING, e.name) if e is not None else NIL


def _event_since(s: Span) -> Static:
    e = s.event if s.event is not None else (s.events[0] if s.events else None)
    return Static(T.DURATION, e.since_start_ns) if e is not None else NIL


def _link_field(field: str) -> Getter:
    def get(s: Span) -> Static:
        k = s.link if s.link is not None else (s.links[0] if s.links else None)
        return Static(T.STRING, getattr(k, field)) if k is not None else NIL

    return get


INTRINSIC_GETTERS: Final[dict[I, Getter]] = {
    I.DURATION: lambda s: Static(T.DURATION, s.duration_ns),
    I.NAME: lambda s: Static(T.STRING, s.name),
    I.STATUS: lambda s: Static(T.STATUS, s.status),
    I.STATUS_MESSAGE: lambda s: Static(T.STRING, s.status_message),
    I.KIND: lambda s: Static(T.KIND, s.kind),
    I.CHILD_COUNT: lambda s: Static(T.INT, s.child_count),
    I.ROOT_SERVICE: lambda s: Static(T.STRING, s.trace.root_service),
    I.ROOT_NAME: lambda s: Static(T.STRING, s.trace.root_name),
    I.TRACE_DURATION: lambda s: Static(T.DURATION, s.trace.duration_ns),
    I.NESTED_SET_LEFT: lambda s: Static(T.INT, s.left),
    I.NESTED_SET_RIGHT: lambda s: Static(T.INT, s.right),
    I.NESTED_SET_PARENT: lambda s: Static(T.INT, s.nested_parent),
    I.EVENT_NAME: _event_name,
    I.EVENT_TIME_SINCE_START: _event_since,
    I.LINK_TRACE_ID: _link_field("trace_id"),
    I.LINK_SPAN_ID: _link_field("span_id"),
    I.INSTRUMENTATION_NAME: lambda s: Static(T.STRING, s.scope.name),
    I.INSTRUMENTATION_VERSION: lambda s: Static(T.STRING, s.scope.version),
    I.TRACE_ID: lambda s: Static(T.STRING, s.trace.id_hex),
    I.SPAN_ID: lambda s: Static(T.STRING, span_id_hex(s.span_id)),
    I.PARENT_ID: lambda s: Static(T.STRING, span_id_hex(s.parent_id)),
    I.SPAN_START_TIME: lambda s: Static(T.INT, s.start_ns),
}


def attribute_getter(a: Attribute) -> Getter:
    if a.intrinsic is not I.NONE:
        found = INTRINSIC_GETTERS.get(a.intrinsic)
        if found is None:
            raise EvalError(f"intrinsic {a} cannot be read")
        return found
    name = a.name
    if a.scope is Scope.SPAN:
        return lambda s: s.attrs.get(name, NIL)
    if a.scope is Scope.RESOURCE:
        return lambda s: s.resource.attrs.get(name, NIL)
    if a.scope is Scope.INSTRUMENTATION:
        return lambda s: s.scope.attrs.get(name, NIL)
    if a.scope is Scope.EVENT:
        return _event_attr(name)
    if a.scope is Scope.LINK:
        return _link_attr(name)
    return _unscoped(name)


def compile_field(e: object) -> Getter:
    """A field expression as a function of a span."""
    if isinstance(e, Static):
        return lambda s: e
    if isinstance(e, Attribute):
        return attribute_getter(e)
    if isinstance(e, UnaryOp):
        inner = compile_field(e.expr)
        op = e.op
        return lambda s: unary(op, inner(s))
    if isinstance(e, BinaryOp):
        return _compile_binary(e)
    raise EvalError(f"{e} is not a field expression")


def _compile_binary(e: BinaryOp) -> Getter:
    op = e.op
    left, right = compile_field(e.lhs), compile_field(e.rhs)
    if op is Op.AND:

        def conj(s: Span) -> Static:
            lv = left(s)
            if lv.type is T.BOOLEAN and not lv.value:
                return FALSE
            return binary(op, lv, right(s))

        return conj
    if op is Op.OR:

        def disj(s: Span) -> Static:
            lv = left(s)
            if lv.type is T.BOOLEAN and lv.value:
                return TRUE
            return binary(op, lv, right(s))

        return disj
    if isinstance(e.rhs, Static) and e.rhs.type is T.STRING:
        fast = _string_constant(op, left, e.rhs)
        if fast is not None:
            return fast
    return lambda s: binary(op, left(s), right(s))


def _string_constant(op: Op, left: Getter, constant: Static) -> Getter | None:
    """``attribute op "text"``: strings compared directly; anything else the general way."""
    want = constant.value
    if op is Op.EQ:
        return lambda s: (
            (TRUE if v.value == want else FALSE) if (v := left(s)).type is T.STRING else binary(op, v, constant)
        )
    if op is Op.NEQ:
        return lambda s: (
            (FALSE if v.value == want else TRUE) if (v := left(s)).type is T.STRING else binary(op, v, constant)
        )
    if op is Op.REGEX or op is Op.NOT_REGEX:
        pattern = compile_regex(want)
        hit = op is Op.REGEX

        def regex(s: Span) -> Static:
            v = left(s)
            if v.type is T.STRING:
                return TRUE if (pattern.match(v.value) is not None) == hit else FALSE
            return binary(op, v, constant)

        return regex
    return None


def references_scope(e: object, scope: Scope, intrinsics: frozenset[I]) -> bool:
    """Does the expression read an attribute of ``scope`` (or one of its intrinsics)?"""
    if isinstance(e, Attribute):
        return e.scope is scope or e.intrinsic in intrinsics
    if isinstance(e, BinaryOp):
        return references_scope(e.lhs, scope, intrinsics) or references_scope(e.rhs, scope, intrinsics)
    if isinstance(e, UnaryOp):
        return references_scope(e.expr, scope, intrinsics)
    return False


EVENT_INTRINSICS: Final = frozenset({I.EVENT_NAME, I.EVENT_TIME_SINCE_START})
LINK_INTRINSICS: Final = frozenset({I.LINK_TRACE_ID, I.LINK_SPAN_ID})
