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

Run it with ``profile-bridge demo`` (sends to a running bridge, or ``--traces-to``/``--profiles-to`` elsewhere) or
``profile-bridge serve --demo`` (a standalone bridge and the shop in one command). ``shop.DemoShop`` supervises the two
service processes (``python -m bridge.demo``, one per service) and drives them with the load loop (``load``). The
SDKs are the ``demo`` extra (``pip install 'profile-bridge[demo]'``; ``[dev]`` has them too).
"""
