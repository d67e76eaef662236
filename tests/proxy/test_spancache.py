from __future__ import annotations

from bridge.call import scope_key
from bridge.spancache import SpanCache
from bridge.spans import SPAN_KIND_CLIENT, SPAN_KIND_INTERNAL, SPAN_KIND_SERVER, Span, Trace

T = "1" * 32


def _trace(n_children: int = 2, trace_id: str = T) -> Trace:
    root = Span(
        trace_id,
        "a" * 16,
        "",
        "GET /checkout",
        SPAN_KIND_SERVER,
        "shop-frontend",
        0,
        100,
        (("service.name", "shop-frontend"),),
    )
    spans = [root]
    for i in range(n_children):
        spans.append(
            Span(
                trace_id,
                f"{i + 1:016x}",
                root.span_id,
                f"child{i}",
                SPAN_KIND_INTERNAL,
                "shop-frontend",
                1,
                50,
                root.resource,
            )
        )
    spans.append(
        Span(trace_id, "c" * 16, root.span_id, "HTTP GET", SPAN_KIND_CLIENT, "shop-frontend", 2, 40, root.resource)
    )
    spans.append(
        Span(
            trace_id,
            "d" * 16,
            "c" * 16,
            "GET /price",
            SPAN_KIND_SERVER,
            "shop-backend",
            3,
            30,
            (("service.name", "shop-backend"),),
        )
    )
    return Trace.from_spans(spans)


def test_put_and_get_with_local_roots() -> None:
    cache = SpanCache(1000, 1 << 20, 60)
    assert cache.put_trace("t1", _trace()) == 5
    child = cache.get("t1", f"{1:016x}")
    assert child is not None and child.local_root_id == "a" * 16 and not child.is_local_root
    backend = cache.get("t1", "d" * 16)
    assert backend is not None and backend.is_local_root and backend.local_root_id == "d" * 16
    trace = cache.get_trace("t1", T)
    assert trace is not None and len(trace) == 5


def test_tenants_never_see_each_others_spans() -> None:
    cache = SpanCache(1000, 1 << 20, 60)
    cache.put_trace(scope_key("team-a"), _trace())
    assert cache.get(scope_key("team-b"), "a" * 16) is None
    assert cache.get(scope_key(None), "a" * 16) is None
    assert cache.get_trace(scope_key("team-b"), T) is None
    assert cache.get(scope_key("team-a"), "a" * 16) is not None


def test_no_tenant_header_is_not_the_anonymous_tenant_nor_anyone_elses_credentials() -> None:
    """Issue 11, item 8: caches are keyed by the tenant header exactly as sent (absent is not ``anonymous``) and by
    the caller's credentials, so no caller is shown what the upstream answered a caller it treats differently."""
    cache = SpanCache(1000, 1 << 20, 60)
    cache.put_trace(scope_key("anonymous"), _trace())
    assert cache.get(scope_key(None), "a" * 16) is None
    cache.put_trace(scope_key(None, "Bearer alice"), _trace())
    assert cache.get(scope_key(None), "a" * 16) is None
    assert cache.get(scope_key(None, "Bearer bob"), "a" * 16) is None
    assert cache.get(scope_key(None, "Bearer alice"), "a" * 16) is not None
    assert (
        len(
            {
                scope_key(None),
                scope_key(""),
                scope_key("-"),
                scope_key("anonymous"),
                scope_key("t:x"),
                scope_key("x"),
                scope_key(None, "x"),
                scope_key("x", "y"),
            }
        )
        == 8
    )


def test_bounded_by_entries() -> None:
    cache = SpanCache(max_entries=10, max_bytes=1 << 30, ttl=60)
    for i in range(20):
        cache.put_trace("t", _trace(n_children=2, trace_id=f"{i:032x}"))
    assert len(cache) <= 10


def test_bounded_by_memory() -> None:
    cache = SpanCache(max_entries=1_000_000, max_bytes=20_000, ttl=60)
    for i in range(200):
        cache.put_trace("t", _trace(n_children=3, trace_id=f"{i:032x}"))
    assert cache.bytes_used <= 20_000
    assert 0 < len(cache) < 200 * 6


def test_expiry_uses_ttl() -> None:
    cache = SpanCache(100, 1 << 20, ttl=60)
    cache.put_trace("t", _trace())
    # cachetools' TTLCache takes its clock at construction; expire everything by asking it to
    cache._traces.expire(time=cache._traces.timer() + 61)  # noqa: SLF001 - exercising the bound, not the API
    assert cache.get("t", "a" * 16) is None


def test_a_trace_put_again_replaces_the_old_copy_and_stale_index_entries_vanish() -> None:
    cache = SpanCache(1000, 1 << 20, 60)
    cache.put_trace("t", _trace(n_children=3))
    smaller = Trace.from_spans([s for s in _trace(n_children=1).spans.values()])
    cache.put_trace("t", smaller)
    assert cache.get("t", f"{3:016x}") is None  # child 3 is not in the new copy
    assert cache.get("t", f"{1:016x}") is not None
    assert len(cache) == len(smaller)


def test_the_index_stays_bounded_under_churn() -> None:
    cache = SpanCache(max_entries=50, max_bytes=1 << 30, ttl=60)
    for i in range(500):
        cache.put_trace("t", _trace(n_children=2, trace_id=f"{i:032x}"))
    assert len(cache) <= 50
    assert len(cache._index) <= 2 * 50 + 5  # noqa: SLF001 - the bound under test
    last = f"{499:032x}"
    assert cache.get_trace("t", last) is not None
