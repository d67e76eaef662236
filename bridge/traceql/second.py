"""Pure: a metrics query's second stage on finished series (Tempo ``ast_metrics.go`` ``TopKBottomK``,
``MetricsFilter``, ``ChainedSecondStage``, ``ast_metrics_math.go`` ``MathExpression``, ``MetricsScalarOp``,
``engine_metrics.go`` ``processTopK`` / ``processBottomK``, ``series_heap.go``).

``topk(n)`` / ``bottomk(n)`` keep, at each timestamp, the n highest (lowest) values (ties: Tempo's order of series
keys), NaN elsewhere; a filter (``> 10``) turns the points that fail it into NaN and drops series left empty; scalar
arithmetic applies to every point (division by zero is NaN); ``(A) op (B)`` pairs series by labels (a series with no
labels on one side pairs with every series of the other) and names the result ``(a op b)`` when both sides are named.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from bridge.traceql.ast import (
    Chained,
    MathExpr,
    MetricsFilter,
    MetricsScalarOp,
    Op,
    SecondStage,
    TopK,
)
from bridge.traceql.timeseries import METRIC_NAME, NAN, QUERY_FRAGMENT, Series, SeriesSet, go_map_key, series_key
from bridge.traceql.values import Static, T


def process(stage: SecondStage | None, ss: SeriesSet, length: int) -> SeriesSet:
    if stage is None:
        return ss
    if isinstance(stage, Chained):
        for s in stage.stages:
            ss = process(s, ss, length)
        return ss
    if isinstance(stage, TopK):
        return _topk(ss, length, stage.limit, stage.op == "topk")
    if isinstance(stage, MetricsFilter):
        return _filter(ss, stage)
    if isinstance(stage, MetricsScalarOp):
        return _scalar(ss, stage)
    return _math(stage, ss, length)


def arithmetic(op: Op, a: float, b: float) -> float:
    """``applyArithmeticOp``."""
    if op is Op.ADD:
        return a + b
    if op is Op.SUB:
        return a - b
    if op is Op.MULT:
        return a * b
    if op is Op.DIV:
        return NAN if b == 0 else a / b
    return NAN


def _compare(op: Op, v: float, ref: float) -> bool:
    if op is Op.GT:
        return v > ref
    if op is Op.GTE:
        return v >= ref
    if op is Op.LT:
        return v < ref
    if op is Op.LTE:
        return v <= ref
    if op is Op.EQ:
        return v == ref
    if op is Op.NEQ:
        return v != ref
    return False


def _filter(ss: SeriesSet, f: MetricsFilter) -> SeriesSet:
    out: SeriesSet = {}
    for key, s in ss.items():
        values = [v if not math.isnan(v) and _compare(f.op, v, f.value) else NAN for v in s.values]
        if all(math.isnan(v) for v in values):
            continue
        exemplars = [e for e in s.exemplars if not math.isnan(e.value) and _compare(f.op, e.value, f.value)]
        out[key] = Series(s.labels, values, exemplars)
    return out


def _scalar(ss: SeriesSet, op: MetricsScalarOp) -> SeriesSet:
    out: SeriesSet = {}
    for key, s in ss.items():
        if op.scalar_on_left:
            values = [arithmetic(op.op, op.value, v) for v in s.values]
        else:
            values = [arithmetic(op.op, v, op.value) for v in s.values]
        exemplars = [
            type(e)(
                e.labels,
                arithmetic(op.op, op.value, e.value) if op.scalar_on_left else arithmetic(op.op, e.value, op.value),
                e.ts_ms,
            )
            for e in s.exemplars
        ]
        out[key] = Series(s.labels, values, exemplars)
    return out


def _key_order(a: Series, b: Series) -> int:
    """``compareSeriesMapKey`` over the first five labels (Tempo's fixed-size key)."""
    ka = [(n, go_map_key(v)) for n, v in a.labels if n != METRIC_NAME][:5]
    kb = [(n, go_map_key(v)) for n, v in b.labels if n != METRIC_NAME][:5]
    empty = ("", (int(T.NIL), 0, ""))
    ka += [empty] * (5 - len(ka))
    kb += [empty] * (5 - len(kb))
    for (na, va), (nb, vb) in zip(ka, kb, strict=True):
        if va[2] != vb[2]:
            return -1 if va[2] > vb[2] else 1
        if na != nb:
            return -1 if na > nb else 1
        if va[0] != vb[0]:
            return -1 if va[0] < vb[0] else 1
        if va[1] != vb[1]:
            return -1 if va[1] < vb[1] else 1
    return 0


def _topk(ss: SeriesSet, length: int, limit: int, top: bool) -> SeriesSet:
    """At each timestamp the ``limit`` best points; a series keeps the points it won."""
    if len(ss) <= limit:
        return ss
    items = list(ss.items())

    def better(x: tuple[Any, Series, float], y: tuple[Any, Series, float]) -> int:
        if x[2] != y[2]:
            return (-1 if x[2] > y[2] else 1) if top else (-1 if x[2] < y[2] else 1)
        c = _key_order(x[1], y[1])
        return -c if top else c

    out: SeriesSet = {}
    for i in range(length):
        points = [(k, s, s.values[i]) for k, s in items if i < len(s.values) and not math.isnan(s.values[i])]
        points.sort(key=functools.cmp_to_key(better))
        for k, s, v in points[:limit]:
            if k not in out:
                out[k] = Series(s.labels, [NAN] * length, s.exemplars)
            out[k].values[i] = v
    return out


def _leaf(expr: MathExpr, ss: SeriesSet, length: int) -> SeriesSet:
    out: SeriesSet = {}
    for s in ss.values():
        fragment = next((v for n, v in s.labels if n == QUERY_FRAGMENT), None)
        if fragment is not None and (fragment.type is not T.STRING or fragment.value != expr.key):
            continue
        labels = [(n, v) for n, v in s.labels if n != QUERY_FRAGMENT]
        out[series_key(labels)] = Series(labels, list(s.values), s.exemplars)
    return process(expr.stage, out, length)


def _math(expr: MathExpr, ss: SeriesSet, length: int) -> SeriesSet:
    if expr.op is Op.NONE:
        return _leaf(expr, ss, length)
    assert expr.lhs is not None and expr.rhs is not None
    lhs, rhs = _math(expr.lhs, ss, length), _math(expr.rhs, ss, length)
    target = rhs if () not in rhs else lhs
    out: SeriesSet = {}
    for key in target:
        left, left_fan = _match(lhs, key)
        right, right_fan = _match(rhs, key)
        if left is None or right is None:
            continue
        if left_fan == right_fan:
            exemplars = (
                (left.exemplars or []) + (right.exemplars or [])
                if left.exemplars and right.exemplars
                else (left.exemplars or right.exemplars)
            )
        else:
            exemplars = right.exemplars if left_fan else left.exemplars
        n = min(len(left.values), len(right.values))
        values = [arithmetic(expr.op, left.values[j], right.values[j]) for j in range(n)]
        out[key] = Series(_merge_labels(expr.op, left.labels, right.labels), values, exemplars)
    return process(expr.stage, out, length)


def _match(ss: SeriesSet, key: Any) -> tuple[Series | None, bool]:
    """``getTSMatch``: the series with this key, else one without labels (fan-out)."""
    if key in ss:
        return ss[key], False
    if () in ss:
        return ss[()], True
    return None, False


def _merge_labels(op: Op, left: list[tuple[str, Static]], right: list[tuple[str, Static]]) -> list[tuple[str, Static]]:
    names = {n for n, _ in left}
    out = list(left) + [(n, v) for n, v in right if n != METRIC_NAME and n not in names]
    lname = next((v for n, v in left if n == METRIC_NAME), None)
    rname = next((v for n, v in right if n == METRIC_NAME), None)
    if lname is None or rname is None or lname.type is not T.STRING or rname.type is not T.STRING:
        for i, (n, _) in enumerate(out):
            if n == METRIC_NAME:
                out[i] = out[-1]
                out.pop()
                break
        return out
    from bridge.traceql.ast import OP_TEXT

    combined = Static(T.STRING, f"({lname.value} {OP_TEXT[op]} {rname.value})")
    return [(n, combined) if n == METRIC_NAME else (n, v) for n, v in out]
