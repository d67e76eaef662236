"""The span cache: spans the Tempo mount served, per caller scope (``CallContext.cache_scope``: the tenant header as
sent and the caller's credentials), so a click right after opening a trace resolves without Tempo's search (which
lags ingest by 15–30 s).

One bounded entry per trace (a cachetools TTL cache whose ``maxsize`` is in bytes), plus a plain dictionary from
span id to trace id. Each trace is charged ``max(estimated bytes, spans × bytes/entries)``, so the byte bound also
bounds the number of spans. Index entries of evicted traces are dropped when found stale, and the index is rebuilt
from the live traces when it grows past twice the entry bound: inserting a 10,000-span trace costs plain dictionary
writes, not 10,000 bounded-cache insertions.

A big trace the Tempo mount served is kept *pending* (``put_pending``): the bytes that were sent and a function that
parses them, run only when a click needs the trace (``pending``; the resolver runs it off the event loop). Its spans
are not indexed until then: clicks find it by the trace id they carry (``bridge.ids``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache

from bridge.spans import Span, Trace


@dataclass(frozen=True, slots=True)
class CachedSpan:
    span: Span
    local_root_id: str  # the span's local root in the same service (itself when it is one)
    is_local_root: bool


@dataclass(frozen=True, slots=True)
class _Entry:
    trace: Trace | None  # None while pending
    local_roots: dict[str, str]
    size: int
    load: Callable[[], Trace] | None = None  # parses a pending trace
    span_count: int = 0


def _estimate(trace: Trace) -> int:
    # the resource tuple is shared by the spans of one resource, so it is not charged per span
    return 256 + sum(400 + sys.getsizeof(s.name) + 60 * len(s.attributes) for s in trace.spans.values())


class SpanCache:
    """Per-scope span and trace memory. Keys are ``(scope, id)``; scopes never see each other's spans."""

    def __init__(self, max_entries: int, max_bytes: int, ttl: float) -> None:
        self._floor = max(1, max_bytes // max(1, max_entries))
        self._max_entries = max_entries
        self._traces: TTLCache[tuple[str, str], _Entry] = TTLCache(
            maxsize=max_bytes, ttl=ttl, getsizeof=lambda e: e.size
        )
        self._index: dict[tuple[str, str], str] = {}

    def put_trace(self, scope: str, trace: Trace) -> int:
        """Remember every span of ``trace`` (replacing an earlier copy); returns how many were stored."""
        t = scope
        size = max(_estimate(trace), self._floor * max(1, len(trace)))
        entry = _Entry(trace, trace.local_roots(), size)
        try:
            self._traces[(t, trace.trace_id)] = entry
        except ValueError:  # one trace larger than the whole cache
            return 0
        index = self._index
        trace_id = trace.trace_id
        for span_id in trace.spans:
            index[(t, span_id)] = trace_id
        if len(index) > 2 * self._max_entries:
            self._rebuild_index()
        return len(trace)

    def put_pending(self, scope: str, trace_id: str, load: Callable[[], Trace], span_count: int, size: int) -> None:
        """Remember a trace without parsing it: ``load`` parses it when a click needs it. ``size``: the bytes
        ``load`` holds."""
        t = scope
        charged = max(256 + size, self._floor * max(1, span_count))
        try:
            self._traces[(t, trace_id)] = _Entry(None, {}, charged, load, span_count)
        except ValueError:  # larger than the whole cache
            return

    def pending(self, scope: str, trace_id: str) -> Callable[[], Trace] | None:
        """The parser of a trace that is held but not parsed yet; None when it is parsed, or not held."""
        entry = self._traces.get((scope, trace_id))
        return entry.load if entry is not None and entry.trace is None else None

    def get(self, scope: str, span_id: str) -> CachedSpan | None:
        key = (scope, span_id)
        trace_id = self._index.get(key)
        if trace_id is None:
            return None
        entry = self._traces.get((key[0], trace_id))
        span = entry.trace.spans.get(span_id) if entry is not None and entry.trace is not None else None
        if entry is None or span is None:
            self._index.pop(key, None)  # its trace was evicted or replaced
            return None
        root_id = entry.local_roots.get(span_id, span_id)
        return CachedSpan(span, root_id, root_id == span_id)

    def get_trace(self, scope: str, trace_id: str) -> Trace | None:
        entry = self._traces.get((scope, trace_id))
        return entry.trace if entry is not None else None

    def _rebuild_index(self) -> None:
        self._traces.expire()
        self._index = {
            (tenant, span_id): trace_id
            for (tenant, trace_id), entry in self._traces.items()
            if entry.trace is not None
            for span_id in entry.trace.spans
        }

    def __len__(self) -> int:
        """Spans held (in traces not yet evicted; pending ones by their count)."""
        return sum(len(e.trace) if e.trace is not None else e.span_count for e in self._traces.values())

    @property
    def bytes_used(self) -> int:
        return int(self._traces.currsize)
