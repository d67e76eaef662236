"""Pure: bounded gzip inflation, shared by every place the bridge undoes gzip (request bodies, Tempo answers, pprof
payloads). Each caller turns the reason into its own error type; the reason reads well after "<what> is".

``Budget``: one request's decompression allowance, shared by its body and every gzipped payload nested in it (a
Push's pprof samples, ``/ingest``'s profile and multipart parts): at most ``INFLATE_FACTOR`` ×
``PROFILE_BRIDGE_MAX_BODY_BYTES`` inflated bytes per request, whatever the number of payloads inside.

What inflating costs in memory (``gunzip``): a payload whose gzip trailer states a size over its limit costs nothing
(refused unread); any other is inflated in ``CHUNK`` steps and costs at most its limit before it is refused — plus,
when it fits, as much again for a moment while its pieces are joined.
"""

from __future__ import annotations

import zlib
from typing import Final

GZIP_MAGIC: Final = b"\x1f\x8b"
GZIP_MIN_BYTES: Final = 18  # a member's 10-byte header and 8-byte trailer
CHUNK: Final = 1024 * 1024  # inflated at a time: a bomb is refused within this much of its limit
# deflate's largest ratio: a 258-byte match in two one-bit codes (zlib's FAQ, "What's the maximum compression ratio")
DEFLATE_MAX_RATIO: Final = 1032


class GzipError(ValueError):
    """``str()`` is the reason, e.g. ``truncated gzip``."""


class GzipTooLarge(GzipError):
    """The data inflates to more than the limit."""


class BudgetSpent(GzipTooLarge):
    """The data would take the request past its decompression budget (``Budget``)."""


# a request may inflate, across its body and everything gzipped inside it, at most this many times the body limit
INFLATE_FACTOR: Final = 4


class Budget:
    """One request's decompression allowance. Every inflation made on the request's behalf is charged to it; past
    ``limit`` inflated bytes, ``gunzip`` raises ``BudgetSpent`` and nothing more is inflated. Not shared between
    requests, and used by one thread at a time (the request's decoder)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @classmethod
    def for_body_limit(cls, max_body_bytes: int) -> Budget:
        return cls(INFLATE_FACTOR * max_body_bytes)

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)

    def spend(self, n: int) -> None:
        """Charge ``n`` bytes a decoder keeps in memory on the request's behalf (a JFR's constant pools) to the same
        allowance: past the limit, ``BudgetSpent``."""
        if n > self.left:
            raise BudgetSpent(
                f"over the request's decompression budget of {self.limit} bytes ({INFLATE_FACTOR} × the body "
                "limit, PROFILE_BRIDGE_MAX_BODY_BYTES, for what a request inflates to and what its decoding keeps)"
            )
        self.used += n

    def gunzip(self, data: bytes, max_bytes: int | None = None) -> bytes:
        """Inflate one gzip member within ``max_bytes`` (this payload's own limit) and what is left of the budget."""
        own = max_bytes if max_bytes is not None else self.limit
        cap = min(own, self.left)
        try:
            out = gunzip(data, cap)
        except GzipTooLarge:
            if cap == self.left:
                raise BudgetSpent(
                    f"over the request's decompression budget of {self.limit} bytes ({INFLATE_FACTOR} × the body "
                    "limit, PROFILE_BRIDGE_MAX_BODY_BYTES, across the body and every gzipped payload in it)"
                ) from None
            raise
        self.used += len(out)
        return out


def stated_size(data: bytes) -> int | None:
    """The size a gzip member's trailer states (RFC 1952 §2.3.1: ISIZE, the input's length modulo 2^32, the last
    four bytes); None for data too short to hold a member, or whose last four bytes cannot be a trailer: more than
    deflate's ``DEFLATE_MAX_RATIO`` times the data (a gzip cut short, junk after it)."""
    if len(data) < GZIP_MIN_BYTES:
        return None
    stated = int.from_bytes(data[-4:], "little")
    return stated if stated <= DEFLATE_MAX_RATIO * len(data) else None


def gunzip(data: bytes, max_bytes: int) -> bytes:
    """Inflate gzip — every member, as RFC 1952 §2.2 allows several — never holding more than ``max_bytes`` of what
    it inflates to (a bomb costs at most the limit, never twice it):

    - a last member whose trailer states more than ``max_bytes`` is refused before anything is inflated (whatever
      came before it, the whole is larger still);
    - otherwise the data is inflated ``CHUNK`` bytes at a time, and refused as soon as it passes the limit (a trailer
      can lie: it is checked only when the member ends, by zlib)."""
    stated = stated_size(data)
    if stated is not None and stated > max_bytes:
        raise GzipTooLarge(f"over {max_bytes} bytes after gzip decompression (its gzip trailer says {stated})")
    parts: list[bytes] = []
    size = 0
    rest = data
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = rest
        try:
            while pending and not inflater.eof:
                piece = inflater.decompress(pending, CHUNK)
                size += len(piece)
                if size > max_bytes:
                    raise GzipTooLarge(f"over {max_bytes} bytes after gzip decompression")
                parts.append(piece)
                pending = inflater.unconsumed_tail
            while not inflater.eof and (piece := inflater.decompress(b"", CHUNK)):  # what zlib still holds
                size += len(piece)
                if size > max_bytes:
                    raise GzipTooLarge(f"over {max_bytes} bytes after gzip decompression")
                parts.append(piece)
        except zlib.error as exc:
            raise GzipError(f"not valid gzip ({exc})") from exc
        if not inflater.eof:
            raise GzipError("truncated gzip")
        rest = inflater.unused_data
        if not rest.startswith(GZIP_MAGIC):  # the end (bytes after the last member are ignored, as gzip(1) does)
            return parts[0] if len(parts) == 1 else b"".join(parts)


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether a client's ``Accept-Encoding`` (RFC 9110 §12.5.3) lets an answer be gzipped: ``gzip`` (or its alias
    ``x-gzip``) with a non-zero weight; failing that, ``*`` with a non-zero weight. An explicit ``gzip;q=0`` refuses it
    whatever ``*`` says; a weight that is not a number counts as 1."""
    named: float | None = None
    star: float | None = None
    for item in (accept_encoding or "").split(","):
        token, _, params = item.partition(";")
        coding = token.strip().lower()
        weight = _weight(params)
        if coding in ("gzip", "x-gzip"):
            named = weight if named is None else max(named, weight)
        elif coding == "*":
            star = weight
    if named is not None:
        return named > 0
    return star is not None and star > 0


def _weight(params: str) -> float:
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return 1.0
    return 1.0


class EncodingError(ValueError):
    """A ``Content-Encoding`` that cannot be undone (unknown coding, corrupt or oversized gzip)."""


def undo_content_encoding(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """An HTTP body in its ``Content-Encoding`` (identity or gzip) → the plain body, at most ``max_bytes``."""
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in ("gzip", "x-gzip"):
        raise EncodingError(f"Content-Encoding {encoding!r} is not one the bridge decodes")
    try:
        return gunzip(body, max_bytes)
    except GzipError as exc:
        raise EncodingError(f"answer is {exc}") from exc
