"""README.md is the user's manual and docs/ its reference: the two set-up commands, the first screen (two commands
and the demo line), every command they show parses with the real command line, every link resolves, the settings
table matches the code, and .ci/run runs the same test command."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from bridge.cli import build_parser
from bridge.config import FIELDS_BY_KEY, settings_markdown
from tests.paths import ROOT

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"

INSTALL_AND_START = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/profile-bridge serve"
TEST_COMMAND = ".venv/bin/python -m pytest"
DEMO_LINE = ".venv/bin/profile-bridge demo"
FIRST_SCREEN_LINES = 45  # what a terminal or a repository page shows before the first scroll
README_MAX_BYTES = 16_000  # the reference lives in docs/; README stays a first read


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return _sh_blocks(section)


def test_exactly_two_setup_commands() -> None:
    assert _quick_start_commands() == [INSTALL_AND_START, TEST_COMMAND]


def test_the_first_screen_has_the_two_commands_and_the_demo_line() -> None:
    """A newcomer gets from nothing to a span page with real data without scrolling: install and start, test, and
    one line that sends demo data to the running bridge."""
    screen = "\n".join(README.splitlines()[:FIRST_SCREEN_LINES])
    blocks = _sh_blocks(screen)
    assert blocks[:3] == [INSTALL_AND_START, TEST_COMMAND, DEMO_LINE]
    assert "http://localhost:4041/" in screen  # where to look
    listen_port = FIELDS_BY_KEY["PROFILE_BRIDGE_LISTEN"].default.rsplit(":", 1)[1]
    assert listen_port == "4041"  # the URL the first screen names is the bridge's default


def _words(line: str) -> list[str]:
    """A shown command line as argv: comments cut, leading VAR=value assignments dropped."""
    line = line.split(" #", 1)[0].strip()
    words = shlex.split(line) if line else []
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words.pop(0)
    return words


def _is_ours(words: list[str]) -> bool:
    return bool(words) and words[0] in ("profile-bridge", ".venv/bin/profile-bridge")


def _block_commands(text: str) -> list[list[str]]:
    """Every profile-bridge command in ``text``'s sh blocks (continuation lines joined)."""
    lines = [line for block in _sh_blocks(text) for line in block.replace("\\\n", " ").splitlines()]
    return [words for words in map(_words, lines) if _is_ours(words)]


def _inline_commands(text: str) -> list[list[str]]:
    """Every `profile-bridge …` code span in the prose (a command named, maybe with some of its flags)."""
    spans = re.findall(r"`((?:\.venv/bin/)?profile-bridge [^`\n]*)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return [
        words
        for words in map(_words, spans)
        if _is_ours(words) and len(words) > 1 and not words[1].isupper() and "[" not in " ".join(words)
    ]


def _subcommand_options(command: str) -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert command in sub.choices, f"profile-bridge has no command {command!r}"
    return set(sub.choices[command]._option_string_actions)


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_shown_parses_with_the_real_cli(path: Path) -> None:
    """Flags in the docs exist: each `profile-bridge …` line of an sh block (the demo line included) parses with
    the CLI's own parser (a made-up flag or a missing argument raises), and every flag a command named in the prose
    carries is one of that command's."""
    text = path.read_text(encoding="utf-8")
    blocks = _block_commands(text)
    if path.name == "README.md" and path.parent == ROOT:
        assert shlex.split(DEMO_LINE) in blocks
    for words in blocks:
        args = build_parser().parse_args(words[1:])
        assert args.command == words[1], words
    for words in _inline_commands(text):
        options = _subcommand_options(words[1])
        unknown = [w for w in words[2:] if w.startswith("-") and w.split("=")[0] not in options]
        assert not unknown, f"{' '.join(words)}: {unknown} are not flags of profile-bridge {words[1]}"


def test_the_demo_line_runs_the_demo_against_the_default_bridge() -> None:
    args = build_parser().parse_args(shlex.split(DEMO_LINE)[1:])
    assert args.command == "demo" and args.to is None and args.traces_to is None and args.load


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (word characters, '-' and ' ' kept), spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = re.match(r"^(#{1,6}) (.+)$", line)
        if match and not in_code:
            slug = _slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(text: str) -> list[str]:
    without_code = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", without_code)


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(path: Path) -> None:
    """Relative links point at files of this repository (a clone has nothing beside it), and their #anchors at
    headings that exist."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for link in _links(text):
        parts = urlsplit(link)
        if parts.scheme or link.startswith("mailto:"):
            continue
        target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if not target.exists() or ROOT.resolve() not in (target, *target.parents):
            broken.append(f"{link}: no such file in the repository")
            continue
        if parts.fragment and target.suffix == ".md" and parts.fragment not in _anchors(target.read_text()):
            broken.append(f"{link}: no heading with that anchor in {target.relative_to(ROOT.resolve())}")
    assert not broken, "\n".join(broken)


def test_the_docs_are_linked_and_nothing_points_outside_the_repository() -> None:
    readme_links = {urlsplit(link).path for link in _links(README)}
    assert "docs/README.md" in readme_links
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for name in (
        "mounts.md",
        "standalone.md",
        "gateway.md",
        "api.md",
        "grafana.md",
        "demo.md",
        "operations.md",
        "benchmarks.md",
        "development.md",
    ):
        assert f"({name})" in index and (DOCS / name).is_file(), name
    for path in _markdown_files():
        assert "../shared" not in path.read_text(encoding="utf-8"), f"{path}: a clone has no ../shared"


def test_readme_stays_short() -> None:
    assert len(README.encode()) <= README_MAX_BYTES, "move reference material to docs/"


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
