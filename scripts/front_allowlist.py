"""Rewrite the copies of the mounts' allowlist (bridge/wire/allowlist.py, their one source): the nginx map in
deploy/nginx-front.conf and the table in docs/security.md.

    .venv/bin/python scripts/front_allowlist.py

Run it after changing ``ALLOWED``; tests fail until the copies agree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.wire.allowlist import (  # noqa: E402
    DOCS_TABLE_BEGIN,
    DOCS_TABLE_END,
    FRONT_MAP_BEGIN,
    FRONT_MAP_END,
    markdown_table,
    nginx_map,
)

COPIES: list[tuple[Path, str, str, Callable[[], str]]] = [
    (ROOT / "deploy" / "nginx-front.conf", FRONT_MAP_BEGIN, FRONT_MAP_END, nginx_map),
    (ROOT / "docs" / "security.md", DOCS_TABLE_BEGIN, DOCS_TABLE_END, markdown_table),
]


def rewritten(text: str, begin: str, end: str, render: Callable[[], str]) -> str:
    """``text`` with everything from the ``begin`` line to the ``end`` line replaced by ``render()``."""
    start = text.index(begin)
    stop = text.index(end, start) + len(end) + 1
    return text[:start] + render() + text[stop:]


def main() -> int:
    for path, begin, end, render in COPIES:
        text = path.read_text()
        new = rewritten(text, begin, end, render)
        if new != text:
            path.write_text(new)
        print(f"{path.relative_to(ROOT)}: {'rewritten' if new != text else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
