"""What the standalone Tempo API answers where a real Tempo answers little or fails, worded as Tempo words it (measured
against grafana/tempo ad33aa8 with ``bench/differential.py``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.store import Store, tempo_api
from tests.store.test_store import CAPTURE_END_S, ctx, ingest_capture


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: CAPTURE_END_S)
    await ingest_capture(s)
    yield s
    await s.close()


async def answer(store: Store, path: str, **query: str) -> tuple[int, dict[str, str], bytes]:
    result: tuple[int, dict[str, str], bytes] = await tempo_api.answer(store, "GET", path, query, {}, ctx())
    return result


async def test_an_unknown_trace_is_a_404_without_a_body(store: Store) -> None:
    assert await answer(store, "api/traces/abababababababababababababababab") == (404, {}, b"")


async def test_a_search_that_finds_nothing_still_says_traces(store: Store) -> None:
    status, _, body = await answer(store, "api/search", q='{ name = "nope" }')
    assert status == 200 and json.loads(body)["traces"] == []


WINDOW = {"start": str(int(CAPTURE_END_S) - 3600), "end": str(int(CAPTURE_END_S))}


@pytest.mark.parametrize(
    ("path", "q", "text"),
    [
        ("api/search", "{ span. }", "invalid TraceQL query: parse error at line "),
        ("api/search", '{ span.foo =~ "[" }', "invalid TraceQL query: invalid regex: `[`"),
        ("api/metrics/query_range", "{ span. } | rate()", "parse error at line "),
        ("api/metrics/query", "{ span. } | rate()", "compiling query: parse error at line "),
        ("api/metrics/query_range", "{} | rate() | topk(0)", "compiling query: limit must be greater than 0"),
        ("api/metrics/query", "{} | rate() | topk(0)", "compiling query: limit must be greater than 0"),
    ],
)
async def test_query_errors_are_worded_as_tempo_words_them(store: Store, path: str, q: str, text: str) -> None:
    status, _, body = await answer(store, path, q=q, **WINDOW)
    assert status == 400 and body.decode().startswith(text), body
