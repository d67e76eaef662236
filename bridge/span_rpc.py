"""Pure: Pyroscope's span RPCs (``SelectMergeSpanProfile``, ``SelectMergeStacktraces`` with a span selector) and the
resolver — which requests it resolves, the selector a request keeps when it is passed on instead, and the answer
Grafana gets."""

from __future__ import annotations

import copy

from google.protobuf.message import Message

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.errors import InvalidArgument
from bridge.limits import time_range_problem
from bridge.resolve import Mode, Resolution, SpanQuery, clean_span_ids, measure_of
from bridge.wire.pyroscope import FLAMEGRAPH_FORMATS


def span_query_of(msg: Message) -> SpanQuery | None:
    """The span query a decoded span RPC carries; None when it has no span selector or asks for a format other
    than a flame graph (those are not resolved)."""
    if not isinstance(msg, qpb.SelectMergeSpanProfileRequest | qpb.SelectMergeStacktracesRequest):
        return None
    if not msg.span_selector or msg.format not in FLAMEGRAPH_FORMATS:
        return None
    problem = time_range_problem(msg.start, msg.end)
    if problem is not None:
        raise InvalidArgument(f"{msg.DESCRIPTOR.name}: {problem}")
    return SpanQuery(
        span_ids=tuple(msg.span_selector),
        profile_type=msg.profile_typeID,
        label_selector=msg.label_selector,
        start_ms=msg.start,
        end_ms=msg.end,
        max_nodes=msg.max_nodes if msg.HasField("max_nodes") and msg.max_nodes > 0 else None,
    )


def clean_selector_of(msg: Message) -> Message | None:
    """For a span RPC that is not resolved: a copy with its span selector cleaned when that changes it; None when
    it is fine as sent. ``SelectMergeSpanProfile`` with no valid id (or none at all) → ``InvalidArgument``."""
    if not isinstance(msg, qpb.SelectMergeSpanProfileRequest | qpb.SelectMergeStacktracesRequest):
        return None
    if isinstance(msg, qpb.SelectMergeStacktracesRequest) and not msg.span_selector:
        return None  # a plain profile query
    ids = clean_span_ids(msg.span_selector)
    if list(ids) == list(msg.span_selector):
        return None
    out = copy.deepcopy(msg)
    del out.span_selector[:]
    out.span_selector.extend(ids)
    return out


def grafana_flamegraph(resolution: Resolution, profile_type: str) -> qpb.FlameGraph:
    """The flame graph Grafana gets; its root bar is all Grafana shows of how it was found.

    - A fallback (``local-root``, ``time-window``) says first what its total is — e.g. "shop-frontend CPU during the
      19 s window around this span, not this span's own" — then why.
    - A ``none`` answer would be one row, which span details do not draw at all: it becomes a one-unit placeholder of
      two rows whose bars say why there is nothing (the ``X-Profile-Bridge-Resolution: none`` header and the root's
      label say it is not data)."""
    if resolution.mode is Mode.NONE:
        return flamegraph.placeholder(
            flamegraph.root_label(f"none: {resolution.reason}"), f"no samples — {resolution.reason}"
        )
    if resolution.mode is Mode.LINKED:
        return resolution.flamegraph
    measure = measure_of(resolution, profile_type)
    return flamegraph.relabel_root(
        resolution.flamegraph, flamegraph.root_label(f"{measure.text} — {resolution.reason}")
    )


def answer_of(method: str, resolution: Resolution, profile_type: str) -> Message:
    fg = grafana_flamegraph(resolution, profile_type)
    if method == "SelectMergeSpanProfile":
        return qpb.SelectMergeSpanProfileResponse(flamegraph=fg)
    return qpb.SelectMergeStacktracesResponse(flamegraph=fg)
