"""Errors the bridge raises, and how each maps onto the wire.

The tree, specialised only where a caller branches on it::

    BridgeError(code, message)                 any failure with a Connect code and a message a user can act on
    ├── InvalidArgument                        the caller sent something unusable (400)
    ├── ResourceExhausted                      a body over the size limit (429)
    ├── StorageFull                            the store's disk is full: nothing stored, retry later (unavailable, 503)
    ├── NotFound                               an id that is not there (404)
    ├── Unimplemented                          a route standalone mode does not serve (501)
    └── UpstreamError(upstream, code, message) Tempo, Pyroscope or another upstream failed
        ├── UpstreamTimeout                    no answer within the request's budget (deadline_exceeded, 504)
        └── UpstreamUnavailable                refused, reset, DNS, 5xx without a Connect body (unavailable, 503)

Foreign exceptions are mapped to these at exactly one boundary per upstream (``bridge/upstream/``), most specific
first, always ``raise … from exc``.
"""

from __future__ import annotations

import enum
from typing import Final


class Code(enum.StrEnum):
    """Connect error codes; the value is the wire string."""

    CANCELED = "canceled"
    UNKNOWN = "unknown"
    INVALID_ARGUMENT = "invalid_argument"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    FAILED_PRECONDITION = "failed_precondition"
    ABORTED = "aborted"
    OUT_OF_RANGE = "out_of_range"
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    DATA_LOSS = "data_loss"
    UNAUTHENTICATED = "unauthenticated"


CODE_TO_HTTP: Final[dict[Code, int]] = {
    Code.CANCELED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}

# HTTP status of an upstream answer that carries no Connect error body → the code we report (Connect's own table
# for HTTP-to-code, as connect-go maps it).
HTTP_TO_CODE: Final[dict[int, Code]] = {
    400: Code.INTERNAL,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.UNIMPLEMENTED,
    429: Code.UNAVAILABLE,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.UNAVAILABLE,
}


def code_for_http_status(status: int) -> Code:
    """Pure: the Connect code for an upstream HTTP status with no Connect error body."""
    return HTTP_TO_CODE.get(status, Code.UNKNOWN)


class BridgeError(Exception):
    """A failure with a Connect code and a message meant for the user."""

    code: Code = Code.INTERNAL

    def __init__(self, message: str, *, code: Code | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def http_status(self) -> int:
        return CODE_TO_HTTP[self.code]


class InvalidArgument(BridgeError):
    code = Code.INVALID_ARGUMENT


class ResourceExhausted(BridgeError):
    code = Code.RESOURCE_EXHAUSTED


class StorageFull(BridgeError):
    """The store cannot write: its disk (or the file system's quota) is full. Temporary — retention or an operator
    frees space, and the store takes writes again by itself — so the code is ``unavailable``, which OTLP exporters
    and SDKs retry; nothing of the refused request was stored."""

    code = Code.UNAVAILABLE


class NotFound(BridgeError):
    code = Code.NOT_FOUND


class Unimplemented(BridgeError):
    code = Code.UNIMPLEMENTED


class UpstreamError(BridgeError):
    """An upstream failed. ``upstream`` names it (``tempo``, ``pyroscope``, a URL) for messages and metrics."""

    code = Code.INTERNAL

    def __init__(self, upstream: str, message: str, *, code: Code | None = None) -> None:
        super().__init__(message, code=code)
        self.upstream = upstream


class UpstreamTimeout(UpstreamError):
    code = Code.DEADLINE_EXCEEDED


class UpstreamUnavailable(UpstreamError):
    code = Code.UNAVAILABLE
