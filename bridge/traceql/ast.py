"""Pure: the TraceQL syntax tree, as Tempo's parser builds it (``pkg/traceql/ast.go``, ``ast_metrics.go``,
``ast_metrics_math.go``, ``enum_operators.go``, ``enum_attributes.go``) and how each node prints
(``ast_stringer.go``: a ``by()`` spanset attribute, a series label and a sub-query key are these strings).

A query is a ``Root``: one ``Pipeline`` per sub-query (a metrics query of the form ``(A) + (B)`` has two), keyed by its
text; the metrics first stage of each (``MetricsAggregate`` or ``MetricsCompare``); the ``MathExpr`` tree that
combines sub-query results and applies second-stage elements (``topk``, a filter ``> 10``, ``* 100``); and hints
(``with(...)``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from bridge.traceql.values import NIL, Static, T, encode_to_string, go_format_fixed, go_format_g


class Op(enum.IntEnum):
    """``Operator`` (``enum_operators.go``)."""

    NONE = 0
    ADD = 1
    SUB = 2
    DIV = 3
    MOD = 4
    MULT = 5
    EQ = 6
    NEQ = 7
    REGEX = 8
    NOT_REGEX = 9
    GT = 10
    GTE = 11
    LT = 12
    LTE = 13
    POW = 14
    AND = 15
    OR = 16
    NOT = 17
    CHILD = 18
    PARENT = 19
    DESCENDANT = 20
    ANCESTOR = 21
    SS_AND = 22
    UNION = 23
    SIBLING = 24
    NOT_CHILD = 25
    NOT_PARENT = 26
    NOT_SIBLING = 27
    NOT_ANCESTOR = 28
    NOT_DESCENDANT = 29
    UNION_CHILD = 30
    UNION_PARENT = 31
    UNION_SIBLING = 32
    UNION_ANCESTOR = 33
    UNION_DESCENDANT = 34
    EXISTS = 35
    NOT_EXISTS = 36
    IN = 37
    NOT_IN = 38
    REGEX_MATCH_ANY = 39
    REGEX_MATCH_NONE = 40


OP_TEXT: Final = {
    Op.ADD: "+", Op.SUB: "-", Op.DIV: "/", Op.MOD: "%", Op.MULT: "*", Op.EQ: "=", Op.NEQ: "!=", Op.REGEX: "=~",
    Op.NOT_REGEX: "!~", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<=", Op.POW: "^", Op.AND: "&&", Op.OR: "||",
    Op.NOT: "!", Op.CHILD: ">", Op.PARENT: "<", Op.DESCENDANT: ">>", Op.ANCESTOR: "<<", Op.SS_AND: "&&",
    Op.SIBLING: "~", Op.UNION: "||", Op.NOT_CHILD: "!>", Op.NOT_PARENT: "!<", Op.NOT_SIBLING: "!~",
    Op.NOT_ANCESTOR: "!<<", Op.NOT_DESCENDANT: "!>>", Op.UNION_CHILD: "&>", Op.UNION_PARENT: "&<",
    Op.UNION_SIBLING: "&~", Op.UNION_ANCESTOR: "&<<", Op.UNION_DESCENDANT: "&>>", Op.IN: "IN", Op.NOT_IN: "NOT IN",
    Op.REGEX_MATCH_ANY: "MATCH ANY", Op.REGEX_MATCH_NONE: "MATCH NONE",
}  # fmt: skip

BOOLEAN_OPS: Final = frozenset(
    {Op.OR, Op.AND, Op.EQ, Op.NEQ, Op.REGEX, Op.NOT_REGEX, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.NOT, Op.EXISTS}
    | {Op.NOT_EXISTS, Op.IN, Op.NOT_IN, Op.REGEX_MATCH_ANY, Op.REGEX_MATCH_NONE}
)
ARITHMETIC_OPS: Final = frozenset({Op.ADD, Op.SUB, Op.MULT, Op.DIV})
STRUCTURAL_OPS: Final = frozenset(range(Op.CHILD, Op.UNION_DESCENDANT + 1)) - {Op.SS_AND, Op.UNION}


class Scope(enum.IntEnum):
    """``AttributeScope``."""

    NONE = 0
    TRACE = 1
    RESOURCE = 2
    SPAN = 3
    EVENT = 4
    LINK = 5
    INSTRUMENTATION = 6


SCOPE_TEXT: Final = {
    Scope.TRACE: "trace", Scope.RESOURCE: "resource", Scope.SPAN: "span", Scope.EVENT: "event", Scope.LINK: "link",
    Scope.INSTRUMENTATION: "instrumentation",
}  # fmt: skip


class I(enum.IntEnum):  # noqa: E742 - Tempo's own name, short where it is used a hundred times
    """``Intrinsic`` (``enum_attributes.go``); the names are how each prints."""

    NONE = 0
    DURATION = 1
    NAME = 2
    STATUS = 3
    STATUS_MESSAGE = 4
    KIND = 5
    CHILD_COUNT = 6
    ROOT_SERVICE = 7
    ROOT_NAME = 8
    TRACE_DURATION = 9
    NESTED_SET_LEFT = 10
    NESTED_SET_RIGHT = 11
    NESTED_SET_PARENT = 12
    EVENT_NAME = 13
    EVENT_TIME_SINCE_START = 14
    LINK_SPAN_ID = 15
    LINK_TRACE_ID = 16
    INSTRUMENTATION_NAME = 17
    INSTRUMENTATION_VERSION = 18
    PARENT = 19
    STRUCTURAL_DESCENDANT = 20
    STRUCTURAL_SIBLING = 21
    STRUCTURAL_CHILD = 22
    TRACE_ID = 23
    SPAN_ID = 24
    PARENT_ID = 25
    SPAN_START_TIME = 26


INTRINSIC_TEXT: Final = {
    I.DURATION: "duration", I.NAME: "name", I.STATUS: "status", I.STATUS_MESSAGE: "statusMessage", I.KIND: "kind",
    I.CHILD_COUNT: "span:childCount", I.ROOT_SERVICE: "rootServiceName", I.ROOT_NAME: "rootName",
    I.TRACE_DURATION: "traceDuration", I.NESTED_SET_LEFT: "nestedSetLeft", I.NESTED_SET_RIGHT: "nestedSetRight",
    I.NESTED_SET_PARENT: "nestedSetParent", I.EVENT_NAME: "event:name",
    I.EVENT_TIME_SINCE_START: "event:timeSinceStart", I.LINK_SPAN_ID: "link:spanID", I.LINK_TRACE_ID: "link:traceID",
    I.INSTRUMENTATION_NAME: "instrumentation:name", I.INSTRUMENTATION_VERSION: "instrumentation:version",
    I.PARENT: "parent", I.TRACE_ID: "trace:id", I.SPAN_ID: "span:id", I.PARENT_ID: "span:parentID",
    I.SPAN_START_TIME: "spanStartTime", I.STRUCTURAL_DESCENDANT: "intrinsic(20)",
    I.STRUCTURAL_SIBLING: "intrinsic(21)", I.STRUCTURAL_CHILD: "intrinsic(22)",
}  # fmt: skip

INTRINSIC_TYPE: Final = {
    I.DURATION: T.DURATION, I.CHILD_COUNT: T.INT, I.NAME: T.STRING, I.STATUS: T.STATUS, I.STATUS_MESSAGE: T.STRING,
    I.KIND: T.KIND, I.EVENT_NAME: T.STRING, I.EVENT_TIME_SINCE_START: T.DURATION, I.LINK_TRACE_ID: T.STRING,
    I.LINK_SPAN_ID: T.STRING, I.PARENT: T.NIL, I.TRACE_DURATION: T.DURATION, I.ROOT_SERVICE: T.STRING,
    I.ROOT_NAME: T.STRING, I.NESTED_SET_LEFT: T.INT, I.NESTED_SET_RIGHT: T.INT, I.NESTED_SET_PARENT: T.INT,
    I.TRACE_ID: T.STRING, I.SPAN_ID: T.STRING, I.PARENT_ID: T.STRING,
}  # fmt: skip

# ``intrinsicFromString``: an unscoped attribute name that names an intrinsic (``{ .duration }`` is not one: the
# grammar makes ``.x`` always an attribute; this is for ``NewScopedAttribute`` with no scope)
INTRINSIC_BY_NAME: Final = {
    "duration": I.DURATION, "name": I.NAME, "status": I.STATUS, "statusMessage": I.STATUS_MESSAGE, "kind": I.KIND,
    "event:name": I.EVENT_NAME, "event:timeSinceStart": I.EVENT_TIME_SINCE_START, "link:spanID": I.LINK_SPAN_ID,
    "link:traceID": I.LINK_TRACE_ID, "parent": I.PARENT, "rootServiceName": I.ROOT_SERVICE, "rootName": I.ROOT_NAME,
    "traceDuration": I.TRACE_DURATION, "trace:id": I.TRACE_ID, "span:id": I.SPAN_ID, "span:parentID": I.PARENT_ID,
    "span:status": I.STATUS, "span:statusMessage": I.STATUS_MESSAGE, "span:duration": I.DURATION,
    "span:name": I.NAME, "span:kind": I.KIND, "span:childCount": I.CHILD_COUNT, "trace:rootName": I.ROOT_NAME,
    "trace:rootService": I.ROOT_SERVICE, "trace:duration": I.TRACE_DURATION,
    "instrumentation:name": I.INSTRUMENTATION_NAME, "instrumentation:version": I.INSTRUMENTATION_VERSION,
    "spanStartTime": I.SPAN_START_TIME, "nestedSetLeft": I.NESTED_SET_LEFT, "nestedSetRight": I.NESTED_SET_RIGHT,
    "nestedSetParent": I.NESTED_SET_PARENT,
}  # fmt: skip

_NON_ATTRIBUTE_RUNES: Final = frozenset("{}()=~!<>&|^,")


def contains_non_attribute_rune(s: str) -> bool:
    return any(c.isspace() or c in _NON_ATTRIBUTE_RUNES for c in s)


@dataclass(frozen=True, slots=True)
class Attribute:
    """``Attribute``: a scoped or unscoped attribute, or an intrinsic (then ``name`` is the intrinsic's text)."""

    name: str
    scope: Scope = Scope.NONE
    parent: bool = False
    intrinsic: I = I.NONE

    def __str__(self) -> str:
        scopes = ["parent"] if self.parent else []
        if self.scope is not Scope.NONE:
            scopes.append(SCOPE_TEXT[self.scope])
        att = INTRINSIC_TEXT[self.intrinsic] if self.intrinsic is not I.NONE else self.name
        scope = ".".join(scopes) + "." if scopes else ""
        if not scope and self.intrinsic is I.NONE and att:
            scope = "."
        if contains_non_attribute_rune(att) or '"' in att:
            att = '"' + att.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return scope + att

    @property
    def implied_type(self) -> T:
        return INTRINSIC_TYPE.get(self.intrinsic, T.ATTRIBUTE)


def intrinsic(i: I) -> Attribute:
    return Attribute(INTRINSIC_TEXT[i], Scope.NONE, False, i)


def scoped_attribute(scope: Scope, parent: bool, name: str) -> Attribute:
    """``NewScopedAttribute``: with no scope and no parent the name may be an intrinsic's."""
    found = INTRINSIC_BY_NAME.get(name, I.NONE) if scope is Scope.NONE and not parent else I.NONE
    return Attribute(name, scope, parent, found)


# --------------------------------------------------------------------------------------------- field expressions


@dataclass(slots=True, eq=False)
class BinaryOp:
    op: Op
    lhs: FieldExpr
    rhs: FieldExpr

    def __str__(self) -> str:
        return binary_text(self.op, self.lhs, self.rhs)


@dataclass(slots=True, eq=False)
class UnaryOp:
    op: Op
    expr: FieldExpr

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return wrap(self.expr) + " != nil"
        if self.op is Op.NOT_EXISTS:
            return wrap(self.expr) + " = nil"
        return OP_TEXT[self.op] + wrap(self.expr)


FieldExpr = Static | Attribute | BinaryOp | UnaryOp


def field_text(e: object) -> str:
    if isinstance(e, Static):
        return encode_to_string(e, quotes=True)
    return str(e)


def wrap(e: object) -> str:
    if isinstance(e, Static | Attribute):
        return field_text(e)
    return "(" + field_text(e) + ")"


def binary_text(op: Op, lhs: object, rhs: object) -> str:
    return wrap(lhs) + " " + OP_TEXT[op] + " " + wrap(rhs)


def references_span(e: FieldExpr) -> bool:
    if isinstance(e, Attribute):
        return True
    if isinstance(e, BinaryOp):
        return references_span(e.lhs) or references_span(e.rhs)
    if isinstance(e, UnaryOp):
        return references_span(e.expr)
    return False


def implied_type(e: object) -> T:
    """``impliedType`` of a field or scalar expression."""
    if isinstance(e, Static):
        return e.type
    if isinstance(e, Attribute):
        return e.implied_type
    if isinstance(e, UnaryOp):
        return T.BOOLEAN if e.op in (Op.EXISTS, Op.NOT_EXISTS) else implied_type(e.expr)
    if isinstance(e, BinaryOp | ScalarOp):
        if e.op in BOOLEAN_OPS:
            return T.BOOLEAN
        t = implied_type(e.lhs)
        return t if t is not T.ATTRIBUTE else implied_type(e.rhs)
    if isinstance(e, Aggregate):
        return T.INT if e.op == "count" or e.expr is None else implied_type(e.expr)
    if isinstance(e, Pipeline):
        last = e.elements[-1] if e.elements else None
        return implied_type(last) if isinstance(last, Aggregate) else T.SPANSET
    return T.SPANSET


# ------------------------------------------------------------------------------------------- pipeline elements


@dataclass(slots=True, eq=False)
class SpansetFilter:
    expr: FieldExpr

    def __str__(self) -> str:
        return "{ " + field_text(self.expr) + " }"


@dataclass(slots=True, eq=False)
class SpansetOp:
    op: Op
    lhs: SpansetExpr
    rhs: SpansetExpr

    def __str__(self) -> str:
        return binary_text(self.op, self.lhs, self.rhs)


@dataclass(slots=True, eq=False)
class Aggregate:
    op: str  # count, max, min, sum, avg
    expr: FieldExpr | None

    def __str__(self) -> str:
        return f"{self.op}({'' if self.expr is None else field_text(self.expr)})"


@dataclass(slots=True, eq=False)
class ScalarOp:
    op: Op
    lhs: ScalarExpr
    rhs: ScalarExpr

    def __str__(self) -> str:
        return binary_text(self.op, self.lhs, self.rhs)


@dataclass(slots=True, eq=False)
class ScalarFilter:
    op: Op
    lhs: ScalarExpr
    rhs: ScalarExpr

    def __str__(self) -> str:
        return binary_text(self.op, self.lhs, self.rhs)


@dataclass(slots=True, eq=False)
class GroupOp:
    expr: FieldExpr

    def __str__(self) -> str:
        return "by(" + field_text(self.expr) + ")"


@dataclass(slots=True, eq=False)
class CoalesceOp:
    def __str__(self) -> str:
        return "coalesce()"


@dataclass(slots=True, eq=False)
class SelectOp:
    attrs: list[Attribute]

    def __str__(self) -> str:
        return "select(" + ", ".join(str(a) for a in self.attrs) + ")"


@dataclass(slots=True, eq=False)
class Pipeline:
    elements: list[Element] = field(default_factory=list)

    def __str__(self) -> str:
        return "|".join(str(e) for e in self.elements)


SpansetExpr = SpansetFilter | SpansetOp | Pipeline
ScalarExpr = Static | Aggregate | ScalarOp | Pipeline
Element = SpansetFilter | SpansetOp | ScalarFilter | GroupOp | CoalesceOp | SelectOp | Aggregate | Pipeline


# -------------------------------------------------------------------------------------------------- metrics


METRICS_OPS: Final = (
    "rate",
    "count_over_time",
    "min_over_time",
    "max_over_time",
    "avg_over_time",
    "sum_over_time",
    "quantile_over_time",
    "histogram_over_time",
)
MAX_GROUP_BYS: Final = 5


@dataclass(slots=True, eq=False)
class MetricsAggregate:
    """A first-stage function: ``rate()``, ``quantile_over_time(duration, .5, .9) by (x)``, …"""

    op: str
    attr: Attribute | None = None
    by: list[Attribute] = field(default_factory=list)
    quantiles: list[float] = field(default_factory=list)

    def __str__(self) -> str:
        out = self.op + "(" + (str(self.attr) if self.attr is not None else "")
        if self.op == "quantile_over_time":
            out += "," + ",".join(go_format_fixed(q, 5) for q in self.quantiles)
        out += ")"
        if self.by:
            out += "by(" + ",".join(str(b) for b in self.by) + ")"
        return out


@dataclass(slots=True, eq=False)
class MetricsCompare:
    """``compare({selection}, topN, start, end)``: every attribute of the selection against the rest."""

    selection: SpansetFilter
    top_n: int = 10
    start_ns: int = 0
    end_ns: int = 0

    def __str__(self) -> str:
        return "compare(" + str(self.selection) + "}"  # sic: Tempo's own text (engine_metrics_compare.go)


FirstStage = MetricsAggregate | MetricsCompare


@dataclass(slots=True, eq=False)
class TopK:
    op: str  # topk or bottomk
    limit: int
    sep: str = " | "

    def __str__(self) -> str:
        return f"{self.op}({self.limit})"


def format_metric_float(v: float) -> str:
    """``formatFloat`` (ast_metrics.go): a whole number without a point, anything else ``%g``."""
    if v == v and v not in (float("inf"), float("-inf")) and v == int(v):
        return str(int(v))
    return go_format_g(v)


@dataclass(slots=True, eq=False)
class MetricsFilter:
    op: Op
    value: float
    sep: str = " "

    def __str__(self) -> str:
        return OP_TEXT[self.op] + " " + format_metric_float(self.value)


@dataclass(slots=True, eq=False)
class MetricsScalarOp:
    op: Op
    value: float
    scalar_on_left: bool
    sep: str = ""

    def __str__(self) -> str:
        v = format_metric_float(self.value)
        return f"{v} {OP_TEXT[self.op]} " if self.scalar_on_left else f" {OP_TEXT[self.op]} {v}"

    def wrap(self, inner: str) -> str:
        v = format_metric_float(self.value)
        return f"{v} {OP_TEXT[self.op]} ({inner})" if self.scalar_on_left else f"({inner}) {OP_TEXT[self.op]} {v}"


@dataclass(slots=True, eq=False)
class Chained:
    stages: list[SecondStage]

    @property
    def sep(self) -> str:
        return separator(self.stages[0]) if self.stages else ""

    def __str__(self) -> str:
        return "".join(separator(s) + str(s) for s in self.stages)


@dataclass(slots=True, eq=False)
class MathExpr:
    """Leaf (``op`` NONE: the sub-query ``key``) or a binary arithmetic node; either with an optional second stage."""

    op: Op
    key: str = ""
    lhs: MathExpr | None = None
    rhs: MathExpr | None = None
    stage: SecondStage | None = None

    def __str__(self) -> str:
        if self.op is Op.NONE:
            text = self.key
        else:
            text = f"({self.lhs}) {OP_TEXT[self.op]} ({self.rhs})"
        return render_stage(text, self.stage) if self.stage is not None else text


SecondStage = TopK | MetricsFilter | MetricsScalarOp | Chained | MathExpr


def render_stage(inner: str, stage: SecondStage) -> str:
    if isinstance(stage, MetricsScalarOp):
        return stage.wrap(inner)
    if isinstance(stage, Chained):
        for s in stage.stages:
            inner = render_stage(inner, s)
        return inner
    return inner + separator(stage) + str(stage)


def separator(stage: SecondStage) -> str:
    """What a stage is written after (`` | topk(5)``, `` > 10``; nothing for math)."""
    return "" if isinstance(stage, MathExpr) else stage.sep


@dataclass(slots=True, eq=False)
class Hint:
    name: str
    value: Static


@dataclass(slots=True, eq=False)
class Root:
    pipelines: dict[str, Pipeline]
    first_stages: dict[str, FirstStage]
    expression: MathExpr
    hints: list[Hint] = field(default_factory=list)

    def single_pipeline(self) -> Pipeline | None:
        """The pipeline of a query with one sub-query and no math between sub-queries (``SinglePipeline``)."""
        if len(self.pipelines) != 1 or len(self.first_stages) > 1 or self.expression.op is not Op.NONE:
            return None
        return next(iter(self.pipelines.values()))

    @property
    def is_metrics(self) -> bool:
        return bool(self.first_stages)

    def second_stage(self) -> SecondStage | None:
        """``MetricsSecondStage``: a flat query's own stage, or the whole math tree."""
        if self.expression.op is Op.NONE:
            return self.expression.stage
        return self.expression

    def hint(self, name: str, kind: T) -> Static:
        """A hint's value of the given type (the last ``with`` wins), or nil."""
        for h in self.hints:
            if h.name == name and h.value.type is kind:
                return h.value
        return NIL

    def __str__(self) -> str:
        text = str(self.expression)
        if self.hints:
            text += " with(" + ",".join(h.name + "=" + field_text(h.value) for h in self.hints) + ")"
        return text
