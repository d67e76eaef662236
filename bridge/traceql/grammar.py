"""Pure: TraceQL's grammar — the language Tempo's parser accepts (``pkg/traceql/expr.y``), written out as
productions with precedence, and what each production builds (``actions``).

``scripts/gen_traceql_tables.py`` turns ``PRODUCTIONS`` and ``PRECEDENCE`` into the LALR(1) tables of
``lalr_tables.json`` (``bridge/traceql/lalr.py``; ``_tables.py`` loads them), resolving conflicts the way yacc does
(precedence and associativity, else shift; an earlier production wins a reduce/reduce conflict), so the same texts
parse — and the same fail — as in Tempo. A production's precedence is that of its last terminal, or its ``%prec`` token.
"""

from __future__ import annotations

from typing import Final

# The tokens in the order expr.y declares them (%token lines, then the precedence lines' new ones): goyacc numbers
# them so, and lists the tokens a syntax error expected in that order.
TOKEN_ORDER: Final = (
    "IDENTIFIER", "STRING", "INTEGER", "FLOAT", "DURATION", "DOT", "OPEN_BRACE", "CLOSE_BRACE", "OPEN_PARENS",
    "CLOSE_PARENS", "COMMA", "NIL", "TRUE", "FALSE", "STATUS_ERROR", "STATUS_OK", "STATUS_UNSET", "KIND_UNSPECIFIED",
    "KIND_INTERNAL", "KIND_SERVER", "KIND_CLIENT", "KIND_PRODUCER", "KIND_CONSUMER", "IDURATION", "CHILDCOUNT",
    "NAME", "STATUS", "STATUS_MESSAGE", "PARENT", "KIND", "ROOTNAME", "ROOTSERVICENAME", "ROOTSERVICE",
    "TRACEDURATION", "NESTEDSETLEFT", "NESTEDSETRIGHT", "NESTEDSETPARENT", "ID", "TRACE_ID", "SPAN_ID", "PARENT_ID",
    "TIMESINCESTART", "VERSION", "PARENT_DOT", "RESOURCE_DOT", "SPAN_DOT", "TRACE_COLON", "SPAN_COLON",
    "EVENT_COLON", "EVENT_DOT", "LINK_COLON", "LINK_DOT", "INSTRUMENTATION_COLON", "INSTRUMENTATION_DOT", "COUNT",
    "AVG", "MAX", "MIN", "SUM", "BY", "COALESCE", "SELECT", "END_ATTRIBUTE", "RATE", "COUNT_OVER_TIME",
    "MIN_OVER_TIME", "MAX_OVER_TIME", "AVG_OVER_TIME", "SUM_OVER_TIME", "QUANTILE_OVER_TIME", "HISTOGRAM_OVER_TIME",
    "COMPARE", "TOPK", "BOTTOMK", "WITH", "PIPE", "AND", "OR", "EQ", "NEQ", "LT", "LTE", "GT", "GTE", "NRE", "RE",
    "DESC", "ANCE", "SIBL", "NOT_CHILD", "NOT_PARENT", "NOT_DESC", "NOT_ANCE", "UNION_CHILD", "UNION_PARENT",
    "UNION_DESC", "UNION_ANCE", "UNION_SIBL", "ADD", "SUB", "NOT", "MUL", "DIV", "MOD", "POW", "UMINUS",
)  # fmt: skip

# lowest first: (associativity, tokens)
PRECEDENCE: Final = (
    ("left", ("PIPE",)),
    ("left", ("AND", "OR")),
    (
        "left",
        (
            "EQ", "NEQ", "LT", "LTE", "GT", "GTE", "NRE", "RE", "DESC", "ANCE", "SIBL", "NOT_CHILD", "NOT_PARENT",
            "NOT_DESC", "NOT_ANCE", "UNION_CHILD", "UNION_PARENT", "UNION_DESC", "UNION_ANCE", "UNION_SIBL",
        ),
    ),
    ("nonassoc", ("INTEGER", "FLOAT")),
    ("left", ("ADD", "SUB")),
    ("left", ("NOT",)),
    ("left", ("MUL", "DIV", "MOD")),
    ("right", ("POW",)),
    ("nonassoc", ("UMINUS",)),
    ("nonassoc", ("NIL",)),
)  # fmt: skip

# (lhs, rhs symbols, action, %prec token or "")
SPANSET_OPS: Final = (
    ("AND", "SS_AND"), ("GT", "CHILD"), ("LT", "PARENT"), ("DESC", "DESCENDANT"), ("ANCE", "ANCESTOR"),
    ("OR", "UNION"), ("SIBL", "SIBLING"), ("NOT_CHILD", "NOT_CHILD"), ("NOT_PARENT", "NOT_PARENT"),
    ("NOT_DESC", "NOT_DESCENDANT"), ("NOT_ANCE", "NOT_ANCESTOR"), ("NRE", "NOT_SIBLING"),
    ("UNION_CHILD", "UNION_CHILD"), ("UNION_PARENT", "UNION_PARENT"), ("UNION_DESC", "UNION_DESCENDANT"),
    ("UNION_ANCE", "UNION_ANCESTOR"), ("UNION_SIBL", "UNION_SIBLING"),
)  # fmt: skip
SCALAR_OPS: Final = (("ADD", "ADD"), ("SUB", "SUB"), ("MUL", "MULT"), ("DIV", "DIV"), ("MOD", "MOD"), ("POW", "POW"))
COMPARISONS: Final = (("EQ", "EQ"), ("NEQ", "NEQ"), ("LT", "LT"), ("LTE", "LTE"), ("GT", "GT"), ("GTE", "GTE"))
FIELD_OPS: Final = SCALAR_OPS[:5] + COMPARISONS + (
    ("RE", "REGEX"), ("NRE", "NOT_REGEX"), ("POW", "POW"), ("AND", "AND"), ("OR", "OR"),
)  # fmt: skip
METRIC_FUNCTIONS: Final = (
    ("MIN_OVER_TIME", "min_over_time"), ("MAX_OVER_TIME", "max_over_time"), ("SUM_OVER_TIME", "sum_over_time"),
    ("AVG_OVER_TIME", "avg_over_time"), ("HISTOGRAM_OVER_TIME", "histogram_over_time"),
)  # fmt: skip
STATICS: Final = (
    ("STRING", "static_string"), ("INTEGER", "static_int"), ("FLOAT", "static_float"), ("TRUE", "static_true"),
    ("FALSE", "static_false"), ("DURATION", "static_duration"), ("STATUS_OK", "status_ok"),
    ("STATUS_ERROR", "status_error"), ("STATUS_UNSET", "status_unset"), ("KIND_UNSPECIFIED", "kind_unspecified"),
    ("KIND_INTERNAL", "kind_internal"), ("KIND_SERVER", "kind_server"), ("KIND_CLIENT", "kind_client"),
    ("KIND_PRODUCER", "kind_producer"), ("KIND_CONSUMER", "kind_consumer"), ("IDENTIFIER", "static_identifier"),
)  # fmt: skip
INTRINSIC_FIELDS: Final = (
    ("IDURATION", "DURATION"), ("NAME", "NAME"), ("STATUS", "STATUS"), ("STATUS_MESSAGE", "STATUS_MESSAGE"),
    ("KIND", "KIND"), ("PARENT", "PARENT"), ("ROOTNAME", "ROOT_NAME"), ("ROOTSERVICENAME", "ROOT_SERVICE"),
    ("TRACEDURATION", "TRACE_DURATION"), ("NESTEDSETLEFT", "NESTED_SET_LEFT"),
    ("NESTEDSETRIGHT", "NESTED_SET_RIGHT"), ("NESTEDSETPARENT", "NESTED_SET_PARENT"),
)  # fmt: skip
SCOPED_INTRINSICS: Final = (
    ("TRACE_COLON IDURATION", "TRACE_DURATION"), ("TRACE_COLON ROOTNAME", "ROOT_NAME"),
    ("TRACE_COLON ROOTSERVICE", "ROOT_SERVICE"), ("TRACE_COLON ID", "TRACE_ID"), ("SPAN_COLON IDURATION", "DURATION"),
    ("SPAN_COLON NAME", "NAME"), ("SPAN_COLON KIND", "KIND"), ("SPAN_COLON STATUS", "STATUS"),
    ("SPAN_COLON STATUS_MESSAGE", "STATUS_MESSAGE"), ("SPAN_COLON ID", "SPAN_ID"),
    ("SPAN_COLON PARENT_ID", "PARENT_ID"), ("SPAN_COLON CHILDCOUNT", "CHILD_COUNT"),
    ("EVENT_COLON NAME", "EVENT_NAME"), ("EVENT_COLON TIMESINCESTART", "EVENT_TIME_SINCE_START"),
    ("LINK_COLON TRACE_ID", "LINK_TRACE_ID"), ("LINK_COLON SPAN_ID", "LINK_SPAN_ID"),
    ("INSTRUMENTATION_COLON NAME", "INSTRUMENTATION_NAME"),
    ("INSTRUMENTATION_COLON VERSION", "INSTRUMENTATION_VERSION"),
)  # fmt: skip
ATTRIBUTE_FIELDS: Final = (
    ("DOT IDENTIFIER END_ATTRIBUTE", "attr_plain"), ("RESOURCE_DOT IDENTIFIER END_ATTRIBUTE", "attr_resource"),
    ("SPAN_DOT IDENTIFIER END_ATTRIBUTE", "attr_span"), ("PARENT_DOT IDENTIFIER END_ATTRIBUTE", "attr_parent"),
    ("PARENT_DOT RESOURCE_DOT IDENTIFIER END_ATTRIBUTE", "attr_parent_resource"),
    ("PARENT_DOT SPAN_DOT IDENTIFIER END_ATTRIBUTE", "attr_parent_span"),
    ("EVENT_DOT IDENTIFIER END_ATTRIBUTE", "attr_event"), ("LINK_DOT IDENTIFIER END_ATTRIBUTE", "attr_link"),
    ("INSTRUMENTATION_DOT IDENTIFIER END_ATTRIBUTE", "attr_instrumentation"),
)  # fmt: skip


def _productions() -> list[tuple[str, str, str, str]]:
    p: list[tuple[str, str, str, str]] = []

    def add(lhs: str, rhs: str, action: str, prec: str = "") -> None:
        p.append((lhs, rhs, action, prec))

    add("root", "spansetPipeline", "root_plain")
    add("root", "spansetPipelineExpression", "root_plain")
    add("root", "scalarPipelineExpressionFilter", "root_plain")
    add("root", "spansetPipeline PIPE metricsAggregation", "root_metrics")
    add("root", "spansetPipeline PIPE metricsAggregation metricsSecondStagePipeline", "root_metrics_two_stage")
    add("root", "metricsExpression", "first")
    add("root", "metricsExpression metricsSecondStagePipeline", "root_chain_second_stage")
    add("root", "root hints", "root_hints")

    add("spansetPipelineExpression", "OPEN_PARENS spansetPipelineExpression CLOSE_PARENS", "second")
    for token, op in SPANSET_OPS:
        add("spansetPipelineExpression", f"spansetPipelineExpression {token} spansetPipelineExpression", f"ss_{op}")
    add("spansetPipelineExpression", "wrappedSpansetPipeline", "first")
    add("wrappedSpansetPipeline", "OPEN_PARENS spansetPipeline CLOSE_PARENS", "second")

    for item in ("spansetExpression", "scalarFilter", "groupOperation", "selectOperation"):
        add("spansetPipeline", item, "pipeline_new")
    for item in ("spansetExpression", "scalarFilter", "groupOperation", "coalesceOperation", "selectOperation"):
        add("spansetPipeline", f"spansetPipeline PIPE {item}", "pipeline_add")

    add("groupOperation", "BY OPEN_PARENS fieldExpression CLOSE_PARENS", "group")
    add("coalesceOperation", "COALESCE OPEN_PARENS CLOSE_PARENS", "coalesce")
    add("selectOperation", "SELECT OPEN_PARENS attributeList CLOSE_PARENS", "select")
    for item in ("intrinsicField", "attributeField", "scopedIntrinsicField"):
        add("attribute", item, "first")
    add("attributeList", "attribute", "list_new")
    add("attributeList", "attributeList COMMA attribute", "list_add")
    add("numericList", "FLOAT", "list_new")
    add("numericList", "INTEGER", "list_new_float")
    add("numericList", "numericList COMMA FLOAT", "list_add")
    add("numericList", "numericList COMMA INTEGER", "list_add_float")

    add("spansetExpression", "OPEN_PARENS spansetExpression CLOSE_PARENS", "second")
    for token, op in SPANSET_OPS:
        add("spansetExpression", f"spansetExpression {token} spansetExpression", f"ss_{op}")
    add("spansetExpression", "spansetFilter", "first")
    add("spansetFilter", "OPEN_BRACE CLOSE_BRACE", "filter_empty")
    add("spansetFilter", "OPEN_BRACE fieldExpression CLOSE_BRACE", "filter")

    _scalars(add)
    _metrics(add)

    add("wrappedMetricsPipeline", "OPEN_PARENS spansetPipeline PIPE metricsAggregation CLOSE_PARENS", "wrapped_metrics")
    add(
        "wrappedMetricsPipeline",
        "OPEN_PARENS spansetPipeline PIPE metricsAggregation metricsSecondStagePipeline CLOSE_PARENS",
        "wrapped_metrics_two_stage",
    )

    add("hint", "IDENTIFIER EQ static", "hint")
    add("hints", "WITH OPEN_PARENS hintList CLOSE_PARENS", "third")
    add("hintList", "hint", "list_new")
    add("hintList", "hintList COMMA hint", "list_add")

    _fields(add)
    return p


def _scalars(add: object) -> None:
    """Scalar filters and aggregates (``count() > 2``, ``avg(duration) = 1s``, between pipelines)."""
    assert callable(add)
    add("scalarFilter", "scalarExpression scalarFilterOperation scalarExpression", "scalar_filter")
    add("scalarFilter", "scalarExpression scalarFilterOperation scalar", "scalar_filter")
    add("scalarFilter", "scalar scalarFilterOperation scalarExpression", "scalar_filter")
    for token, op in COMPARISONS:
        add("scalarFilterOperation", token, f"op_{op}")

    add(
        "scalarPipelineExpressionFilter",
        "scalarPipelineExpression scalarFilterOperation scalarPipelineExpression",
        "scalar_filter",
    )
    add("scalarPipelineExpressionFilter", "scalarPipelineExpression scalarFilterOperation scalar", "scalar_filter")
    add("scalarPipelineExpression", "OPEN_PARENS scalarPipelineExpression CLOSE_PARENS", "second")
    for token, op in SCALAR_OPS:
        add("scalarPipelineExpression", f"scalarPipelineExpression {token} scalarPipelineExpression", f"sc_{op}")
    add("scalarPipelineExpression", "wrappedScalarPipeline", "first")
    add("wrappedScalarPipeline", "OPEN_PARENS scalarPipeline CLOSE_PARENS", "second")
    add("scalarPipeline", "spansetPipeline PIPE aggregate", "pipeline_add")

    add("scalarExpression", "OPEN_PARENS scalarExpression CLOSE_PARENS", "second")
    for token, op in SCALAR_OPS:
        add("scalarExpression", f"scalarExpression {token} scalarExpression", f"sc_{op}")
    for token, op in SCALAR_OPS:
        add("scalarExpression", f"scalarExpression {token} scalar", f"sc_{op}")
    for token, op in SCALAR_OPS:
        add("scalarExpression", f"scalar {token} scalarExpression", f"sc_{op}")
    add("scalarExpression", "aggregate", "first")

    add("aggregate", "COUNT OPEN_PARENS CLOSE_PARENS", "agg_count")
    for token in ("MAX", "MIN", "AVG", "SUM"):
        add("aggregate", f"{token} OPEN_PARENS fieldExpression CLOSE_PARENS", f"agg_{token.lower()}")


def _metrics(add: object) -> None:
    assert callable(add)
    by = "BY OPEN_PARENS attributeList CLOSE_PARENS"
    add("metricsAggregation", "RATE OPEN_PARENS CLOSE_PARENS", "m_rate")
    add("metricsAggregation", f"RATE OPEN_PARENS CLOSE_PARENS {by}", "m_rate_by")
    add("metricsAggregation", "COUNT_OVER_TIME OPEN_PARENS CLOSE_PARENS", "m_count")
    add("metricsAggregation", f"COUNT_OVER_TIME OPEN_PARENS CLOSE_PARENS {by}", "m_count_by")
    for token, name in METRIC_FUNCTIONS:
        add("metricsAggregation", f"{token} OPEN_PARENS attribute CLOSE_PARENS", f"m_{name}")
        add("metricsAggregation", f"{token} OPEN_PARENS attribute CLOSE_PARENS {by}", f"m_{name}_by")
    add("metricsAggregation", "QUANTILE_OVER_TIME OPEN_PARENS attribute COMMA numericList CLOSE_PARENS", "m_quantile")
    add(
        "metricsAggregation",
        f"QUANTILE_OVER_TIME OPEN_PARENS attribute COMMA numericList CLOSE_PARENS {by}",
        "m_quantile_by",
    )  # noqa: E501
    add("metricsAggregation", "COMPARE OPEN_PARENS spansetFilter CLOSE_PARENS", "m_compare")
    add("metricsAggregation", "COMPARE OPEN_PARENS spansetFilter COMMA INTEGER CLOSE_PARENS", "m_compare_n")
    add(
        "metricsAggregation",
        "COMPARE OPEN_PARENS spansetFilter COMMA INTEGER COMMA INTEGER COMMA INTEGER CLOSE_PARENS",
        "m_compare_window",
    )  # noqa: E501

    add("metricsSecondStage", "TOPK OPEN_PARENS INTEGER CLOSE_PARENS", "topk")
    add("metricsSecondStage", "BOTTOMK OPEN_PARENS INTEGER CLOSE_PARENS", "bottomk")
    for token, op in COMPARISONS:
        add("metricsFilterOperation", token, f"op_{op}")
    add("metricsFilter", "metricsFilterOperation scalar", "metrics_filter")
    add("metricsSecondStagePipeline", "PIPE metricsSecondStage", "list_new_second")
    add("metricsSecondStagePipeline", "metricsFilter", "list_new")
    add("metricsSecondStagePipeline", "metricsSecondStagePipeline PIPE metricsSecondStage", "list_add")
    add("metricsSecondStagePipeline", "metricsSecondStagePipeline metricsFilter", "list_add_second")

    add("metricsExpression", "OPEN_PARENS metricsExpression CLOSE_PARENS", "second")
    for token, op in SCALAR_OPS[:2] + SCALAR_OPS[2:4]:
        add("metricsExpression", f"metricsExpression {token} metricsExpression", f"math_{op}")
    add("metricsExpression", "wrappedMetricsPipeline", "first")
    for token, op in SCALAR_OPS[:2] + SCALAR_OPS[2:4]:
        add("metricsExpression", f"metricsExpression {token} scalar", f"math_scalar_right_{op}", token)
    for token, op in SCALAR_OPS[:2] + SCALAR_OPS[2:4]:
        add("metricsExpression", f"scalar {token} metricsExpression", f"math_scalar_left_{op}", token)

    add("scalar", "INTEGER", "static_int")
    add("scalar", "FLOAT", "static_float")
    add("scalar", "DURATION", "static_duration")
    add("scalar", "SUB scalar", "fold_negate", "UMINUS")
    add("scalar", "OPEN_PARENS scalar CLOSE_PARENS", "second")
    for token, op in (("MUL", "MULT"), ("DIV", "DIV"), ("ADD", "ADD"), ("SUB", "SUB")):
        add("scalar", f"scalar {token} scalar", f"fold_{op}", token)


def _fields(add: object) -> None:
    assert callable(add)
    add("fieldExpression", "OPEN_PARENS fieldExpression CLOSE_PARENS", "second")
    for token, op in FIELD_OPS:
        add("fieldExpression", f"fieldExpression {token} fieldExpression", f"bin_{op}")
    add("fieldExpression", "fieldExpression NEQ NIL", "exists_left")
    add("fieldExpression", "NIL NEQ fieldExpression", "exists_right")
    add("fieldExpression", "fieldExpression EQ NIL", "not_exists_left")
    add("fieldExpression", "NIL EQ fieldExpression", "not_exists_right")
    add("fieldExpression", "NIL NEQ NIL", "static_false_3")
    add("fieldExpression", "NIL EQ NIL", "static_false_3")
    add("fieldExpression", "SUB fieldExpression", "negate")
    add("fieldExpression", "NOT fieldExpression", "logical_not")
    for item in ("static", "intrinsicField", "attributeField", "scopedIntrinsicField"):
        add("fieldExpression", item, "first")
    for token, action in STATICS:
        add("static", token, action)
    for token, name in INTRINSIC_FIELDS:
        add("intrinsicField", token, f"intrinsic_{name}")
    for tokens, name in SCOPED_INTRINSICS:
        add("scopedIntrinsicField", tokens, f"intrinsic_{name}")
    for tokens, action in ATTRIBUTE_FIELDS:
        add("attributeField", tokens, action)


PRODUCTIONS: Final = tuple(_productions())
START: Final = "root"
