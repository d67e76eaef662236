"""Standalone mode's embedded store: SQLite (WAL) under ``settings.data_dir``, filled by the ingest routes and the
OTLP sinks, read through the same ``TraceSource`` / ``ProfileSource`` protocols as Tempo and Pyroscope.

- ``db.Store``: the store (ingest, queries, retention); ``schema``: versioned migrations;
- ``decode``: pure ingest decoding; ``selector``: label selectors; ``traceql``: the TraceQL subset; ``query``: pure
  query pieces (time window, span/trace selectors, Tempo search spans, pprof building);
- ``querier_api``: the ``pyroscope_local`` RPC table; ``tempo_api``: the ``tempo_local`` handler;
- ``runtime``: standalone mode's lifetime in the app (open, publish in ``app[BACKENDS]``, retention task, close).
"""

from bridge.store.db import Store, StoreError

__all__ = ["Store", "StoreError"]
