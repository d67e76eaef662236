"""The differences ``bench/differential.py`` knows: each answer that differs from the real peer's on purpose, or for a
reason written down, with that reason (docs/peers.md lists them too). A line matching one is counted as ``known``,
not as a difference; anything else that differs is a finding.

Each entry: the check groups it applies to (a group's proxy twin included), a regular expression over the check's
name, and why — ``deliberate``: the bridge answers otherwise on purpose; ``structural``: the store cannot answer as
Pyroscope does without keeping something it does not keep; ``traceql``: TraceQL engine work, listed for
``bridge/traceql``'s owner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Known:
    groups: tuple[str, ...]
    name: str  # a regular expression, searched in the check's name
    kind: str  # deliberate | structural | traceql
    why: str

    def matches(self, group: str, name: str) -> bool:
        return group.removeprefix("proxy.") in self.groups and re.search(self.name, name) is not None


KNOWN: Final[tuple[Known, ...]] = (
    Known(
        ("pyroscope.span",),
        r"spans \['([0-9a-f]{0,15}|[0-9a-f]{17,}|[^']*[^0-9a-f'][^']*)'\]",
        "deliberate",
        "a span id that is not 16 hex: Pyroscope's querier fails the request (Connect unknown, HTTP 500); the "
        "bridge answers 400 invalid_argument saying what to send (never a 500)",
    ),
    Known(
        ("pyroscope.span",),
        r"spans \['0{16}'\]",
        "deliberate",
        "sixteen zeros: Pyroscope takes it and matches nothing (200, empty); the bridge answers 400 naming it "
        "OpenTelemetry's invalid span id — no span has it, so a click that sends it is a mistake to report",
    ),
    Known(
        ("pyroscope.series",),
        r"EXEMPLAR_TYPE_SPAN",
        "deliberate",
        "span exemplars of SelectSeries: Pyroscope relays its backend's Unimplemented as Connect unknown (HTTP 500); "
        "the store answers unimplemented (501) with the same words",
    ),
    Known(
        ("pyroscope.series",),
        r"AVERAGE",
        "deliberate",
        "TIME_SERIES_AGGREGATION_TYPE_AVERAGE: Pyroscope's v2 read path sums whatever is asked (its aggregator's "
        "TODO, pkg/querybackend/query_time_series.go); the store averages, as the v1 read path does",
    ),
    Known(
        ("pyroscope.series", "pyroscope.heatmap"),
        r"INDIVIDUAL",
        "structural",
        "one upload split into series by a sample label (span_name) is one profile to Pyroscope — one id, one "
        "heatmap point, one exemplar of the whole upload; the store keeps a profile per series and counts each",
    ),
    Known(
        ("pyroscope.errors",),
        r"selector",
        "deliberate",
        "a malformed label selector: Pyroscope words it as Prometheus' parser does (and takes a bare `name` as a "
        "metric name, matching nothing); the store names what is wrong in its own words (both 400 for a bad one)",
    ),
    Known(
        ("pyroscope.errors",),
        r"profile type",
        "deliberate",
        "a malformed profile type: both 400 invalid_argument; the store's message names the five parts with an "
        "example instead of Pyroscope's 'profile-type selection must be of the form …'",
    ),
    Known(
        ("pyroscope.misc",),
        r"GetProfileStats|AnalyzeQuery",
        "deliberate",
        "v2 answers {} to both (not implemented on its read path); the store answers its own numbers (whether "
        "data was ingested, oldest/newest profile; the blocks, series and bytes a query reads)",
    ),
    Known(
        ("pyroscope.labels",),
        r"LabelNames",
        "deliberate",
        "__service_name__: a label of Pyroscope's v2 storage only; the store answers v1's label set",
    ),
    Known(
        ("tempo.metrics",),
        r"compare\(",
        "traceql",
        "compare(): Tempo counts nil for its vparquet well-known/dedicated columns (k8s.*, http.*, url.*, server.*) "
        "in every span and keeps its own top-10 among equal-count values; bridge/traceql does neither",
    ),
)


def known(group: str, name: str) -> Known | None:
    return next((k for k in KNOWN if k.matches(group, name)), None)
