"""Pure: TraceQL's structural operators on one trace's spans, by their nested-set numbers — Tempo's own algorithms
(``vparquet5/block_traceql.go``: ``DescendantOf``, ``SiblingOf``, ``ChildOf``, ``nestedSetOneManyLoop``,
``nestedSetManyManyLoop``), in place sorts included: the order of the spans a structural query answers with is the
order these leave them in, so it is kept exactly.

Each function returns the right-hand spans related to some left-hand span (``falseForAll``: to none); ``invert``
turns descendant into ancestor and child into parent; ``union`` returns both sides' related spans.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from bridge.traceql.model import Span

Test = Callable[[Span, Span], bool]


def _first(items: list[Span], key: Callable[[Span], int], value: int, ascending: bool = True) -> int:
    """``sort.Search`` over items sorted by ``key``: the first whose key is at least ``value`` (ascending order) or
    at most ``value`` (descending order)."""
    if ascending:
        return bisect_left(items, value, key=key)
    return bisect_left(items, -value, key=lambda s: -key(s))


def _left(s: Span) -> int:
    return s.left


def _parent(s: Span) -> int:
    return s.nested_parent


def _is_descendant(a: Span, b: Span) -> bool:
    if a.left == 0 or b.left == 0 or a.right == 0 or b.right == 0:
        return False
    return a.left > b.left and a.right < b.right


def descendant_of(lhs: list[Span], rhs: list[Span], false_for_all: bool, invert: bool, union: bool) -> list[Span]:
    if not lhs and not rhs:
        return []
    if union:
        return _descendant_union(lhs, rhs, invert)
    lhs.sort(key=lambda s: s.left, reverse=not invert)
    out: list[Span] = []
    for r in rhs:
        if invert:
            found = _first(lhs, _left, r.left)
        else:
            found = _first(lhs, _left, r.left, ascending=False)
        matches = False
        for a in lhs[found:]:
            x, y = (r, a) if invert else (a, r)
            if _is_descendant(y, x):
                matches = True
                break
        if matches != false_for_all:
            out.append(r)
    return out


def _descendant_union(lhs: list[Span], rhs: list[Span], invert: bool) -> list[Span]:
    lhs.sort(key=lambda s: s.left)
    if lhs is not rhs:
        rhs.sort(key=lambda s: s.left)
    if invert:
        lhs, rhs = rhs, lhs
    out: list[Span] = []
    seen: set[int] = set()

    def add(s: Span) -> None:
        if id(s) not in seen:
            seen.add(id(s))
            out.append(s)

    def after(a: Span, b: Span) -> bool:
        return b.left > a.right

    li = ri = 0
    while li < len(lhs) and ri < len(rhs):
        l_span, r_span = lhs[li], rhs[ri]
        while ri < len(rhs):
            r_span = rhs[ri]
            if _is_descendant(r_span, l_span):
                add(r_span)
            if ri + 1 < len(rhs) and after(r_span, rhs[ri + 1]):
                ri += 1
                break
            ri += 1
        while li < len(lhs):
            l_span = lhs[li]
            if after(r_span, l_span):
                break
            if _is_descendant(r_span, l_span):
                add(l_span)
                if ri < len(rhs) and _is_descendant(rhs[ri], l_span):
                    break
            li += 1
    return out


def sibling_of(lhs: list[Span], rhs: list[Span], false_for_all: bool, union: bool) -> list[Span]:
    if not lhs and not rhs:
        return []
    if union:
        lhs.sort(key=lambda s: s.nested_parent)
        if lhs is not rhs:
            rhs.sort(key=lambda s: s.nested_parent)
        return _many_many(
            lhs,
            rhs,
            lambda s: s.nested_parent != 0,
            lambda a, b: a.nested_parent == b.nested_parent != 0 and a is not b,
            lambda a, b: b.nested_parent > a.nested_parent,
            false_for_all,
            union,
        )
    lhs.sort(key=lambda s: s.nested_parent)
    out: list[Span] = []
    for r in rhs:
        matches = False
        if r.nested_parent != 0:
            found = _first(lhs, _parent, r.nested_parent)
            if found < len(lhs):
                matches = lhs[found].nested_parent == r.nested_parent
                if matches and r is lhs[found]:
                    matches = found + 1 < len(lhs) and lhs[found + 1].nested_parent == r.nested_parent
        if matches != false_for_all:
            out.append(r)
    return out


def child_of(lhs: list[Span], rhs: list[Span], false_for_all: bool, invert: bool, union: bool) -> list[Span]:
    if not lhs and not rhs:
        return []

    def is_child(p: Span, c: Span) -> bool:
        return p.left == c.nested_parent and p.left != 0 and c.nested_parent != 0

    if union:
        if lhs is rhs:
            rhs = list(rhs)
        parents, children = (rhs, lhs) if invert else (lhs, rhs)
        parents.sort(key=lambda s: s.left)
        children.sort(key=lambda s: s.nested_parent)
        return _one_many(
            parents,
            children,
            lambda s: s.left != 0,
            is_child,
            lambda p, c: c.nested_parent > p.left,
            false_for_all,
            invert,
            union,
        )
    lhs.sort(key=(lambda s: s.nested_parent) if invert else (lambda s: s.left))
    out: list[Span] = []
    for r in rhs:
        if invert:
            found = _first(lhs, _parent, r.left)
        else:
            found = _first(lhs, _left, r.nested_parent)
        matches = False
        if found < len(lhs):
            matches = is_child(r, lhs[found]) if invert else is_child(lhs[found], r)
        if matches != false_for_all:
            out.append(r)
    return out


def _one_many(
    one: list[Span],
    many: list[Span],
    valid: Callable[[Span], bool],
    match: Test,
    after: Test,
    false_for_all: bool,
    invert: bool,
    union: bool,
) -> list[Span]:
    out: list[Span] = []
    seen: set[int] = set()

    def add(s: Span) -> None:
        if not union:
            out.append(s)
        elif id(s) not in seen:
            seen.add(id(s))
            out.append(s)

    mi = 0
    for o in one:
        if not valid(o):
            continue
        matches = False
        while mi < len(many):
            m = many[mi]
            if after(o, m):
                break
            if invert:
                if match(o, m):
                    matches = True
                    if not union:
                        break
                    add(m)
            elif match(o, m) != false_for_all:
                matches = True
                add(m)
            mi += 1
        if invert:
            if matches != false_for_all:
                add(o)
        elif matches and union:
            add(o)
    if false_for_all and not invert:
        for m in many[mi:]:
            add(m)
    return out


def _many_many(
    lhs: list[Span],
    rhs: list[Span],
    valid: Callable[[Span], bool],
    match: Test,
    after: Test,
    false_for_all: bool,
    union: bool,
) -> list[Span]:
    out: list[Span] = []
    seen: set[int] = set()

    def add(s: Span) -> None:
        if not union:
            out.append(s)
        elif id(s) not in seen:
            seen.add(id(s))
            out.append(s)

    rescan = 0
    for r in rhs:
        if not valid(r):
            continue
        li = rescan
        matches = False
        while li < len(lhs):
            l_span = lhs[li]
            if after(r, l_span):
                break
            if after(lhs[rescan], l_span):
                rescan = li
            if match(r, l_span):
                matches = True
                if union:
                    add(l_span)
            li += 1
        if matches != false_for_all:
            add(r)
    return out
