"""Pure: the part of a query's span condition (``bridge.traceql.prefilter``) the ``spans`` table's own columns answer,
as SQL — Tempo's "conditions storage can answer" (``FetchSpansRequest``) for this store — and the scans that read
candidate spans with it. Nothing here touches a connection.

Columns: ``service`` (``resource.service.name``), ``name``, ``start_ns`` / ``end_ns`` (``duration``), ``span_id``,
``trace_id``, ``parent_span_id`` (a root: no parent). A condition becomes SQL only when the SQL is implied by it (a
span it keeps may still fail the query, never the other way); ``a || b`` only when both sides translate.

Attributes live in the stored protobuf bytes, which SQL cannot decode; but a span that has ``span.x`` holds the bytes
of the key ``x`` in its body (a resource attribute: in its resource's), so a condition false without its attribute
(``prefilter.required_attributes``) becomes ``instr(body, 'x') > 0``: spans without the key are never decoded. An
equality with a literal also needs the value's bytes: a string's text, a number as OTLP encodes it (an integer as
``AnyValue.int_value``, or as ``double_value`` when it is whole, since ``= 503`` also holds for 503.0). Senders encode
protobuf canonically (the store keeps their bytes), so the bytes are there when the value is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.common.v1 import common_pb2

from bridge.store import decode
from bridge.store.query import FAR_FUTURE_NS
from bridge.store.trace_rows import BUCKETS_IN, LONG_SPAN_NS, SPAN_COLUMNS
from bridge.traceql.ast import Attribute, BinaryOp, I, Op, Scope
from bridge.traceql.prefilter import (
    All,
    AnyOf,
    Expr,
    Need,
    Root,
    conjuncts,
    is_root_test,
    local_conjuncts,
    required_attributes,
)
from bridge.traceql.values import ELEMENT_OF, NUMERIC, Static, T

SERVICE: Final = Attribute("service.name", Scope.RESOURCE)
_COMPARE: Final = {Op.EQ: "=", Op.NEQ: "!=", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
_FLIP: Final = {Op.GT: Op.LT, Op.GTE: Op.LTE, Op.LT: Op.GT, Op.LTE: Op.GTE}
NEVER: Final = "0 = 1"


@dataclass(frozen=True, slots=True)
class Sql:
    text: str
    params: tuple[Any, ...] = ()
    columns: frozenset[str] = frozenset()  # which of span_id, trace_id, service it pins (for the index)


def _and(parts: list[Sql]) -> Sql | None:
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return Sql(
        " AND ".join(f"({p.text})" for p in parts),
        tuple(x for p in parts for x in p.params),
        frozenset().union(*(p.columns for p in parts)),
    )


def sql_of_need(n: Need) -> Sql | None:
    """The SQL a span of the answer satisfies (None: nothing the columns can say)."""
    if n is None:
        return None
    if isinstance(n, Root):
        return Sql("parent_span_id IS NULL")
    if isinstance(n, Expr):
        fields = [s for s in (sql_of_field(c) for c in conjuncts(n.expr)) if s is not None]
        presence = [_presence(a) for a in required_attributes(n) if a != SERVICE]
        values = [v for v in (_value_bytes(c) for c in local_conjuncts(n.expr)) if v is not None]
        return _and(fields + presence + values)
    if isinstance(n, All):
        return _and([s for s in (sql_of_need(p) for p in n.parts) if s is not None])
    assert isinstance(n, AnyOf)
    alternatives = [sql_of_need(p) for p in n.parts]
    if any(a is None for a in alternatives):
        return None
    parts = [a for a in alternatives if a is not None]
    return Sql(" OR ".join(f"({p.text})" for p in parts), tuple(x for p in parts for x in p.params))


def sql_of_field(e: object) -> Sql | None:
    if is_root_test(e):
        return Sql("parent_span_id IS NULL")
    if not isinstance(e, BinaryOp):
        return None
    if e.op is Op.AND:
        return _and([s for s in (sql_of_field(e.lhs), sql_of_field(e.rhs)) if s is not None])
    if e.op is Op.OR:
        left, right = sql_of_field(e.lhs), sql_of_field(e.rhs)
        if left is None or right is None:
            return None
        return Sql(f"({left.text}) OR ({right.text})", left.params + right.params)
    attr, value = e.lhs, e.rhs
    op: Op = e.op
    if isinstance(value, Attribute) and isinstance(attr, Static):
        attr, value, op = value, attr, _FLIP.get(op, op)
    if not isinstance(attr, Attribute) or not isinstance(value, Static):
        return None
    return _comparison(attr, op, value)


_IN_RESOURCE: Final = "resource_id IN (SELECT id FROM resources WHERE instr(body, ?) > 0)"


def _presence(attr: Attribute) -> Sql:
    """The stored bytes name the attribute's key: in the span's body, its resource's, or either (unscoped)."""
    return _presence_in(attr.scope, attr.name.encode())


def _presence_in(scope: Scope, raw: bytes) -> Sql:
    if scope is Scope.SPAN:
        return Sql("instr(body, ?) > 0", (raw,))
    if scope is Scope.RESOURCE:
        return Sql(_IN_RESOURCE, (raw,))
    return Sql(f"instr(body, ?) > 0 OR {_IN_RESOURCE}", (raw, raw))


def _encodings(value: Static) -> list[bytes]:
    """How OTLP carries attribute values equal to the literal (empty: any encoding, no test)."""
    if value.type is T.STRING:
        return [value.value.encode()] if value.value else []
    if value.type is T.BOOLEAN:
        return [common_pb2.AnyValue(bool_value=bool(value.value)).SerializeToString()]
    if value.type in (T.INT, T.FLOAT):
        number = float(value.value)
        out = [common_pb2.AnyValue(double_value=number).SerializeToString()]
        if number.is_integer() and -(2**63) <= number < 2**63:
            out.append(common_pb2.AnyValue(int_value=int(number)).SerializeToString())
        return out
    return []


def _value_bytes(e: object) -> Sql | None:
    """``attr = literal`` (or ``IN``) on an attribute: the value's bytes are in the span's body or its resource's."""
    if not isinstance(e, BinaryOp) or e.op not in (Op.EQ, Op.IN):
        return None
    attr, value = (e.lhs, e.rhs) if isinstance(e.lhs, Attribute) else (e.rhs, e.lhs)
    if not isinstance(attr, Attribute) or not isinstance(value, Static) or attr == SERVICE:
        return None
    if attr.intrinsic is not I.NONE or attr.parent or attr.scope not in (Scope.SPAN, Scope.RESOURCE, Scope.NONE):
        return None
    items = [Static(ELEMENT_OF[value.type], v) for v in value.value] if value.type in ELEMENT_OF else [value]
    found = [_encodings(v) for v in items]
    if not found or (e.op is Op.IN and value.type not in ELEMENT_OF) or any(not f for f in found):
        return None
    texts: list[str] = []
    params: list[Any] = []
    for encoded in (b for f in found for b in f):
        part = _presence_in(attr.scope, encoded)
        texts.append(part.text)
        params.extend(part.params)
    return Sql(" OR ".join(f"({t})" for t in texts), tuple(params))


def _strings(op: Op, value: Static) -> list[str] | None:
    """The strings an ``=`` / ``IN`` test accepts."""
    if op is Op.EQ and value.type is T.STRING:
        return [value.value]
    if op is Op.IN and value.type is T.STRING_ARRAY:
        return list(value.value)
    return None


def _comparison(attr: Attribute, op: Op, value: Static) -> Sql | None:
    if attr == SERVICE or attr.intrinsic is I.NAME:
        column = "service" if attr == SERVICE else "name"
        wanted = _strings(op, value)
        if wanted is None:
            return None
        marks = ", ".join("?" for _ in wanted)
        return Sql(f"{column} IN ({marks})", tuple(wanted), frozenset({column}) if len(wanted) == 1 else frozenset())
    if attr.intrinsic is I.DURATION and op in _COMPARE and value.type in NUMERIC:
        return Sql(f"end_ns - start_ns {_COMPARE[op]} ?", (value.value,))
    if attr.intrinsic is I.SPAN_ID and op is Op.EQ and value.type is T.STRING:
        text = value.value.lower()
        number = decode.span_id_to_int(text) if len(text) == 16 else None
        return Sql("span_id = ?", (number,), frozenset({"span_id"})) if number is not None else Sql(NEVER)
    if attr.intrinsic is I.TRACE_ID and op is Op.EQ and value.type is T.STRING:
        raw = decode.trace_id_to_bytes(value.value.lower().rjust(32, "0"))
        return Sql("trace_id = ?", (raw,), frozenset({"trace_id"})) if raw is not None else Sql(NEVER)
    return None


def column_only(n: Need) -> bool:
    """Does the span-local condition read nothing but columns (so spans need not be decoded to test it)?"""
    if n is None or isinstance(n, Root):
        return True
    if isinstance(n, All | AnyOf):
        return all(column_only(p) for p in n.parts)
    return all(isinstance(c, Root) or _column_field(c) for c in local_conjuncts(n.expr))


_COLUMN_INTRINSICS: Final = frozenset({I.NAME, I.DURATION, I.SPAN_ID, I.TRACE_ID})


def _column_field(e: object) -> bool:
    if isinstance(e, Attribute):
        return e == SERVICE or e.intrinsic in _COLUMN_INTRINSICS
    if isinstance(e, BinaryOp):
        return _column_field(e.lhs) and _column_field(e.rhs)
    return isinstance(e, Static)


# ---------------------------------------------------------------------------------------------------- scans


class Marker:
    """A parameter the executor fills in: the tenant, or the JSON list of 10-minute buckets to probe."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


TENANT: Final = Marker("tenant")
BUCKETS: Final = Marker("buckets")


@dataclass(frozen=True, slots=True)
class Scan:
    """One statement over ``spans`` and its parameters (``TENANT`` and ``BUCKETS`` filled in by the executor; the
    buckets are those holding spans that start in ``bucket_range``, for lookups by span or trace id)."""

    sql: str
    params: list[Any] = field(default_factory=list)
    bucket_range: tuple[int, int] | None = None


def index_for(where: Sql | None) -> str:
    pinned = where.columns if where is not None else frozenset()
    if "span_id" in pinned:
        return "spans_span"
    if "trace_id" in pinned:
        return "spans_trace"
    if "service" in pinned:
        return "spans_service_time"
    return "spans_time"


def search_scans(where: Sql | None, window: tuple[int, int] | None, with_body: bool) -> list[Scan]:
    """Candidate spans for a search, newest first: those overlapping ``window`` ([lo, hi) ns) — a first range on the
    start (spans_time keeps the end beside the start) and a second for spans over a minute begun before it."""
    columns = SPAN_COLUMNS if with_body else SPAN_COLUMNS.replace("body", "NULL")
    index = index_for(where)
    conds = "tenant = ?" + (f" AND ({where.text})" if where is not None else "")
    by_id = index in ("spans_span", "spans_trace")
    params: list[Any] = [TENANT, *(where.params if where is not None else ()), *([BUCKETS] if by_id else [])]
    buckets = f" AND {BUCKETS_IN}" if by_id else ""
    if window is None:
        sql = f"SELECT {columns} FROM spans INDEXED BY {index} WHERE {conds}{buckets} ORDER BY start_ns DESC"
        return [Scan(sql, params, (0, FAR_FUTURE_NS) if by_id else None)]
    lo, hi = window
    near = max(0, lo - LONG_SPAN_NS)
    scans = [
        Scan(
            f"SELECT {columns} FROM spans INDEXED BY {index} WHERE {conds}{buckets} AND start_ns >= ? "
            "AND start_ns < ? AND end_ns >= ? ORDER BY start_ns DESC",
            [*params, near, hi, lo],
            (near, hi) if by_id else None,
        )
    ]
    if lo - LONG_SPAN_NS > 0:
        scans.append(
            Scan(
                f"SELECT {columns} FROM spans INDEXED BY spans_long WHERE end_ns - start_ns > {LONG_SPAN_NS} "
                f"AND end_ns >= ? AND start_ns < ? AND {conds} ORDER BY start_ns DESC",
                [lo, min(hi, lo - LONG_SPAN_NS), TENANT, *(where.params if where is not None else ())],
            )
        )
    return scans


def metric_scan(where: Sql | None, start_ns: int, end_ns: int, with_body: bool) -> Scan:
    """Spans starting in ``(start_ns, end_ns]`` (a metric's window), with the condition."""
    columns = SPAN_COLUMNS if with_body else SPAN_COLUMNS.replace("body", "NULL")
    index = index_for(where)
    conds = "tenant = ?" + (f" AND ({where.text})" if where is not None else "")
    by_id = index in ("spans_span", "spans_trace")
    params: list[Any] = [TENANT, *(where.params if where is not None else ()), *([BUCKETS] if by_id else [])]
    buckets = f" AND {BUCKETS_IN}" if by_id else ""
    return Scan(
        f"SELECT {columns} FROM spans INDEXED BY {index} WHERE {conds}{buckets} AND start_ns > ? AND start_ns <= ?",
        [*params, start_ns, end_ns],
        (start_ns + 1, end_ns + 1) if by_id else None,
    )
