"""Pure: what a query needs from storage (Tempo ``storage.go`` ``FetchSpansRequest``, ``ast_conditions.go``
``extractConditions``): the conditions storage can test (``resource.service.name = "a"``, ``duration > 1s``), whether
a span must meet all of them (``AllConditions``: a plain conjunction) and what a second pass only reads (``select()``,
a metric's ``by()``).

Two uses follow Tempo's fetch layer (``vparquet5/block_traceql.go``): which spans of a trace the pipeline starts from
— those meeting at least one condition (every span when the query has ``{}`` or a trace-level condition, every
connected span under a structural operator) — and which attributes a span of the answer shows: each attribute a
condition names, when the span met that condition (or the attribute is only read), as Tempo's spans carry exactly
what their columns returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from bridge.traceql.ast import (
    Aggregate,
    Attribute,
    BinaryOp,
    CoalesceOp,
    GroupOp,
    I,
    MetricsAggregate,
    MetricsCompare,
    Op,
    Pipeline,
    Root,
    ScalarFilter,
    ScalarOp,
    Scope,
    SelectOp,
    SpansetFilter,
    SpansetOp,
    UnaryOp,
    intrinsic,
)
from bridge.traceql.fields import INTRINSIC_GETTERS
from bridge.traceql.model import Span
from bridge.traceql.ops import binary, unary
from bridge.traceql.values import NIL, Static, T

STRUCTURAL: Final = frozenset({I.STRUCTURAL_DESCENDANT, I.STRUCTURAL_CHILD, I.STRUCTURAL_SIBLING})
TRACE_LEVEL: Final = frozenset({I.TRACE_ID, I.TRACE_DURATION, I.ROOT_NAME, I.ROOT_SERVICE})
NESTED: Final = frozenset({I.NESTED_SET_LEFT, I.NESTED_SET_RIGHT, I.NESTED_SET_PARENT})
# which nested-set columns a structural operator reads (createSpanIterator: addNilPredicateIfNotAlready)
STRUCTURAL_COLUMNS: Final = {
    I.STRUCTURAL_DESCENDANT: (I.NESTED_SET_LEFT, I.NESTED_SET_RIGHT),
    I.STRUCTURAL_CHILD: (I.NESTED_SET_LEFT, I.NESTED_SET_PARENT),
    I.STRUCTURAL_SIBLING: (I.NESTED_SET_PARENT,),
}
# intrinsics a search answer never lists among a span's attributes (engine.go asTraceSearchMetadata)
HIDDEN: Final = frozenset({I.NAME, I.DURATION, I.TRACE_DURATION, I.ROOT_SERVICE, I.ROOT_NAME, I.TRACE_ID, I.SPAN_ID})
HIDDEN_ALL: Final = HIDDEN | STRUCTURAL | {I.SPAN_START_TIME}


@dataclass(frozen=True, slots=True)
class Condition:
    attribute: Attribute
    op: Op = Op.NONE
    operands: tuple[Static, ...] = ()


@dataclass(slots=True)
class FetchRequest:
    conditions: list[Condition] = field(default_factory=list)
    all_conditions: bool = True
    second_pass: list[Condition] = field(default_factory=list)
    select_all: bool = False

    def has_attribute(self, a: Attribute) -> bool:
        return any(_match(c.attribute, a) for c in (*self.conditions, *self.second_pass))

    def second_pass_has(self, a: Attribute) -> bool:
        return any(_match(c.attribute, a) for c in self.second_pass)

    def has_attribute_with_op(self, a: Attribute, op: Op) -> bool:
        return any(_match(c.attribute, a) and c.op is op for c in (*self.conditions, *self.second_pass))


def _match(have: Attribute, a: Attribute) -> bool:
    """An unscoped condition ``.foo`` also covers ``span.foo`` and ``resource.foo``."""
    if have == a:
        return True
    return (
        have.scope is Scope.NONE
        and a.scope in (Scope.RESOURCE, Scope.SPAN)
        and have.parent == a.parent
        and have.name == a.name
        and have.intrinsic is a.intrinsic
    )


# --------------------------------------------------------------------------------------------------- extract


def extract(root: Root) -> dict[str, FetchRequest]:
    """One request per sub-query (``RootExpr.extractConditions`` from ``AllConditions: true``)."""
    out: dict[str, FetchRequest] = {}
    for key, p in root.pipelines.items():
        req = FetchRequest()
        extract_pipeline(p, req)
        stage = root.first_stages.get(key)
        if stage is not None:
            extract_first_stage(stage, req)
        out[key] = req
    return out


def extract_pipeline(p: Pipeline, req: FetchRequest) -> None:
    second_pass = False
    for e in p.elements:
        if second_pass:
            scratch = FetchRequest()
            extract_element(e, scratch)
            for c in (*scratch.conditions, *scratch.second_pass):
                if not req.has_attribute_with_op(c.attribute, Op.NONE):
                    req.second_pass.append(c)
        else:
            extract_element(e, req)
        if isinstance(e, SelectOp):
            second_pass = True


def extract_element(e: object, req: FetchRequest) -> None:
    if isinstance(e, Pipeline):
        extract_pipeline(e, req)
    elif isinstance(e, SpansetFilter):
        extract_field(e.expr, req)
        if isinstance(e.expr, Static) and e.expr.type is T.BOOLEAN and e.expr.value:
            if not any(c.attribute.intrinsic is not I.NONE and c.op is Op.NONE for c in req.conditions):
                req.conditions.append(Condition(intrinsic(I.SPAN_START_TIME)))
    elif isinstance(e, SpansetOp):
        if e.op not in (Op.SS_AND, Op.UNION):
            req.conditions.append(Condition(intrinsic(_structural(e.op))))
        extract_element(e.lhs, req)
        extract_element(e.rhs, req)
        req.all_conditions = False
    elif isinstance(e, ScalarFilter | ScalarOp):
        extract_element(e.lhs, req)
        extract_element(e.rhs, req)
    elif isinstance(e, Aggregate):
        req.all_conditions = False
        if e.expr is not None:
            extract_field(e.expr, req)
    elif isinstance(e, GroupOp):
        extract_field(e.expr, req)
        req.all_conditions = False
    elif isinstance(e, SelectOp):
        scratch = FetchRequest()
        for a in e.attrs:
            extract_field(a, scratch)
        req.second_pass.extend(scratch.conditions)
    elif isinstance(e, CoalesceOp | Static):
        return


def _structural(op: Op) -> I:
    if op in (Op.DESCENDANT, Op.ANCESTOR, Op.NOT_DESCENDANT, Op.NOT_ANCESTOR, Op.UNION_DESCENDANT):
        return I.STRUCTURAL_DESCENDANT
    if op is Op.UNION_ANCESTOR:
        return I.STRUCTURAL_DESCENDANT
    if op in (Op.SIBLING, Op.NOT_SIBLING, Op.UNION_SIBLING):
        return I.STRUCTURAL_SIBLING
    return I.STRUCTURAL_CHILD


def extract_field(e: object, req: FetchRequest) -> None:
    """``BinaryOperation`` / ``UnaryOperation`` / ``Attribute`` ``.extractConditions``."""
    if isinstance(e, Attribute):
        req.conditions.append(Condition(e))
    elif isinstance(e, UnaryOp):
        if isinstance(e.expr, Attribute) and e.op in (Op.EXISTS, Op.NOT_EXISTS):
            req.conditions.append(Condition(e.expr, e.op))
        else:
            extract_field(e.expr, req)
    elif isinstance(e, BinaryOp):
        _extract_binary(e, req)


def _extract_binary(e: BinaryOp, req: FetchRequest) -> None:
    lhs, rhs, op = e.lhs, e.rhs, e.op
    if isinstance(lhs, Attribute) and isinstance(rhs, Static):
        req.conditions.append(_predicate(lhs, op, rhs))
    elif isinstance(lhs, Attribute) and isinstance(rhs, Attribute):
        req.conditions += [Condition(lhs), Condition(rhs)]
    elif isinstance(lhs, Attribute):
        req.conditions.append(Condition(lhs))
        extract_field(rhs, req)
    elif isinstance(lhs, Static) and isinstance(rhs, Attribute):
        req.conditions.append(_predicate(rhs, op, lhs))
    elif isinstance(lhs, Static):
        if not isinstance(rhs, Static):
            extract_field(rhs, req)
    else:
        extract_field(lhs, req)
        extract_field(rhs, req)
        req.all_conditions = req.all_conditions and op is not Op.OR


def _predicate(a: Attribute, op: Op, value: Static) -> Condition:
    """A condition with an operand, or a plain read where storage cannot test the operator."""
    from bridge.traceql.ast import BOOLEAN_OPS

    if (value.type is T.NIL and op is Op.NEQ) or op not in BOOLEAN_OPS:
        return Condition(a)
    if value.type is T.BOOLEAN and op in (Op.OR, Op.AND):
        return Condition(a)
    return Condition(a, op, (value,))


def extract_first_stage(stage: object, req: FetchRequest) -> None:
    if isinstance(stage, MetricsAggregate):
        if stage.attr is not None and not req.has_attribute(stage.attr):
            req.second_pass.append(Condition(stage.attr))
        for b in stage.by:
            present = req.has_attribute(b) if req.all_conditions else req.second_pass_has(b)
            if not present:
                req.second_pass.append(Condition(b))
    elif isinstance(stage, MetricsCompare):
        req.select_all = True
        if not req.has_attribute(intrinsic(I.SPAN_START_TIME)):
            req.second_pass.append(Condition(intrinsic(I.SPAN_START_TIME)))


# ------------------------------------------------------------------------------------------ fetch-layer model


def _values(a: Attribute, s: Span) -> list[tuple[Attribute, Static]]:
    """The values storage returns for one condition's attribute on a span, each under the attribute it is kept as
    (an unscoped ``.foo`` is read from the span and from its resource)."""
    if a.intrinsic is not I.NONE:
        getter = INTRINSIC_GETTERS.get(a.intrinsic)
        return [(a, getter(s))] if getter is not None else []
    name = a.name
    if a.scope is Scope.SPAN:
        return [(a, s.attrs.get(name, NIL))]
    if a.scope is Scope.RESOURCE:
        return [(a, s.resource.attrs.get(name, NIL))]
    if a.scope is Scope.INSTRUMENTATION:
        return [(a, s.scope.attrs.get(name, NIL))]
    if a.scope is Scope.NONE:
        return [
            (Attribute(name, Scope.SPAN), s.attrs.get(name, NIL)),
            (Attribute(name, Scope.RESOURCE), s.resource.attrs.get(name, NIL)),
        ]
    items = s.events if a.scope is Scope.EVENT else s.links
    found = [x.attrs[name] for x in items if name in x.attrs]
    return [(a, v) for v in found] or [(a, NIL)]


def _event_intrinsic_values(a: Attribute, s: Span) -> list[Static]:
    if a.intrinsic is I.EVENT_NAME:
        return [Static(T.STRING, e.name) for e in s.events]
    if a.intrinsic is I.EVENT_TIME_SINCE_START:
        return [Static(T.DURATION, e.since_start_ns) for e in s.events]
    if a.intrinsic is I.LINK_TRACE_ID:
        return [Static(T.STRING, k.trace_id) for k in s.links]
    if a.intrinsic is I.LINK_SPAN_ID:
        return [Static(T.STRING, k.span_id) for k in s.links]
    return []


MULTI: Final = frozenset({I.EVENT_NAME, I.EVENT_TIME_SINCE_START, I.LINK_TRACE_ID, I.LINK_SPAN_ID})


def satisfied(c: Condition, value: Static) -> bool:
    """Would storage return this value for the condition (its predicate holds; a plain read: it exists)?"""
    if c.op is Op.NONE or c.op is Op.EXISTS:
        return value.type is not T.NIL
    if c.op is Op.NOT_EXISTS:
        return unary(Op.NOT_EXISTS, value).value is True
    try:
        return binary(c.op, value, c.operands[0]).value is True
    except Exception:  # noqa: BLE001 - storage predicates never fail; a value they cannot compare is no match
        return False


def condition_values(c: Condition, s: Span) -> list[tuple[Attribute, Static]]:
    """The values storage returns for condition ``c`` on span ``s``: those meeting its predicate."""
    a = c.attribute
    if a.intrinsic in MULTI:
        return [(a, v) for v in _event_intrinsic_values(a, s) if satisfied(c, v)]
    if c.op is Op.NOT_EXISTS:
        return [(attr, Static(T.STRING, "nil")) for attr, v in _values(a, s) if v.type is T.NIL]
    return [(attr, v) for attr, v in _values(a, s) if satisfied(c, v)]


def fetch_filter(req: FetchRequest) -> Callable[[Span], bool]:
    """Which spans storage hands the pipeline: those meeting at least one condition — all when a condition matches
    every span (``{}``'s start time, a trace-level condition), the connected ones under a structural operator."""
    conditions = req.conditions
    if not conditions or any(c.attribute.intrinsic in TRACE_LEVEL for c in conditions):
        return lambda s: True
    if any(c.attribute.intrinsic is I.SPAN_START_TIME or (c.attribute.intrinsic is I.SPAN_ID and c.op is Op.NONE)
           for c in conditions):  # fmt: skip
        return lambda s: True
    structural = any(c.attribute.intrinsic in STRUCTURAL for c in conditions)
    tests = [c for c in conditions if c.attribute.intrinsic not in STRUCTURAL]

    def keep(s: Span) -> bool:
        if structural and (s.left > 0 or s.right > 0 or s.nested_parent != 0):
            return True
        return any(condition_values(c, s) for c in tests)

    return keep


def visible_attributes(req: FetchRequest) -> Callable[[Span], list[tuple[str, Static]]]:
    """A span's attributes as a search answer lists them: (key, value), in key order."""
    read_columns: set[I] = set()
    for c in req.conditions:
        read_columns.update(STRUCTURAL_COLUMNS.get(c.attribute.intrinsic, ()))
    explicit_nested = {c.attribute.intrinsic for c in (*req.conditions, *req.second_pass)} & NESTED
    first = [c for c in req.conditions if c.attribute.intrinsic not in HIDDEN_ALL]
    second = [Condition(c.attribute) for c in req.second_pass if c.attribute.intrinsic not in HIDDEN_ALL]
    for i in explicit_nested & read_columns:
        second.append(Condition(intrinsic(i)))
    wants = first + second

    def attributes(s: Span) -> list[tuple[str, Static]]:
        found: dict[tuple[Scope, str, I], tuple[str, Static]] = {}
        for c in wants:
            for attr, value in condition_values(c, s):
                if value.type is not T.NIL:
                    found[(attr.scope, attr.name, attr.intrinsic)] = (attr.name, value)
        return sorted(found.values(), key=lambda kv: kv[0])

    return attributes


def shows_name(req: FetchRequest) -> bool:
    """Does the answer carry span names (a condition or ``select`` read ``name``)?"""
    return any(c.attribute.intrinsic is I.NAME for c in (*req.conditions, *req.second_pass))


def name_condition(req: FetchRequest) -> list[Condition]:
    return [c for c in req.conditions if c.attribute.intrinsic is I.NAME] + [
        Condition(c.attribute) for c in req.second_pass if c.attribute.intrinsic is I.NAME
    ]
