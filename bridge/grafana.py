"""Pure: Grafana's own conventions the bridge reproduces (``docs/contracts``: Grafana's trace → profiles link).

- The span window: Grafana's "Profiles for this span" asks for the span's start − 60 s … end + 60 s (Explore link);
  its span details ask for ±30 s. Times are Unix milliseconds; the bridge rounds outwards (start down, end up) so the
  window always holds the whole span.
- Explore URLs: ``/explore?schemaVersion=1&panes=<JSON>&orgId=1``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlencode

from bridge.spans import Span

EXPLORE_MARGIN_MS: Final = 60_000  # tracesToProfiles' Explore link
DETAILS_MARGIN_MS: Final = 30_000  # span details' embedded flame graph
PYROSCOPE_DS_TYPE: Final = "grafana-pyroscope-datasource"
TEMPO_DS_TYPE: Final = "tempo"


def span_window(span: Span, margin_ms: int = EXPLORE_MARGIN_MS) -> tuple[int, int]:
    """``[start − margin, end + margin]`` in ms, rounded outwards: the window Grafana asks profiles for."""
    return span.start_ns // 1_000_000 - margin_ms, -(-span.end_ns // 1_000_000) + margin_ms


def explore_url(grafana_url: str, panes: Mapping[str, Any]) -> str:
    return f"{grafana_url.rstrip('/')}/explore?" + urlencode(
        {"schemaVersion": "1", "panes": json.dumps(panes), "orgId": "1"}
    )
