"""Ground floor: an HTTP request's body and headers as both modes handle them — the body read within the size
limit and kept as sent (``read_body``; ``raw_body`` gives it back to a pass-through that re-sends it), the headers a
proxy forwards (``end_to_end``), and the media types that mean protobuf, however a client spells them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from multidict import CIMultiDict, CIMultiDictProxy

from bridge.errors import InvalidArgument, ResourceExhausted

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# every spelling of "a protobuf body" the bridge's clients send: Connect (application/proto), OTLP/HTTP
# (application/x-protobuf) and Tempo (application/protobuf)
PROTOBUF_TYPES: Final = frozenset({"application/proto", "application/x-protobuf", "application/protobuf"})
_RAW_BODY = web.RequestKey("raw_body", bytes)


def media_type(content_type: str | None) -> str:
    """Pure: a Content-Type without its parameters, in lower case (``application/json; charset=utf-8`` is
    ``application/json``)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


async def read_body(request: web.Request, max_bytes: int) -> tuple[bytes, str | None]:
    """The request body as sent (the app's server never undoes its Content-Encoding: ``create_app`` turns aiohttp's
    ``auto_decompress`` off), read in chunks and refused (``ResourceExhausted``) as soon as it passes ``max_bytes``;
    with the ``Content-Encoding`` still to undo (None when there is none)."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise ResourceExhausted(f"request body of {declared} bytes is over the limit of {max_bytes} bytes")
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > max_bytes:
                raise ResourceExhausted(f"request body is over the limit of {max_bytes} bytes")
            parts.append(chunk)
    except RequestPayloadError as exc:
        raise InvalidArgument(f"request body cannot be read ({str(exc).strip()})") from exc
    raw = request[_RAW_BODY] = b"".join(parts)
    return raw, request.headers.get("Content-Encoding") or None


def raw_body(request: web.Request) -> bytes | None:
    """The body ``read_body`` read, as sent; None when nothing read it."""
    return request.get(_RAW_BODY)


def end_to_end(headers: Mapping[str, str], drop: Iterable[str] = HOP_BY_HOP) -> CIMultiDict[str]:
    """Pure: the headers a proxy forwards — all but hop-by-hop ones and those the ``Connection`` header names."""
    dropped = set(drop)
    for value in _all(headers, "Connection"):
        dropped.update(token.strip().lower() for token in value.split(",") if token.strip())
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in dropped:
            out.add(key, value)
    return out


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    if isinstance(headers, CIMultiDictProxy | CIMultiDict):
        return list(headers.getall(name, []))
    value = headers.get(name)
    return [value] if value is not None else []
