"""The ``pyroscope_local`` RPC table: Pyroscope's querier methods answered by the store, keyed by method name, each
with its request type (the ``/pyroscope`` mount decodes with it, calls, encodes the answer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf.message import Message

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.store.db import Store
from bridge.upstream.base import CallContext

Handler = Callable[[Any, CallContext], Awaitable[Message]]
RpcTable = dict[str, tuple[type[Message], Handler]]


def rpc_table(store: Store) -> RpcTable:
    return {
        "ProfileTypes": (qpb.ProfileTypesRequest, store.profile_types),
        "LabelNames": (tpb.LabelNamesRequest, store.label_names),
        "LabelValues": (tpb.LabelValuesRequest, store.label_values),
        "Series": (qpb.SeriesRequest, store.series),
        "SelectMergeStacktraces": (qpb.SelectMergeStacktracesRequest, store.select_merge_stacktraces),
        "SelectMergeSpanProfile": (qpb.SelectMergeSpanProfileRequest, store.select_merge_span_profile),
        "SelectMergeProfile": (qpb.SelectMergeProfileRequest, store.select_merge_profile),
        "SelectSeries": (qpb.SelectSeriesRequest, store.select_series),
    }
