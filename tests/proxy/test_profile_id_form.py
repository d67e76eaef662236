"""``PROFILE_BRIDGE_PROFILE_ID_FORM=span``: for a Grafana whose Pyroscope data source reaches Pyroscope directly, the
``/tempo`` mount writes the plain 16-hex span id into ``pyroscope.profile.id`` (Pyroscope refuses the carried
``<span id>:<trace id>``, ``tests/proxy/test_transparency.py``). A click through the bridge then names the span only:
it is found in the span cache the trace view filled — for a big trace too, whose spans are indexed in the background
since no click will carry its trace — without Tempo's search."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import querier_pb2 as qpb
from bridge._proto import tempo_pb2
from bridge.call import scope_key
from bridge.config import DEFAULT_PROFILE_TYPE
from bridge.routes.tempo import ENRICH_IN_HELPER_BYTES
from bridge.spans import PROFILE_ID_ATTR
from bridge.state import SPAN_CACHE
from tests.span_stack import Stack, linked_total, start_stack

HEX16 = re.compile(r"[0-9a-f]{16}")


async def view(stack: Stack, trace_id: str) -> dict[str, tuple[str, otlp_trace.Span]]:
    """Grafana opening the trace: span id → (its pyroscope.profile.id, the span)."""
    resp = await stack.http.get(f"/tempo/api/v2/traces/{trace_id}", headers={"Accept": "application/protobuf"})
    assert resp.status == 200
    out = {}
    for raw in tempo_pb2.TraceByIDResponse.FromString(await resp.read()).trace.resource_spans:
        for ss in otlp_trace.ResourceSpans.FromString(raw).scope_spans:
            for span in ss.spans:
                (value,) = [kv.value.string_value for kv in span.attributes if kv.key == PROFILE_ID_ATTR]
                out[span.span_id.hex()] = (value, span)
    return out


async def click(stack: Stack, value: str, span: otlp_trace.Span, service: str) -> str:
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{service}"}}',
        span_selector=[value],
        start=span.start_time_unix_nano // 1_000_000 - 60_000,
        end=span.end_time_unix_nano // 1_000_000 + 60_000,
    )
    resp = await stack.http.post(
        "/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile",
        data=req.SerializeToString(),
        headers={"Content-Type": "application/proto"},
    )
    assert resp.status == 200, await resp.text()
    return resp.headers["X-Profile-Bridge-Resolution"]


async def test_plain_span_ids_are_written_and_clicks_find_their_spans_in_the_cache(
    aiohttp_server: Any, aiohttp_client: Any
) -> None:
    stack = await start_stack(aiohttp_server, aiohttp_client, profile_id_form="span")
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    child = stack.shop.span(stack.shop.pick("frontend-child", where=lambda r: r.trace_id == root.trace_id).span_id)
    values = await view(stack, root.trace_id)
    assert all(value == span_id and HEX16.fullmatch(value) for span_id, (value, _) in values.items())
    value, span = values[child.span_id]
    assert await click(stack, value, span, child.service) == "local-root"
    assert stack.tempo.search_calls == [] and len(stack.tempo.calls("/api/v2/traces/")) == 1


async def test_a_big_trace_is_indexed_for_clicks_that_name_a_span_only(
    aiohttp_server: Any, aiohttp_client: Any
) -> None:
    stack = await start_stack(aiohttp_server, aiohttp_client, profile_id_form="span")
    root = stack.shop.pick("frontend-root", where=lambda r: linked_total(r.span_id) > 0)
    resource_spans = stack.shop.resource_spans(root.trace_id)
    first, parent = next(
        (ss, s) for rs in resource_spans for ss in rs.scope_spans for s in ss.spans if s.span_id.hex() == root.span_id
    )
    for i in range(1500):  # in-process children of the root: a trace past ENRICH_IN_HELPER_BYTES
        extra = first.spans.add()
        extra.CopyFrom(parent)
        extra.span_id = (i + 1).to_bytes(8, "big")
        extra.parent_span_id = parent.span_id
        extra.name = f"child {i}"
        kept = [kv for kv in extra.attributes if kv.key != PROFILE_ID_ATTR]  # the SDK tagged the root only
        del extra.attributes[:]
        extra.attributes.extend(kept)
    trace_id = stack.tempo.add_trace(root.trace_id, resource_spans)
    assert sum(len(rs.SerializeToString()) for rs in resource_spans) > ENRICH_IN_HELPER_BYTES
    values = await view(stack, trace_id)
    assert len(values) > 1500 and all(value == span_id for span_id, (value, _) in values.items())
    cache = stack.client.app[SPAN_CACHE]
    for _ in range(200):  # indexed off the event loop, after the answer went out
        if cache.get(scope_key(None), f"{1500:016x}") is not None:
            break
        await asyncio.sleep(0.05)
    value, span = values[f"{1500:016x}"]
    assert await click(stack, value, span, root.service) == "local-root"
    assert stack.tempo.search_calls == [] and len(stack.tempo.calls("/api/v2/traces/")) == 1
