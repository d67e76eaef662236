"""Pure: Pyroscope's API as the bridge speaks it (``docs/contracts``: Pyroscope): the querier's RPC paths and names,
which of them carry span selectors, the ingest paths, the label names that hold span, trace, service and SDK.

Connect's codecs themselves (proto and JSON, gzip, errors, timeouts) are ``bridge.connect``.
"""

from __future__ import annotations

from typing import Final

from google.protobuf.message import Message

from bridge._proto import querier_pb2 as qpb

QUERIER_SERVICE: Final = "querier.v1.QuerierService"
QUERIER_PATH: Final = f"/{QUERIER_SERVICE}/"
# querier.v1.QuerierService's methods (the contract's service list): a closed set, e.g. for metric labels
QUERIER_METHODS: Final = frozenset(
    {
        "ProfileTypes",
        "LabelValues",
        "LabelNames",
        "Series",
        "SelectMergeStacktraces",
        "SelectMergeSpanProfile",
        "SelectMergeProfile",
        "SelectSeries",
        "SelectHeatmap",
        "Diff",
        "GetProfileStats",
        "AnalyzeQuery",
    }
)
OTHER_METHOD: Final = "other"
# the RPCs that may carry a span selector: request and response messages
SPAN_RPCS: Final[dict[str, tuple[type[Message], type[Message]]]] = {
    "SelectMergeSpanProfile": (qpb.SelectMergeSpanProfileRequest, qpb.SelectMergeSpanProfileResponse),
    "SelectMergeStacktraces": (qpb.SelectMergeStacktracesRequest, qpb.SelectMergeStacktracesResponse),
}
# formats a span query can be resolved in (the answer is a flame graph)
FLAMEGRAPH_FORMATS: Final = (qpb.PROFILE_FORMAT_UNSPECIFIED, qpb.PROFILE_FORMAT_FLAMEGRAPH)

PUSH_PATH: Final = "/push.v1.PusherService/Push"
INGEST_PATH: Final = "/ingest"
READY_PATH: Final = "/ready"

# per-sample pprof labels that are not series labels (span profiles), and series labels the bridge reads
SPAN_ID_LABEL: Final = "span_id"
TRACE_ID_LABEL: Final = "trace_id"
LEGACY_SPAN_ID_LABEL: Final = "profile_id"  # renamed to span_id at ingest
SPAN_NAME_LABEL: Final = "span_name"
SERVICE_LABEL: Final = "service_name"
SPY_LABEL: Final = "pyroscope_spy"

# what the function → spans list needs of Pyroscope in proxy mode (../shared/contracts/pyroscope.md, "Span
# exemplars"): field 10 of SelectSeriesRequest, answered with span ids per point. Released Pyroscope (v2.2.1 and
# before, as read) rejects EXEMPLAR_TYPE_SPAN on SelectSeries or ignores the field.
SPAN_EXEMPLARS_NEEDED: Final = (
    "a Pyroscope whose SelectSeries answers span exemplars (exemplar_type = EXEMPLAR_TYPE_SPAN with a "
    "stack_trace_selector): newer than v2.2.1, the latest release this bridge was checked against"
)


def rpc_method(tail: str) -> str | None:
    """``querier.v1.QuerierService/SelectMergeSpanProfile`` (a path under a mount, no leading slash) →
    ``SelectMergeSpanProfile``; other paths → None."""
    prefix = QUERIER_PATH[1:]
    if tail.startswith(prefix) and "/" not in tail[len(prefix) :]:
        return tail[len(prefix) :] or None
    return None


def method_label(method: str | None) -> str:
    """A querier method as a metric label: one of ``QUERIER_METHODS``, anything else ``other`` (bounded)."""
    return method if method in QUERIER_METHODS else OTHER_METHOD
