from __future__ import annotations

import json

import pytest

from bridge.connect import decode_error, encode_error
from bridge.errors import CODE_TO_HTTP, Code, code_for_http_status

CONTRACT_TABLE = {  # https://connectrpc.com/docs/protocol/#error-codes (code → HTTP status)
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}


@pytest.mark.parametrize(("code", "status"), sorted(CONTRACT_TABLE.items()))
def test_code_to_http_and_wire_json(code: str, status: int) -> None:
    c = Code(code)
    assert CODE_TO_HTTP[c] == status
    got_status, body, headers = encode_error(c, "why it failed")
    assert got_status == status
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"code": code, "message": "why it failed", "details": []}
    assert decode_error(got_status, body) == (c, "why it failed")


def test_every_code_is_in_the_table() -> None:
    assert {c.value for c in Code} == set(CONTRACT_TABLE)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, Code.INTERNAL),
        (401, Code.UNAUTHENTICATED),
        (403, Code.PERMISSION_DENIED),
        (404, Code.UNIMPLEMENTED),
        (429, Code.UNAVAILABLE),
        (502, Code.UNAVAILABLE),
        (503, Code.UNAVAILABLE),
        (504, Code.UNAVAILABLE),
        (500, Code.UNKNOWN),
        (418, Code.UNKNOWN),
    ],
)
def test_upstream_http_status_without_connect_body(status: int, code: Code) -> None:
    assert code_for_http_status(status) == code


@pytest.mark.parametrize("body", [b"", b"<html>bad gateway</html>", b'{"code": "no_such_code"}', b"[1,2]"])
def test_non_connect_bodies_are_not_errors(body: bytes) -> None:
    assert decode_error(502, body) is None
