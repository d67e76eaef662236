"""Standalone mode's embedded store: SQLite (WAL) under ``settings.data_dir``, filled by the ingest routes and the
OTLP sinks, read through the same ``TraceSource`` / ``ProfileSource`` protocols as Tempo and Pyroscope.

- ``backend.Store``: the store as one backend, composed of ``database`` (the SQLite file, its writer thread with
  group commit, its reader pool), ``ingest`` (rows into tables, the OTLP sinks), ``retention`` (age and size
  budgets), ``traces`` (trace by id, span lookup, TraceQL search, tags) and ``profiles`` (merged stacks, Pyroscope's
  querier);
- ``schema``: versioned migrations and the column formats; ``decode``: pure ingest decoding; ``traceql``: the
  TraceQL subset; ``query``: pure query pieces (time window, span/trace selectors, TraceQL attribute values, Tempo
  search spans);
- ``querier_api``: the ``pyroscope_local`` RPC table; ``tempo_api``: the ``tempo_local`` handler;
- ``runtime``: standalone mode's lifetime in the app (open, publish in ``app[BACKENDS]``, retention task, close);
- ``integrity``: is the file damaged (at start, on ``/readyz``, for ``store check``); ``repair`` and ``salvage``:
  ``store repair``, the rows a damaged file still holds.
"""

from bridge.store.backend import Store
from bridge.store.database import StoreError

__all__ = ["Store", "StoreError"]
