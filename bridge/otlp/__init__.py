"""OTLP profiles: the link gateway.

- ``link``           pure: span-id sample attributes → OTLP ``Link`` entries and ``link_index`` (the core).
- ``pprof_convert``  pure: a pprof ``Profile`` → an ``ExportProfilesServiceRequest`` (labels → sample attributes).
- ``gateway``        link, then forward to Pyroscope or hand to the standalone store; one place for metrics.
- ``grpc_server``    grpc.aio server: ProfilesService/Export (and TraceService/Export when the store runs).
- ``pull``           optional scraper of ``/debug/pprof/profile?seconds=N`` targets feeding the gateway.

The HTTP receiver is ``bridge/routes/otlp.py``; forwarding is ``bridge/upstream/otlp_forward.py``.
"""
