"""Standalone mode's side of the ``/pyroscope`` mount: Pyroscope's querier methods answered by the store, keyed by
method name, each with its request type (the mount decodes with it, calls, encodes the answer). Anything else under
the mount is ``unimplemented``, with a message naming what the store does answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.connect import Codec, decode_message
from bridge.errors import Unimplemented
from bridge.store.backend import Store

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


class StorePyroscope:
    """The ``/pyroscope`` mount's backend in standalone mode."""

    def __init__(self, store: Store) -> None:
        self.table = rpc_table(store)

    def must_decode(self, method: str | None, content_type: str | None) -> bool:
        return method is not None and method in self.table

    async def pass_on(
        self, request: web.Request, ctx: CallContext, body: bytes | None = None, encoding: str | None = None
    ) -> web.StreamResponse:
        raise Unimplemented(
            f"{request.method} {request.path} is not served in standalone mode (the embedded store answers the "
            f"querier.v1.QuerierService RPCs {', '.join(sorted(self.table))})"
        )

    async def call(self, method: str, data: bytes, codec: Codec, ctx: CallContext) -> Message | None:
        entry = self.table.get(method)
        if entry is None:
            raise Unimplemented(f"{method} is not served in standalone mode")
        cls, handler = entry
        return await handler(decode_message(data, codec, cls), ctx)
