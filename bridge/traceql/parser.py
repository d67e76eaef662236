"""Pure: TraceQL text → ``ast.Root`` (Tempo ``parse.go`` ``Parse``): tokens (``lexer``), the LALR(1) tables of
the grammar (``_tables``, generated from ``grammar`` by ``lalr``), the nodes of ``build``, then Tempo's one AST
rewrite (``ast_rewriter.go``: ``.a = "x" || .a = "y"`` becomes ``.a IN ["x", "y"]``, and the same for ``!=`` with
``&&`` and the regular-expression forms) — it changes how ``by()`` names read, so it is done here too.

Errors read as Tempo's, to the letter: tokens are read when goyacc's parser would read them, a state's default
reduction is taken as goyacc takes it, the expected tokens are listed as goyacc lists them (``syntax error: unexpected
}, expecting ...``), at the lexer's line and column; the first error wins.
"""

from __future__ import annotations

from typing import Any, Final

from bridge.traceql import _tables
from bridge.traceql.ast import (
    Aggregate,
    Attribute,
    BinaryOp,
    GroupOp,
    MathExpr,
    Op,
    Pipeline,
    Root,
    ScalarFilter,
    ScalarOp,
    SpansetFilter,
    SpansetOp,
    UnaryOp,
)
from bridge.traceql.build import ACTIONS, Context, new_binary, new_unary
from bridge.traceql.errors import ParseError
from bridge.traceql.grammar import TOKEN_ORDER
from bridge.traceql.lexer import TEXT_OF, LexError, Token, tokenize
from bridge.traceql.values import Static, T

ACCEPT: Final = -0x7FFF
MAX_QUERY_BYTES: Final = 128 * 1024  # Tempo's frontend default max_query_expression_size_bytes


def _decode(rows: tuple[str, ...], names: tuple[str, ...]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for row in rows:
        entries: dict[str, int] = {}
        for item in row.split():
            index, _, value = item.partition(":")
            entries[names[int(index)]] = int(value)
        out.append(entries)
    return out


_ACTIONS: Final = _decode(_tables.ACTIONS, _tables.TERMINALS)
_GOTOS: Final = _decode(_tables.GOTOS, _tables.NONTERMINALS)
_PRODUCTIONS: Final = _tables.PRODUCTIONS


def token_text(kind: str) -> str:
    return TEXT_OF.get(kind, kind)


def parse(text: str, *, rewrite_ast: bool = True) -> Root:
    """The query's tree, or ``ParseError``; ``rewrite_ast=False`` is Tempo's ``ParseNoOptimizations``."""
    if len(text.encode()) > MAX_QUERY_BYTES:
        raise ParseError(f"query is larger than the maximum size of {MAX_QUERY_BYTES} bytes")
    tokens, lex_error = tokenize(text)
    ctx = Context()
    root = _run(tokens, ctx, lex_error)
    if ctx.errors:
        raise ParseError(*ctx.errors[0])
    assert root is not None
    return rewrite(root) if rewrite_ast else root


def _token_number(kind: str) -> int:
    """goyacc's numbering: ``$end`` 1, then the tokens as expr.y declares them from 4 on."""
    return 1 if kind == "$end" else 4 + _ORDER[kind]


def _default(row: dict[str, int]) -> int | None:
    """goyacc's default action of a state (``wract``): the reduction most of its tokens take, the first in token
    order on a tie; taken for any token without an action of its own."""
    counts: dict[int, int] = {}
    for a in row.values():
        if a < 0 and a != ACCEPT:
            counts[a] = counts.get(a, 0) + 1
    best: int | None = None
    for kind in sorted(row, key=_token_number):
        a = row[kind]
        if a < 0 and a != ACCEPT and (best is None or counts[a] > counts[best]):
            best = a
    return best


_ORDER: Final = {kind: i for i, kind in enumerate(TOKEN_ORDER)}
_DEFAULTS: Final = [_default(row) for row in _ACTIONS]
# a state with no shift and one reduction reduces without reading the next token (goyacc's "simple" state)
_SIMPLE: Final = [
    not any(a >= 0 or a == ACCEPT for a in row.values()) and len(set(row.values())) == 1 for row in _ACTIONS
]


def _run(tokens: list[Token], ctx: Context, lex_error: LexError | None) -> Root | None:
    """The LR parse as goyacc's runs it: tokens read only when a state needs one (errors of the grammar's actions
    are placed at the last token read, as Tempo's lexer position is), a state's default reduction taken for any token
    it has no action for; the first error is the one reported."""
    states = [0]
    values: list[Any] = []
    i = 0
    token: Token | None = None
    while True:
        state = states[-1]
        action: int | None
        if _SIMPLE[state]:
            action = _DEFAULTS[state]
        else:
            if token is None:
                token = tokens[i]
                ctx.line, ctx.col = token.line, token.col
                if lex_error is not None and i == len(tokens) - 1:
                    ctx.errors.append((lex_error.message, lex_error.line, lex_error.col))
            action = _ACTIONS[state].get(token.kind, _DEFAULTS[state])
        if action is None:
            assert token is not None
            ctx.errors.append((_syntax_message(state, token), token.line, token.col))
            return None
        if action == ACCEPT:
            root: Root = values[-1]
            return root
        if action >= 0:
            assert token is not None
            states.append(action)
            values.append(token.value)
            token = None
            i += 1
            continue
        lhs, length, name = _PRODUCTIONS[-action - 1]
        args = values[len(values) - length :]
        del values[len(values) - length :]
        del states[len(states) - length :]
        values.append(ACTIONS[name](ctx, *args))
        states.append(_GOTOS[states[-1]][lhs])


def _syntax_message(state: int, token: Token) -> str:
    """goyacc's verbose message: the tokens the state shifts, in token order, when there are at most four."""
    message = "syntax error: unexpected " + token_text(token.kind)
    expected = sorted((k for k, a in _ACTIONS[state].items() if a >= 0 and k != "$end"), key=_token_number)
    if 0 < len(expected) <= 4:
        message += ", expecting " + " or ".join(token_text(k) for k in expected)
    return message


# ----------------------------------------------------------------------------------------------------- rewrite


def rewrite(root: Root) -> Root:
    """``ApplyASTRewrites`` with its one transformation (``or_to_in``), keys renamed to the rewritten text."""
    keys: dict[str, str] = {}
    pipelines: dict[str, Pipeline] = {}
    for key, p in root.pipelines.items():
        new = _pipeline(p)
        new_key = str(new)
        if key in root.first_stages:
            new_key += " | " + str(root.first_stages[key])
        pipelines[new_key] = new
        keys[key] = new_key
    root.first_stages = {keys[k]: v for k, v in root.first_stages.items()}
    root.pipelines = pipelines
    _rename(root.expression, keys)
    return root


def _rename(expr: MathExpr | None, keys: dict[str, str]) -> None:
    if expr is None:
        return
    if expr.op is Op.NONE:
        expr.key = keys.get(expr.key, expr.key)
    else:
        _rename(expr.lhs, keys)
        _rename(expr.rhs, keys)


def _pipeline(p: Pipeline) -> Pipeline:
    out: list[Any] = []
    for e in p.elements:
        if isinstance(e, SpansetFilter):
            out.append(SpansetFilter(_field(e.expr)))
        elif isinstance(e, ScalarFilter):
            out.append(ScalarFilter(e.op, _scalar(e.lhs), _scalar(e.rhs)))
        elif isinstance(e, GroupOp):
            out.append(GroupOp(_field(e.expr)))
        elif isinstance(e, SpansetOp):
            out.append(SpansetOp(e.op, _spanset(e.lhs), _spanset(e.rhs)))
        elif isinstance(e, Pipeline):
            out.append(_pipeline(e))
        else:
            out.append(e)
    return Pipeline(out)


def _spanset(e: Any) -> Any:
    if isinstance(e, SpansetFilter):
        return SpansetFilter(_field(e.expr))
    if isinstance(e, ScalarFilter):
        return ScalarFilter(e.op, _scalar(e.lhs), _scalar(e.rhs))
    if isinstance(e, SpansetOp):
        return SpansetOp(e.op, _spanset(e.lhs), _spanset(e.rhs))
    if isinstance(e, Pipeline):
        return _pipeline(e)
    return e


def _scalar(e: Any) -> Any:
    if isinstance(e, Pipeline):
        return _pipeline(e)
    if isinstance(e, ScalarOp):
        return ScalarOp(e.op, _scalar(e.lhs), _scalar(e.rhs))
    if isinstance(e, Aggregate):
        return Aggregate(e.op, None if e.expr is None else _field(e.expr))
    return e


_REWRITES: Final = (
    (Op.OR, Op.EQ, Op.IN, ()),
    (Op.AND, Op.NEQ, Op.NOT_IN, ()),
    (Op.OR, Op.REGEX, Op.REGEX_MATCH_ANY, (T.STRING, T.STRING_ARRAY)),
    (Op.AND, Op.NOT_REGEX, Op.REGEX_MATCH_NONE, (T.STRING, T.STRING_ARRAY)),
)


def _field(e: Any) -> Any:
    if isinstance(e, BinaryOp):
        e = new_binary(e.op, _field(e.lhs), _field(e.rhs))
    elif isinstance(e, UnaryOp):
        e = new_unary(e.op, _field(e.expr))
    for outer, scalar_op, array_op, types in _REWRITES:
        e = _to_array(e, outer, scalar_op, array_op, types)
    return e


def _to_array(e: Any, outer: Op, scalar_op: Op, array_op: Op, types: tuple[T, ...]) -> Any:
    if not isinstance(e, BinaryOp) or e.op is not outer:
        return e
    left = _operands(e.lhs, scalar_op, array_op)
    right = _operands(e.rhs, scalar_op, array_op)
    if left is None or right is None or left[0] != right[0]:
        return e
    if types and (left[1].type not in types or right[1].type not in types):
        return e
    array = _append(left[1], right[1])
    if array is None:
        return e
    return new_binary(array_op, left[0], array)


def _operands(e: Any, scalar_op: Op, array_op: Op) -> tuple[Attribute, Static] | None:
    if not isinstance(e, BinaryOp) or e.op not in (scalar_op, array_op):
        return None
    attr, value = e.lhs, e.rhs
    if not isinstance(attr, Attribute):
        attr, value = e.rhs, e.lhs
    if not isinstance(attr, Attribute) or not isinstance(value, Static):
        return None
    return attr, value


_APPENDABLE: Final = {
    T.STRING: (T.STRING, T.STRING_ARRAY),
    T.STRING_ARRAY: (T.STRING, T.STRING_ARRAY),
    T.INT: (T.INT, T.INT_ARRAY),
    T.INT_ARRAY: (T.INT, T.INT_ARRAY),
    T.FLOAT: (T.FLOAT, T.FLOAT_ARRAY),
    T.FLOAT_ARRAY: (T.FLOAT, T.FLOAT_ARRAY),
    T.BOOLEAN: (T.BOOLEAN, T.BOOLEAN_ARRAY),
    T.BOOLEAN_ARRAY: (T.BOOLEAN, T.BOOLEAN_ARRAY),
}
_ARRAY_OF: Final = {T.STRING: T.STRING_ARRAY, T.INT: T.INT_ARRAY, T.FLOAT: T.FLOAT_ARRAY, T.BOOLEAN: T.BOOLEAN_ARRAY}


def _append(a: Static, b: Static) -> Static | None:
    """``Static.append``: two values (or arrays) of one element type as one array."""
    allowed = _APPENDABLE.get(a.type)
    if allowed is None or b.type not in allowed:
        return None
    array_type = _ARRAY_OF.get(a.type, a.type)
    values = (a.value if a.type is array_type else (a.value,)) + (b.value if b.type is array_type else (b.value,))
    return Static(array_type, tuple(values))


def parse_attribute(text: str) -> Attribute | None:
    """``ParseIdentifier``: ``resource.service.name``, ``span:name``, ``.foo`` as an attribute (None when it is not
    one)."""
    try:
        root = parse("{" + text + "}", rewrite_ast=False)
    except ParseError:
        return None
    pipeline = root.single_pipeline()
    if pipeline is None or len(pipeline.elements) != 1:
        return None
    element = pipeline.elements[0]
    if isinstance(element, SpansetFilter) and isinstance(element.expr, Attribute):
        return element.expr
    return None
