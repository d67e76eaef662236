"""Pure: Pyroscope's API as the bridge speaks it (``docs/contracts``: Pyroscope): the querier's RPC paths and names,
which of them carry span selectors, the ingest paths, the label names that hold span, trace, service and SDK.

Connect's codecs themselves (proto and JSON, gzip, errors, timeouts) are ``bridge.connect``.
"""

from __future__ import annotations

from typing import Final

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor
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
SPAN_SELECTOR_FIELD: Final = "span_selector"
TOP: Final = ""  # the request message itself, as a place a span selector sits (Diff's are "left" and "right")


def _selector_places(desc: Descriptor) -> tuple[str, ...]:
    """Where a request carries a span selector: ``TOP`` when it has the field itself, else the names of its message
    fields that do (one level down is as deep as querier.v1 nests: ``DiffRequest.left`` / ``.right``)."""
    if SPAN_SELECTOR_FIELD in desc.fields_by_name:
        return (TOP,)
    return tuple(
        f.name
        for f in desc.fields
        if f.message_type is not None and SPAN_SELECTOR_FIELD in f.message_type.fields_by_name
    )


def _span_rpcs() -> dict[str, tuple[type[Message], tuple[str, ...]]]:
    service = qpb.DESCRIPTOR.services_by_name[QUERIER_SERVICE.rpartition(".")[2]]
    out: dict[str, tuple[type[Message], tuple[str, ...]]] = {}
    for method in service.methods:
        places = _selector_places(method.input_type)
        if places:
            out[method.name] = (message_factory.GetMessageClass(method.input_type), places)
    return out


# The RPCs whose requests can carry a span selector — read from querier.v1's own messages (any request with a
# ``span_selector`` field, or a message field holding one), so one a later querier.proto adds is covered as soon as
# bridge/_proto/querier.proto has it. At grafana/pyroscope v2.2.1: SelectMergeSpanProfile, SelectMergeStacktraces
# and Diff (left, right); SelectMergeProfile, SelectSeries and SelectHeatmap have none. method → (request class,
# places).
SPAN_RPCS: Final[dict[str, tuple[type[Message], tuple[str, ...]]]] = _span_rpcs()
# formats a span query can be resolved in (the answer is a flame graph)
FLAMEGRAPH_FORMATS: Final = (qpb.PROFILE_FORMAT_UNSPECIFIED, qpb.PROFILE_FORMAT_FLAMEGRAPH)
# Pyroscope's default max_nodes for a flame graph or a diff asked without one (pkg/validation/limits.go,
# querier.max-flamegraph-nodes-default)
DEFAULT_MAX_NODES: Final = 8192

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

# what the function → spans list needs of Pyroscope in proxy mode: SelectHeatmap with span exemplars, which only
# Pyroscope's v2 read path serves (pkg/frontend/readpath/queryfrontend/query_heatmap.go; the v1 querier answers
# "SelectHeatmap not implemented in old querier", pkg/querier/querier.go). SelectSeries never serves span exemplars:
# v1 refuses every exemplar type, v2 says "exemplar type span is not implemented"
# (pkg/querybackend/query_time_series.go).
SPAN_EXEMPLARS_NEEDED: Final = (
    "a Pyroscope that serves SelectHeatmap with span exemplars (query_type = HEATMAP_QUERY_TYPE_SPAN): its v2 "
    "read path, from v2.1 on"
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
