from __future__ import annotations

import gzip

import pytest

from bridge.compression import GzipError, GzipTooLarge, gunzip


def test_round_trip() -> None:
    assert gunzip(gzip.compress(b"x" * 1000), 1000) == b"x" * 1000


@pytest.mark.parametrize(
    ("data", "limit", "error", "reason"),
    [
        (gzip.compress(b"x" * 1001), 1000, GzipTooLarge, "over 1000 bytes after gzip decompression"),
        (gzip.compress(b"x" * 100)[:-9], 1000, GzipError, "truncated gzip"),
        (b"not gzip at all", 1000, GzipError, "not valid gzip"),
    ],
)
def test_reasons(data: bytes, limit: int, error: type[Exception], reason: str) -> None:
    with pytest.raises(error, match=reason):
        gunzip(data, limit)


def test_a_gzip_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~64 KiB
    with pytest.raises(GzipTooLarge):
        gunzip(bomb, 1024 * 1024)
