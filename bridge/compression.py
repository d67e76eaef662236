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
