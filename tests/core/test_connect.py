"""The sans-I/O Connect codec (bridge/connect.py): one table per mapping."""

from __future__ import annotations

import gzip
import json

import pytest

from bridge._proto import querier_pb2 as qpb
from bridge.call import Deadline
from bridge.connect import (
    Codec,
    codec_for,
    decode_error,
    decode_message,
    decode_request,
    decompress,
    encode_error,
    encode_message,
    encode_response,
    parse_timeout_ms,
)
from bridge.errors import CODE_TO_HTTP, Code, InvalidArgument, ResourceExhausted


@pytest.mark.parametrize(
    ("content_type", "codec"),
    [
        ("application/proto", Codec.PROTO),
        ("application/proto; charset=utf-8", Codec.PROTO),
        ("Application/Proto", Codec.PROTO),
        ("application/x-protobuf", Codec.PROTO),
        ("application/protobuf", Codec.PROTO),
        ("application/json", Codec.JSON),
        ("application/json; charset=utf-8", Codec.JSON),
        ("text/plain", None),
        ("application/grpc", None),
        ("", None),
        (None, None),
    ],
)
def test_codec_table(content_type: str | None, codec: Codec | None) -> None:
    if codec is None:
        with pytest.raises(InvalidArgument, match="application/proto or application/json"):
            codec_for(content_type)
    else:
        assert codec_for(content_type) is codec


REQ = qpb.SelectMergeSpanProfileRequest(
    profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds",
    label_selector='{service_name="x"}',
    span_selector=["7f80395fd15dcdc9"],
    start=1795945280000,
    end=1795945340000,
    max_nodes=512,
)


@pytest.mark.parametrize("codec", [Codec.PROTO, Codec.JSON])
@pytest.mark.parametrize("encoding", [None, "identity", "gzip", "GZIP"])
def test_requests_decode_in_both_codecs_and_encodings(codec: Codec, encoding: str | None) -> None:
    body = encode_message(REQ, codec)
    if encoding and encoding.lower() == "gzip":
        body = gzip.compress(body)
    msg, got = decode_request(body, codec.content_type, encoding, qpb.SelectMergeSpanProfileRequest, 1 << 20)
    assert got is codec and msg == REQ


def test_json_follows_protojson_rules() -> None:
    doc = json.loads(encode_message(REQ, Codec.JSON))
    assert doc["profileTypeID"] == REQ.profile_typeID and doc["spanSelector"] == ["7f80395fd15dcdc9"]
    assert doc["start"] == "1795945280000" and doc["maxNodes"] == "512"  # int64 as strings
    numbers = b'{"start": 5, "end": "6", "unknownField": true}'
    msg = decode_message(numbers, Codec.JSON, qpb.SelectMergeSpanProfileRequest)
    assert (msg.start, msg.end) == (5, 6)  # numbers accepted, unknown fields ignored
    assert decode_message(b"", Codec.JSON, qpb.ProfileTypesRequest) == qpb.ProfileTypesRequest()


@pytest.mark.parametrize(
    ("body", "codec"),
    [
        (b"\xff\xff\xff", Codec.PROTO),
        (b"{nope", Codec.JSON),
        (b"\xff\xfe", Codec.JSON),
        (b'{"start": "x"}', Codec.JSON),
    ],
)
def test_malformed_messages_are_invalid_argument(body: bytes, codec: Codec) -> None:
    with pytest.raises(InvalidArgument, match="querier.v1.SelectMergeSpanProfileRequest"):
        decode_message(body, codec, qpb.SelectMergeSpanProfileRequest)


def test_gzip_limits_apply_raw_and_after_decompression() -> None:
    small = gzip.compress(b"\x00" * 10_000)
    assert len(small) < 1000
    with pytest.raises(ResourceExhausted, match="after gzip decompression"):
        decompress(small, "gzip", 5_000)
    with pytest.raises(ResourceExhausted, match="over the limit"):
        decompress(b"x" * 5_001, None, 5_000)
    assert decompress(small, "gzip", 10_000) == b"\x00" * 10_000


@pytest.mark.parametrize(
    ("body", "encoding", "words"),
    [
        (b"not gzip", "gzip", "not valid gzip"),
        (gzip.compress(b"abc" * 100, mtime=0)[:20], "gzip", "truncated"),
        (b"abc", "br", "unsupported Content-Encoding"),
    ],
)
def test_bad_encodings_are_invalid_argument(body: bytes, encoding: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        decompress(body, encoding, 1 << 20)


@pytest.mark.parametrize(
    ("accept", "gz"),
    [
        ("gzip", True),
        ("gzip, deflate", True),
        ("deflate, GZIP;q=0.5", True),
        ("gzip;q=0", False),
        ("identity", False),
        ("", False),
        (None, False),
        ("br", False),
    ],
)
def test_responses_gzip_when_accepted(accept: str | None, gz: bool) -> None:
    body, headers = encode_response(REQ, Codec.PROTO, accept)
    assert headers["Content-Type"] == "application/proto"
    assert (headers.get("Content-Encoding") == "gzip") is gz
    raw = gzip.decompress(body) if gz else body
    assert qpb.SelectMergeSpanProfileRequest.FromString(raw) == REQ


@pytest.mark.parametrize("code", list(Code))
def test_error_json_per_code(code: Code) -> None:
    status, body, headers = encode_error(code, f"{code.value} happened")
    assert status == CODE_TO_HTTP[code]
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"code": code.value, "message": f"{code.value} happened", "details": []}
    assert decode_error(status, body) == (code, f"{code.value} happened")


@pytest.mark.parametrize("body", [b"", b"upstream timed out", b'{"code": "nonsense"}', b"[1,2]", b'{"message": "x"}'])
def test_bodies_that_are_not_connect_errors(body: bytes) -> None:
    assert decode_error(502, body) is None


@pytest.mark.parametrize(
    ("header", "seconds"),
    [(None, None), ("0", 0.0), ("1500", 1.5), (" 250 ", 0.25), ("9999999999", 9999999.999)],
)
def test_timeout_header(header: str | None, seconds: float | None) -> None:
    assert parse_timeout_ms(header) == seconds


@pytest.mark.parametrize("header", ["-1", "1.5", "abc", "", "10000000000"])
def test_malformed_timeout_header_is_invalid_argument(header: str) -> None:
    with pytest.raises(InvalidArgument, match="Connect-Timeout-Ms"):
        parse_timeout_ms(header)


def test_deadline_is_capped_and_counts_down_on_the_injected_clock() -> None:
    now = [100.0]
    deadline = Deadline.start(60.0, 30.0, clock=lambda: now[0])
    assert deadline.remaining() == 30.0
    now[0] += 29.5
    assert deadline.remaining() == 0.5 and not deadline.expired()
    now[0] += 1
    assert deadline.remaining() == 0.0 and deadline.expired()
    assert Deadline.start(None, 5.0, clock=lambda: 0.0).remaining() == 5.0
    assert Deadline.start(0.2, 5.0, clock=lambda: 0.0).remaining() == 0.2
