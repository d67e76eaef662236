"""Pure, build time only: LALR(1) parse tables from a grammar with yacc's precedence rules (``grammar.py`` in,
``lalr_tables.json`` out via ``scripts/gen_traceql_tables.py``; a test checks the committed tables are current).

The construction is the textbook one (Aho, Lam, Sethi, Ullman, *Compilers*, 4.7.5): LR(0) item sets, then lookaheads
found spontaneously or propagated from kernel items until nothing changes. Conflicts are settled as yacc settles them:
a shift/reduce conflict by the precedence of the production (its ``%prec`` token, else its last terminal) against
the token's — higher wins, equal goes by associativity (left: reduce, right: shift, nonassoc: error) — and by a shift
when either has none; a reduce/reduce conflict by the earlier production. The grammar has no empty productions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Production = tuple[str, tuple[str, ...], str, str]
Item = tuple[int, int]

END = "$end"
ACCEPT = "$accept"


@dataclass(frozen=True, slots=True)
class Tables:
    terminals: tuple[str, ...]
    nonterminals: tuple[str, ...]
    productions: tuple[tuple[str, int, str], ...]  # (lhs, length, action); production 0 is $accept → start
    actions: tuple[
        dict[str, int], ...
    ]  # state → token → shift (n >= 0: to state n) / reduce (-p - 1) / accept (-0x7fff)
    gotos: tuple[dict[str, int], ...]  # state → nonterminal → state
    conflicts: tuple[str, ...]  # shift/reduce settled by default shift, reduce/reduce: what yacc would report


ACCEPT_ACTION = -0x7FFF


def build(
    productions: Sequence[tuple[str, str, str, str]], precedence: Sequence[tuple[str, Sequence[str]]], start: str
) -> Tables:
    prods: list[tuple[str, tuple[str, ...], str, str]] = [(ACCEPT, (start,), "", "")]
    prods += [(lhs, tuple(rhs.split()), action, prec) for lhs, rhs, action, prec in productions]
    nonterminals = sorted({p[0] for p in prods})
    nt_set = set(nonterminals)
    terminals = sorted({s for p in prods for s in p[1] if s not in nt_set} | {END})
    by_lhs: dict[str, list[int]] = {nt: [] for nt in nonterminals}
    for i, p in enumerate(prods):
        by_lhs[p[0]].append(i)
    first = _first_sets(prods, nt_set)

    states, transitions = _lr0(prods, by_lhs, nt_set)
    lookaheads = _lookaheads(prods, by_lhs, nt_set, first, states, transitions)

    levels: dict[str, tuple[int, str]] = {}
    for level, (assoc, tokens) in enumerate(precedence, start=1):
        for token in tokens:
            levels[token] = (level, assoc)
    actions: list[dict[str, int]] = []
    gotos: list[dict[str, int]] = []
    conflicts: list[str] = []
    for index, kernel in enumerate(states):
        row: dict[str, int] = {}
        for symbol, target in transitions[index].items():
            if symbol not in nt_set:
                row[symbol] = target
        for prod, dot in kernel:
            if dot != len(prods[prod][1]):
                continue
            for token in sorted(lookaheads[(index, (prod, dot))]):
                if prod == 0:
                    row[token] = ACCEPT_ACTION
                    continue
                _add_reduce(row, token, prod, prods, levels, conflicts, index)
        actions.append({t: a for t, a in row.items() if a is not None})
        gotos.append({s: t for s, t in transitions[index].items() if s in nt_set})
    return Tables(
        terminals=tuple(terminals),
        nonterminals=tuple(nonterminals),
        productions=tuple((p[0], len(p[1]), p[2]) for p in prods),
        actions=tuple(actions),
        gotos=tuple(gotos),
        conflicts=tuple(conflicts),
    )


def _rule_level(prod: tuple[str, tuple[str, ...], str, str], nt: set[str], levels: dict[str, tuple[int, str]]) -> int:
    if prod[3]:
        return levels[prod[3]][0]
    for symbol in reversed(prod[1]):
        if symbol not in nt:
            return levels.get(symbol, (0, ""))[0]
    return 0


def _add_reduce(
    row: dict[str, int],
    token: str,
    prod: int,
    prods: list[tuple[str, tuple[str, ...], str, str]],
    levels: dict[str, tuple[int, str]],
    conflicts: list[str],
    state: int,
) -> None:
    nt = {p[0] for p in prods}
    reduce = -prod - 1
    existing = row.get(token)
    if existing is None and token not in row:
        row[token] = reduce
        return
    if existing is None:  # a nonassoc error entry stays an error
        return
    if existing < 0:  # reduce/reduce: the earlier production
        other = -existing - 1
        conflicts.append(f"state {state}: reduce/reduce on {token} ({other} vs {prod})")
        row[token] = -min(other, prod) - 1
        return
    rule = _rule_level(prods[prod], nt, levels)
    tok_level, assoc = levels.get(token, (0, ""))
    if rule == 0 or tok_level == 0:
        conflicts.append(f"state {state}: shift/reduce on {token} (production {prod}), shift")
        return
    if rule > tok_level:
        row[token] = reduce
    elif rule == tok_level:
        if assoc == "left":
            row[token] = reduce
        elif assoc == "nonassoc":
            row[token] = None  # type: ignore[assignment]


def _first_sets(prods: list[tuple[str, tuple[str, ...], str, str]], nt: set[str]) -> dict[str, set[str]]:
    first: dict[str, set[str]] = {n: set() for n in nt}
    changed = True
    while changed:
        changed = False
        for lhs, rhs, _, _ in prods:
            head = rhs[0]
            add = first[head] if head in nt else {head}
            if not add <= first[lhs]:
                first[lhs] |= add
                changed = True
    return first


def _closure0(
    kernel: frozenset[Item], prods: list[Production], by_lhs: dict[str, list[int]], nt: set[str]
) -> set[Item]:
    items = set(kernel)
    todo = list(kernel)
    while todo:
        prod, dot = todo.pop()
        rhs = prods[prod][1]
        if dot < len(rhs) and rhs[dot] in nt:
            for q in by_lhs[rhs[dot]]:
                if (q, 0) not in items:
                    items.add((q, 0))
                    todo.append((q, 0))
    return items


def _lr0(
    prods: list[Production], by_lhs: dict[str, list[int]], nt: set[str]
) -> tuple[list[frozenset[Item]], list[dict[str, int]]]:
    start = frozenset({(0, 0)})
    states = [start]
    index = {start: 0}
    transitions: list[dict[str, int]] = []
    i = 0
    while i < len(states):
        items = _closure0(states[i], prods, by_lhs, nt)
        moves: dict[str, set[tuple[int, int]]] = {}
        for prod, dot in items:
            rhs = prods[prod][1]
            if dot < len(rhs):
                moves.setdefault(rhs[dot], set()).add((prod, dot + 1))
        row: dict[str, int] = {}
        for symbol in sorted(moves):
            kernel = frozenset(moves[symbol])
            if kernel not in index:
                index[kernel] = len(states)
                states.append(kernel)
            row[symbol] = index[kernel]
        transitions.append(row)
        i += 1
    return states, transitions


def _lookaheads(
    prods: list[Production],
    by_lhs: dict[str, list[int]],
    nt: set[str],
    first: dict[str, set[str]],
    states: list[frozenset[Item]],
    transitions: list[dict[str, int]],
) -> dict[tuple[int, tuple[int, int]], set[str]]:
    la: dict[tuple[int, tuple[int, int]], set[str]] = {(s, item): set() for s, k in enumerate(states) for item in k}
    propagate: dict[tuple[int, tuple[int, int]], set[tuple[int, tuple[int, int]]]] = {key: set() for key in la}
    la[(0, (0, 0))].add(END)
    for s, kernel in enumerate(states):
        for item in kernel:
            for target_item, tokens in _closure1_moves(item, prods, by_lhs, nt, first):
                symbol = prods[target_item[0]][1][target_item[1] - 1]
                target = (transitions[s][symbol], target_item)
                if "#" in tokens:
                    propagate[(s, item)].add(target)
                la[target] |= tokens - {"#"}
    changed = True
    while changed:
        changed = False
        for source, targets in propagate.items():
            tokens = la[source]
            for target in targets:
                if not tokens <= la[target]:
                    la[target] |= tokens
                    changed = True
    return la


def _closure1_moves(
    kernel: Item, prods: list[Production], by_lhs: dict[str, list[int]], nt: set[str], first: dict[str, set[str]]
) -> list[tuple[tuple[int, int], set[str]]]:
    """The LR(1) closure of ``[kernel, #]``: for each item with a symbol after its dot, the item after moving over
    it and the lookaheads it carries (``#`` marks those propagated from the kernel)."""
    expected: dict[str, set[str]] = {}  # nonterminal → lookaheads of its productions in the closure
    todo: list[tuple[int, int, frozenset[str]]] = [(kernel[0], kernel[1], frozenset({"#"}))]
    while todo:
        prod, dot, tokens = todo.pop()
        rhs = prods[prod][1]
        if dot >= len(rhs) or rhs[dot] not in nt:
            continue
        follow: set[str] | frozenset[str] = (
            (first[rhs[dot + 1]] if rhs[dot + 1] in nt else {rhs[dot + 1]}) if dot + 1 < len(rhs) else tokens
        )
        have = expected.setdefault(rhs[dot], set())
        new = set(follow) - have
        if not new:
            continue
        have |= new
        for q in by_lhs[rhs[dot]]:
            todo.append((q, 0, frozenset(new)))
    moves: list[tuple[tuple[int, int], set[str]]] = []
    prod, dot = kernel
    if dot < len(prods[prod][1]):
        moves.append(((prod, dot + 1), {"#"}))
    for symbol, lookaheads in expected.items():
        for q in by_lhs[symbol]:
            moves.append(((q, 1), set(lookaheads)))
    return moves
