"""Pure: what each production of ``grammar.py`` builds — Tempo's constructors in ``ast.go`` / ``ast_metrics.go`` /
``ast_metrics_math.go`` (``newBinaryOperation``, ``newRootExprWithMetrics``, ``newRootExprScalarMath``, …).

Constant parts are folded as Tempo folds them while parsing: a field expression that reads no span and validates
becomes its value (``{ 1 = 2 }`` is ``{ false }``); a trace id compared with ``trace:id`` loses its leading zeros;
metric arithmetic on literals folds with TraceQL's own int/float rules (``1 / 2`` is 0) and refuses durations.
Errors found while building (an unknown identifier, a division by zero in a literal) are collected, not raised:
the parse goes on as yacc's does and the first error is the one reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from bridge.traceql import ast
from bridge.traceql.ast import (
    Aggregate,
    Attribute,
    BinaryOp,
    Chained,
    GroupOp,
    Hint,
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
    intrinsic,
    references_span,
    scoped_attribute,
)
from bridge.traceql.errors import EvalError, QueryError
from bridge.traceql.ops import binary, unary
from bridge.traceql.validate import is_valid_field
from bridge.traceql.values import FALSE, INT64_MAX, INT64_MIN, TRUE, Static, T, to_float


class Context:
    """Errors found while building; the first is the parse's error."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, int, int]] = []
        self.line = 0  # where the parser stands: the last token it shifted (Tempo reports the lexer's position)
        self.col = 0

    def error(self, message: str) -> None:
        self.errors.append((message, self.line, self.col))


# ------------------------------------------------------------------------------------------------ constructors


def new_binary(op: Op, lhs: Any, rhs: Any) -> Any:
    """``newBinaryOperation``."""
    if isinstance(lhs, Attribute) and lhs.intrinsic is I.TRACE_ID and isinstance(rhs, Static):
        rhs = _trace_id_operand(rhs)
    if isinstance(rhs, Attribute) and rhs.intrinsic is I.TRACE_ID and isinstance(lhs, Static):
        lhs = _trace_id_operand(lhs)
    node = BinaryOp(op, lhs, rhs)
    if not references_span(node) and is_valid_field(node):
        try:
            return evaluate_constant(node)
        except QueryError:
            return node
    return node


def _trace_id_operand(s: Static) -> Static:
    return Static(T.STRING, s.value.lstrip("0")) if s.type is T.STRING else s


def new_unary(op: Op, expr: Any) -> Any:
    """``newUnaryOperation``."""
    node = UnaryOp(op, expr)
    if not references_span(node) and is_valid_field(node):
        try:
            return evaluate_constant(node)
        except QueryError:
            return node
    return node


def evaluate_constant(e: Any) -> Static:
    """A field expression with no attribute in it (``execute(nil)``)."""
    if isinstance(e, Static):
        return e
    if isinstance(e, BinaryOp):
        lhs = evaluate_constant(e.lhs)
        if lhs.type is T.BOOLEAN and ((e.op is Op.AND and not lhs.value) or (e.op is Op.OR and lhs.value)):
            return TRUE if e.op is Op.OR else FALSE
        return binary(e.op, lhs, evaluate_constant(e.rhs))
    if isinstance(e, UnaryOp):
        return unary(e.op, evaluate_constant(e.expr))
    raise EvalError(f"{e} is not a constant")


def pipeline_of(e: Any) -> Pipeline:
    return e if isinstance(e, Pipeline) else Pipeline([e])


def root_plain(ctx: Context, e: Any) -> Root:
    p = pipeline_of(e)
    key = str(p)
    return Root({key: p}, {}, MathExpr(Op.NONE, key))


def _root_metrics(e: Any, m1: Any, m2: list[Any] | None) -> Root:
    p = pipeline_of(e)
    key = str(p) + " | " + str(m1)
    stage = Chained(list(m2)) if m2 is not None else None
    return Root({key: p}, {key: m1}, MathExpr(Op.NONE, key, stage=stage))


def root_math(op: Op, lhs: Root, rhs: Root) -> Root:
    """``newRootExprMath``: both sub-queries kept, their results combined by ``op``."""
    return Root(
        {**lhs.pipelines, **rhs.pipelines},
        {**lhs.first_stages, **rhs.first_stages},
        MathExpr(op, lhs=lhs.expression, rhs=rhs.expression),
    )


def chain_second_stage(root: Root, stages: list[Any]) -> Root:
    """``chainMathSecondStage``."""
    if not stages:
        return root
    expr = root.expression
    expr.stage = Chained(list(stages)) if expr.stage is None else Chained([expr.stage, *stages])
    return root


def root_scalar_math(ctx: Context, op: Op, scalar: Static, root: Root, scalar_on_left: bool) -> Root:
    """``newRootExprScalarMath`` with ``metricScalarFloat``: a duration is refused."""
    if scalar.type is T.DURATION:
        ctx.error("duration cannot be used as a scalar operand in metric arithmetic")
    stage = MetricsScalarOp(op, to_float(scalar), scalar_on_left)
    expr = root.expression
    if expr.stage is None:
        expr.stage = stage
    elif isinstance(expr.stage, Chained):
        expr.stage.stages.append(stage)
    else:
        expr.stage = Chained([expr.stage, stage])
    return root


def fold_arith(ctx: Context, op: Op, lhs: Static, rhs: Static) -> Static:
    """``foldConstArith``."""
    if lhs.type is T.DURATION or rhs.type is T.DURATION:
        ctx.error("duration cannot be used in scalar arithmetic")
        return Static(T.NIL, None)
    try:
        return binary(op, lhs, rhs)
    except QueryError as exc:
        ctx.error(exc.message)
        return Static(T.NIL, None)


def fold_negate(ctx: Context, _minus: Any, s: Static) -> Static:
    try:
        return unary(Op.SUB, s)
    except QueryError as exc:
        ctx.error(exc.message)
        return Static(T.NIL, None)


def static_identifier(ctx: Context, name: str) -> Static:
    if name == "minInt":
        return Static(T.INT, INT64_MIN)
    if name == "maxInt":
        return Static(T.INT, INT64_MAX)
    ctx.error("unknown identifier: " + name)
    return Static(T.NIL, None)


def metrics_filter(ctx: Context, op: Op, s: Static) -> MetricsFilter:
    """``newMetricsFilterFromStatic``: a duration is compared in seconds."""
    value = to_float(s)
    if s.type is T.DURATION:
        value /= 1e9
    return MetricsFilter(op, value)


# -------------------------------------------------------------------------------------------------- the table


def _const(value: Any) -> Callable[..., Any]:
    return lambda ctx, *_: value


def _binary_field(op: Op) -> Callable[..., Any]:
    return lambda ctx, lhs, _tok, rhs: new_binary(op, lhs, rhs)


def _attr(scope: Scope, parent: bool, index: int) -> Callable[..., Any]:
    def make(ctx: Context, *args: Any) -> Attribute:
        name = args[index]
        if scope is Scope.NONE and not parent:
            return Attribute(name)
        return scoped_attribute(scope, parent, name)

    return make


def _metric(op: str, with_attr: bool, with_by: bool) -> Callable[..., Any]:
    def make(ctx: Context, *args: Any) -> MetricsAggregate:
        attr = args[2] if with_attr else None
        by = list(args[-2]) if with_by else []
        return MetricsAggregate(op, attr, by)

    return make


def _quantile(with_by: bool) -> Callable[..., Any]:
    def make(ctx: Context, *args: Any) -> MetricsAggregate:
        return MetricsAggregate("quantile_over_time", args[2], list(args[-2]) if with_by else [], list(args[4]))

    return make


def _actions() -> dict[str, Callable[..., Any]]:
    a: dict[str, Callable[..., Any]] = {
        "first": lambda ctx, x, *_: x,
        "second": lambda ctx, _a, x, *_: x,
        "third": lambda ctx, _a, _b, x, *_: x,
        "root_plain": root_plain,
        "root_metrics": lambda ctx, e, _p, m: _root_metrics(e, m, None),
        "root_metrics_two_stage": lambda ctx, e, _p, m, s: _root_metrics(e, m, s),
        "root_chain_second_stage": lambda ctx, r, s: chain_second_stage(r, s),
        "root_hints": _with_hints,
        "wrapped_metrics": lambda ctx, _o, e, _p, m, _c: _root_metrics(e, m, None),
        "wrapped_metrics_two_stage": lambda ctx, _o, e, _p, m, s, _c: _root_metrics(e, m, s),
        "pipeline_new": lambda ctx, e: Pipeline([e]),
        "pipeline_add": lambda ctx, p, _pipe, e: Pipeline([*p.elements, e]),
        "group": lambda ctx, _by, _o, e, _c: GroupOp(e),
        "coalesce": lambda ctx, *_: ast.CoalesceOp(),
        "select": lambda ctx, _s, _o, attrs, _c: SelectOp(list(attrs)),
        "list_new": lambda ctx, x: [x],
        "list_new_float": lambda ctx, x: [float(x)],
        "list_new_second": lambda ctx, _p, x: [x],
        "list_add": lambda ctx, xs, _sep, x: [*xs, x],
        "list_add_float": lambda ctx, xs, _sep, x: [*xs, float(x)],
        "list_add_second": lambda ctx, xs, x: [*xs, x],
        "filter_empty": lambda ctx, *_: SpansetFilter(TRUE),
        "filter": lambda ctx, _o, e, _c: SpansetFilter(e),
        "scalar_filter": lambda ctx, lhs, op, rhs: ScalarFilter(op, lhs, rhs),
        "agg_count": lambda ctx, *_: Aggregate("count", None),
        "hint": lambda ctx, name, _eq, value: Hint(name, value),
        "topk": lambda ctx, _t, _o, n, _c: TopK("topk", n),
        "bottomk": lambda ctx, _t, _o, n, _c: TopK("bottomk", n),
        "metrics_filter": metrics_filter,
        "m_rate": _metric("rate", False, False),
        "m_rate_by": _metric("rate", False, True),
        "m_count": _metric("count_over_time", False, False),
        "m_count_by": _metric("count_over_time", False, True),
        "m_quantile": _quantile(False),
        "m_quantile_by": _quantile(True),
        "m_compare": lambda ctx, _c, _o, f, _e: MetricsCompare(f, 10, 0, 0),
        "m_compare_n": lambda ctx, _c, _o, f, _x, n, _e: MetricsCompare(f, n, 0, 0),
        "m_compare_window": lambda ctx, _c, _o, f, _x, n, _y, s, _z, e, _e: MetricsCompare(f, n, s, e),
        "static_string": lambda ctx, v: Static(T.STRING, v),
        "static_int": lambda ctx, v: Static(T.INT, v),
        "static_float": lambda ctx, v: Static(T.FLOAT, v),
        "static_duration": lambda ctx, v: Static(T.DURATION, v),
        "static_true": _const(TRUE),
        "static_false": _const(FALSE),
        "static_false_3": _const(FALSE),
        "static_identifier": static_identifier,
        "exists_left": lambda ctx, e, _n, _nil: new_unary(Op.EXISTS, e),
        "exists_right": lambda ctx, _nil, _n, e: new_unary(Op.EXISTS, e),
        "not_exists_left": lambda ctx, e, _eq, _nil: new_unary(Op.NOT_EXISTS, e),
        "not_exists_right": lambda ctx, _nil, _eq, e: new_unary(Op.NOT_EXISTS, e),
        "negate": lambda ctx, _m, e: new_unary(Op.SUB, e),
        "logical_not": lambda ctx, _n, e: new_unary(Op.NOT, e),
        "fold_negate": fold_negate,
        "attr_plain": _attr(Scope.NONE, False, 1),
        "attr_resource": _attr(Scope.RESOURCE, False, 1),
        "attr_span": _attr(Scope.SPAN, False, 1),
        "attr_parent": _attr(Scope.NONE, True, 1),
        "attr_parent_resource": _attr(Scope.RESOURCE, True, 2),
        "attr_parent_span": _attr(Scope.SPAN, True, 2),
        "attr_event": _attr(Scope.EVENT, False, 1),
        "attr_link": _attr(Scope.LINK, False, 1),
        "attr_instrumentation": _attr(Scope.INSTRUMENTATION, False, 1),
    }
    a.update(_generated_actions())
    return a


def _generated_actions() -> dict[str, Callable[..., Any]]:
    """The families of actions: one per operator, aggregate, metric, intrinsic, status and kind."""
    a: dict[str, Callable[..., Any]] = {}
    for name in ("EQ", "NEQ", "LT", "LTE", "GT", "GTE"):
        a[f"op_{name}"] = _const(Op[name])
    for op in Op:
        a[f"ss_{op.name}"] = (lambda o: lambda ctx, lhs, _t, rhs: SpansetOp(o, lhs, rhs))(op)
        a[f"sc_{op.name}"] = (lambda o: lambda ctx, lhs, _t, rhs: ScalarOp(o, lhs, rhs))(op)
        a[f"bin_{op.name}"] = _binary_field(op)
        a[f"math_{op.name}"] = (lambda o: lambda ctx, lhs, _t, rhs: root_math(o, lhs, rhs))(op)
        a[f"math_scalar_right_{op.name}"] = (lambda o: lambda ctx, r, _t, s: root_scalar_math(ctx, o, s, r, False))(op)
        a[f"math_scalar_left_{op.name}"] = (lambda o: lambda ctx, s, _t, r: root_scalar_math(ctx, o, s, r, True))(op)
        a[f"fold_{op.name}"] = (lambda o: lambda ctx, lhs, _t, rhs: fold_arith(ctx, o, lhs, rhs))(op)
    for agg in ("max", "min", "avg", "sum"):
        a[f"agg_{agg}"] = (lambda g: lambda ctx, _a, _o, e, _c: Aggregate(g, e))(agg)
    for name in ("min_over_time", "max_over_time", "sum_over_time", "avg_over_time", "histogram_over_time"):
        a[f"m_{name}"] = _metric(name, True, False)
        a[f"m_{name}_by"] = _metric(name, True, True)
    for i in I:
        a[f"intrinsic_{i.name}"] = (lambda x: lambda ctx, *_: intrinsic(x))(i)
    for token, status in (("ok", 1), ("error", 0), ("unset", 2)):
        a[f"status_{token}"] = _const(Static(T.STATUS, status))
    for number, kind in enumerate(("unspecified", "internal", "client", "server", "producer", "consumer")):
        a[f"kind_{kind}"] = _const(Static(T.KIND, number))
    return a


def _with_hints(ctx: Context, root: Root, hints: list[Hint]) -> Root:
    root.hints = list(hints)
    return root


ACTIONS: Final = _actions()
