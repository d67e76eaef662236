"""A two-service demo shop instrumented with the stock SDKs, so every resolution mode of profile-bridge shows up.

``shop-frontend`` and ``shop-backend`` are small aiohttp services, each in its own process (pyroscope-io profiles a
whole process under one service name). Traces: ``opentelemetry-sdk`` with the OTLP/HTTP protobuf exporter. Profiles:
``pyroscope-io`` (100 Hz CPU, 10 s windows) with ``pyroscope-otel``'s ``PyroscopeSpanProcessor``, which tags the
samples of local root spans with their span id.

What each request produces, and what profile-bridge answers for its spans:

- frontend ``GET /checkout``: SERVER root (linked) → ``renderCart``, CPU in ``render_json`` (local-root) → CLIENT
  ``HTTP GET shop-backend`` (local-root) carrying ``traceparent`` to
- backend ``GET /price``: SERVER span with a remote parent, so a local root too (linked) → ``countPrimes``, CPU in
  ``count_primes`` (local-root);
- frontend ``GET /health``: one very short span (time-window: too short for a 10 ms sample);
- frontend ``GET /slow-io``: SERVER root → ``waitForInventory``, sleeps 300 ms (time-window or none: no CPU).

Run: ``python -m examples.demo_app --frontend-port 8080 --backend-port 8081 [--load]``; endpoints from the
environment: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and
``PYROSCOPE_SERVER_ADDRESS``.
"""
