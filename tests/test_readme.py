"""README.md is the user's manual: its two set-up commands, its settings table and .ci/run must agree."""

from __future__ import annotations

import re

from bridge.config import settings_markdown
from tests.paths import ROOT

README = (ROOT / "README.md").read_text()

INSTALL_AND_START = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/profile-bridge serve"
TEST_COMMAND = ".venv/bin/python -m pytest"


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.S)


def test_exactly_two_setup_commands() -> None:
    assert _quick_start_commands() == [INSTALL_AND_START, TEST_COMMAND]


def test_ci_runs_the_same_test_command_lint_and_types() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/pip install -q -e '.[dev]'" in ci
    lines = [line.strip() for line in ci.splitlines()]
    assert TEST_COMMAND in lines
    assert ".venv/bin/ruff check ." in lines
    assert ".venv/bin/mypy" in lines
    assert "set -euo pipefail" in ci  # pytest's exit 5 (no tests ran) fails the run


def test_settings_table_matches_the_code() -> None:
    start = README.index("<!-- settings-table")
    table = README[README.index("\n", start) + 1 : README.index("<!-- /settings-table -->")].strip()
    assert table == settings_markdown(), "regenerate README's settings table from bridge.config.settings_markdown()"
