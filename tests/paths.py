"""Where tests find ground truth: copies of real captures under ``tests/fixtures/`` (see its README). The repository
never reads outside itself, so a plain clone runs its own tests."""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
FIXTURES: Final = ROOT / "tests" / "fixtures"
SHOP_CAPTURE: Final = FIXTURES / "shop-capture"
VULTURE_TRACE: Final = FIXTURES / "tempo" / "vulture-trace.json"
GO_CPU_PPROF: Final = FIXTURES / "pyroscope" / "go-cpu.pprof"
JFR_FIXTURES: Final = FIXTURES / "jfr"  # recordings and jfr-parser's expected outputs
COMPOSE_SCHEMA: Final = ROOT / "tests" / "schemas" / "compose-spec.json"
GOLDEN: Final = ROOT / "tests" / "golden"
ARTIFACTS: Final = ROOT / "tests" / "artifacts"
