"""pprof → OTLP profiles (bridge/otlp/pprof_convert.py), on real pprof: the shop capture's profiles (pyroscope-io,
with ``span_id`` / ``trace_id`` / ``span_name`` labels) and Pyroscope's Go CPU profile."""

from __future__ import annotations

from collections import Counter

import pytest
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

from bridge._proto import profile_pb2, push_pb2
from bridge.config import Settings
from bridge.errors import InvalidArgument
from bridge.otlp.link import link_request
from bridge.otlp.pprof_convert import pprof_to_otlp
from bridge.pprof import decode_pprof, iter_samples
from tests.paths import GO_CPU_PPROF, SHOP_CAPTURE


def shop_pprofs() -> list[tuple[str, bytes]]:
    """(service name, raw pprof bytes) of every profile the shop capture's SDKs pushed."""
    out = []
    for path in sorted(SHOP_CAPTURE.glob("*_push*.bin")):
        push = push_pb2.PushRequest.FromString(path.read_bytes())
        for series in push.series:
            labels = {label.name: label.value for label in series.labels}
            out.extend((labels["service_name"], sample.raw_profile) for sample in series.samples)
    return out


def otlp_samples(req: svc.ExportProfilesServiceRequest, profile_no: int) -> Counter[tuple[object, ...]]:
    """Every sample of one converted profile as (frames root first, value, labels incl. link ids)."""
    d = req.dictionary
    st = d.string_table
    out: Counter[tuple[object, ...]] = Counter()
    profile = req.resource_profiles[0].scope_profiles[0].profiles[profile_no]
    for sample in profile.samples:
        frames: list[str] = []
        for loc_index in d.stack_table[sample.stack_index].location_indices:
            frames.extend(
                st[d.function_table[line.function_index].name_strindex] for line in d.location_table[loc_index].lines
            )
        labels = {}
        for ai in sample.attribute_indices:
            kv = d.attribute_table[ai]
            labels[st[kv.key_strindex]] = kv.value.string_value
        if sample.link_index:
            link = d.link_table[sample.link_index]
            labels["span_id"] = link.span_id.hex()
            labels["trace_id"] = link.trace_id.hex()
        out[(tuple(reversed(frames)), sample.values[0], tuple(sorted(labels.items())))] += 1
    return out


def pprof_samples(profile: profile_pb2.Profile, value_index: int) -> Counter[tuple[object, ...]]:
    return Counter(
        (frames, value, tuple(sorted(labels.items()))) for frames, value, labels in iter_samples(profile, value_index)
    )


@pytest.mark.parametrize("n", range(len(shop_pprofs())))
def test_shop_profiles_convert_sample_for_sample_and_link(n: int) -> None:
    service, raw = shop_pprofs()[n]
    profile = decode_pprof(raw)

    req = pprof_to_otlp(profile, service)

    resource = req.resource_profiles[0]
    assert [(a.key, a.value.string_value) for a in resource.resource.attributes] == [("service.name", service)]
    profiles = resource.scope_profiles[0].profiles
    assert len(profiles) == len(profile.sample_type)
    st = req.dictionary.string_table
    for k, (out, vt) in enumerate(zip(profiles, profile.sample_type, strict=True)):
        assert (st[out.sample_type.type_strindex], st[out.sample_type.unit_strindex]) == (
            profile.string_table[vt.type],
            profile.string_table[vt.unit],
        )
        assert (out.time_unix_nano, out.duration_nano, out.period) == (
            profile.time_nanos,
            profile.duration_nanos,
            profile.period,
        )
        # labels → attributes with their keys unchanged, every frame and value kept
        assert otlp_samples(req, k) == pprof_samples(profile, k)
    d = req.dictionary
    assert st[0] == "" and len(d.link_table) == 1 and d.link_table[0].span_id == bytes(8)
    assert not d.attribute_table[0].key_strindex and not d.stack_table[0].location_indices

    # linking moves span_id / trace_id from attributes into Links; what Pyroscope would read back is the same
    before = otlp_samples(req, 0)
    stats = link_request(req, Settings().link_keys)
    assert stats.invalid == 0 and stats.linked == sum(
        1 for s in profile.sample if any(profile.string_table[lb.key] == "span_id" for lb in s.label)
    )
    assert otlp_samples(req, 0) == before
    keys_left = {
        st[d.attribute_table[ai].key_strindex]
        for p in req.resource_profiles[0].scope_profiles[0].profiles
        for s in p.samples
        for ai in s.attribute_indices
    }
    assert not keys_left & {"span_id", "trace_id"}


def test_the_whole_capture_links_185_samples_into_114_distinct_spans() -> None:
    """The fixture README's numbers: 201 samples, 185 with a span_id label, 114 distinct span ids."""
    samples = linked = 0
    spans: set[str] = set()
    for service, raw in shop_pprofs():
        req = pprof_to_otlp(decode_pprof(raw), service)
        stats = link_request(req, Settings().link_keys)
        samples += stats.samples
        linked += stats.linked
        spans.update(link.span_id.hex() for link in list(req.dictionary.link_table)[1:])
    assert (samples, linked, len(spans)) == (201, 185, 114)


def test_go_cpu_profile_gives_one_otlp_profile_per_sample_type() -> None:
    profile = decode_pprof(GO_CPU_PPROF.read_bytes())
    req = pprof_to_otlp(profile, "go-app")
    profiles = req.resource_profiles[0].scope_profiles[0].profiles
    st = req.dictionary.string_table
    assert [(st[p.sample_type.type_strindex], st[p.sample_type.unit_strindex]) for p in profiles] == [
        (profile.string_table[vt.type], profile.string_table[vt.unit]) for vt in profile.sample_type
    ]
    assert len(profile.sample_type) == 2
    for k in range(len(profiles)):
        assert otlp_samples(req, k) == pprof_samples(profile, k)
    assert sum(p.samples[0].values[0] >= 0 for p in profiles) == 2
    # the request survives a round trip through the wire
    assert svc.ExportProfilesServiceRequest.FromString(req.SerializeToString()) == req


def test_numeric_labels_become_integer_attributes_with_their_unit() -> None:
    p = profile_pb2.Profile(string_table=["", "cpu", "nanoseconds", "bytes", "alloc", "main"])
    p.sample_type.add(type=1, unit=2)
    p.function.add(id=1, name=5)
    p.location.add(id=1).line.add(function_id=1, line=3)
    p.sample.add(location_id=[1], value=[7]).label.add(key=4, num=4096, num_unit=3)
    req = pprof_to_otlp(p, "x")
    kv = req.dictionary.attribute_table[
        req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].attribute_indices[0]
    ]
    st = req.dictionary.string_table
    assert (st[kv.key_strindex], kv.value.int_value, st[kv.unit_strindex]) == ("alloc", 4096, "bytes")


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda p: p.sample[0].location_id.append(9), "unknown location 9"),
        (lambda p: setattr(p.location[0].line[0], "function_id", 8), "unknown function 8"),
        (lambda p: setattr(p.function[0], "name", 99), "string 99"),
        (lambda p: setattr(p.location[0], "mapping_id", 5), "unknown mapping 5"),
    ],
)
def test_a_pprof_that_refers_to_missing_things_is_invalid(corrupt: object, message: str) -> None:
    p = profile_pb2.Profile(string_table=["", "cpu", "nanoseconds", "main"])
    p.sample_type.add(type=1, unit=2)
    p.function.add(id=1, name=3)
    p.location.add(id=1).line.add(function_id=1, line=3)
    p.sample.add(location_id=[1], value=[7])
    corrupt(p)  # type: ignore[operator]
    with pytest.raises(InvalidArgument, match=message):
        pprof_to_otlp(p, "x")
