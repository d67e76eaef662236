"""Linking on the wire (bridge/otlp/fastlink.py): the native path (C, bridge/otlp/_fastlink.c) gives the same
requests, counts and errors as the pure Python reference (bridge/otlp/link.py) — on the link tests' requests, the
shop capture's profiles, seeded random requests, hand-made wire encodings and thousands of mutated bodies.

"Same request" means: both outputs parse, and parse to equal messages (so serialise to equal bytes). The native path
appends new links at the end of the dictionary record instead of re-serialising it, so its raw bytes may differ.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2

from bridge.call import CallContext, Deadline
from bridge.config import Settings
from bridge.errors import InvalidArgument
from bridge.metrics import Metrics
from bridge.otlp import fastlink
from bridge.otlp.gateway import Gateway
from bridge.otlp.link import LinkKeys, LinkStats, link_request
from bridge.otlp.pprof_convert import pprof_to_otlp
from bridge.pprof import decode_pprof
from tests.otlp.test_link import SPAN_A, SPAN_B, TRACE_A, TRACE_B, Builder
from tests.otlp.test_pprof_convert import shop_pprofs

KEYS = Settings().link_keys

if not fastlink.NATIVE:
    if os.environ.get("CI"):
        pytest.fail(
            "bridge.otlp._fastlink did not build (CI needs a C compiler and Python headers: "
            "pip install -e . builds it)",
            pytrace=False,
        )
    pytest.skip(
        "bridge.otlp._fastlink is not built (no C compiler when the package was installed); "
        "the pure Python path runs instead",
        allow_module_level=True,
    )

from bridge.otlp import _fastlink  # noqa: E402  (only when built)

Outcome = tuple[svc.ExportProfilesServiceRequest, LinkStats] | str


def run(link: Callable[[], tuple[bytes, LinkStats]]) -> Outcome:
    try:
        out, stats = link()
    except InvalidArgument as exc:
        return f"InvalidArgument: {exc.message}"
    return svc.ExportProfilesServiceRequest.FromString(out), stats


def assert_same(data: bytes, keys: LinkKeys = KEYS) -> Outcome:
    """Both paths on ``data`` (a body the protobuf parser accepts); their outcomes are equal. The native path leaves
    the dictionary it was given alone."""
    req = svc.ExportProfilesServiceRequest.FromString(data)
    dictionary_before = req.dictionary.SerializeToString()
    native = run(lambda: fastlink.link_wire_native(data, req.dictionary, keys))
    python = run(lambda: fastlink.link_wire_python(data, keys))
    if isinstance(native, str) or isinstance(python, str):
        assert native == python
    else:
        assert native[1] == python[1]
        assert native[0] == python[0]
        assert native[0].SerializeToString() == python[0].SerializeToString()
    assert req.dictionary.SerializeToString() == dictionary_before
    return native


# --------------------------------------------------------------------------------------------- wire helpers


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, wire_type: int, payload: bytes | int) -> bytes:
    tag = varint(number << 3 | wire_type)
    if wire_type == 0:
        assert isinstance(payload, int)
        return tag + varint(payload)
    assert isinstance(payload, bytes)
    if wire_type == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload  # fixed32 / fixed64 bytes, or a group's body with its end tag


def msg(number: int, *parts: bytes) -> bytes:
    return field(number, 2, b"".join(parts))


def packed(*values: int) -> bytes:
    return b"".join(varint(v) for v in values)


def wire_request(dictionary: bytes, *samples: bytes, extra_profile: bytes = b"", extra_top: bytes = b"") -> bytes:
    """resource_profiles[0].scope_profiles[0].profiles[0] holding ``samples`` (each a Sample's payload)."""
    profile = b"".join(field(2, 2, s) for s in samples)
    return msg(1, msg(2, msg(2, profile + extra_profile))) + field(2, 2, dictionary) + extra_top


def dictionary_with(
    *attrs: tuple[str, str | bytes], links: list[tuple[bytes, bytes]] | None = None
) -> tuple[bytes, list[int]]:
    """A ProfilesDictionary's bytes with string and attribute tables; the attribute indices of ``attrs``."""
    b = Builder()
    indices = [b.attr(k, v) for k, v in attrs]
    for trace, span in links or []:
        b.req.dictionary.link_table.add(trace_id=trace, span_id=span)
    return b.req.dictionary.SerializeToString(), indices


# --------------------------------------------------------------------------------------------- the link tests' requests


def scenario_requests() -> list[tuple[str, svc.ExportProfilesServiceRequest]]:
    out = []

    b = Builder()
    thread = b.attr("thread.name", "main")
    trace, span = b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A)
    b.sample(thread, trace, span)
    b.sample(span, trace)
    b.sample(thread)
    out.append(("dedup and removal", b.req))

    b = Builder()
    d = b.req.dictionary
    d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
    d.link_table.add(trace_id=bytes.fromhex(TRACE_B), span_id=bytes.fromhex(SPAN_B))
    d.link_table.add(trace_id=bytes.fromhex(TRACE_A), span_id=bytes.fromhex(SPAN_A))
    d.link_table.add(trace_id=bytes(16), span_id=bytes.fromhex(SPAN_B))  # span only, zero trace: found as such
    b.sample(b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A))
    b.sample(b.attr("trace_id", TRACE_B), b.attr("span_id", SPAN_A))
    b.sample(b.attr("span_id", SPAN_B))
    b.sample(b.attr("span_id", SPAN_A), link_index=1)
    out.append(("existing links", b.req))

    for key, value in [
        ("span_id", "b7ad6b716920333"),
        ("span_id", "b7ad6b716920333g"),
        ("span_id", "0" * 16),
        ("span_id", 12345),
        ("span_id", b"\x00" * 8),
        ("span_id", b"\x01\x02\x03"),
        ("profile_id", "not-a-span-id!!!"),
        ("otel.profile.span_id", TRACE_A),
        ("span_id", "ü" * 16),
        ("span_id", "ü" * 8),
    ]:
        b = Builder()
        b.sample(b.attr(key, value))
        out.append((f"invalid {key}={value!r}", b.req))

    b = Builder()
    b.sample(b.attr("trace_id", "0" * 32), b.attr("span_id", SPAN_A))
    b.sample(b.attr("profile_id", SPAN_A.upper()))
    b.sample(b.attr("trace_id", bytes.fromhex(TRACE_A)), b.attr("span_id", bytes.fromhex(SPAN_A)))
    b.sample(b.attr("span_id", SPAN_B.encode()))
    legacy = b.attr("profile_id", SPAN_A)
    plain_trace, plain_span = b.attr("trace_id", TRACE_B), b.attr("span_id", SPAN_B)
    otel_trace, otel_span = b.attr("otel.profile.trace_id", TRACE_A), b.attr("otel.profile.span_id", SPAN_A)
    b.sample(plain_trace, legacy, plain_span, otel_span, otel_trace)
    b.sample(otel_trace, otel_trace, legacy, legacy)
    b.sample()
    out.append(("rules", b.req))

    b = Builder()
    rp = b.req.resource_profiles[0]
    rp.resource.attributes.append(
        common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="shop"))
    )
    rp.schema_url = "https://opentelemetry.io/schemas/1.30.0"
    b.profile.profile_id = bytes(range(16))
    b.profile.original_payload = b"\x1f\x8b raw"
    b.profile.attribute_indices.append(b.attr("profile.attr", "x"))
    s = b.sample(b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A), value=123)
    s.timestamps_unix_nano.extend([1, 2, 3])
    b.req.resource_profiles.add().scope_profiles.add().profiles.add().samples.add(
        attribute_indices=[b.attr("span_id", SPAN_B)], values=[1]
    )
    out.append(("everything else kept", b.req))

    b = Builder()
    pairs = [(b.attr("trace_id", f"{i + 1:032x}"), b.attr("span_id", f"{i + 1:016x}")) for i in range(50)]
    for n in range(1000):
        b.sample(*pairs[n % 50])
    out.append(("many", b.req))
    return out


@pytest.mark.parametrize(("name", "req"), scenario_requests(), ids=[name for name, _ in scenario_requests()])
def test_the_link_tests_requests_link_the_same(name: str, req: svc.ExportProfilesServiceRequest) -> None:
    expected = svc.ExportProfilesServiceRequest()
    expected.CopyFrom(req)
    expected_stats = link_request(expected, KEYS)

    outcome = assert_same(req.SerializeToString())

    assert outcome == (expected, expected_stats)


@pytest.mark.parametrize(
    ("corrupt", "named"),
    [
        (lambda b: b.sample(99), "attribute_table index 99"),
        (lambda b: b.sample(-1), "attribute_table index -1"),
        (lambda b: b.sample(2**31 - 1), "attribute_table index 2147483647"),
        (lambda b: b.sample(link_index=7), "link_index 7"),
        (lambda b: b.sample(link_index=-3), "link_index -3"),
        (lambda b: setattr(b.req.dictionary.attribute_table[1], "key_strindex", 500), "key_strindex 500"),
        (lambda b: setattr(b.req.dictionary.attribute_table[1], "key_strindex", -2), "key_strindex -2"),
    ],
)
def test_out_of_range_indices_give_the_same_error(corrupt: Callable[[Builder], object], named: str) -> None:
    b = Builder()
    b.sample(b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A))
    corrupt(b)

    outcome = assert_same(b.req.SerializeToString())

    assert isinstance(outcome, str) and named in outcome


def test_the_first_bad_sample_in_request_order_is_the_one_named() -> None:
    b = Builder()
    b.req.dictionary.link_table.add()
    b.sample(b.attr("thread.name", "main"))
    b.sample(77)  # first: an attribute index
    b.sample(link_index=9)
    b.sample(88)
    outcome = assert_same(b.req.SerializeToString())
    assert isinstance(outcome, str) and "index 77" in outcome


def test_without_link_keys_in_the_strings_only_attribute_indices_are_checked() -> None:
    b = Builder()
    b.sample(b.attr("thread.name", "main"))
    b.req.dictionary.attribute_table[1].key_strindex = 400  # never looked at: no configured key in the strings
    assert assert_same(b.req.SerializeToString()) == (b.req, LinkStats(samples=1))
    b.sample(42)
    outcome = assert_same(b.req.SerializeToString())
    assert isinstance(outcome, str) and "index 42" in outcome


def test_other_link_keys_and_a_key_playing_two_roles() -> None:
    b = Builder()
    b.sample(b.attr("x.span", SPAN_A), b.attr("x.trace", TRACE_A))
    b.sample(b.attr("both", SPAN_B), b.attr("x.trace", TRACE_B))
    b.sample(b.attr("both", TRACE_B))
    data = b.req.SerializeToString()
    for keys in [(("x.trace", "x.span"),), (("x.trace", "both"), ("", "x.span"), ("both", "both")), ()]:
        assert_same(data, keys)


def test_a_request_without_samples_or_dictionary_comes_back_as_it_was() -> None:
    for data in [b"", svc.ExportProfilesServiceRequest(resource_profiles=[{}]).SerializeToString()]:
        req = svc.ExportProfilesServiceRequest.FromString(data)
        out, stats = fastlink.link_wire_native(data, req.dictionary, KEYS)
        assert (out, stats) == (data, LinkStats())


def test_link_wire_uses_the_native_path_when_built() -> None:
    assert fastlink.IMPLEMENTATION == "native"
    b = Builder()
    b.sample(b.attr("span_id", SPAN_A))
    data = b.req.SerializeToString()
    out, stats = fastlink.link_wire(data, b.req.dictionary, KEYS)
    assert stats.linked == 1
    assert out != data and out == fastlink.link_wire_native(data, b.req.dictionary, KEYS)[0]


# --------------------------------------------------------------------------------------------- real profiles


def test_the_shop_capture_links_the_same() -> None:
    n = 0
    for service, raw in shop_pprofs():
        req = pprof_to_otlp(decode_pprof(raw), service)
        outcome = assert_same(req.SerializeToString())
        assert not isinstance(outcome, str)
        n += outcome[1].linked
    assert n == 185  # the fixture README's count of samples with a span_id label


# --------------------------------------------------------------------------------------------- hand-made wire


def test_unknown_fields_and_non_canonical_encodings_everywhere() -> None:
    dictionary, (thread, trace, span, span2) = dictionary_with(
        ("thread.name", "main"), ("trace_id", TRACE_A), ("span_id", SPAN_A), ("span_id", SPAN_B)
    )
    group = field(40, 3, field(1, 0, 5) + field(41, 3, field(2, 5, b"abcd") + field(41, 4, b"")) + field(40, 4, b""))
    unknown = field(99, 0, 7) + field(98, 1, b"12345678") + field(97, 5, b"1234") + field(96, 2, b"xyz") + group
    samples = [
        # canonical, with unknown fields after
        field(1, 0, 1) + field(2, 2, packed(thread, trace, span)) + field(4, 2, packed(10)) + unknown,
        # unpacked attribute indices, fields out of order, unknown fields in between
        field(4, 2, packed(20)) + field(2, 0, span) + unknown + field(2, 0, trace) + field(1, 0, 2),
        # attribute indices split over packed records; a link_index 0 written out
        field(2, 2, packed(trace)) + field(3, 0, 0) + field(2, 2, packed(span, thread)),
        # a field number we know with another wire type is an unknown field: kept as such
        field(2, 5, b"\x01\x00\x00\x00")
        + field(3, 1, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        + field(2, 2, packed(span2)),
        # non-minimal varints in the packed payload and in link_index 0; a negative stack_index
        field(2, 2, b"\x83\x00" + packed(span)) + field(3, 0, 0) + field(1, 0, -5),
        # nothing to link, invalid, and empty
        field(2, 2, packed(thread)),
        b"",
        unknown,
    ]
    data = wire_request(dictionary, *samples, extra_profile=unknown, extra_top=unknown)
    outcome = assert_same(data)
    assert not isinstance(outcome, str)
    assert outcome[1] == LinkStats(samples=8, linked=5, invalid=0, already_linked=0, links_added=3)


def test_the_dictionary_split_over_two_records_and_placed_first() -> None:
    first, (trace, span) = dictionary_with(
        ("trace_id", TRACE_A), ("span_id", SPAN_A), links=[(bytes(16), bytes(8)), (bytes.fromhex(TRACE_B), bytes(8))]
    )
    second = msg(4, field(2, 2, bytes.fromhex(SPAN_B)))  # one more link in a second dictionary record
    sample = field(2, 2, packed(trace, span))
    resource = msg(1, msg(2, msg(2, field(2, 2, sample))))
    for data in [
        field(2, 2, first) + resource + field(2, 2, second),
        field(2, 2, first) + field(2, 2, second) + resource,
        resource + field(2, 2, first) + resource + field(2, 2, second) + field(9, 0, 1),
    ]:
        outcome = assert_same(data)
        assert not isinstance(outcome, str) and outcome[1].links_added == 1


def test_a_long_request_whose_lengths_change_size() -> None:
    """Removing attributes shrinks the profile across a length-prefix boundary (128, 16384 bytes)."""
    for n_samples in (5, 6, 7, 1000, 1100, 1200):
        b = Builder()
        trace, span = b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A)
        thread = b.attr("thread.name", "main")
        for i in range(n_samples):
            b.sample(*((thread, trace, span) if i % 3 else (thread,)), value=i)
        assert_same(b.req.SerializeToString())


# --------------------------------------------------------------------------------------------- random requests


def random_request(rnd: random.Random) -> svc.ExportProfilesServiceRequest:
    b = Builder()
    spans = [f"{rnd.getrandbits(64):016x}" for _ in range(4)] + ["0" * 16, "xyz", SPAN_A.upper()]
    traces = [f"{rnd.getrandbits(128):032x}" for _ in range(3)] + ["0" * 32, TRACE_A[:-1]]
    values: list[str | bytes | int] = [*spans, *traces, bytes.fromhex(SPAN_B), bytes.fromhex(TRACE_B), 7, b"\x00" * 8]
    keys = ["span_id", "trace_id", "otel.profile.span_id", "otel.profile.trace_id", "profile_id", "thread.name"]
    attrs = [b.attr(rnd.choice(keys), rnd.choice(values)) for _ in range(rnd.randrange(1, 30))]
    d = b.req.dictionary
    if rnd.random() < 0.5:
        d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
        for _ in range(rnd.randrange(0, 4)):
            d.link_table.add(
                trace_id=rnd.choice([bytes.fromhex(TRACE_A), b"", bytes(16)]),
                span_id=rnd.choice([bytes.fromhex(SPAN_A), bytes.fromhex(SPAN_B)]),
            )
    n_links = len(d.link_table)
    profiles = [b.profile] + [
        b.req.resource_profiles.add().scope_profiles.add().profiles.add() for _ in range(rnd.randrange(0, 3))
    ]
    for _ in range(rnd.randrange(0, 200)):
        profile = rnd.choice(profiles)
        link = rnd.randrange(1, n_links) if n_links > 1 and rnd.random() < 0.1 else 0
        chosen = rnd.sample(attrs, rnd.randrange(0, min(5, len(attrs))))
        profile.samples.add(
            stack_index=rnd.randrange(0, 3), attribute_indices=chosen, link_index=link, values=[rnd.randrange(1, 100)]
        )
    return b.req


@pytest.mark.parametrize("seed", range(40))
def test_random_requests_link_the_same(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(5):
        assert_same(random_request(rnd).SerializeToString())


# --------------------------------------------------------------------------------------------- mutated bodies


def mutate(rnd: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rnd.choice((1, 1, 1, 2, 3))):
        kind = rnd.randrange(5)
        pos = rnd.randrange(len(out)) if out else 0
        if kind == 0 and out:
            out[pos] = rnd.randrange(256)
        elif kind == 1 and out:
            out[pos] ^= 1 << rnd.randrange(8)
        elif kind == 2:
            del out[pos:]
        elif kind == 3:
            out[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4)))
        elif out:
            del out[pos : pos + rnd.randrange(1, 4)]
    return bytes(out)


def test_thousands_of_mutated_bodies_never_crash_and_agree_when_they_parse() -> None:
    rnd = random.Random(2026)
    bases = [random_request(random.Random(s)).SerializeToString() for s in range(6)]
    bases.append(scenario_requests()[4][1].SerializeToString())
    dictionaries = [svc.ExportProfilesServiceRequest.FromString(base).dictionary for base in bases]
    parsed = malformed = 0
    for _ in range(5000):
        n = rnd.randrange(len(bases))
        data = mutate(rnd, bases[n])
        # the extension alone, on bytes nobody validated: a result or a clean error, never a crash
        try:
            fastlink.link_wire_native(data, dictionaries[n], KEYS)
        except InvalidArgument as exc:
            malformed += "not a valid ExportProfilesServiceRequest" in exc.message
        try:
            svc.ExportProfilesServiceRequest.FromString(data)
        except DecodeError:
            continue  # the receivers answer INVALID_ARGUMENT before linking
        parsed += 1
        assert_same(data)
    print(f"{parsed} mutated bodies parsed; the extension alone called {malformed} malformed")
    assert parsed > 500 and malformed > 500  # the mutations reach both branches


def test_garbage_dictionary_bytes_are_a_clean_error() -> None:
    rnd = random.Random(5)
    for _ in range(500):
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40)))
        try:
            _fastlink.link(field(1, 2, b""), junk, {}, True, {}, 0)
        except ValueError as exc:
            assert "malformed dictionary" in str(exc)


def test_the_extension_checks_its_arguments() -> None:
    with pytest.raises(TypeError):
        _fastlink.link("not bytes", b"", {}, True, {}, 0)
    with pytest.raises(ValueError, match="n_links"):
        _fastlink.link(b"", b"", {}, True, {}, -1)


# --------------------------------------------------------------------------------------------- the gateway


class RecordingForwarder:
    name = "recording"

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def export(self, body: bytes, ctx: CallContext) -> svc.ExportProfilesServiceResponse:
        self.bodies.append(body)
        return svc.ExportProfilesServiceResponse()

    async def close(self) -> None:
        pass


class RecordingSink:
    def __init__(self) -> None:
        self.requests: list[svc.ExportProfilesServiceRequest] = []

    async def ingest_otlp_profiles(self, req: svc.ExportProfilesServiceRequest, tenant: str | None) -> None:
        self.requests.append(req)


def gateway_request() -> tuple[bytes, svc.ExportProfilesServiceRequest]:
    """A protobuf body with one invalid id, and the request the pure path makes of it."""
    b = Builder()
    b.sample(b.attr("thread.name", "main"), b.attr("trace_id", TRACE_A), b.attr("span_id", SPAN_A))
    b.sample(b.attr("span_id", "not hex at all!!"))
    data = b.req.SerializeToString()
    expected = svc.ExportProfilesServiceRequest.FromString(data)
    link_request(expected, KEYS)
    return data, expected


def context() -> CallContext:
    return CallContext(deadline=Deadline.start(None, 10.0))


async def test_the_gateway_forwards_the_natively_linked_body() -> None:
    data, expected = gateway_request()
    forwarder = RecordingForwarder()
    gateway = Gateway(Settings.for_tests(), Metrics(), forwarder=forwarder)

    resp = await gateway.export(svc.ExportProfilesServiceRequest.FromString(data), context(), wire=data)

    received = svc.ExportProfilesServiceRequest.FromString(data)
    assert forwarder.bodies == [fastlink.link_wire_native(data, received.dictionary, KEYS)[0]]
    assert svc.ExportProfilesServiceRequest.FromString(forwarder.bodies[0]) == expected
    assert resp.partial_success.error_message.startswith("1 sample has invalid trace or span ids")


async def test_the_gateway_hands_the_sink_and_the_puller_a_linked_message() -> None:
    data, expected = gateway_request()
    sink = RecordingSink()
    gateway = Gateway(Settings.for_tests(), Metrics(), sink=sink)

    await gateway.export(svc.ExportProfilesServiceRequest.FromString(data), context(), wire=data)
    req = svc.ExportProfilesServiceRequest.FromString(data)
    stats = await gateway.link(req)  # the pull path: no body, the message is linked in place

    assert sink.requests == [expected]
    assert req == expected and stats.linked == 1 and stats.invalid == 1


async def test_the_gateway_forwards_nothing_when_an_index_is_out_of_range() -> None:
    b = Builder()
    b.sample(b.attr("span_id", SPAN_A), 40)
    data = b.req.SerializeToString()
    forwarder = RecordingForwarder()
    metrics = Metrics()
    gateway = Gateway(Settings.for_tests(), metrics, forwarder=forwarder)

    with pytest.raises(InvalidArgument, match="attribute_table index 40"):
        await gateway.export(svc.ExportProfilesServiceRequest.FromString(data), context(), wire=data, route="t")

    assert forwarder.bodies == []
    assert metrics.ingest_rejected.labels("t")._value.get() == 1


def test_a_dictionary_written_unusually_reads_as_the_parser_reads_it() -> None:
    """The native path reads the request's own dictionary record: repeated fields inside an attribute entry (the last
    key wins, AnyValue records merge), fields with the wrong wire type (unknown fields), stray groups."""
    strings = [b"", b"span_id", b"trace_id", b"thread.name"]
    string_records = field(5, 0, 7) + b"".join(field(5, 2, text) for text in strings)  # a varint 5 is no string
    span_a, span_b = SPAN_A.encode(), SPAN_B.encode()
    group = field(30, 3, field(1, 0, 1) + field(30, 4, b""))
    attributes = [
        b"",
        field(1, 0, 3) + field(1, 0, 1) + msg(2, field(1, 2, span_a)),  # key given twice: span_id wins
        field(1, 0, 1) + msg(2, field(1, 2, b"zz" * 8)) + msg(2, field(7, 2, bytes.fromhex(SPAN_B))),  # bytes wins
        field(1, 0, 1) + msg(2, field(1, 2, span_b)) + msg(2, b""),  # an empty AnyValue keeps the string
        field(1, 0, 1) + msg(2, field(1, 2, span_b)) + msg(2, field(3, 0, 3)),  # an int comes last: not an id
        field(1, 5, b"\x01\x00\x00\x00") + msg(2, field(1, 2, span_a)),  # key as fixed32: unknown, key stays ""
        group + field(1, 0, 2) + msg(2, group + field(1, 2, TRACE_A.encode()) + field(99, 1, b"8bytes!!")),
        field(1, 0, 1) + msg(2, field(1, 0, 5) + field(1, 2, span_a)),  # string_value as a varint is unknown
    ]
    dictionary = string_records + b"".join(field(6, 2, a) for a in attributes) + field(4, 2, b"")
    samples = [field(2, 2, packed(i)) for i in range(1, len(attributes))] + [field(2, 2, packed(6, 2))]
    outcome = assert_same(wire_request(dictionary, *samples))
    assert not isinstance(outcome, str)
    assert outcome[1] == LinkStats(samples=8, linked=5, invalid=1, already_linked=0, links_added=3)
