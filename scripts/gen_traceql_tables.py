"""Regenerate bridge/traceql/lalr_tables.json, the LALR(1) tables of bridge/traceql/grammar.py (bridge/traceql/lalr.py),
which bridge/traceql/_tables.py loads at import.

Run after changing the grammar: ``.venv/bin/python scripts/gen_traceql_tables.py``. A test fails while the committed
tables differ from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.traceql import grammar, lalr  # noqa: E402

TARGET = Path(__file__).resolve().parent.parent / "bridge" / "traceql" / "lalr_tables.json"


def _rows(rows: list[dict[str, int]], names: tuple[str, ...]) -> list[str]:
    """Each state's row as ``index:value`` pairs in name order: dense, one string per state."""
    index = {name: i for i, name in enumerate(names)}
    return [" ".join(f"{index[k]}:{v}" for k, v in sorted(row.items(), key=lambda kv: index[kv[0]])) for row in rows]


def render() -> str:
    """One key per line: a diff shows which table changed, and the file stays a handful of lines."""
    t = lalr.build(grammar.PRODUCTIONS, grammar.PRECEDENCE, grammar.START)
    doc = {
        "generated_by": "scripts/gen_traceql_tables.py from bridge/traceql/grammar.py: do not edit",
        "conflicts_left_to_shift": len(t.conflicts),
        "terminals": list(t.terminals),
        "nonterminals": list(t.nonterminals),
        "productions": [list(p) for p in t.productions],
        "actions": _rows(t.actions, t.terminals),
        "gotos": _rows(t.gotos, t.nonterminals),
    }
    lines = [f"  {json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}" for key, value in doc.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


if __name__ == "__main__":
    TARGET.write_text(render())
    print(f"wrote {TARGET}")
