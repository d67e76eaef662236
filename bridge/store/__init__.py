"""Standalone mode's embedded store: SQLite (WAL) under ``settings.data_dir``, filled by the ingest routes and the
OTLP sinks, read through the same ``TraceSource`` / ``ProfileSource`` protocols as Tempo and Pyroscope.

- ``db.Store``: the store (ingest, queries, retention); ``schema``: versioned migrations;
- ``model``: pure ingest decoding; ``selector``: label selectors; ``traceql``: the TraceQL subset;
- ``querier_api``: the ``pyroscope_local`` RPC table; ``tempo_api``: the ``tempo_local`` handler;
- ``retention``: the background task.
"""

from bridge.store.db import Store, StoreError

__all__ = ["Store", "StoreError"]
