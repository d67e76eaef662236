"""The pure linking core (bridge/otlp/link.py) on requests built with opentelemetry-proto."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as ppb

from bridge.config import Settings
from bridge.errors import InvalidArgument
from bridge.otlp.link import LinkStats, link_request, parse_id

KEYS = Settings().link_keys
TRACE_A = "0af7651916cd43dd8448eb211c80319c"
SPAN_A = "b7ad6b7169203331"
TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_B = "00f067aa0ba902b7"


class Builder:
    """A request with one dictionary and one profile; attributes are added by (key, value)."""

    def __init__(self) -> None:
        self.req = svc.ExportProfilesServiceRequest()
        d = self.req.dictionary
        d.string_table.append("")
        d.attribute_table.add()
        d.stack_table.add()
        d.stack_table.add(location_indices=[])
        self.profile = (
            self.req.resource_profiles.add()
            .scope_profiles.add()
            .profiles.add(
                time_unix_nano=1_700_000_000_000_000_000,
                duration_nano=10_000_000_000,
            )
        )
        self.profile.sample_type.type_strindex = self.string("cpu")
        self.profile.sample_type.unit_strindex = self.string("nanoseconds")

    def string(self, text: str) -> int:
        table = self.req.dictionary.string_table
        if text in table:
            return list(table).index(text)
        table.append(text)
        return len(table) - 1

    def attr(self, key: str, value: str | bytes | int) -> int:
        kv = self.req.dictionary.attribute_table.add(key_strindex=self.string(key))
        if isinstance(value, str):
            kv.value.string_value = value
        elif isinstance(value, bytes):
            kv.value.bytes_value = value
        else:
            kv.value.int_value = value
        return len(self.req.dictionary.attribute_table) - 1

    def sample(self, *attrs: int, link_index: int = 0, value: int = 10) -> ppb.Sample:
        return self.profile.samples.add(
            stack_index=1, attribute_indices=list(attrs), link_index=link_index, values=[value]
        )

    def link(self, stats_expected: LinkStats | None = None) -> LinkStats:
        stats = link_request(self.req, KEYS)
        if stats_expected is not None:
            assert stats == stats_expected
        return stats


def link_ids(req: svc.ExportProfilesServiceRequest, index: int) -> tuple[str, str]:
    link = req.dictionary.link_table[index]
    return link.trace_id.hex(), link.span_id.hex()


def test_trace_and_span_attributes_become_one_deduplicated_link_and_are_removed() -> None:
    b = Builder()
    thread = b.attr("thread.name", "main")
    trace, span = b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A)
    s1 = b.sample(thread, trace, span)
    s2 = b.sample(span, trace)  # same ids, other attribute order
    s3 = b.sample(thread)  # nothing to link

    stats = b.link()

    assert stats == LinkStats(samples=3, linked=2, invalid=0, already_linked=0, links_added=1)
    links = b.req.dictionary.link_table
    assert len(links) == 2
    assert links[0].trace_id == bytes(16) and links[0].span_id == bytes(8)  # the sentinel, inserted
    assert link_ids(b.req, 1) == (TRACE_A, SPAN_A)
    assert (s1.link_index, list(s1.attribute_indices)) == (1, [thread])
    assert (s2.link_index, list(s2.attribute_indices)) == (1, [])
    assert (s3.link_index, list(s3.attribute_indices)) == (0, [thread])
    assert stats.partial_success_message() == ""


def test_existing_links_are_reused_and_the_sentinel_kept() -> None:
    b = Builder()
    d = b.req.dictionary
    d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
    d.link_table.add(trace_id=bytes.fromhex(TRACE_B), span_id=bytes.fromhex(SPAN_B))
    d.link_table.add(trace_id=bytes.fromhex(TRACE_A), span_id=bytes.fromhex(SPAN_A))
    a = b.sample(b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A))
    other = b.sample(b.attr("trace_id", TRACE_B), b.attr("span_id", SPAN_A))

    stats = b.link()

    assert a.link_index == 2  # found, not appended
    assert other.link_index == 3  # a new (trace, span) pair
    assert stats.links_added == 1
    assert [link_ids(b.req, i) for i in range(1, 4)] == [(TRACE_B, SPAN_B), (TRACE_A, SPAN_A), (TRACE_B, SPAN_A)]
    assert d.link_table[0].trace_id == bytes(16)


def test_a_sample_that_already_has_a_link_keeps_it_and_its_attributes() -> None:
    b = Builder()
    b.req.dictionary.link_table.add(trace_id=bytes(16), span_id=bytes(8))
    b.req.dictionary.link_table.add(trace_id=bytes.fromhex(TRACE_B), span_id=bytes.fromhex(SPAN_B))
    span = b.attr("span_id", SPAN_A)
    kept = b.sample(span, link_index=1)

    stats = b.link()

    assert (kept.link_index, list(kept.attribute_indices)) == (1, [span])
    assert stats == LinkStats(samples=1, linked=0, invalid=0, already_linked=1, links_added=0)
    assert len(b.req.dictionary.link_table) == 2


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("span_id", "b7ad6b716920333"),  # 15 hex
        ("span_id", "b7ad6b71692033311"),  # 17 hex
        ("span_id", "b7ad6b716920333g"),  # not hex
        ("span_id", "0000000000000000"),  # all zeros
        ("span_id", 12345),  # not a string or bytes
        ("span_id", b"\x00" * 8),  # zero bytes
        ("span_id", b"\x01\x02\x03"),  # wrong length
        ("profile_id", "not-a-span-id!!!"),
        ("otel.profile.span_id", TRACE_A),  # a trace id where a span id belongs
    ],
)
def test_invalid_span_ids_are_counted_and_left_alone(key: str, value: str | bytes | int) -> None:
    b = Builder()
    bad = b.attr(key, value)
    sample = b.sample(bad)

    stats = b.link()

    assert stats.invalid == 1 and stats.linked == 0
    assert (sample.link_index, list(sample.attribute_indices)) == (0, [bad])
    assert stats.partial_success_message() == (
        "1 sample has invalid trace or span ids in their link attributes and was left unlinked"
    )
    assert len(b.req.dictionary.link_table) == 0  # nothing linked, nothing added


def test_an_invalid_trace_id_invalidates_its_pair() -> None:
    b = Builder()
    trace, span = b.attr("trace_id", "00000000000000000000000000000000"), b.attr("span_id", SPAN_A)
    sample = b.sample(trace, span)
    stats = b.link()
    assert stats.invalid == 1
    assert list(sample.attribute_indices) == [trace, span]


def test_span_only_keys_link_with_an_empty_trace_id() -> None:
    b = Builder()
    sample = b.sample(b.attr("profile_id", SPAN_A.upper()))
    b.link()
    assert sample.link_index == 1
    assert link_ids(b.req, 1) == ("", SPAN_A)
    assert list(sample.attribute_indices) == []


def test_configured_order_decides_and_duplicates_of_the_linked_ids_are_dropped_too() -> None:
    b = Builder()
    legacy = b.attr("profile_id", SPAN_A)  # the same span id again: would be a second span_id label
    plain_trace, plain_span = b.attr("trace_id", TRACE_B), b.attr("span_id", SPAN_B)
    otel_trace, otel_span = b.attr("otel.profile.trace_id", TRACE_A), b.attr("otel.profile.span_id", SPAN_A)
    sample = b.sample(plain_trace, legacy, plain_span, otel_span, otel_trace)

    b.link()

    assert link_ids(b.req, sample.link_index) == (TRACE_A, SPAN_A)  # otel.profile.* comes first
    assert list(sample.attribute_indices) == [plain_trace, plain_span]  # other ids are not ours to drop


def test_raw_byte_values_and_hex_byte_values_are_ids() -> None:
    b = Builder()
    raw = b.sample(b.attr("trace_id", bytes.fromhex(TRACE_A)), b.attr("span_id", bytes.fromhex(SPAN_A)))
    text = b.sample(b.attr("span_id", SPAN_B.encode()))
    b.link()
    assert link_ids(b.req, raw.link_index) == (TRACE_A, SPAN_A)
    assert link_ids(b.req, text.link_index) == ("", SPAN_B)


def _bad_key(b: Builder) -> None:
    b.sample(b.attr("thread.name", "main"))
    b.req.dictionary.attribute_table[3].key_strindex = 500


@pytest.mark.parametrize(
    ("corrupt", "named"),
    [
        (lambda b: b.sample(99), "attribute_table index 99"),
        (lambda b: b.sample(-1), "attribute_table index -1"),
        (lambda b: b.sample(link_index=7), "link_index 7"),
        (lambda b: _bad_key(b), "attribute_table\\[3\\].key_strindex 500"),
    ],
)
def test_out_of_range_indices_reject_the_whole_request(corrupt: object, named: str) -> None:
    b = Builder()
    b.sample(b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A))
    corrupt(b)  # type: ignore[operator]
    with pytest.raises(InvalidArgument, match=named):
        b.link()


def test_out_of_range_indices_are_found_even_without_link_keys_in_the_strings() -> None:
    b = Builder()
    b.sample(b.attr("thread.name", "main"), 42)
    with pytest.raises(InvalidArgument, match="index 42"):
        b.link()


def test_everything_else_in_the_request_is_preserved() -> None:
    b = Builder()
    rp = b.req.resource_profiles[0]
    rp.resource.attributes.append(
        common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="shop"))
    )
    rp.schema_url = "https://opentelemetry.io/schemas/1.30.0"
    rp.scope_profiles[0].scope.name = "pprof"
    b.profile.profile_id = bytes(range(16))
    b.profile.original_payload_format = "pprof"
    b.profile.original_payload = b"\x1f\x8b raw"
    b.profile.attribute_indices.append(b.attr("profile.attr", "x"))
    d = b.req.dictionary
    d.mapping_table.add()
    d.function_table.add()
    d.function_table.add(name_strindex=b.string("main.work"))
    d.location_table.add()
    d.location_table.add(address=0x42).lines.add(function_index=1, line=7)
    sample = b.sample(b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A), value=123)
    sample.timestamps_unix_nano.extend([1, 2, 3])
    before = svc.ExportProfilesServiceRequest()
    before.CopyFrom(b.req)

    b.link()

    expected = before
    expected.dictionary.link_table.add(trace_id=bytes(16), span_id=bytes(8))
    expected.dictionary.link_table.add(trace_id=bytes.fromhex(TRACE_A), span_id=bytes.fromhex(SPAN_A))
    s = expected.resource_profiles[0].scope_profiles[0].profiles[0].samples[0]
    del s.attribute_indices[:]
    s.link_index = 1
    assert b.req == expected


def test_many_samples_share_decisions_and_links() -> None:
    b = Builder()
    pairs = [(b.attr("trace_id", f"{i + 1:032x}"), b.attr("span_id", f"{i + 1:016x}")) for i in range(50)]
    for n in range(1000):
        b.sample(*pairs[n % 50])
    stats = b.link()
    assert stats == LinkStats(samples=1000, linked=1000, invalid=0, already_linked=0, links_added=50)
    assert len(b.req.dictionary.link_table) == 51
    for n, sample in enumerate(b.profile.samples):
        assert link_ids(b.req, sample.link_index) == (f"{n % 50 + 1:032x}", f"{n % 50 + 1:016x}")


@pytest.mark.parametrize(
    ("value", "size", "expected"),
    [
        (common_pb2.AnyValue(string_value=SPAN_A), 8, bytes.fromhex(SPAN_A)),
        (common_pb2.AnyValue(string_value=SPAN_A.upper()), 8, bytes.fromhex(SPAN_A)),
        (common_pb2.AnyValue(string_value=TRACE_A), 16, bytes.fromhex(TRACE_A)),
        (common_pb2.AnyValue(string_value=SPAN_A), 16, None),
        (common_pb2.AnyValue(string_value="ü" * 16), 8, None),
        (common_pb2.AnyValue(bytes_value=bytes.fromhex(SPAN_A)), 8, bytes.fromhex(SPAN_A)),
        (common_pb2.AnyValue(bool_value=True), 8, None),
        (common_pb2.AnyValue(), 8, None),
    ],
)
def test_parse_id(value: common_pb2.AnyValue, size: int, expected: bytes | None) -> None:
    assert parse_id(value, size) == expected


def reference_link(keys: tuple[tuple[str, str], ...], attrs: list[tuple[str, str]]) -> tuple[str, str, list[int]] | str:
    """The rules written out plainly, one sample at a time: (trace hex, span hex, kept positions), "invalid" or
    "none"."""

    def valid(text: str, size: int) -> bool:
        return len(text) == 2 * size and all(c in "0123456789abcdefABCDEF" for c in text) and int(text, 16) != 0

    any_span_key = False
    for trace_key, span_key in keys:
        spans = [v for k, v in attrs if k == span_key]
        any_span_key = any_span_key or bool(spans)
        good = [v for v in spans if valid(v, 8)]
        if not good:
            continue
        traces = [v for k, v in attrs if trace_key and k == trace_key]
        good_traces = [v for v in traces if valid(v, 16)]
        if traces and not good_traces:
            continue
        span, trace = good[0].lower(), (good_traces[0].lower() if good_traces else "")
        span_keys = {s for _, s in keys}
        trace_keys = {t for t, _ in keys if t}
        kept = [
            pos
            for pos, (k, v) in enumerate(attrs)
            if not (k in span_keys and valid(v, 8) and v.lower() == span)
            and not (trace and k in trace_keys and valid(v, 16) and v.lower() == trace)
        ]
        return trace, span, kept
    return "invalid" if any_span_key else "none"


@pytest.mark.parametrize("seed", range(20))
def test_linking_matches_the_rules_written_out_plainly(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    spans = [f"{rnd.getrandbits(64):016x}" for _ in range(4)] + ["0" * 16, "xyz", SPAN_A.upper()]
    traces = [f"{rnd.getrandbits(128):032x}" for _ in range(3)] + ["0" * 32, TRACE_A[:-1]]
    pool = [(k, v) for k in ("span_id", "otel.profile.span_id", "profile_id") for v in spans]
    pool += [(k, v) for k in ("trace_id", "otel.profile.trace_id") for v in traces]
    pool += [("thread.name", "main"), ("thread.name", "worker"), ("span_name", "GET /")]
    b = Builder()
    index = {kv: b.attr(*kv) for kv in pool}
    samples = []
    for _ in range(300):
        chosen = rnd.sample(pool, rnd.randrange(0, 5))
        samples.append((chosen, b.sample(*(index[kv] for kv in chosen))))
    keys = tuple(KEYS)

    stats = link_request(b.req, keys)

    invalid = linked = 0
    for chosen, sample in samples:
        expected = reference_link(keys, chosen)
        if isinstance(expected, str):
            invalid += expected == "invalid"
            assert (sample.link_index, list(sample.attribute_indices)) == (0, [index[kv] for kv in chosen])
            continue
        linked += 1
        trace, span, kept = expected
        assert link_ids(b.req, sample.link_index) == (trace, span)
        assert list(sample.attribute_indices) == [index[chosen[pos]] for pos in kept]
    assert (stats.linked, stats.invalid) == (linked, invalid)
    pairs = [link_ids(b.req, i) for i in range(1, len(b.req.dictionary.link_table))]
    assert len(pairs) == len(set(pairs))  # de-duplicated
