"""Grafana's conventions the bridge reproduces: one span window for every place that builds Grafana's query."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from bridge.grafana import DETAILS_MARGIN_MS, explore_url, span_window
from bridge.spans import Span


def span(start_ns: int, end_ns: int) -> Span:
    return Span("a" * 32, "1" * 16, "", "GET /x", 2, "svc", start_ns, end_ns)


@pytest.mark.parametrize(
    ("start_ns", "end_ns", "margin", "window"),
    [
        (1_000_000_000, 2_000_000_000, 60_000, (1_000 - 60_000, 2_000 + 60_000)),
        # sub-millisecond edges round outwards: the window always holds the whole span
        (1_000_400_000, 1_000_600_001, 60_000, (1_000 - 60_000, 1_001 + 60_000)),
        (1_000_999_999, 1_001_000_000, DETAILS_MARGIN_MS, (1_000 - 30_000, 1_001 + 30_000)),
    ],
)
def test_span_window_table(start_ns: int, end_ns: int, margin: int, window: tuple[int, int]) -> None:
    assert span_window(span(start_ns, end_ns), margin) == window


def test_explore_url_carries_the_panes_as_json() -> None:
    url = explore_url("http://grafana:3000/", {"pb": {"datasource": "x"}})
    parts = urlsplit(url)
    assert parts.path == "/explore"
    query = parse_qs(parts.query)
    assert json.loads(query["panes"][0]) == {"pb": {"datasource": "x"}} and query["schemaVersion"] == ["1"]
