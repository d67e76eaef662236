"""TraceQL as Tempo 3.0 runs it, pure (no I/O): docs/traceql.md is the map; the store executes the plans."""
