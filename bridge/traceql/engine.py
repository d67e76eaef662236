"""Pure: a TraceQL pipeline run over the spansets of one trace (Tempo ``ast_execute.go``, ``ast.go``
``SpansetFilter.evaluate``, ``Pipeline.evaluate``).

Each element maps spansets to spansets: a filter keeps the spans it is true for (the very spanset when it keeps them
all — structural operators sort their inputs in place, and that sharing decides the order spans come back in, so it is
kept), ``&&`` / ``||`` between spansets join their spans, structural operators relate them (``structure``), an
aggregate gives each spanset a scalar and an attribute (``count()`` = 3), ``by()`` splits a spanset by a value,
``coalesce()`` joins them again, ``select()`` only asks for more attributes in the answer.

A filter over event (link) attributes is true for a span when it is true with one of the span's events (links).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from bridge.traceql.ast import (
    Aggregate,
    CoalesceOp,
    GroupOp,
    Op,
    Pipeline,
    ScalarFilter,
    Scope,
    SelectOp,
    SpansetFilter,
    SpansetOp,
)
from bridge.traceql.errors import EvalError
from bridge.traceql.fields import EVENT_INTRINSICS, LINK_INTRINSICS, compile_field, references_scope
from bridge.traceql.model import Span, Spanset
from bridge.traceql.ops import compare_for_filter
from bridge.traceql.structure import child_of, descendant_of, sibling_of
from bridge.traceql.values import NIL, Static, T, compare, map_key

Evaluate = Callable[[list[Spanset]], list[Spanset]]

_DESCENDANT: Final = {Op.NOT_DESCENDANT, Op.NOT_ANCESTOR, Op.ANCESTOR, Op.DESCENDANT, Op.UNION_ANCESTOR}
_DESCENDANT_ALL: Final = _DESCENDANT | {Op.UNION_DESCENDANT}
_CHILD: Final = {Op.NOT_CHILD, Op.CHILD, Op.NOT_PARENT, Op.PARENT, Op.UNION_PARENT, Op.UNION_CHILD}
_SIBLING: Final = {Op.NOT_SIBLING, Op.SIBLING, Op.UNION_SIBLING}
MULTIPLE_SPANSETS: Final = (
    "spanset operators are not supported for multiple spansets per trace. consider using coalesce()"
)


def span_predicate(expr: object) -> Callable[[Span], bool]:
    """True when the filter expression is true for the span (for one of its events / links when it reads them)."""
    fn = compile_field(expr)
    events = references_scope(expr, Scope.EVENT, EVENT_INTRINSICS)
    links = references_scope(expr, Scope.LINK, LINK_INTRINSICS)

    def plain(s: Span) -> bool:
        v = fn(s)
        return v.type is T.BOOLEAN and bool(v.value)

    if not events and not links:
        return plain

    def each(s: Span) -> bool:
        try:
            for event in s.events if events and s.events else [None]:
                s.event = event
                for link in s.links if links and s.links else [None]:
                    s.link = link
                    if plain(s):
                        return True
            return False
        finally:
            s.event = s.link = None

    return each


def compile_pipeline(p: Pipeline) -> Evaluate:
    steps = [compile_element(e) for e in p.elements]

    def run(spansets: list[Spanset]) -> list[Spanset]:
        for step in steps:
            spansets = step(spansets)
            if not spansets:
                return []
        return spansets

    return run


def compile_element(e: object) -> Evaluate:
    if isinstance(e, Pipeline):
        return compile_pipeline(e)
    if isinstance(e, SpansetFilter):
        return _filter(e)
    if isinstance(e, SpansetOp):
        return _spanset_op(e)
    if isinstance(e, ScalarFilter):
        return _scalar_filter(e)
    if isinstance(e, Aggregate):
        return _aggregate(e)
    if isinstance(e, GroupOp):
        return _group(e)
    if isinstance(e, CoalesceOp):
        return _coalesce
    if isinstance(e, SelectOp):
        return lambda spansets: spansets
    raise EvalError(f"{e} cannot be evaluated")


def _filter(f: SpansetFilter) -> Evaluate:
    keep = span_predicate(f.expr)

    def run(spansets: list[Spanset]) -> list[Spanset]:
        out: list[Spanset] | None = None
        for i, ss in enumerate(spansets):
            matching = [s for s in ss.spans if keep(s)] if ss.spans else []
            if matching and len(matching) == len(ss.spans):
                if out is not None:
                    out.append(ss)
                continue
            if out is None:
                out = list(spansets[:i])
            if matching:
                part = ss.clone()
                part.spans = matching
                out.append(part)
        return spansets if out is None else out

    return run


def _coalesce(spansets: list[Spanset]) -> list[Spanset]:
    if not spansets:
        return []
    return [Spanset(spansets[0].trace, [s for ss in spansets for s in ss.spans])]


def _unique(lhs: Sequence[Spanset], rhs: Sequence[Spanset]) -> list[Span]:
    """``uniqueSpans``: the smaller side's spans, then the larger side's not already there."""
    left = sum(len(ss.spans) for ss in lhs)
    right = sum(len(ss.spans) for ss in rhs)
    smaller, larger = (lhs, rhs) if left < right else (rhs, lhs)
    out = [s for ss in smaller for s in ss.spans]
    seen = {id(s) for s in out}
    out += [s for ss in larger for s in ss.spans if id(s) not in seen]
    return out


def _relation(op: Op) -> Callable[[list[Span], list[Span]], list[Span]]:
    if op in _DESCENDANT_ALL:
        ffa = op in (Op.NOT_DESCENDANT, Op.NOT_ANCESTOR)
        invert = op in (Op.ANCESTOR, Op.NOT_ANCESTOR, Op.UNION_ANCESTOR)
        union = op in (Op.UNION_ANCESTOR, Op.UNION_DESCENDANT)
        return lambda lhs, rhs: descendant_of(lhs, rhs, ffa, invert, union)
    if op in _CHILD:
        ffa = op in (Op.NOT_PARENT, Op.NOT_CHILD)
        invert = op in (Op.PARENT, Op.NOT_PARENT, Op.UNION_PARENT)
        union = op in (Op.UNION_PARENT, Op.UNION_CHILD)
        return lambda lhs, rhs: child_of(lhs, rhs, ffa, invert, union)
    if op in _SIBLING:
        ffa = op is Op.NOT_SIBLING
        union = op is Op.UNION_SIBLING
        return lambda lhs, rhs: sibling_of(lhs, rhs, ffa, union)
    raise EvalError(f"spanset operation ({op.name}) not supported")


def _spanset_op(o: SpansetOp) -> Evaluate:
    left, right = compile_element(o.lhs), compile_element(o.rhs)
    relate = None if o.op in (Op.SS_AND, Op.UNION) else _relation(o.op)

    def run(spansets: list[Spanset]) -> list[Spanset]:
        out: list[Spanset] = []
        for ss in spansets:
            lhs, rhs = left([ss]), right([ss])
            if relate is None:
                if (lhs and rhs) if o.op is Op.SS_AND else (lhs or rhs):
                    _add(out, ss, _unique(lhs, rhs))
                continue
            if not rhs:
                continue
            if len(lhs) > 1 or len(rhs) > 1:
                raise EvalError(MULTIPLE_SPANSETS)
            if not rhs[0].spans:
                continue
            _add(out, ss, relate(lhs[0].spans if lhs else [], rhs[0].spans))
        return out

    return run


def _add(out: list[Spanset], source: Spanset, spans: list[Span]) -> None:
    if spans:
        part = source.clone()
        part.spans = spans
        out.append(part)


def _scalar_filter(f: ScalarFilter) -> Evaluate:
    if not isinstance(f.lhs, Aggregate) or not isinstance(f.rhs, Static):
        raise EvalError(f"scalar filter ({f}) not supported")
    aggregate, value, op = _aggregate(f.lhs), f.rhs, f.op

    def run(spansets: list[Spanset]) -> list[Spanset]:
        return [ss for ss in aggregate(spansets) if compare_for_filter(op, ss.scalar, value)]

    return run


@dataclass(slots=True)
class _Sum:
    value: Static | None = None
    count: int = 0

    def add(self, v: Static) -> None:
        """``sumInto``: values of another type than the first are skipped (Tempo)."""
        self.count += 1
        if self.value is None:
            self.value = v
        elif self.value.type is v.type and v.type in (T.INT, T.FLOAT, T.DURATION):
            self.value = Static(v.type, self.value.value + v.value)


def _aggregate(a: Aggregate) -> Evaluate:
    name = str(a)
    value_of = compile_field(a.expr) if a.expr is not None else None

    def reduce(ss: Spanset) -> Static | None:
        if a.op == "count":
            return Static(T.INT, len(ss.spans))
        assert value_of is not None
        values = [v for v in (value_of(s) for s in ss.spans) if v.type is not T.NIL]
        if not values:
            return None
        if a.op in ("sum", "avg"):
            total = _Sum()
            for v in values:
                total.add(v)
            assert total.value is not None
            return total.value if a.op == "sum" else _divide(total.value, total.count)
        best = values[0]
        for v in values[1:]:
            c = compare(v, best)
            if (a.op == "max" and c > 0) or (a.op == "min" and c == -1):
                best = v
        return best

    def run(spansets: list[Spanset]) -> list[Spanset]:
        out: list[Spanset] = []
        for ss in spansets:
            scalar = reduce(ss)
            if scalar is None:
                continue
            copy = ss.clone()
            copy.scalar = scalar
            copy.attributes.append((name, scalar))
            out.append(copy)
        return out

    return run


def _divide(total: Static, n: int) -> Static:
    """``divideBy``: an int average is a float; a duration's stays a duration (Go integer division)."""
    if total.type is T.INT:
        return Static(T.FLOAT, total.value / n)
    if total.type is T.DURATION:
        q = abs(total.value) // n
        return Static(T.DURATION, q if total.value >= 0 else -q)
    if total.type is T.FLOAT:
        return Static(T.FLOAT, total.value / n)
    return total


def _group(g: GroupOp) -> Evaluate:
    value_of = compile_field(g.expr)
    name = str(g)

    def run(spansets: list[Spanset]) -> list[Spanset]:
        out: list[Spanset] = []
        for ss in spansets:
            groups: dict[tuple[int, object], Spanset] = {}
            for s in ss.spans:
                v = value_of(s)
                key = map_key(v)
                group = groups.get(key)
                if group is None:
                    group = groups[key] = Spanset(ss.trace, [], NIL, [*ss.attributes, (name, v)])
                group.spans.append(s)
            out.extend(groups.values())
        return out

    return run
