"""Pure: does a parsed query mean something? Tempo's ``validate()`` (``ast_validate.go``, ``ast_metrics.go``,
``ast_metrics_math.go``, ``engine_metrics_compare.go``), rule for rule: types must meet (``{ 1 = "foo" }`` fails),
a filter must be boolean (``{ 1 + 1 }`` fails), an aggregate must read the span (``sum(3) = 2`` fails), a regular
expression must compile. What Tempo itself does not run yet (``parent.``, a scalar filter that is not
``aggregate op value``, too many ``by`` labels) is ``Unsupported``; everything else wrong is ``InvalidQuery``.
"""

from __future__ import annotations

from bridge.traceql.ast import (
    MAX_GROUP_BYS,
    OP_TEXT,
    STRUCTURAL_OPS,
    Aggregate,
    Attribute,
    BinaryOp,
    Chained,
    CoalesceOp,
    GroupOp,
    I,
    MathExpr,
    MetricsAggregate,
    MetricsCompare,
    MetricsFilter,
    MetricsScalarOp,
    Op,
    Pipeline,
    Root,
    ScalarFilter,
    ScalarOp,
    Scope,
    SelectOp,
    SpansetFilter,
    SpansetOp,
    TopK,
    UnaryOp,
    field_text,
    implied_type,
    references_span,
)
from bridge.traceql.errors import InvalidQuery, Unsupported
from bridge.traceql.ops import binary_types_valid, compile_regex, matching_operand, unary_type_valid
from bridge.traceql.values import NUMERIC, Static, T

SERVICE_NAME = Attribute("service.name", Scope.RESOURCE)
MAX_COMPARE_TOP_N = 1000


def validate_root(root: Root) -> None:
    for pipeline in root.pipelines.values():
        validate_element(pipeline)
    for stage in root.first_stages.values():
        validate_first_stage(stage)
    validate_second_stage(root.expression)
    if root.expression.stage is not None or root.expression.op is not Op.NONE:
        if any(isinstance(s, MetricsCompare) for s in root.first_stages.values()):
            raise InvalidQuery("`compare()` cannot be used with second stage functions")


def validate_element(e: object) -> None:
    if isinstance(e, Pipeline):
        for item in e.elements:
            validate_element(item)
    elif isinstance(e, SpansetFilter):
        validate_field(e.expr)
        t = implied_type(e.expr)
        if t not in (T.ATTRIBUTE, T.BOOLEAN):
            raise InvalidQuery(f"span filter field expressions must resolve to a boolean: {e}")
    elif isinstance(e, SpansetOp):
        validate_element(e.lhs)
        validate_element(e.rhs)
    elif isinstance(e, ScalarFilter):
        _validate_scalar_filter(e)
    elif isinstance(e, GroupOp):
        if not references_span(e.expr):
            raise InvalidQuery(f"grouping field expressions must reference the span: {e}")
        validate_field(e.expr)
    elif isinstance(e, SelectOp):
        for a in e.attrs:
            validate_field(a)
    elif isinstance(e, Aggregate):
        _validate_aggregate(e)
    elif isinstance(e, ScalarOp):
        validate_element(e.lhs)
        validate_element(e.rhs)
        _check_binary(e.op, e.lhs, e.rhs, e)
    elif isinstance(e, CoalesceOp | Static):
        return


def _check_binary(op: Op, lhs: object, rhs: object, node: object) -> None:
    lt, rt = implied_type(lhs), implied_type(rhs)
    if not matching_operand(lt, rt):
        raise InvalidQuery(f"binary operations must operate on the same type: {node}")
    if not binary_types_valid(op, lt, rt):
        raise InvalidQuery(f"illegal operation for the given types: {node}")


def _validate_scalar_filter(f: ScalarFilter) -> None:
    validate_element(f.lhs)
    validate_element(f.rhs)
    _check_binary(f.op, f.lhs, f.rhs, f)
    # Tempo's very words: ast_validate.go passes "(%v)" to newUnsupportedError and never formats it
    if not isinstance(f.lhs, Aggregate):
        raise Unsupported("scalar filter lhs of type (%v)")
    if not isinstance(f.rhs, Static):
        raise Unsupported("scalar filter rhs of type (%v)")


def _validate_aggregate(a: Aggregate) -> None:
    if a.expr is None:
        return
    validate_field(a.expr)
    t = implied_type(a.expr)
    if t is not T.ATTRIBUTE and t not in NUMERIC:
        raise InvalidQuery(f"aggregate field expressions must resolve to a number type: {a}")
    if not references_span(a.expr):
        raise InvalidQuery(f"aggregate field expressions must reference the span: {a}")


def validate_field(e: object) -> None:
    """A field expression (``BinaryOperation`` / ``UnaryOperation`` / ``Attribute`` ``.validate()``)."""
    if isinstance(e, Attribute):
        if e.parent:
            raise Unsupported("parent")
        if e.intrinsic is I.PARENT:
            raise Unsupported("intrinsic (parent)")
    elif isinstance(e, BinaryOp):
        _validate_binary(e)
    elif isinstance(e, UnaryOp):
        _validate_unary(e)


def _validate_binary(e: BinaryOp) -> None:
    validate_field(e.lhs)
    validate_field(e.rhs)
    lt, rt = implied_type(e.lhs), implied_type(e.rhs)
    if e.op in (Op.EXISTS, Op.NOT_EXISTS):
        raise InvalidQuery(f"illegal operation for the given type: {e}")
    if not matching_operand(lt, rt):
        raise InvalidQuery(f"binary operations must operate on the same type: {e}")
    if not binary_types_valid(e.op, lt, rt):
        raise InvalidQuery(f"illegal operation for the given types: {e}")
    if e.op in (Op.REGEX, Op.NOT_REGEX):
        if not isinstance(e.rhs, Static) or rt not in (T.STRING, T.STRING_ARRAY):
            raise InvalidQuery(f"invalid type for =~ or !~: {field_text(e.rhs)}")
        for pattern in (e.rhs.value,) if rt is T.STRING else e.rhs.value:
            compile_regex(pattern)
    if e.op in STRUCTURAL_OPS:
        raise Unsupported(f"binary operation ({OP_TEXT.get(e.op, e.op.name)})")


def _validate_unary(e: UnaryOp) -> None:
    validate_field(e.expr)
    if e.op is Op.NOT_EXISTS and isinstance(e.expr, Attribute):
        if e.expr.intrinsic is not I.NONE:
            raise InvalidQuery(f"{e.expr}=nil is not valid because intrinsics cannot be nil")
        if e.expr == SERVICE_NAME:
            raise InvalidQuery(f"{e.expr}=nil is not valid because resource.service.name cannot be nil")
    t = implied_type(e.expr)
    if t is T.ATTRIBUTE:
        return
    if not unary_type_valid(e.op, t):
        raise InvalidQuery(f"illegal operation for the given type: {e}")


def validate_first_stage(stage: object) -> None:
    if isinstance(stage, MetricsAggregate):
        if stage.op in ("histogram_over_time", "quantile_over_time") and len(stage.by) >= MAX_GROUP_BYS:
            raise Unsupported(f"metrics group by {len(stage.by)} values")
        for q in stage.quantiles:
            if q < 0 or q > 1:
                raise InvalidQuery(f"quantile must be between 0 and 1: {q}")
        if len(stage.by) > MAX_GROUP_BYS:
            raise Unsupported(f"metrics group by {len(stage.by)} values")
    elif isinstance(stage, MetricsCompare):
        validate_element(stage.selection)
        if stage.top_n <= 0 or stage.top_n > MAX_COMPARE_TOP_N:
            raise InvalidQuery(f"compare() top number of values must be an integer between 1 and {MAX_COMPARE_TOP_N}")
        if stage.start_ns == 0 and stage.end_ns == 0:
            return
        if stage.start_ns <= 0 or stage.end_ns <= 0:
            raise InvalidQuery("compare() timestamps must be positive integer unix nanoseconds")
        if stage.end_ns <= stage.start_ns:
            raise InvalidQuery("compare() end timestamp must be greater than start timestamp")


def validate_second_stage(stage: object) -> None:
    if isinstance(stage, MathExpr):
        if stage.op is not Op.NONE:
            if stage.op not in (Op.ADD, Op.SUB, Op.MULT, Op.DIV):
                op = OP_TEXT.get(stage.op, stage.op.name)
                raise InvalidQuery(f"unsupported math operation between queries: {op}")
            validate_second_stage(stage.lhs)
            validate_second_stage(stage.rhs)
        if stage.stage is not None:
            validate_second_stage(stage.stage)
    elif isinstance(stage, Chained):
        for s in stage.stages:
            validate_second_stage(s)
    elif isinstance(stage, TopK):
        if stage.limit <= 0:
            raise InvalidQuery("limit must be greater than 0")
    elif isinstance(stage, MetricsFilter):
        if stage.op not in (Op.GT, Op.GTE, Op.LT, Op.LTE, Op.EQ, Op.NEQ):
            raise InvalidQuery(f"unsupported metrics filter operation: {OP_TEXT.get(stage.op, stage.op.name)}")
    elif isinstance(stage, MetricsScalarOp):
        if stage.op not in (Op.ADD, Op.SUB, Op.MULT, Op.DIV):
            raise InvalidQuery(f"unsupported scalar operation: {OP_TEXT.get(stage.op, stage.op.name)}")


def is_valid_field(e: object) -> bool:
    """``validate() == nil`` for constant folding at parse time."""
    try:
        validate_field(e)
    except (InvalidQuery, Unsupported):
        return False
    return True
