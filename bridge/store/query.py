"""Pure pieces of the store's queries, no database access: Pyroscope's time window, span, trace and profile id
selectors and call-site filter (for ``profiles``); the value of a TraceQL attribute on a stored span and Tempo's
search span shape (for ``traces``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf import json_format
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge.errors import InvalidArgument
from bridge.spans import pb_any_value_to_str
from bridge.store import decode, traceql

DEFAULT_MAX_NODES: Final = 8192  # Pyroscope's querier.max-flamegraph-nodes-default
MAX_PROFILE_IDS: Final = 10_000  # profile_id_selector entries one request may name
FAR_FUTURE_NS: Final = 2**63 - 1  # int64: the largest time SQLite compares as an integer


@dataclass(slots=True)
class TraceMatch:
    """One trace of a search answer: its summary and the spans that matched (up to ``spss``)."""

    trace_id: str
    root_service: str
    root_name: str
    start_ns: int
    end_ns: int
    spans: list[dict[str, Any]] = field(default_factory=list)
    matched: int = 0


@dataclass(slots=True)
class SearchResult:
    """A TraceQL search's answer: up to ``limit`` traces, how many spans were examined, and, when the search stopped
    before it had looked at every span of its window, why (``partial``); None means the answer is complete."""

    traces: list[TraceMatch]
    inspected_spans: int = 0
    partial: str | None = None


def window_ns(start_ms: int, end_ms: int) -> tuple[int, int]:
    """Pyroscope's inclusive ``[start, end]`` in ms over the capture start → ``[lo, hi)`` in ns."""
    lo = min(max(0, start_ms) * 1_000_000, FAR_FUTURE_NS)
    hi = min((end_ms + 1) * 1_000_000, FAR_FUTURE_NS) if end_ms > 0 else FAR_FUTURE_NS
    return lo, hi


def parse_span_selector(values: Iterable[str]) -> list[int]:
    """``span_selector`` entries → stored span ids. One bad entry fails the whole request, as Pyroscope does."""
    out: list[int] = []
    for value in values:
        number = decode.span_id_to_int(value) if len(value) == 16 else None
        if len(value) != 16:
            raise InvalidArgument(f'invalid span id length: "{value}"')
        if number is None:
            try:
                bytes.fromhex(value)
            except ValueError:
                raise InvalidArgument(f'invalid span id: "{value}"') from None
            continue  # all zeros: matches nothing
        out.append(number)
    return out


def parse_trace_selector(values: Iterable[str]) -> list[bytes]:
    out: list[bytes] = []
    for value in values:
        text = value.strip().lower()
        if not 0 < len(text) <= 32:
            raise InvalidArgument(f'invalid trace id length: "{value}"')
        try:
            out.append(bytes.fromhex(text.rjust(32, "0")))
        except ValueError:
            raise InvalidArgument(f'invalid trace id: "{value}"') from None
    return out


def profile_uuid(row_id: int, time_ns: int) -> str:
    """A stored profile's id as Pyroscope shows one (a UUID, ``types.v1.Exemplar.profile_id``): its row id and its
    capture start, so an id outlives nothing it named — a row id SQLite hands out again after retention comes with
    another capture time, and the id then selects nothing."""
    raw = (row_id & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big") + (time_ns & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def parse_profile_ids(values: Iterable[str]) -> list[tuple[int, int]]:
    """``profile_id_selector`` → (row id, capture start in ns) per entry. Every form Go's ``uuid.Parse`` takes
    (``xxxxxxxx-xxxx-…``, ``{…}``, ``urn:uuid:…``, 32 hex digits); one bad entry fails the request. A well-formed id
    this store never handed out selects nothing."""
    out: list[tuple[int, int]] = []
    for value in values:
        text = value.strip()
        if text.lower().startswith("urn:uuid:"):
            text = text[9:]
        if len(text) == 38 and text[0] == "{" and text[-1] == "}":
            text = text[1:-1]
        if len(text) == 36 and all(text[i] == "-" for i in (8, 13, 18, 23)):
            text = text.replace("-", "")
        try:
            raw = bytes.fromhex(text) if len(text) == 32 else b""
        except ValueError:
            raw = b""
        if len(raw) != 16:
            raise InvalidArgument(f'invalid profile id (not a UUID): "{value[:80]}"')
        row_id, time_ns = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
        out.append(
            (
                row_id - (1 << 64) if row_id >= 1 << 63 else row_id,
                time_ns - (1 << 64) if time_ns >= 1 << 63 else time_ns,
            )
        )
        if len(out) > MAX_PROFILE_IDS:
            raise InvalidArgument(f"profile_id_selector names more than {MAX_PROFILE_IDS} profiles")
    return out


def any_value(value: common_pb2.AnyValue) -> traceql.Value | None:
    which = value.WhichOneof("value")
    if which in ("string_value", "int_value", "double_value", "bool_value"):
        result: traceql.Value = getattr(value, which)
        return result
    if which is None:
        return None

    return pb_any_value_to_str(value)


def bound_attr_value(bound: tuple[Any, ...], attr: traceql.Attr) -> traceql.Value | None:
    return attr_value(attr, *bound)


def attr_value(
    attr: traceql.Attr,
    trace_id: bytes,
    span_id: int,
    service: str,
    name: str,
    start_ns: int,
    end_ns: int,
    span: otlp_trace.Span | None,
    resource: otlp_trace.ResourceSpans | None,
) -> traceql.Value | None:
    if attr.scope == "intrinsic":
        if attr.key == "span:id":
            return decode.int_to_span_id(span_id)
        if attr.key == "trace:id":
            return trace_id.hex()
        if attr.key == "name":
            return name
        if attr.key == "duration":
            return end_ns - start_ns
        if attr.key == "kind":
            return int(span.kind) if span is not None else None
        if attr.key == "status":
            return int(span.status.code) if span is not None else None
        return None
    if attr.scope in ("span", "any") and span is not None:
        for kv in span.attributes:
            if kv.key == attr.key:
                return any_value(kv.value)
    if attr.scope in ("resource", "any"):
        if attr.key == "service.name" and resource is None:
            return service
        if resource is not None:
            for kv in resource.resource.attributes:
                if kv.key == attr.key:
                    return any_value(kv.value)
    return None


def search_span(
    query: traceql.Query,
    span_id: int,
    service: str,
    name: str,
    start_ns: int,
    end_ns: int,
    span: otlp_trace.Span | None,
    resource: otlp_trace.ResourceSpans | None,
    value_of: Callable[[traceql.Attr], traceql.Value | None],
) -> dict[str, Any]:
    """A span of Tempo's search answer: ``name`` only when span:name is filtered or selected; selected (and
    filtered) attributes under their key, ``resource.service.name`` as ``service.name``."""
    out: dict[str, Any] = {
        "spanID": decode.int_to_span_id(span_id),
        "startTimeUnixNano": str(start_ns),
        "durationNanos": str(end_ns - start_ns),
        "_name": name,
        "_service": service,
    }
    wanted = [c.attr for c in query.conds] + list(query.select)
    attributes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for attr in wanted:
        if attr.scope == "intrinsic":
            if attr.key == "name":
                out["name"] = name
            continue
        if attr.key in seen:
            continue
        value: Any = None
        if attr.scope in ("span", "any") and span is not None:
            value = next((kv.value for kv in span.attributes if kv.key == attr.key), None)
        if value is None and attr.scope in ("resource", "any") and resource is not None:
            value = next((kv.value for kv in resource.resource.attributes if kv.key == attr.key), None)
        if value is None and attr.key == "service.name" and attr.scope != "span":
            value = common_pb2.AnyValue(string_value=service)
        if value is None:
            continue
        seen.add(attr.key)
        attributes.append({"key": attr.key, "value": json_format.MessageToDict(value)})
    if attributes:
        out["attributes"] = attributes
    return out


def filter_call_site(
    stacks: Sequence[tuple[tuple[str, ...], int]], call_site: Sequence[str]
) -> list[tuple[tuple[str, ...], int]]:
    """``stack_trace_selector.call_site``: keep stacks that start (root first) with these frames."""
    n = len(call_site)
    prefix = tuple(call_site)
    return [(frames, v) for frames, v in stacks if frames[:n] == prefix]
