"""The slowest recent requests per service: what the index page lists and ``GET /api/v1/requests/slowest`` serves.

- ``recent_traces``: one search of the trace source (Tempo in proxy mode, the store in standalone mode), then the
  traces with each service's longest hits, fetched by ID (their trees give every local root).
- ``slowest_local_roots`` (pure): the local roots of those traces (the requests each service served), slowest first
  per service, a few of each span name so one slow endpoint does not hide the others.
- ``resolve_rows``: each row's resolution mode (``linked → local-root → time-window → none``), through the same
  resolver the API and the pages use, a few at a time; a row whose backend failed says so instead of failing the list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urlencode

from bridge.answer import answer
from bridge.call import CallContext
from bridge.config import Settings
from bridge.errors import BridgeError
from bridge.resolution import Step
from bridge.resolve import Resolver
from bridge.sampling import Sampling
from bridge.sources import TraceSource
from bridge.spans import Span, Trace
from bridge.units import format_duration_ns

INDEX_SEARCH_LIMIT: Final = 200  # traces the search asks for
INDEX_LIMIT: Final = 60  # of those, the slowest-looking ones per service it fetches
INDEX_PER_SERVICE: Final = 10
INDEX_PER_NAME: Final = 3  # per service and span name, so one slow endpoint does not hide the others
INDEX_QUERY: Final = "{ } | select(resource.service.name, span:name)"
INDEX_SPSS: Final = 10
RESOLVE_CONCURRENCY: Final = 4  # rows resolved at once: each is one or two profile queries
RESOLVE_MAX_NODES: Final = 64  # the mode is what is asked for, not the flame graph: keep the answers small


def span_path(span: Span, **query: str) -> str:
    """The bridge's page of ``span`` (``/spans/<trace>/<span>``), with the non-empty query parameters."""
    path = f"/spans/{quote(span.trace_id)}/{quote(span.span_id)}"
    query = {k: v for k, v in query.items() if v}
    return path + ("?" + urlencode(query) if query else "")


@dataclass(frozen=True, slots=True)
class IndexRow:
    span: Span
    duration: str
    href: str
    children: int


@dataclass(frozen=True, slots=True)
class RowResolution:
    """How one row's span resolves: its mode, the reason and the answer's total; or the error that stopped it."""

    step: Step | None
    reason: str
    total: int
    error_code: str = ""
    sampling: Sampling | None = None  # the total as a count of samples (``bridge.sampling``)


def slowest_local_roots(
    traces: Iterable[Trace], per_service: int = INDEX_PER_SERVICE, per_name: int = INDEX_PER_NAME
) -> list[tuple[str, list[IndexRow]]]:
    """Pure: the local roots of the traces (the requests each service served), slowest first per service, at most
    ``per_name`` of one span name so every endpoint shows."""
    by_service: dict[str, list[tuple[Span, int]]] = {}
    for trace in traces:
        for span in trace.spans.values():
            if trace.is_local_root(span):
                children = sum(1 for _ in trace.descendants(span.span_id))
                by_service.setdefault(span.service, []).append((span, children))
    out = []
    for service in sorted(by_service):
        ranked = sorted(by_service[service], key=lambda sc: (-sc[0].duration_ns, sc[0].span_id))
        per: dict[str, int] = {}
        rows: list[IndexRow] = []
        for span, children in ranked:
            if per.get(span.name, 0) >= per_name:
                continue
            per[span.name] = per.get(span.name, 0) + 1
            rows.append(IndexRow(span, format_duration_ns(span.duration_ns), span_path(span), children))
            if len(rows) >= per_service:
                break
        out.append((service, rows))
    return out


async def recent_traces(source: TraceSource, now_s: float, since_s: float, ctx: CallContext) -> list[Trace]:
    """Recent traces, the slowest-looking per service first: one search (its hits carry each matched span's service
    and duration), then, per service, the traces with its longest hits, fetched by ID (their trees give every local
    root), ``INDEX_LIMIT`` at most."""
    start, end = int(now_s - since_s), int(now_s) + 1
    hits = await source.search(INDEX_QUERY, start, end, INDEX_SEARCH_LIMIT, ctx, spss=INDEX_SPSS)
    longest: dict[tuple[str, str], dict[str, int]] = {}  # (service, span name) → trace id → its longest such span
    for hit in hits:
        per = longest.setdefault((hit.service, hit.name), {})
        per[hit.trace_id] = max(per.get(hit.trace_id, 0), hit.duration_ns)
    ranked = [sorted(per.items(), key=lambda kv: (-kv[1], kv[0])) for _, per in sorted(longest.items())]
    trace_ids: dict[str, None] = {}
    for rank in range(INDEX_PER_NAME):
        for per_service in ranked:
            if rank < len(per_service) and len(trace_ids) < INDEX_LIMIT:
                trace_ids.setdefault(per_service[rank][0], None)
    limit = asyncio.Semaphore(8)

    async def one(trace_id: str) -> Trace | None:
        async with limit:
            try:
                return await source.trace_by_id(trace_id, ctx, start, end)
            except BridgeError:
                return None

    return [t for t in await asyncio.gather(*(one(t) for t in trace_ids)) if t is not None]


async def resolve_rows(
    resolver: Resolver,
    traces: Sequence[Trace],
    spans: Sequence[Span],
    *,
    profile_type: str,
    settings: Settings,
    ctx: CallContext,
) -> list[RowResolution]:
    """Each span's resolution in ``scope=span`` (what its page's badge says), ``RESOLVE_CONCURRENCY`` at a time, in
    the order given. The traces are already fetched: they go into the span cache first, so the resolver finds every
    span's tree there instead of asking the trace source again."""
    for trace in traces:
        resolver.span_cache.put_trace(ctx.cache_scope, trace)
    limit = asyncio.Semaphore(RESOLVE_CONCURRENCY)

    async def one(span: Span) -> RowResolution:
        async with limit:
            try:
                ans = await answer(
                    resolver,
                    span.trace_id,
                    span.span_id,
                    scope="span",
                    profile_type=profile_type,
                    settings=settings,
                    ctx=ctx,
                    max_nodes=RESOLVE_MAX_NODES,
                )
            except BridgeError as exc:
                return RowResolution(None, exc.message, 0, exc.code.value)
        return RowResolution(ans.step, ans.resolution.reason, ans.tree.total, sampling=ans.sampling)

    return list(await asyncio.gather(*(one(s) for s in spans)))
