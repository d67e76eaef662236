"""Pure: bounded gzip inflation, shared by every place the bridge undoes gzip (request bodies, Tempo answers, pprof
payloads). Each caller turns the reason into its own error type; the reason reads well after "<what> is"."""

from __future__ import annotations

import zlib
from typing import Final

GZIP_MAGIC: Final = b"\x1f\x8b"


class GzipError(ValueError):
    """``str()`` is the reason, e.g. ``truncated gzip``."""


class GzipTooLarge(GzipError):
    """The data inflates to more than the limit."""


def gunzip(data: bytes, max_bytes: int) -> bytes:
    """Inflate one gzip member, never producing more than ``max_bytes`` (a gzip bomb stops at the limit)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise GzipError(f"not valid gzip ({exc})") from exc
    if len(out) > max_bytes:
        raise GzipTooLarge(f"over {max_bytes} bytes after gzip decompression")
    if not inflater.eof:
        raise GzipError("truncated gzip")
    return out


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
