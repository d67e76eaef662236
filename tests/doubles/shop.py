"""The shop capture (``tests/fixtures/shop-capture``) as traces: the real ``ExportTraceServiceRequest`` bodies the
OpenTelemetry SDK sent, regrouped per trace into OTLP ``ResourceSpans`` (what Tempo stores and answers with) and
``bridge.spans.Trace`` objects, plus the role of every span from ``spans.jsonl``.

Roles: ``frontend-root`` (``GET /checkout``), ``frontend-child`` (``renderCart``), ``frontend-client``
(``HTTP GET shop-backend``), ``frontend-short`` (``GET /health``), ``frontend-io`` (``GET /slow-io``),
``backend-root`` (``GET /price``, remote parent), ``backend-child`` (``countPrimes``).

    shop = load_shop()
    child = shop.pick("frontend-child")
    shop.trace(child.trace_id).local_root(child.span_id)      # the frontend-root of the same trace
    shop.resource_spans(child.trace_id)                        # list[ResourceSpans] for a Tempo double
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import tempo_pb2
from bridge.spans import Span, Trace, spans_from_otlp
from tests.paths import SHOP_CAPTURE

ROLES: Final = (
    "frontend-root",
    "frontend-child",
    "frontend-client",
    "frontend-short",
    "frontend-io",
    "backend-root",
    "backend-child",
)


@dataclass(frozen=True, slots=True)
class SpanRole:
    """One line of ``spans.jsonl``: which span played which part."""

    role: str
    service: str
    trace_id: str  # 32 lower-case hex
    span_id: str  # 16 lower-case hex


@dataclass(slots=True)
class ShopCapture:
    requests: list[trace_service_pb2.ExportTraceServiceRequest]
    roles: list[SpanRole]
    _resource_spans: dict[str, list[otlp_trace.ResourceSpans]] = field(default_factory=dict)
    _traces: dict[str, Trace] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------- traces

    def trace_ids(self) -> list[str]:
        """Every trace id of the capture, in the order their first span arrived."""
        return list(self._resource_spans)

    def resource_spans(self, trace_id: str) -> list[otlp_trace.ResourceSpans]:
        """The trace's spans as OTLP ``ResourceSpans``, one per (resource, schema) with one ``ScopeSpans`` per scope.
        Returns fresh copies: callers may change them."""
        out = []
        for rs in self._resource_spans[trace_id]:
            copy = otlp_trace.ResourceSpans()
            copy.CopyFrom(rs)
            out.append(copy)
        return out

    def tempo_trace(self, trace_id: str) -> tempo_pb2.Trace:
        """The trace as Tempo's ``tempopb.Trace`` (``resource_spans`` as serialized bytes)."""
        return tempo_pb2.Trace(resource_spans=[rs.SerializeToString() for rs in self._resource_spans[trace_id]])

    def trace(self, trace_id: str) -> Trace:
        return self._traces[trace_id]

    def span(self, span_id: str) -> Span:
        for trace in self._traces.values():
            found = trace.get(span_id)
            if found is not None:
                return found
        raise KeyError(span_id)

    def all_spans(self) -> Iterator[Span]:
        for trace in self._traces.values():
            yield from trace.spans.values()

    # ------------------------------------------------------------------------------------------- roles

    def of_role(self, role: str) -> list[SpanRole]:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        return [r for r in self.roles if r.role == role]

    def role_of(self, span_id: str) -> str:
        for r in self.roles:
            if r.span_id == span_id:
                return r.role
        raise KeyError(span_id)

    def in_trace(self, trace_id: str, role: str) -> SpanRole:
        """The span of ``role`` in trace ``trace_id``."""
        for r in self.of_role(role):
            if r.trace_id == trace_id:
                return r
        raise KeyError(f"no {role} span in trace {trace_id}")

    def pick(self, role: str, where: Callable[[SpanRole], bool] | None = None, index: int = 0) -> SpanRole:
        """The ``index``-th span of ``role`` (arrival order) whose trace the capture holds completely and that
        satisfies ``where``."""
        found = [r for r in self.of_role(role) if self._complete(r.trace_id) and (where is None or where(r))]
        if len(found) <= index:
            raise LookupError(f"no {role} span #{index} matching the condition in the capture")
        return found[index]

    def _complete(self, trace_id: str) -> bool:
        trace = self._traces.get(trace_id)
        if trace is None:
            return False
        expected = {r.span_id for r in self.roles if r.trace_id == trace_id}
        return expected <= set(trace.spans)


def _key(rs: otlp_trace.ResourceSpans) -> bytes:
    return rs.resource.SerializeToString(deterministic=True) + b"|" + rs.schema_url.encode()


def _build(requests: list[trace_service_pb2.ExportTraceServiceRequest]) -> dict[str, list[otlp_trace.ResourceSpans]]:
    # trace id → resource key → ResourceSpans (with scope key → ScopeSpans)
    grouped: dict[str, dict[bytes, tuple[otlp_trace.ResourceSpans, dict[bytes, otlp_trace.ScopeSpans]]]] = {}
    for req in requests:
        for rs in req.resource_spans:
            rkey = _key(rs)
            for ss in rs.scope_spans:
                skey = ss.scope.SerializeToString(deterministic=True) + b"|" + ss.schema_url.encode()
                for span in ss.spans:
                    trace_id = span.trace_id.hex().rjust(32, "0")
                    per_trace = grouped.setdefault(trace_id, {})
                    if rkey not in per_trace:
                        new_rs = otlp_trace.ResourceSpans(schema_url=rs.schema_url)
                        new_rs.resource.CopyFrom(rs.resource)
                        per_trace[rkey] = (new_rs, {})
                    target_rs, scopes = per_trace[rkey]
                    if skey not in scopes:
                        new_ss = target_rs.scope_spans.add(schema_url=ss.schema_url)
                        new_ss.scope.CopyFrom(ss.scope)
                        scopes[skey] = new_ss
                    scopes[skey].spans.add().CopyFrom(span)
    return {tid: [rs for rs, _ in per.values()] for tid, per in grouped.items()}


def export_requests(directory: Path = SHOP_CAPTURE) -> list[trace_service_pb2.ExportTraceServiceRequest]:
    """The capture's ``*_v1_traces.bin`` bodies, decoded, in arrival order."""
    return [
        trace_service_pb2.ExportTraceServiceRequest.FromString(path.read_bytes())
        for path in sorted(directory.glob("*_v1_traces.bin"))
    ]


@functools.lru_cache(maxsize=1)
def load_shop(directory: Path = SHOP_CAPTURE) -> ShopCapture:
    """The capture, parsed once per test session (treat the result as read-only; ``resource_spans`` copies)."""
    requests = export_requests(directory)
    roles = []
    for line in (directory / "spans.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            roles.append(SpanRole(row["kind"], row["service"], row["trace_id"], row["span_id"]))
    capture = ShopCapture(requests, roles)
    capture._resource_spans = _build(requests)
    capture._traces = {
        tid: Trace.from_spans(spans_from_otlp(rs_list), tid) for tid, rs_list in capture._resource_spans.items()
    }
    return capture


def capture_now() -> float:
    """'Now' for any test that uses the capture: a minute after its last span ended (2026-11-29), so "recent" means
    the capture whatever today's date is. Inject it as the clock; never let recorded data meet the real clock."""
    return max(s.end_ns for s in load_shop().all_spans()) / 1e9 + 60
