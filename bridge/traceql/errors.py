"""TraceQL's errors: every one is the caller's (400), each saying what is wrong with the query.

InvalidArgument (bridge.errors)
└── QueryError
    ├── ParseError      the text is not TraceQL (``parse error at line 1, col 7: syntax error: unexpected }``)
    ├── InvalidQuery    parses, but means nothing (``{ 1 + "foo" = 1 }``: Tempo's validation errors)
    ├── Unsupported     ``unsupported: <construct>``: valid TraceQL that neither Tempo nor the bridge runs
    └── EvalError       a value fails while the query runs (an integer division by zero)
"""

from __future__ import annotations

from bridge.errors import InvalidArgument


class QueryError(InvalidArgument):
    pass


class ParseError(QueryError):
    def __init__(self, message: str, line: int = 0, col: int = 0) -> None:
        where = f"at line {line}, col {col}" if line or col else ""
        super().__init__(f"parse error {where}: {message}" if where else f"parse error : {message}")
        self.detail = message
        self.line = line
        self.col = col


class InvalidQuery(QueryError):
    pass


class Unsupported(QueryError):
    def __init__(self, construct: str) -> None:
        super().__init__(f"unsupported: {construct}")
        self.construct = construct


class EvalError(QueryError):
    pass
