"""Text that is almost TraceQL never breaks the bridge: Tempo's valid examples, mutated (characters dropped,
doubled, swapped, replaced by TraceQL's own punctuation and keywords; seeded, so every run tries the same), through
the parser and validation — only ``QueryError`` — and through the store's search and metrics endpoints — only 200
or 400, with a message; never 500, never a hang."""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.store import Store, tempo_api
from bridge.traceql.errors import QueryError
from bridge.traceql.metrics import compile_metrics
from bridge.traceql.parser import parse
from bridge.traceql.search import compile_search
from tests.store.test_store import ctx
from tests.traceql.test_language import EXAMPLES
from tests.traceql.test_search_cases import store_trace

PIECES = list("{}()[]|&!<>=~.,:\"`-+*/%^ ") + [
    "&&", "||", ">>", "<<", "!~", "=~", "nil", "true", "by(", "count()", "rate()", "span.", "resource.", "event:",
    "link:", "trace:", "duration", "1ms", "3.5", "-1", "with(", "select(", "compare(", "topk(", "\\", "\n", "é",
]  # fmt: skip


def mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(chars) + 1)
        kind = rng.randrange(4)
        if kind == 0 and chars:
            del chars[min(i, len(chars) - 1)]
        elif kind == 1:
            chars.insert(i, rng.choice(PIECES))
        elif kind == 2 and len(chars) > 1:
            j = rng.randrange(len(chars))
            k = min(i, len(chars) - 1)
            chars[j], chars[k] = chars[k], chars[j]
        else:
            chars[min(i, len(chars) - 1) if chars else 0 : min(i, len(chars) - 1) + 1 if chars else 0] = [
                rng.choice(PIECES)
            ]
    return "".join(chars)


def mutants(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [mutate(rng, rng.choice(EXAMPLES["valid"])) for _ in range(count)]


def test_mutated_queries_only_raise_query_errors() -> None:
    outcomes: Counter[str] = Counter()
    for text in mutants(3000, 20):
        try:
            root = parse(text)
            (compile_metrics if root.is_metrics else compile_search)(text)
            outcomes["compiles"] += 1
        except QueryError:
            outcomes["refused"] += 1
    assert outcomes["compiles"] > 150 and outcomes["refused"] > 1000, outcomes  # both kinds were tried


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path, clock=lambda: 1_000_000.0)
    await s.ingest_otlp_traces(store_trace(), None)
    yield s
    await s.close()


async def test_mutated_queries_answer_200_or_400(store: Store) -> None:
    handler = functools.partial(tempo_api.answer, store)
    statuses: Counter[int] = Counter()
    for text in mutants(400, 21):
        for path, extra in (("api/search", {}), ("api/metrics/query_range", {"step": "10s"})):
            status, _, body = await handler("GET", path, {"q": text, "start": "900", "end": "1100", **extra}, {}, ctx())
            statuses[status] += 1
            assert status in (200, 400), (path, text, body)
            assert status == 200 or body.strip(), (path, text)
    assert statuses[200] > 20 and statuses[400] > 100, statuses


@pytest.mark.parametrize(
    "query",
    [
        {"q": "{}", "limit": "-1"},
        {"q": "{}", "limit": "9" * 30},
        {"q": "{}", "spss": "x"},
        {"q": "{}", "start": "1e99"},
        {"q": "{}", "start": "2000", "end": "1000"},
        {"q": "{}", "start": "0", "end": str(10**12)},
        {"q": "\x00"},
        {"q": "{" * 5000},
        {"q": "{ .a = " + "1 + " * 3000 + "1 }"},
        {"q": "x" * 200_000},
    ],
)
async def test_odd_parameters_are_400_or_answered(store: Store, query: dict[str, str]) -> None:
    handler = functools.partial(tempo_api.answer, store)
    for path in ("api/search", "api/metrics/query_range", "api/metrics/query"):
        status, _, body = await handler("GET", path, query, {}, ctx())
        assert status in (200, 400), (path, query, body[:200])
