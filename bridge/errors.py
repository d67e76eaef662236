"""Errors the bridge raises, and how each maps onto the wire.

The tree, specialised only where a caller branches on it::

    BridgeError(code, message)                 any failure with a Connect code and a message a user can act on
    ├── InvalidArgument                        the caller sent something unusable (400)
    ├── ResourceExhausted                      a body (or what it inflates to) over its size limit (413)
    ├── StorageFull                            the store's disk is full: retry later (unavailable, 503 Retry-After)
    ├── StoreDamaged                           the store's file is damaged: retry later (unavailable, 503 Retry-After)
    ├── NotFound                               an id that is not there (404)
    ├── Unauthenticated                        no token, or one the bridge does not accept (401)
    ├── PermissionDenied                       a token without the permission or the tenant asked for (403)
    ├── Unimplemented                          a route standalone mode does not serve (501)
    └── UpstreamError(upstream, code, message) Tempo, Pyroscope or another upstream failed
        ├── UpstreamTimeout                    no answer within the request's budget (deadline_exceeded, 504)
        ├── UpstreamTooLarge                   an answer over PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES (502)
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


# The same codes as gRPC numbers them (google.rpc.Code, grpc/grpc doc/statuscodes.md; Connect's codes are gRPC's in
# this order, connectrpc.com/connect code.go): what the OTLP/gRPC server answers and an OTLP/HTTP error's Status.code
CODE_TO_GRPC_NUMBER: Final[dict[Code, int]] = {code: number for number, code in enumerate(Code, start=1)}

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

    @property
    def retry_after(self) -> int | None:
        """Seconds after which a retry may succeed (the ``Retry-After`` header), when the failure is temporary."""
        return None


class InvalidArgument(BridgeError):
    code = Code.INVALID_ARGUMENT


class ResourceExhausted(BridgeError):
    """Too large: a body, or what it inflates to, over its limit. HTTP 413 (Content Too Large), which OTLP exporters
    and SDKs do not retry — sending the same body again cannot succeed; Connect clients read the code from the body
    (``resource_exhausted``). Connect's own status for the code, 429, would make exporters retry it forever."""

    code = Code.RESOURCE_EXHAUSTED

    @property
    def http_status(self) -> int:
        return 413


class StorageFull(BridgeError):
    """The store cannot write: its disk (or its file system quota) is full. Temporary — retention or an operator
    frees space — so the answer is ``unavailable`` (503 with ``Retry-After``; gRPC ``UNAVAILABLE``), which OTLP
    exporters and SDKs retry, and nothing of the request was stored."""

    code = Code.UNAVAILABLE
    RETRY_AFTER_S: Final = 30

    @property
    def retry_after(self) -> int | None:
        return self.RETRY_AFTER_S


class StoreDamaged(BridgeError):
    """The store's file is damaged (SQLite: "database disk image is malformed"): the store takes no more writes until
    an operator repairs it (``profile-bridge store repair``). Like a full disk, the answer is ``unavailable`` (503
    with ``Retry-After``; gRPC ``UNAVAILABLE``) — exporters and SDKs retry it — and nothing of the request was
    stored: never a 500, which exporters drop, and never an acknowledgement of data written into a damaged file."""

    code = Code.UNAVAILABLE
    RETRY_AFTER_S: Final = 60

    @property
    def retry_after(self) -> int | None:
        return self.RETRY_AFTER_S


class NotFound(BridgeError):
    code = Code.NOT_FOUND


class Unauthenticated(BridgeError):
    code = Code.UNAUTHENTICATED


class PermissionDenied(BridgeError):
    code = Code.PERMISSION_DENIED


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


class UpstreamTooLarge(UpstreamError):
    """An answer the bridge must read whole is larger than it will hold (``PROFILE_BRIDGE_MAX_UPSTREAM_ANSWER_BYTES``).
    The upstream did answer, but with nothing the bridge can use: 502 Bad Gateway, ``resource_exhausted`` in the
    body."""

    code = Code.RESOURCE_EXHAUSTED

    @property
    def http_status(self) -> int:
        return 502
