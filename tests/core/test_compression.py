from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Callable

import pytest

from bridge.compression import CHUNK, GzipError, GzipTooLarge, accepts_gzip, gunzip, stated_size

MiB = 1024 * 1024


def test_round_trip() -> None:
    assert gunzip(gzip.compress(b"x" * 1000), 1000) == b"x" * 1000


@pytest.mark.parametrize(
    ("data", "limit", "error", "reason"),
    [
        (gzip.compress(b"x" * 1001, mtime=0), 1000, GzipTooLarge, "over 1000 bytes after gzip decompression"),
        (gzip.compress(b"x" * 100, mtime=0)[:-9], 1000, GzipError, "truncated gzip"),
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


def _zeros_gzip(size: int) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    return b"".join([*(deflate.compress(block) for _ in range(size // MiB)), deflate.flush()])


def _peak(fn: Callable[[], object]) -> int:
    """The most memory Python held while ``fn`` ran (tracemalloc), beyond what it held before."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            fn()
        except GzipTooLarge:
            pass
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


# slow: seconds of pure decompression; reads no clock, so it cannot depend on the date
@pytest.mark.slow
def test_a_bomb_whose_trailer_states_its_size_is_refused_before_it_is_inflated() -> None:
    """Issue 19: on main a bomb inflated to its limit in one buffer, then copied it (twice the limit at the peak)."""
    bomb = _zeros_gzip(256 * MiB)
    assert stated_size(bomb) == 256 * MiB
    with pytest.raises(GzipTooLarge, match=r"its gzip trailer says 268435456"):
        gunzip(bomb, 64 * MiB)
    assert _peak(lambda: gunzip(bomb, 64 * MiB)) < MiB


# slow: seconds of pure decompression; reads no clock, so it cannot depend on the date
@pytest.mark.slow
def test_a_bomb_whose_trailer_lies_costs_at_most_its_limit() -> None:
    bomb = _zeros_gzip(256 * MiB)
    lying = bomb[:-4] + (1000).to_bytes(4, "little")
    with pytest.raises(GzipTooLarge, match=r"^over 67108864 bytes after gzip decompression$"):
        gunzip(lying, 64 * MiB)
    assert _peak(lambda: gunzip(lying, 64 * MiB)) < 64 * MiB + 3 * CHUNK


def test_every_member_is_inflated() -> None:
    """RFC 1952 §2.2: a gzip file is a series of members (``cat a.gz b.gz``); main kept the first one only."""
    data = gzip.compress(b"first ") + gzip.compress(b"second")
    assert gunzip(data, 100) == b"first second"
    with pytest.raises(GzipTooLarge):
        gunzip(data, 10)  # the limit counts every member
    assert (
        gunzip(gzip.compress(b"one") + b"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 100) == b"one"
    )  # junk after: ignored


def test_a_trailer_that_cannot_be_one_is_not_taken_for_a_size() -> None:
    cut = gzip.compress(b"x" * 10_000)[:-9]  # its last four bytes are compressed data, read as a huge size
    assert stated_size(cut) is None
    with pytest.raises(GzipError, match="truncated gzip"):
        gunzip(cut, 100_000)


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [
        # the Tempo mount's table
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("br;q=1.0, gzip;q=0.8", True),
        ("*", True),
        ("gzip;q=0", False),
        ("gzip;q=0.0", False),
        ("identity", False),
        ("", False),
        ("deflate", False),
        # the Connect codec's table
        ("gzip, deflate", True),
        ("deflate, GZIP;q=0.5", True),
        (None, False),
        ("br", False),
        # where the two copies disagreed, and RFC 9110 §12.5.3's edges
        ("gzip; q=0.000", False),
        ("gzip;Q=0", False),
        ("*;q=0.5, gzip;q=0", False),  # an explicit refusal wins over the wildcard
        ("gzip;q=0, *", False),
        ("*;q=0", False),
        ("deflate, *;q=0.1", True),
        ("x-gzip", True),
        ("gzip;q=junk", True),  # an unreadable weight counts as 1
        (" GZIP ; q=1 ", True),
    ],
)
def test_accepts_gzip_table(header: str | None, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


def test_one_budget_is_charged_by_every_payload_of_a_request() -> None:
    from bridge.compression import INFLATE_FACTOR, Budget, BudgetSpent

    budget = Budget.for_body_limit(1000)
    assert budget.limit == INFLATE_FACTOR * 1000 == 4000
    blob = gzip.compress(b"x" * 1500)
    assert budget.gunzip(blob) == b"x" * 1500
    assert budget.gunzip(blob, max_bytes=2000) == b"x" * 1500
    assert (budget.used, budget.left) == (3000, 1000)
    with pytest.raises(BudgetSpent, match="decompression budget of 4000 bytes"):
        budget.gunzip(blob)  # 1500 more would pass 4000: refused, nothing charged
    assert budget.used == 3000
    with pytest.raises(GzipTooLarge) as caught:
        Budget(10_000).gunzip(blob, max_bytes=100)  # the payload's own limit binds first
    assert not isinstance(caught.value, BudgetSpent)
