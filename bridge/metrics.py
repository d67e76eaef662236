"""The bridge's Prometheus metrics. One registry per app, so tests and several apps in one process never collide.

Under ``serve --workers N`` (``bridge.workers``) each worker process writes its values to files in one directory
(prometheus_client's multiprocess mode, switched on by ``use_multiprocess`` before any metric exists) and ``render``
answers the sum over every worker, dead ones' counters included: a scraper on the shared port sees one bridge.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values

_multiprocess_dir: str | None = None


def use_multiprocess(path: str) -> None:
    """From now on metric values live in files under ``path`` (``PROMETHEUS_MULTIPROC_DIR`` must name it too: the
    library reads it when a value is created) and ``render`` aggregates every process's files."""
    global _multiprocess_dir
    _multiprocess_dir = path
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "profile_bridge_requests", "HTTP requests served, by route and status code", ["route", "code"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "profile_bridge_request_seconds", "HTTP request duration by route", ["route"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.resolutions = Counter(
            "profile_bridge_resolutions", "span profile resolutions by mode", ["mode"], registry=r
        )
        self.upstream_seconds = Histogram(
            "profile_bridge_upstream_seconds", "upstream call latency", ["upstream", "call", "outcome"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.cache_hits = Counter("profile_bridge_cache_hits", "cache hits by cache", ["cache"], registry=r)
        self.cache_misses = Counter("profile_bridge_cache_misses", "cache misses by cache", ["cache"], registry=r)
        self.cache_entries = Gauge("profile_bridge_cache_entries", "entries held by cache", ["cache"], registry=r,
                                   multiprocess_mode="livesum")
        self.enriched_spans = Counter(
            "profile_bridge_enriched_spans", "spans given pyroscope.profile.id by the Tempo mount", registry=r
        )
        self.enrich_failures = Counter(
            "profile_bridge_enrich_failures",
            "Tempo answers passed through unchanged because they could not be decoded", ["reason"], registry=r,
        )
        self.ingested = Counter(
            "profile_bridge_ingested", "items ingested by the standalone store", ["kind"], registry=r
        )
        self.ingest_rejected = Counter(
            "profile_bridge_ingest_rejected", "ingest requests rejected", ["route"], registry=r
        )
        self.links = Counter(
            "profile_bridge_link_samples", "OTLP profile samples seen by the link gateway, by outcome",
            ["outcome"], registry=r,
        )
        self.pprof_scrapes = Counter(
            "profile_bridge_pprof_scrapes", "pprof pull scrapes by target and outcome (ok, error)",
            ["target", "outcome"], registry=r,
        )

    def render(self) -> bytes:
        if _multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        every = CollectorRegistry()
        multiprocess.MultiProcessCollector(every, path=_multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(every)
