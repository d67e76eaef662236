"""``POST /v1development/profiles``: the link gateway's OTLP/HTTP receiver.

- Bodies: ``application/x-protobuf`` (binary) or ``application/json`` (OTLP/JSON: lowerCamelCase names, ``traceId``
  / ``spanId`` / ``profileId`` as hex — base64 is accepted too), optionally ``Content-Encoding: gzip``.
- Answers ``ExportProfilesServiceResponse`` in the request's encoding; a partial success carries the count of
  samples whose ids were invalid (``rejected_profiles`` stays 0).
- Errors are OTLP errors: a ``google.rpc.Status`` in the request's encoding with the HTTP status of its code
  (malformed body 400, a body over ``PROFILE_BRIDGE_MAX_BODY_BYTES`` 413 — not 429, which exporters retry —,
  unsupported media type 415, a full disk 503 with ``Retry-After``, upstream failures as Pyroscope answered them,
  e.g. 503/504).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

from bridge.body import PROTOBUF_TYPES, media_type, read_body
from bridge.connect import decompress
from bridge.errors import CODE_TO_GRPC_NUMBER, CODE_TO_HTTP, BridgeError, Code, InvalidArgument
from bridge.middleware import ROUTE_LABEL
from bridge.state import SETTINGS, backends_of, call_context

PATH: Final = "/v1development/profiles"
JSON_TYPE: Final = "application/json"
ID_SIZES: Final = {"traceId": 16, "trace_id": 16, "spanId": 8, "span_id": 8, "profileId": 16, "profile_id": 16}


def decode_protobuf(data: bytes) -> svc.ExportProfilesServiceRequest:
    req = svc.ExportProfilesServiceRequest()
    try:
        req.ParseFromString(data)
    except DecodeError as exc:
        raise InvalidArgument(
            f"request body is not a valid ExportProfilesServiceRequest protobuf message ({exc})"
        ) from exc
    return req


def decode_json(data: bytes) -> svc.ExportProfilesServiceRequest:
    """OTLP/JSON → message. Ids are hex in OTLP/JSON (protobuf's JSON mapping would read them as base64)."""
    try:
        doc = json.loads(data or b"{}")
        if not isinstance(doc, dict):
            raise ValueError("the body is not a JSON object")
        _hex_ids_to_base64(doc)
        req = svc.ExportProfilesServiceRequest()
        json_format.ParseDict(doc, req, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise InvalidArgument(f"request body is not a valid OTLP/JSON ExportProfilesServiceRequest ({exc})") from exc
    return req


def _hex_ids_to_base64(doc: dict[str, Any]) -> None:
    dictionary = doc.get("dictionary")
    if isinstance(dictionary, dict):
        for link in _list(dictionary.get("linkTable", dictionary.get("link_table"))):
            _convert_ids(link)
    for rp in _list(doc.get("resourceProfiles", doc.get("resource_profiles"))):
        for sp in _list(rp.get("scopeProfiles", rp.get("scope_profiles")) if isinstance(rp, dict) else None):
            for profile in _list(sp.get("profiles") if isinstance(sp, dict) else None):
                _convert_ids(profile)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _convert_ids(obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    for key, size in ID_SIZES.items():
        value = obj.get(key)
        if isinstance(value, str) and len(value) == 2 * size:
            try:
                raw = binascii.unhexlify(value)
            except (binascii.Error, ValueError):
                continue  # not hex: leave it to the base64 reading
            obj[key] = base64.b64encode(raw).decode("ascii")


def status_response(
    code: Code, message: str, as_json: bool, *, http_status: int | None = None, retry_after: int | None = None
) -> web.Response:
    """An OTLP/HTTP error: ``google.rpc.Status`` in the request's encoding; ``Retry-After`` when it is temporary."""
    status = status_pb2.Status(code=CODE_TO_GRPC_NUMBER[code], message=message)
    http = http_status or CODE_TO_HTTP[code]
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    if as_json:
        body = json.dumps({"code": status.code, "message": message}).encode()
        return web.Response(status=http, body=body, content_type=JSON_TYPE, headers=headers)
    return web.Response(
        status=http, body=status.SerializeToString(), content_type="application/x-protobuf", headers=headers
    )


def error_status(exc: BridgeError, as_json: bool) -> web.Response:
    """A ``BridgeError`` as an OTLP/HTTP error: a body too large is 413 (never retried), a full disk 503 with
    ``Retry-After`` (retried), the rest their code's status."""
    return status_response(exc.code, exc.message, as_json, http_status=exc.http_status, retry_after=exc.retry_after)


async def export_profiles(request: web.Request) -> web.Response:
    request[ROUTE_LABEL] = "otlp_profiles"
    ctype = media_type(request.headers.get("Content-Type"))
    as_json = ctype == JSON_TYPE
    if not as_json and ctype not in PROTOBUF_TYPES:
        message = f"unsupported Content-Type {ctype or '(none)'!r}: send application/x-protobuf or application/json"
        return status_response(Code.INVALID_ARGUMENT, message, False, http_status=415)
    app = request.app
    settings = app[SETTINGS]
    try:
        raw, encoding = await read_body(request, settings.max_body_bytes)
        data = decompress(raw, encoding, settings.max_body_bytes)
        req = decode_json(data) if as_json else decode_protobuf(data)
        ctx = call_context(request)
        gateway = backends_of(app).gateway
        resp = await gateway.export(req, ctx, route="otlp_http_profiles", wire=None if as_json else data)
    except BridgeError as exc:
        return error_status(exc, as_json)
    if as_json:
        body = json_format.MessageToJson(resp, indent=None).encode()
        return web.Response(body=body, content_type=JSON_TYPE)
    return web.Response(body=resp.SerializeToString(), content_type="application/x-protobuf")


def setup(app: web.Application) -> None:
    app.router.add_post(PATH, export_profiles)
