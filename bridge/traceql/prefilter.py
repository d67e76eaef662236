"""Pure: what every span of a query's answer must satisfy on its own, so that storage can skip a trace without
running the whole query on it.

The answer's spans come from the pipeline's filters: through ``A | B`` they satisfy both, through ``A && B`` or
``A || B`` between spansets one of them, through ``A >> B`` (and ``>``, ``~``, their negations) the right-hand side.
``need`` derives that condition as a tree (``All`` / ``AnyOf`` / a filter's expression); ``local_conjuncts`` keeps
the parts one span answers by itself — a comparison on the trace (``rootServiceName``, ``traceDuration``) or on the
tree (``nestedSet…``, ``span:childCount``) needs the whole trace and is dropped (the condition only gets weaker),
except ``nestedSetParent < 0`` and ``nestedSetParent = -1``, which say "a root span" (no parent id).

A trace can be in the answer only if one of its spans meets the result; the store looks for such spans (pushing what
its columns hold into SQL) and runs the whole query on the traces it finds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from bridge.traceql.ast import (
    Attribute,
    BinaryOp,
    I,
    Op,
    Pipeline,
    Scope,
    SelectOp,
    SpansetFilter,
    SpansetOp,
    UnaryOp,
)
from bridge.traceql.engine import span_predicate
from bridge.traceql.errors import QueryError
from bridge.traceql.model import Scope as SpanScope
from bridge.traceql.model import Span, TraceInfo
from bridge.traceql.values import Static, T

TRACE_WIDE: Final = frozenset(
    {I.ROOT_NAME, I.ROOT_SERVICE, I.TRACE_DURATION, I.NESTED_SET_LEFT, I.NESTED_SET_RIGHT, I.NESTED_SET_PARENT}
    | {I.CHILD_COUNT, I.PARENT}
)
_NON_UNION_STRUCTURAL: Final = frozenset(
    {Op.CHILD, Op.PARENT, Op.DESCENDANT, Op.ANCESTOR, Op.SIBLING, Op.NOT_CHILD, Op.NOT_PARENT}
    | {Op.NOT_SIBLING, Op.NOT_ANCESTOR, Op.NOT_DESCENDANT}
)


@dataclass(frozen=True, slots=True)
class All:
    parts: tuple[Need, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[Need, ...]


@dataclass(frozen=True, slots=True)
class Expr:
    expr: object


@dataclass(frozen=True, slots=True)
class Root:
    """A root span: no parent id (``nestedSetParent < 0``)."""


Need = All | AnyOf | Expr | Root | None  # None: no condition


def need(e: object) -> Need:
    """What every span in the result of ``e`` satisfies."""
    if isinstance(e, Pipeline):
        parts = tuple(n for n in (need(x) for x in e.elements) if n is not None)
        return All(parts) if len(parts) > 1 else (parts[0] if parts else None)
    if isinstance(e, SpansetFilter):
        if isinstance(e.expr, Static) and e.expr.type is T.BOOLEAN and e.expr.value:
            return None
        return Expr(e.expr)
    if isinstance(e, SpansetOp):
        if e.op in _NON_UNION_STRUCTURAL:
            return need(e.rhs)
        left, right = need(e.lhs), need(e.rhs)
        return None if left is None or right is None else AnyOf((left, right))
    return None


def conjuncts(expr: object) -> list[object]:
    if isinstance(expr, BinaryOp) and expr.op is Op.AND:
        return conjuncts(expr.lhs) + conjuncts(expr.rhs)
    return [expr]


def is_root_test(expr: object) -> bool:
    """``nestedSetParent < 0`` / ``= -1`` (either side)."""
    if not isinstance(expr, BinaryOp):
        return False
    attr, value, op = expr.lhs, expr.rhs, expr.op
    if isinstance(value, Attribute):
        attr, value = value, attr
        op = {Op.LT: Op.GT, Op.GT: Op.LT}.get(op, op)
    if not (isinstance(attr, Attribute) and attr.intrinsic is I.NESTED_SET_PARENT and isinstance(value, Static)):
        return False
    if value.type is not T.INT:
        return False
    return (op is Op.LT and value.value == 0) or (op in (Op.EQ, Op.LTE) and value.value == -1)


def span_local(expr: object) -> bool:
    """Can one span answer this expression by itself?"""
    if isinstance(expr, Attribute):
        return not expr.parent and expr.intrinsic not in TRACE_WIDE
    if isinstance(expr, BinaryOp):
        return span_local(expr.lhs) and span_local(expr.rhs)
    if isinstance(expr, UnaryOp):
        return span_local(expr.expr)
    return True


def local_conjuncts(expr: object) -> list[object]:
    """The conjuncts one span answers (a root test as ``Root``), the others dropped."""
    out: list[object] = []
    for c in conjuncts(expr):
        if is_root_test(c):
            out.append(Root())
        elif span_local(c) and not (isinstance(c, Static) and c.type is T.BOOLEAN and c.value):
            out.append(c)
    return out


def compile_need(n: Need) -> Callable[[Span], bool] | None:
    """The span-local part of a need as a test of one span (None: every span passes)."""
    if n is None:
        return None
    if isinstance(n, Root):
        return lambda s: not s.parent_id
    if isinstance(n, Expr):
        found = [
            compile_need(Root()) if isinstance(c, Root) else _tolerant(span_predicate(c))
            for c in local_conjuncts(n.expr)
        ]
        return _all([t for t in found if t is not None])
    if isinstance(n, All):
        return _all([t for t in (compile_need(p) for p in n.parts) if t is not None])
    alternatives = [compile_need(p) for p in n.parts]
    if any(a is None for a in alternatives):
        return None
    either: list[Callable[[Span], bool]] = [a for a in alternatives if a is not None]
    return lambda s: any(t(s) for t in either)


def attributes_in(expr: object) -> list[Attribute]:
    if isinstance(expr, Attribute):
        return [expr]
    if isinstance(expr, BinaryOp):
        return attributes_in(expr.lhs) + attributes_in(expr.rhs)
    if isinstance(expr, UnaryOp):
        return attributes_in(expr.expr)
    return []


def _bare_span() -> Span:
    return Span(TraceInfo(b""), b"", b"", 0, 0, "", 0, 0, "", {}, SpanScope({}), SpanScope({}))


def required_attributes(n: Need) -> list[Attribute]:
    """Attributes every span of the answer has: those a conjunct reads alone (``span.x``, ``resource.x``, ``.x``)
    and is false without — found by asking the conjunct about a span that has no attributes at all. Storage can skip
    a span whose stored bytes do not name them without decoding it."""
    if isinstance(n, All):
        return [a for p in n.parts for a in required_attributes(p)]
    if not isinstance(n, Expr):
        return []
    out = []
    for c in local_conjuncts(n.expr):
        attrs = attributes_in(c)
        if len(attrs) != 1 or attrs[0].intrinsic is not I.NONE or attrs[0].parent:
            continue
        if attrs[0].scope not in (Scope.SPAN, Scope.RESOURCE, Scope.NONE):
            continue
        try:
            absent_passes = span_predicate(c)(_bare_span())
        except QueryError:
            continue
        if not absent_passes:
            out.append(attrs[0])
    return out


def _tolerant(test: Callable[[Span], bool]) -> Callable[[Span], bool]:
    """A test that cannot decide (``{ !.a }`` on a span without ``a``) keeps the span: the whole query, run on the
    trace, decides — with Tempo's rules on which spans storage hands it — and fails there if Tempo fails."""

    def run(s: Span) -> bool:
        try:
            return test(s)
        except QueryError:
            return True

    return run


def _all(tests: list[Callable[[Span], bool]]) -> Callable[[Span], bool] | None:
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    return lambda s: all(t(s) for t in tests)


def span_by_span(p: Pipeline) -> bool:
    """Is the pipeline a chain of filters (and ``select``) that each span passes or fails by itself — a query a metric
    can run span by span, without the trace (Tempo ``NeedsFullTrace`` false, and nothing trace-wide read)?"""
    for e in p.elements:
        if isinstance(e, SelectOp):
            continue
        if not isinstance(e, SpansetFilter):
            return False
        if not all(is_root_test(c) or span_local(c) for c in conjuncts(e.expr)):
            return False
    return True
