"""Sans-I/O Connect unary codec, as Pyroscope serves it (the Connect protocol, https://connectrpc.com/docs/protocol/ :
unary requests, error JSON and codes).

Nothing here touches a socket: handlers pass bytes and header values in, and get messages, bytes and headers out.
"""

from __future__ import annotations

import enum
import gzip
import json
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from bridge.body import PROTOBUF_TYPES, media_type
from bridge.compression import Budget, BudgetSpent, GzipError, GzipTooLarge, accepts_gzip, gunzip
from bridge.errors import CODE_TO_HTTP, Code, InvalidArgument, ResourceExhausted

M = TypeVar("M", bound=Message)

PROTO: Final = "application/proto"
JSON: Final = "application/json"


class Codec(enum.Enum):
    PROTO = PROTO
    JSON = JSON

    @property
    def content_type(self) -> str:
        return self.value


def codec_for(content_type: str | None) -> Codec:
    """The codec named by a request's Content-Type (parameters such as ``charset`` ignored)."""
    base = media_type(content_type)
    if base in PROTOBUF_TYPES:
        return Codec.PROTO
    if base == JSON:
        return Codec.JSON
    raise InvalidArgument(f"unsupported Content-Type {content_type!r}: send application/proto or application/json")


def decompress(body: bytes, content_encoding: str | None, max_bytes: int, budget: Budget | None = None) -> bytes:
    """Undo ``Content-Encoding`` (identity or gzip), refusing anything larger than ``max_bytes`` after it; the
    inflated bytes are charged to the request's ``budget`` when there is one."""
    encoding = (content_encoding or "identity").strip().lower()
    if len(body) > max_bytes:
        raise ResourceExhausted(f"request body of {len(body)} bytes is over the limit of {max_bytes} bytes")
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise InvalidArgument(f"unsupported Content-Encoding {content_encoding!r}: send gzip or identity")
    try:
        return budget.gunzip(body, max_bytes) if budget is not None else gunzip(body, max_bytes)
    except BudgetSpent as exc:
        raise ResourceExhausted(f"request body is {exc}") from None
    except GzipTooLarge:
        raise ResourceExhausted(
            f"request body is over the limit of {max_bytes} bytes after gzip decompression"
        ) from None
    except GzipError as exc:
        raise InvalidArgument(f"request body is {exc}") from exc


def decode_message(data: bytes, codec: Codec, cls: type[M]) -> M:
    """Decode a message in either codec; malformed input is an InvalidArgument naming the message type."""
    msg = cls()
    name = cls.DESCRIPTOR.full_name
    if codec is Codec.PROTO:
        try:
            msg.ParseFromString(data)
        except DecodeError as exc:
            raise InvalidArgument(f"request body is not a valid {name} protobuf message ({exc})") from exc
        return msg
    try:
        json_format.Parse(data.decode("utf-8") if data else "{}", msg, ignore_unknown_fields=True)
    except (json_format.ParseError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgument(f"request body is not a valid {name} JSON message ({exc})") from exc
    return msg


def decode_document(data: bytes, cls: type[Message]) -> dict[str, Any]:
    """A Connect JSON request as the document it is (a JSON object), for a caller that edits it rather than
    round-tripping it through a message: ``json_format`` cannot hold a field or an enum name our .proto lacks, so a
    message re-encoded to JSON would lose them. Not an object → InvalidArgument naming the message type."""
    name = cls.DESCRIPTOR.full_name
    try:
        doc = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgument(f"request body is not a valid {name} JSON message ({exc})") from exc
    if not isinstance(doc, dict):
        raise InvalidArgument(f"request body is not a valid {name} JSON message (not a JSON object)")
    return doc


def strict_message(doc: dict[str, Any], cls: type[M]) -> M | None:
    """The message a JSON document holds when every field and enum name in it is one our .proto knows; None when it
    holds anything else (then only the document itself says all the request says), or a value no field can hold
    (``1e999`` in an int64 reads as infinity: Pyroscope refuses it in its own words)."""
    msg = cls()
    try:
        json_format.ParseDict(doc, msg)
    except (json_format.ParseError, RecursionError, OverflowError, ValueError, TypeError):
        return None
    return msg


def encode_document(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def decode_request(
    body: bytes,
    content_type: str | None,
    content_encoding: str | None,
    cls: type[M],
    max_bytes: int,
    budget: Budget | None = None,
) -> tuple[M, Codec]:
    codec = codec_for(content_type)
    return decode_message(decompress(body, content_encoding, max_bytes, budget), codec, cls), codec


def encode_message(msg: Message, codec: Codec) -> bytes:
    if codec is Codec.PROTO:
        return msg.SerializeToString()
    return json_format.MessageToJson(msg, indent=None).encode()


def encode_response(msg: Message, codec: Codec, accept_encoding: str | None) -> tuple[bytes, dict[str, str]]:
    """A unary success: body and headers, gzipped when the client accepts it."""
    body = encode_message(msg, codec)
    headers = {"Content-Type": codec.content_type}
    if accepts_gzip(accept_encoding):
        body = gzip.compress(body, compresslevel=5)
        headers["Content-Encoding"] = "gzip"
    return body, headers


def encode_error(code: Code, message: str) -> tuple[int, bytes, dict[str, str]]:
    """A Connect error: HTTP status, JSON body and headers."""
    body = json.dumps({"code": code.value, "message": message, "details": []}).encode()
    return CODE_TO_HTTP[code], body, {"Content-Type": "application/json"}


def decode_error(status: int, body: bytes) -> tuple[Code, str] | None:
    """A Connect error body from an upstream, or None when the body is not one."""
    try:
        doc = json.loads(body)
        code = Code(doc["code"])
    except (ValueError, KeyError, TypeError):
        return None
    message = doc.get("message", "") if isinstance(doc, dict) else ""
    return code, str(message)


# --------------------------------------------------------------------------------------------- deadlines


MAX_TIMEOUT_DIGITS: Final = 10


def parse_timeout_ms(value: str | None) -> float | None:
    """``Connect-Timeout-Ms`` → seconds; None when absent. Malformed → InvalidArgument (as connect-go does)."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or len(text) > MAX_TIMEOUT_DIGITS:
        raise InvalidArgument(f"Connect-Timeout-Ms {value!r} is not a positive whole number of milliseconds")
    return int(text) / 1000.0


def headers_get(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup on a plain mapping (aiohttp's CIMultiDict is already insensitive)."""
    value = headers.get(name)
    if value is not None:
        return value
    lname = name.lower()
    for key, val in headers.items():
        if key.lower() == lname:
            return val
    return None


__all__ = [
    "Code",
    "Codec",
    "codec_for",
    "decode_error",
    "decode_document",
    "decode_message",
    "decode_request",
    "decompress",
    "encode_document",
    "encode_error",
    "encode_message",
    "encode_response",
    "parse_timeout_ms",
    "strict_message",
]
