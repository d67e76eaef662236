"""Pure pieces of the store's profile queries, no database access: Pyroscope's time window, span, trace and profile
id selectors and call-site filter (for ``profiles``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from bridge.errors import InvalidArgument
from bridge.store import decode

DEFAULT_MAX_NODES: Final = 8192  # Pyroscope's querier.max-flamegraph-nodes-default
MAX_PROFILE_IDS: Final = 10_000  # profile_id_selector entries one request may name
FAR_FUTURE_NS: Final = 2**63 - 1  # int64: the largest time SQLite compares as an integer


def window_ns(start_ms: int, end_ms: int) -> tuple[int, int]:
    """Pyroscope's inclusive ``[start, end]`` in ms over the capture start → ``[lo, hi)`` in ns."""
    lo = min(max(0, start_ms) * 1_000_000, FAR_FUTURE_NS)
    hi = min((end_ms + 1) * 1_000_000, FAR_FUTURE_NS) if end_ms > 0 else FAR_FUTURE_NS
    return lo, hi


def parse_span_selector(values: Iterable[str]) -> list[int]:
    """``span_selector`` entries → stored span ids. One bad entry fails the whole request, as Pyroscope does."""
    out: list[int] = []
    for value in values:
        number = decode.span_id_to_int(value) if len(value) == 16 else None
        if len(value) != 16:
            raise InvalidArgument(f'invalid span id length: "{value}"')
        if number is None:
            try:
                bytes.fromhex(value)
            except ValueError:
                raise InvalidArgument(f'invalid span id: "{value}"') from None
            continue  # all zeros: matches nothing
        out.append(number)
    return out


def parse_trace_selector(values: Iterable[str]) -> list[bytes]:
    out: list[bytes] = []
    for value in values:
        text = value.strip().lower()
        if not 0 < len(text) <= 32:
            raise InvalidArgument(f'invalid trace id length: "{value}"')
        try:
            out.append(bytes.fromhex(text.rjust(32, "0")))
        except ValueError:
            raise InvalidArgument(f'invalid trace id: "{value}"') from None
    return out


def profile_uuid(row_id: int, time_ns: int) -> str:
    """A stored profile's id as Pyroscope shows one (a UUID, ``types.v1.Exemplar.profile_id``): its row id and its
    capture start, so an id outlives nothing it named — a row id SQLite hands out again after retention comes with
    another capture time, and the id then selects nothing."""
    raw = (row_id & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big") + (time_ns & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def parse_profile_ids(values: Iterable[str]) -> list[tuple[int, int]]:
    """``profile_id_selector`` → (row id, capture start in ns) per entry. Every form Go's ``uuid.Parse`` takes
    (``xxxxxxxx-xxxx-…``, ``{…}``, ``urn:uuid:…``, 32 hex digits); one bad entry fails the request. A well-formed id
    this store never handed out selects nothing."""
    out: list[tuple[int, int]] = []
    for value in values:
        text = value.strip()
        if text.lower().startswith("urn:uuid:"):
            text = text[9:]
        if len(text) == 38 and text[0] == "{" and text[-1] == "}":
            text = text[1:-1]
        if len(text) == 36 and all(text[i] == "-" for i in (8, 13, 18, 23)):
            text = text.replace("-", "")
        try:
            raw = bytes.fromhex(text) if len(text) == 32 else b""
        except ValueError:
            raw = b""
        if len(raw) != 16:
            raise InvalidArgument(f'invalid profile id (not a UUID): "{value[:80]}"')
        row_id, time_ns = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
        out.append(
            (
                row_id - (1 << 64) if row_id >= 1 << 63 else row_id,
                time_ns - (1 << 64) if time_ns >= 1 << 63 else time_ns,
            )
        )
        if len(out) > MAX_PROFILE_IDS:
            raise InvalidArgument(f"profile_id_selector names more than {MAX_PROFILE_IDS} profiles")
    return out


def filter_call_site(
    stacks: Sequence[tuple[tuple[str, ...], int]], call_site: Sequence[str]
) -> list[tuple[tuple[str, ...], int]]:
    """``stack_trace_selector.call_site``: keep stacks that start (root first) with these frames."""
    n = len(call_site)
    prefix = tuple(call_site)
    return [(frames, v) for frames, v in stacks if frames[:n] == prefix]
