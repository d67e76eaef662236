"""Where tests find ground truth. ``../shared`` sits beside the project's root (see README)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
SHARED: Final = ROOT.parent / "shared"
FIXTURES: Final = SHARED / "fixtures"
SHOP_CAPTURE: Final = FIXTURES / "shop-capture"
VULTURE_TRACE: Final = FIXTURES / "tempo" / "vulture-trace.json"
GO_CPU_PPROF: Final = FIXTURES / "pyroscope" / "go-cpu.pprof"
COMPOSE_SCHEMA: Final = SHARED / "schemas" / "compose-spec.json"
GOLDEN: Final = ROOT / "tests" / "golden"
ARTIFACTS: Final = ROOT / "tests" / "artifacts"
