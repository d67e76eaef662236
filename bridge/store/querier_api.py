"""Standalone mode's side of the ``/pyroscope`` mount: the Pyroscope API that Grafana's Pyroscope data source,
Profiles Drilldown and Perses call, answered by the store.

- ``querier.v1.QuerierService``: every method, keyed by name with its request type (the mount decodes the body,
  calls, encodes the answer in the request's codec): the flame graph, pprof, tree and DOT merges, series, labels,
  profile types, time series, ``SelectHeatmap``, ``Diff``, ``GetProfileStats``, ``AnalyzeQuery``.
- ``settings.v1.SettingsService`` (``Get``, ``Set``, ``Delete``; per tenant, ``bridge.store.settings``) and
  ``capabilities.v1.FeatureFlagsService/GetFeatureFlags``: other Connect services, decoded here (``pass_on`` hands
  them over undecoded).
- ``GET pyroscope/render`` and ``pyroscope/render-diff`` (``bridge.store.render_api``).

Anything else under the mount is ``unimplemented``, with a message naming what the store does answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from google.protobuf.message import Message

from bridge._proto import capabilities_pb2 as cpb
from bridge._proto import querier_pb2 as qpb
from bridge._proto import settings_pb2 as spb
from bridge._proto import types_pb2 as tpb
from bridge.body import read_body
from bridge.call import CallContext
from bridge.connect import Codec, codec_for, decode_message, decompress, encode_response
from bridge.errors import Unimplemented
from bridge.state import CLOCK, SETTINGS
from bridge.store import render_api
from bridge.store.backend import Store

Handler = Callable[[Any, CallContext], Awaitable[Message]]
RpcTable = dict[str, tuple[type[Message], Handler]]
HttpHandler = Callable[[Store, Any, CallContext, int], Awaitable[web.Response]]

SETTINGS_SERVICE: Final = "settings.v1.SettingsService/"
FEATURE_FLAGS: Final = "capabilities.v1.FeatureFlagsService/GetFeatureFlags"

# grafana/pyroscope pkg/featureflags/feature_flags.go (read at 3fe6a457), with what the store does: it serves
# what the v2 read path serves (SelectHeatmap, span exemplars, profile_id_selector), and no ruler
_V2_DOCS: Final = "https://github.com/grafana/pyroscope/blob/main/pkg/pyroscope/PYROSCOPE_V2.md"
FEATURE_FLAG_LIST: Final = (
    ("pyroscopeRuler", False, "Supports the Pyroscope ruler, which exports Prometheus metrics from Profiling "
     "Data.", None),
    ("pyroscopeRulerFunctions", False, "Enables function support for the Pyroscope ruler, which allows to export "
     "resource usage on a per function level.", None),
    ("utf8LabelNames", False, "Supports UTF-8 label names for Pyroscope read/write APIs.", None),
    ("v2StorageLayer", True, "v2 storage layer", _V2_DOCS),
)  # fmt: skip


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
        "SelectHeatmap": (qpb.SelectHeatmapRequest, store.select_heatmap),
        "Diff": (qpb.DiffRequest, store.diff),
        "GetProfileStats": (tpb.GetProfileStatsRequest, store.get_profile_stats),
        "AnalyzeQuery": (qpb.AnalyzeQueryRequest, store.analyze_query),
    }


async def get_feature_flags(req: cpb.GetFeatureFlagsRequest, ctx: CallContext) -> cpb.GetFeatureFlagsResponse:
    out = cpb.GetFeatureFlagsResponse()
    for name, enabled, description, url in FEATURE_FLAG_LIST:
        flag = out.feature_flags.add(name=name, enabled=enabled, description=description)
        if url is not None:
            flag.documentation_url = url
    return out


def service_table(store: Store) -> RpcTable:
    """The other Connect services the store answers, by path (service/method)."""
    settings = store.settings

    async def get(req: spb.GetSettingsRequest, ctx: CallContext) -> Message:
        return await settings.get(req, ctx.tenant_key)

    async def set_(req: spb.SetSettingsRequest, ctx: CallContext) -> Message:
        return await settings.set(req, ctx.tenant_key)

    async def delete(req: spb.DeleteSettingsRequest, ctx: CallContext) -> Message:
        return await settings.delete(req, ctx.tenant_key)

    return {
        SETTINGS_SERVICE + "Get": (spb.GetSettingsRequest, get),
        SETTINGS_SERVICE + "Set": (spb.SetSettingsRequest, set_),
        SETTINGS_SERVICE + "Delete": (spb.DeleteSettingsRequest, delete),
        FEATURE_FLAGS: (cpb.GetFeatureFlagsRequest, get_feature_flags),
    }


HTTP_ROUTES: Final[dict[str, HttpHandler]] = {
    render_api.RENDER: render_api.render,
    render_api.RENDER_DIFF: render_api.render_diff,
}


class StorePyroscope:
    """The ``/pyroscope`` mount's backend in standalone mode."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.table = rpc_table(store)
        self.services = service_table(store)

    def must_decode(self, method: str | None, content_type: str | None) -> bool:
        return method is not None and method in self.table

    async def pass_on(
        self, request: web.Request, ctx: CallContext, body: bytes | None = None, encoding: str | None = None
    ) -> web.StreamResponse:
        tail = request.match_info.get("tail", "")
        entry = self.services.get(tail)
        if entry is not None and request.method == "POST":
            return await self._serve(request, ctx, *entry)
        route = HTTP_ROUTES.get(tail)
        if route is not None and request.method in ("GET", "HEAD"):
            now_ms = int(request.app[CLOCK].now() * 1000)
            return await route(self.store, request, ctx, now_ms)
        raise Unimplemented(
            f"{request.method} {request.path} is not served in standalone mode (the embedded store answers the "
            f"querier.v1.QuerierService RPCs {', '.join(sorted(self.table))}, "
            f"{', '.join(sorted(self.services))}, and GET {', '.join(sorted(HTTP_ROUTES))})"
        )

    async def _serve(
        self, request: web.Request, ctx: CallContext, cls: type[Message], handler: Handler
    ) -> web.Response:
        limit = request.app[SETTINGS].max_body_bytes
        codec = codec_for(request.headers.get("Content-Type"))
        raw, encoding = await read_body(request, limit)
        answer = await handler(decode_message(decompress(raw, encoding, limit), codec, cls), ctx)
        out, headers = encode_response(answer, codec, request.headers.get("Accept-Encoding"))
        return web.Response(body=out, headers=headers)

    async def call(self, method: str, data: bytes, codec: Codec, ctx: CallContext) -> Message | None:
        entry = self.table.get(method)
        if entry is None:
            raise Unimplemented(f"{method} is not served in standalone mode")
        cls, handler = entry
        return await handler(decode_message(data, codec, cls), ctx)
