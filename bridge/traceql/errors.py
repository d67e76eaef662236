"""TraceQL's errors: every one is the caller's (400), each saying what is wrong with the query in Tempo's words.

InvalidArgument (bridge.errors)
└── QueryError
    ├── ParseError      the text is not TraceQL (``parse error at line 1, col 7: syntax error: unexpected }``)
    ├── InvalidQuery    parses, but means nothing (``{ 1 + "foo" = 1 }``: Tempo's validation errors)
    ├── Unsupported     Tempo's own ``unsupportedError`` (``pkg/traceql/ast_validate.go``): valid TraceQL that Tempo
    │                   does not run either, ``<feature> not yet supported`` (``parent not yet supported``)
    ├── NotRunnable     valid TraceQL the endpoint does not run, in Tempo's engine's words: ``not a metrics query``
    │                   (``engine_metrics.go``), ``math expressions not supported`` (``engine.go``)
    ├── NotBuilt        ``unsupported: <construct>``: what Tempo runs and the bridge does not (yet)
    └── EvalError       a value fails while the query runs (an integer division by zero)

Tempo's HTTP API frames the first three by endpoint (``invalid TraceQL query: …`` on search, ``compiling query: …``
on metrics); ``bridge.store.tempo_api`` does that framing, once, at the boundary.
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
    def __init__(self, feature: str) -> None:
        super().__init__(f"{feature} not yet supported")
        self.feature = feature


class NotRunnable(QueryError):
    pass


class NotBuilt(QueryError):
    def __init__(self, construct: str) -> None:
        super().__init__(f"unsupported: {construct}")
        self.construct = construct


class EvalError(QueryError):
    pass
