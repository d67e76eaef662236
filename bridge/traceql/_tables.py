"""The LALR(1) tables of ``grammar`` (built by ``lalr``), loaded from ``lalr_tables.json``, which
``scripts/gen_traceql_tables.py`` writes (a test checks it is current). Per state, ``ACTIONS`` holds
``token-index:action`` pairs (a state to shift to, -1 - production to reduce, -32767 to accept) and ``GOTOS``
``nonterminal-index:state`` pairs; ``PRODUCTIONS`` are ``(left side, length, action name)``. Data, not code: the
tables are some 50,000 characters that no one reads line by line."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Final

_DATA: Final = json.loads(files(__package__).joinpath("lalr_tables.json").read_text(encoding="utf-8"))

TERMINALS: Final[tuple[str, ...]] = tuple(_DATA["terminals"])
NONTERMINALS: Final[tuple[str, ...]] = tuple(_DATA["nonterminals"])
PRODUCTIONS: Final[tuple[tuple[str, int, str], ...]] = tuple((lhs, n, act) for lhs, n, act in _DATA["productions"])
ACTIONS: Final[tuple[str, ...]] = tuple(_DATA["actions"])
GOTOS: Final[tuple[str, ...]] = tuple(_DATA["gotos"])
