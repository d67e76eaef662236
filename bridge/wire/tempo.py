"""Pure: Tempo's query API as the bridge speaks it (``docs/contracts``: Tempo), both API versions, both encodings.

- Trace by ID: ``GET /api/v2/traces/<id>`` (``TraceByIDResponse``; not found = 200 with an empty trace) and the older
  ``GET /api/traces/<id>`` (bare ``Trace``; not found = 404). ``Accept: application/protobuf`` → protobuf (Tempo's
  check is a substring match), anything else → JSON (gogo jsonpb: base64 ids, string int64s, enum names).
- Search: ``GET /api/search?q=<TraceQL>&start&end&limit&spss`` → JSON with hex ids (leading zeros stripped).
- Trace ids follow Tempo's own reading (``bridge.ids.tempo_trace_id``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.spans import SERVICE_NAME, Attrs, SearchHit, Span, any_value_to_str, spans_from_json, spans_from_otlp

PROTOBUF: Final = "application/protobuf"
JSON: Final = "application/json"
SEARCH_PATH: Final = "/api/search"
READY_PATH: Final = "/ready"
TRACE_PATH: Final = re.compile(r"^api/(?:(?P<v2>v2)/)?traces/(?P<id>[^/]*)$")


@dataclass(frozen=True, slots=True)
class TempoAnswer:
    """A Tempo answer as received: status, headers, body (still in its Content-Encoding)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def encoding(self) -> str:
        return self.headers.get("Content-Encoding", "")


def trace_path(trace_id: str, version: int = 2) -> str:
    return f"/api/v2/traces/{trace_id}" if version == 2 else f"/api/traces/{trace_id}"


def trace_request(tail: str) -> tuple[int, str] | None:
    """``api/v2/traces/<id>`` → (2, id), ``api/traces/<id>`` → (1, id); anything else → None."""
    m = TRACE_PATH.match(tail)
    if m is None:
        return None
    return (2 if m.group("v2") else 1), m.group("id")


def wants_protobuf(accept: str) -> bool:
    """Tempo's own rule for choosing an answer's encoding: a substring match on ``Accept``."""
    return PROTOBUF in accept


def is_protobuf_answer(content_type: str, accept: str) -> bool:
    """Which encoding a trace-by-ID answer is in: its content type says; without one, what was asked for."""
    ctype = content_type.lower()
    if "protobuf" in ctype:
        return True
    if "json" in ctype:
        return False
    return wants_protobuf(accept)


def span_by_id_query(span_id: str) -> str:
    """The TraceQL that finds one span by id (``span:id`` exists since Tempo v2.5), with what the resolver needs."""
    return f'{{ span:id = "{span_id}" }} | select(span:name, resource.service.name)'


def traceql_string(value: str) -> str:
    """A TraceQL string literal: double quotes, backslash and quote escaped, newlines as ``\\n``."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def endpoint_query(service: str, name: str) -> str:
    """The TraceQL that finds a service's spans of one name (an endpoint's requests), with what the hits need."""
    return (
        f"{{ resource.service.name = {traceql_string(service)} && span:name = {traceql_string(name)} }} "
        "| select(span:name, resource.service.name)"
    )


# --------------------------------------------------------------------------------------------- decoding answers


def json_resource_spans(doc: Any) -> list[Any]:
    """The ResourceSpans list of a trace-by-ID JSON answer, v2 (``trace.resourceSpans``) or v1 (``batches``); an
    empty list for the "not found" shapes. ``ValueError`` when the document is not shaped like a trace answer."""
    if not isinstance(doc, dict):
        raise ValueError(f"the answer is a JSON {type(doc).__name__}, not an object")
    holder: Any = doc
    if "trace" in doc:
        holder = doc["trace"]
        if holder is None:
            return []
        if not isinstance(holder, dict):
            raise ValueError("'trace' is not an object")
    for key in ("resourceSpans", "batches"):
        if key in holder:
            found = holder[key]
            if found is None:
                return []
            if not isinstance(found, list):
                raise ValueError(f"'{key}' is not a list")
            return found
    return []


def decode_trace(body: bytes, content_type: str, version: int) -> list[Span]:
    """A trace-by-ID answer body → its spans (empty: not found). ``ValueError`` when it is not a trace."""
    if "json" in content_type.lower():
        try:
            return spans_from_json(json_resource_spans(json.loads(body)))
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise ValueError(f"JSON that is not a trace ({exc})") from exc
    try:
        if version == 1:
            raw = list(tempo_pb2.Trace.FromString(body).resource_spans)
        else:
            raw = list(tempo_pb2.TraceByIDResponse.FromString(body).trace.resource_spans)
        return spans_from_otlp(otlp_trace.ResourceSpans.FromString(r) for r in raw)
    except (DecodeError, ValueError) as exc:
        raise ValueError(f"something that is not a trace ({exc})") from exc


def parse_search_response(doc: Mapping[str, Any]) -> list[SearchHit]:
    """``/api/search`` JSON → one hit per matched span. ``traces`` is absent when nothing matched; ``traceID`` has its
    leading zeros stripped; a ``select``ed ``resource.service.name`` comes back as ``service.name``."""
    hits: list[SearchHit] = []
    for trace in doc.get("traces") or []:
        trace_id = str(trace.get("traceID", "")).lower().rjust(32, "0")
        span_sets = trace.get("spanSets") or ([trace["spanSet"]] if trace.get("spanSet") else [])
        for span_set in span_sets:
            for s in span_set.get("spans") or []:
                attrs: Attrs = tuple(
                    (kv.get("key", ""), any_value_to_str(kv.get("value", {}))) for kv in s.get("attributes", [])
                )
                amap = dict(attrs)
                hits.append(
                    SearchHit(
                        trace_id=trace_id,
                        span_id=str(s.get("spanID", "")).lower().rjust(16, "0"),
                        name=s.get("name", amap.get("name", "")),
                        service=amap.get(SERVICE_NAME, amap.get("resource.service.name", "")),
                        start_ns=int(s.get("startTimeUnixNano", 0)),
                        duration_ns=int(s.get("durationNanos", 0)),
                        root_service=str(trace.get("rootServiceName", "")),
                        root_name=str(trace.get("rootTraceName", "")),
                        attributes=attrs,
                    )
                )
    return hits


def decode_search(body: bytes) -> list[SearchHit]:
    """A search answer body → its hits. ``ValueError`` when it is not a search result."""
    try:
        doc: Any = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return parse_search_response(doc)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ValueError(f"something that is not a search result ({exc})") from exc
