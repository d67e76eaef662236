"""Pure: OTLP trace exports (protobuf, or JSON with hex ids) → the store's span rows (``SpanBatch``), each span
checked as Tempo checks it before it is kept; what is refused is counted and named (OTLP partial success)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge.errors import InvalidArgument
from bridge.limits import RANGE_TEXT, unix_ns_ok
from bridge.spans import SERVICE_NAME, pb_any_value_to_str
from bridge.store.decode import span_id_bytes_to_int
from bridge.store.tag_rows import TagRow, add_attributes, add_scope, add_span


@dataclass(frozen=True, slots=True)
class SpanRow:
    trace_id: bytes
    span_id: int
    parent_span_id: int | None
    service: str
    name: str
    start_ns: int
    end_ns: int
    resource: bytes  # ResourceSpans holding only resource + schema_url
    scope: bytes  # ScopeSpans holding only scope + schema_url
    body: bytes  # the Span as received


@dataclass(slots=True)
class SpanBatch:
    rows: list[SpanRow]
    rejected: int
    message: str
    tags: set[TagRow]  # what the Tempo tag endpoints list (``store/tag_rows.py``)


def rows_from_export(req: otlp_trace_svc.ExportTraceServiceRequest) -> SpanBatch:
    """OTLP traces → span rows. A span with an invalid trace or span id is rejected (OTLP partial success); the
    rest are kept."""
    rows: list[SpanRow] = []
    tags: set[TagRow] = set()
    rejected = 0
    reasons: list[str] = []
    for rs in req.resource_spans:
        resource_body = otlp_trace.ResourceSpans(resource=rs.resource, schema_url=rs.schema_url).SerializeToString(
            deterministic=True
        )
        service = ""
        for kv in rs.resource.attributes:
            if kv.key == SERVICE_NAME:
                service = pb_any_value_to_str(kv.value)
        add_attributes(tags, "resource", rs.resource.attributes)
        for ss in rs.scope_spans:
            scope_body = otlp_trace.ScopeSpans(scope=ss.scope, schema_url=ss.schema_url).SerializeToString(
                deterministic=True
            )
            add_scope(tags, ss.scope)
            for span in ss.spans:
                span_id = span_id_bytes_to_int(span.span_id)
                if len(span.trace_id) != 16 or not any(span.trace_id) or span_id is None:
                    rejected += 1
                    if len(reasons) < 3:
                        reasons.append(
                            f"span {span.name!r}: trace id must be 16 non-zero bytes and span id 8 non-zero bytes "
                            f"(got {len(span.trace_id)} and {len(span.span_id)})"
                        )
                    continue
                if not (unix_ns_ok(span.start_time_unix_nano) and unix_ns_ok(span.end_time_unix_nano)):
                    rejected += 1
                    if len(reasons) < 3:
                        reasons.append(
                            f"span {span.name[:80]!r}: start and end ({span.start_time_unix_nano}, "
                            f"{span.end_time_unix_nano}) must be Unix times in nanoseconds {RANGE_TEXT}"
                        )
                    continue
                add_span(tags, span, service)
                rows.append(
                    SpanRow(
                        trace_id=bytes(span.trace_id),
                        span_id=span_id,
                        parent_span_id=span_id_bytes_to_int(span.parent_span_id),
                        service=service,
                        name=span.name,
                        start_ns=int(span.start_time_unix_nano),
                        end_ns=int(span.end_time_unix_nano),
                        resource=resource_body,
                        scope=scope_body,
                        body=span.SerializeToString(),
                    )
                )
    message = "; ".join(reasons) + (f" (and {rejected - len(reasons)} more)" if rejected > len(reasons) else "")
    return SpanBatch(rows, rejected, message, tags)


_ID_KEYS: Final = {"traceId", "spanId", "parentSpanId"}


def otlp_json_ids_to_base64(doc: Any) -> Any:
    """OTLP/JSON carries trace and span ids as hex; protobuf's JSON parser expects base64 for bytes. Convert in
    place (ids inside spans and span links) and return the document."""
    import base64

    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _ID_KEYS and isinstance(value, str):
                    if not re.fullmatch(r"(?:[0-9a-fA-F]{2})*", value):
                        raise InvalidArgument(f"OTLP/JSON {key} {value[:40]!r} is not hex")
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return doc


def parse_export_json(body: bytes) -> otlp_trace_svc.ExportTraceServiceRequest:
    try:
        doc = json.loads(body or b"{}")
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"request body is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise InvalidArgument("OTLP/JSON body must be an object with resourceSpans")
    req = otlp_trace_svc.ExportTraceServiceRequest()
    try:
        json_format.ParseDict(otlp_json_ids_to_base64(doc), req, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise InvalidArgument(f"request body is not a valid OTLP ExportTraceServiceRequest ({exc})") from exc
    return req
