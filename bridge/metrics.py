"""The bridge's Prometheus metrics. One registry per app, so tests and several apps in one process never collide.

Every label value of every metric comes from a closed set, enforced here and nowhere else: ``Vocabulary`` holds the
values each label name may take (``VOCABULARY`` below, plus what the app adds once at start: its routes, the
configured pprof targets), and every labelled metric clamps a value it does not know to ``other`` and counts that in
``profile_bridge_metric_labels_clamped_total{label}``. So no request — a junk RPC name, a random path, an upstream's
odd status — can add a series: the number of series is fixed by the code and the settings, not by traffic.

Under ``serve --workers N`` (``bridge.workers``) each worker process writes its values to files in one directory
(prometheus_client's multiprocess mode, switched on by ``use_multiprocess`` before any metric exists) and ``render``
answers the sum over every worker, dead ones' counters included: a scraper on the shared port sees one bridge.
"""

from __future__ import annotations

import http
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, Self, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values

from bridge.errors import Code
from bridge.wire.pyroscope import QUERIER_METHODS

if TYPE_CHECKING:
    from aiohttp import web

_multiprocess_dir: str | None = None


def use_multiprocess(path: str) -> None:
    """From now on metric values live in files under ``path`` (``PROMETHEUS_MULTIPROC_DIR`` must name it too: the
    library reads it when a value is created) and ``render`` aggregates every process's files."""
    global _multiprocess_dir
    _multiprocess_dir = path
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OTHER: Final = "other"

_STATUSES: Final = frozenset({str(int(s)) for s in http.HTTPStatus} | {"499"})
# label name -> the values it may take; anything else is ``other``
VOCABULARY: Final[Mapping[str, frozenset[str]]] = {
    # requests by route: the app's routes (added at start) and the finer labels handlers set; "unmatched" for 404s
    "route": frozenset(
        {
            "unmatched",
            # ingest_rejected's routes (HTTP ingest, the link gateway's receivers, the store's OTLP profile sink)
            "/v1/traces",
            "/push.v1.PusherService/Push",
            "/ingest",
            "otlp_profiles",
            "otlp_http_profiles",
            "otlp_grpc_profiles",
            "otlp-profiles",
        }
    ),
    "code": _STATUSES,
    "mode": frozenset({"linked", "local-root", "time-window", "none"}),
    "upstream": frozenset({"tempo", "pyroscope"}),
    "call": frozenset({"trace_by_id", "search", "ready", "passthrough", "otlp_export"}) | QUERIER_METHODS,
    # upstream outcomes (ok, a Connect code, an HTTP status), link outcomes, scrape outcomes
    "outcome": frozenset({"ok", "error", "linked", "invalid", "already_linked", "no_link_attributes"})
    | frozenset(c.value for c in Code)
    | _STATUSES,
    "cache": frozenset({"spans", "span_lookups"}),
    "reason": frozenset({"protobuf", "json", "encoding"}),
    "kind": frozenset({"profiles", "samples", "spans"}),
    "target": frozenset(),  # the configured pprof targets, added at start
    "label": frozenset(),  # the clamp counter's own label: every label name above, added below
}


class Vocabulary:
    """The closed set of values of each label name. ``allow`` adds values; only the app's assembly calls it (its
    routes, its settings), never a request."""

    def __init__(self, initial: Mapping[str, Iterable[str]]) -> None:
        self._values: dict[str, set[str]] = {name: set(values) for name, values in initial.items()}
        self._values["label"] |= set(self._values)

    def allow(self, label: str, *values: str) -> None:
        self._values.setdefault(label, set()).update(values)

    def knows(self, label: str, value: str) -> bool:
        return value in self._values.get(label, ())


class _Closed:
    """Mixed into a prometheus metric: ``labels`` clamps every value outside its label's vocabulary to ``other``.
    Only the parent metric carries the vocabulary; the children prometheus_client creates do not call ``labels``."""

    _vocabulary: Vocabulary | None = None
    _clamped: Counter | None = None
    _label_names: tuple[str, ...] = ()

    def close_over(self, vocabulary: Vocabulary, clamped: Counter | None, names: Iterable[str]) -> None:
        self._vocabulary = vocabulary
        self._clamped = clamped
        self._label_names = tuple(names)

    def labels(self, *values: object, **kwargs: object) -> Self:
        vocabulary = self._vocabulary
        if vocabulary is not None:
            if kwargs:
                values = tuple(kwargs[name] for name in self._label_names)
            values = tuple(
                self._clamp(name, str(value), vocabulary) for name, value in zip(self._label_names, values, strict=True)
            )
            return super().labels(*values)  # type: ignore[misc,no-any-return]
        return super().labels(*values, **kwargs)  # type: ignore[misc,no-any-return]

    def _clamp(self, name: str, value: str, vocabulary: Vocabulary) -> str:
        if vocabulary.knows(name, value):
            return value
        if self._clamped is not None:
            self._clamped.labels(name).inc()
        return OTHER


class ClosedCounter(_Closed, Counter):
    pass


class ClosedGauge(_Closed, Gauge):
    pass


class ClosedHistogram(_Closed, Histogram):
    pass


M = TypeVar("M", bound=_Closed)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.vocabulary = Vocabulary(VOCABULARY)
        r = self.registry
        self.labels_clamped = self._closed(
            ClosedCounter(
                "profile_bridge_metric_labels_clamped",
                "label values recorded as 'other' because they are outside their label's closed set (by label name)",
                ["label"],
                registry=r,
            ),
            clamps=False,
        )
        self.requests = self._closed(
            ClosedCounter(
                "profile_bridge_requests",
                "HTTP requests served, by route and status code",
                ["route", "code"],
                registry=r,
            )
        )
        self.request_seconds = self._closed(
            ClosedHistogram(
                "profile_bridge_request_seconds",
                "HTTP request duration by route",
                ["route"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            )
        )
        self.resolutions = self._closed(
            ClosedCounter("profile_bridge_resolutions", "span profile resolutions by mode", ["mode"], registry=r)
        )
        self.upstream_seconds = self._closed(
            ClosedHistogram(
                "profile_bridge_upstream_seconds",
                "upstream call latency",
                ["upstream", "call", "outcome"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            )
        )
        self.cache_hits = self._closed(
            ClosedCounter("profile_bridge_cache_hits", "cache hits by cache", ["cache"], registry=r)
        )
        self.cache_misses = self._closed(
            ClosedCounter("profile_bridge_cache_misses", "cache misses by cache", ["cache"], registry=r)
        )
        self.cache_entries = self._closed(
            ClosedGauge(
                "profile_bridge_cache_entries",
                "entries held by cache",
                ["cache"],
                registry=r,
                multiprocess_mode="livesum",
            )
        )
        self.enriched_spans = Counter(
            "profile_bridge_enriched_spans", "spans given pyroscope.profile.id by the Tempo mount", registry=r
        )
        self.enrich_failures = self._closed(
            ClosedCounter(
                "profile_bridge_enrich_failures",
                "Tempo answers passed through unchanged because they could not be decoded",
                ["reason"],
                registry=r,
            )
        )
        self._declare_standalone(r)

    def _declare_standalone(self, r: CollectorRegistry) -> None:
        """What standalone mode and the OTLP side record: ingest, the store's disk, the link gateway, pprof pulls."""
        self.ingested = self._closed(
            ClosedCounter("profile_bridge_ingested", "items ingested by the standalone store", ["kind"], registry=r)
        )
        self.ingest_rejected = self._closed(
            ClosedCounter("profile_bridge_ingest_rejected", "ingest requests rejected", ["route"], registry=r)
        )
        self.links = self._closed(
            ClosedCounter(
                "profile_bridge_link_samples",
                "OTLP profile samples seen by the link gateway, by outcome",
                ["outcome"],
                registry=r,
            )
        )
        self.store_disk_full = Gauge(
            "profile_bridge_store_disk_full",
            "1 while the standalone store's disk is full and ingest is refused",
            registry=r,
        )
        self.store_full_refusals = Counter(
            "profile_bridge_store_disk_full_refusals",
            "ingest writes refused because the store's disk was full",
            registry=r,
        )
        self.pprof_scrapes = self._closed(
            ClosedCounter(
                "profile_bridge_pprof_scrapes",
                "pprof pull scrapes by target and outcome (ok, error)",
                ["target", "outcome"],
                registry=r,
            )
        )

    def _closed(self, metric: M, *, clamps: bool = True) -> M:
        names = tuple(getattr(metric, "_labelnames", ()))
        for name in names:
            if name not in VOCABULARY:
                raise AssertionError(f"label {name!r} has no vocabulary in bridge.metrics.VOCABULARY")
        metric.close_over(self.vocabulary, self.labels_clamped if clamps else None, names)
        return metric

    def allow_routes(self, app: web.Application) -> None:
        """The app's routes become known ``route`` values (once, when the app is assembled)."""
        for resource in app.router.resources():
            self.vocabulary.allow("route", resource.canonical)

    def allow(self, label: str, *values: str) -> None:
        self.vocabulary.allow(label, *values)

    def render(self) -> bytes:
        if _multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        every = CollectorRegistry()
        multiprocess.MultiProcessCollector(every, path=_multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(every)
