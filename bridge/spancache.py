"""The span cache: spans the Tempo mount served, per tenant, so a click right after opening a trace resolves
without Tempo's search (which lags ingest by 15–30 s).

Bounded twice: by entries and by estimated memory. Each entry is charged ``max(estimate, bytes / entries)``, so a
cachetools size-bounded TTL cache with one ``maxsize`` in bytes enforces both limits at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from cachetools import TTLCache

from bridge.spans import Span, Trace

ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class CachedSpan:
    span: Span
    local_root_id: str  # the span's local root in the same service (itself when it is one)
    is_local_root: bool


def _estimate(entry: CachedSpan | tuple[str, ...]) -> int:
    if isinstance(entry, tuple):
        return 64 + 80 * len(entry)
    s = entry.span
    # the resource tuple is shared by the spans of one resource, so it is not charged per span
    return 360 + sys.getsizeof(s.name) + 60 * len(s.attributes)


class SpanCache:
    """Per-tenant span and trace memory. Keys are ``(tenant, id)``; tenants never see each other's spans."""

    def __init__(self, max_entries: int, max_bytes: int, ttl: float) -> None:
        floor = max(1, max_bytes // max(1, max_entries))
        self._spans: TTLCache[tuple[str, str], CachedSpan] = TTLCache(
            maxsize=max_bytes, ttl=ttl, getsizeof=lambda e: max(floor, _estimate(e))
        )
        # trace id → span ids, for tree walks (scope=request); charged like spans
        self._traces: TTLCache[tuple[str, str], tuple[str, ...]] = TTLCache(
            maxsize=max(1, max_bytes // 8), ttl=ttl, getsizeof=lambda e: max(floor, _estimate(e))
        )

    def put_trace(self, tenant: str | None, trace: Trace) -> int:
        """Remember every span of ``trace``; returns how many were stored."""
        t = tenant or ANONYMOUS
        stored = 0
        for span in trace.spans.values():
            root = trace.local_root(span.span_id)
            entry = CachedSpan(span, root.span_id if root else span.span_id, trace.is_local_root(span))
            try:
                self._spans[(t, span.span_id)] = entry
                stored += 1
            except ValueError:  # a single entry larger than the whole cache
                continue
        try:
            self._traces[(t, trace.trace_id)] = tuple(trace.spans)
        except ValueError:
            pass
        return stored

    def get(self, tenant: str | None, span_id: str) -> CachedSpan | None:
        return self._spans.get((tenant or ANONYMOUS, span_id))

    def get_trace(self, tenant: str | None, trace_id: str) -> Trace | None:
        """The trace as far as the cache still holds it; None when its span list is gone."""
        t = tenant or ANONYMOUS
        ids = self._traces.get((t, trace_id))
        if ids is None:
            return None
        spans = [e.span for sid in ids if (e := self._spans.get((t, sid))) is not None]
        return Trace.from_spans(spans, trace_id) if spans else None

    def __len__(self) -> int:
        return len(self._spans)

    @property
    def bytes_used(self) -> int:
        return int(self._spans.currsize)
