"""The profile sink: OTLP profiles (opentelemetry-proto ≥ 1.43 shapes — dictionary tables, stack table, link table)
into the store; a sample's link becomes its span and trace id."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.profiles.v1development import profiles_pb2 as ppb

from bridge import flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.errors import InvalidArgument
from bridge.store import Store
from tests.store.test_store import CPU, ctx

TRACE = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
SPAN = bytes.fromhex("00f067aa0ba902b7")
T0_NS = 1_795_945_290_000_000_000


def build_request() -> svc.ExportProfilesServiceRequest:
    req = svc.ExportProfilesServiceRequest()
    d = req.dictionary
    strings = ["", "cpu", "nanoseconds", "main", "handler", "hash", "gc", "span_name", "checkout", "thread", "span_id"]
    d.string_table.extend(strings)

    def s(text: str) -> int:
        return strings.index(text)

    d.mapping_table.add()
    d.function_table.add()
    for name in ("main", "handler", "hash", "gc"):
        d.function_table.add(name_strindex=s(name))
    d.location_table.add()
    for fn in range(1, 5):
        d.location_table.add().lines.add(function_index=fn)
    d.stack_table.add()
    d.stack_table.add(location_indices=[3, 2, 1])  # leaf first: hash ← handler ← main
    d.stack_table.add(location_indices=[4, 1])  # gc ← main
    d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
    d.link_table.add(trace_id=TRACE, span_id=SPAN)
    d.attribute_table.add()
    attr = d.attribute_table.add(key_strindex=s("span_name"))
    attr.value.string_value = "checkout"
    raw_span = d.attribute_table.add(key_strindex=s("span_id"))
    raw_span.value.string_value = "1122334455667788"
    rp = req.resource_profiles.add()
    rp.resource.attributes.add(key="service.name").value.string_value = "otlp-app"
    prof = rp.scope_profiles.add().profiles.add()
    prof.sample_type.type_strindex, prof.sample_type.unit_strindex = s("cpu"), s("nanoseconds")
    prof.period_type.type_strindex, prof.period_type.unit_strindex = s("cpu"), s("nanoseconds")
    prof.period = 10_000_000
    prof.time_unix_nano, prof.duration_nano = T0_NS, 10_000_000_000
    prof.samples.add(stack_index=1, link_index=1, attribute_indices=[1], values=[30_000_000])
    prof.samples.add(stack_index=2, values=[10_000_000])
    prof.samples.add(stack_index=2, attribute_indices=[2], values=[5_000_000])
    return req


async def test_otlp_profiles_links_become_span_and_trace_ids(tmp_path: Path) -> None:
    store = await Store.open(tmp_path, clock=lambda: T0_NS / 1e9)
    try:
        await store.ingest_otlp_profiles(build_request(), None)
        window = (T0_NS // 1_000_000, T0_NS // 1_000_000)
        req = qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="otlp-app"}', start=window[0], end=window[1]
        )
        whole = (await store.select_merge_stacktraces(req, ctx())).flamegraph
        assert dict(flamegraph.iter_stacks(flamegraph.decode(whole))) == {
            ("main", "handler", "hash"): 30_000_000,
            ("main", "gc"): 15_000_000,
        }
        req.span_selector.append(SPAN.hex())
        linked = (await store.select_merge_stacktraces(req, ctx())).flamegraph
        assert dict(flamegraph.iter_stacks(flamegraph.decode(linked))) == {("main", "handler", "hash"): 30_000_000}
        del req.span_selector[:]
        req.trace_id_selector.append(TRACE.hex())
        assert (await store.select_merge_stacktraces(req, ctx())).flamegraph.total == 30_000_000
        del req.trace_id_selector[:]
        req.span_selector.append("1122334455667788")  # a span_id attribute without a link counts too
        assert (await store.select_merge_stacktraces(req, ctx())).flamegraph.total == 5_000_000
        names = await store.label_values(tpb.LabelValuesRequest(name="span_name"), ctx())
        assert list(names.names) == ["checkout"]
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda r: setattr(r.resource_profiles[0].scope_profiles[0].profiles[0].samples[0], "stack_index", 99),
            "stack index 99",
        ),
        (
            lambda r: setattr(r.resource_profiles[0].scope_profiles[0].profiles[0].samples[1], "link_index", 7),
            "link index 7",
        ),
        (lambda r: setattr(r.dictionary.function_table[2], "name_strindex", 500), "string index 500"),
    ],
)
async def test_bad_indexes_reject_the_whole_request(tmp_path: Path, damage: object, message: str) -> None:
    req = build_request()
    damage(req)  # type: ignore[operator]
    store = await Store.open(tmp_path)
    try:
        with pytest.raises(InvalidArgument, match=message):
            await store.ingest_otlp_profiles(req, None)
        assert (await store.counts()).samples == 0
    finally:
        await store.close()


def test_otlp_proto_has_the_current_sample_shape() -> None:
    fields = {f.name: f.number for f in ppb.Sample.DESCRIPTOR.fields}
    assert fields["stack_index"] == 1 and fields["link_index"] == 3 and fields["values"] == 4
