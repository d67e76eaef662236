"""Print the TraceQL conformance counts per section of Tempo's corpus (``tests/traceql/conformance.py``): each case
answered correctly, refused as ``unsupported`` (400), or wrong — and every answer that differs from the real Tempo
binary's, with why.

Run: ``.venv/bin/python scripts/traceql_conformance.py`` (a temporary store; about ten seconds). The table is the one
``docs/traceql.md`` publishes; a test checks they agree.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.traceql import conformance as cf  # noqa: E402


async def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        store, shop = await cf.open_stores(Path(tmp))
        try:
            outcomes = await cf.everything(store, shop)
        finally:
            await store.close()
            await shop.close()
    print(f"Tempo {cf.REVISION[:7]} ({cf.REVISION})\n")
    print(cf.table(outcomes))
    differing = [o for o in outcomes if o.verdict != cf.CORRECT]
    if differing:
        print("\nDiffering from Tempo:")
        for o in differing:
            print(f"- [{o.section}] {o.case}\n  {o.detail}")
    return 0 if all(o.detail in cf.known_differences().values() for o in differing) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
