"""Pure: the one rule for trace and span ids, in every form the bridge meets them.

- Canonical text: a span id is 16 lower-case hex characters, a trace id 32; what users, Grafana, Tempo and the SDKs
  send is accepted in either case and with surrounding blanks. A trace id may be shorter (Tempo left-pads it with
  zeros: ``1`` is ``000…001``). An all-zero id is no id (W3C Trace Context, OTLP): it is refused everywhere the bridge
  *uses* an id — selectors, labels, links, the API — and only passed on where it merely forwards (Tempo's own rule,
  ``tempo_trace_id``, answers 404 for it).
- Bytes: OTLP carries 8 / 16 raw bytes; Tempo's JSON carries standard base64 of them.
- The store keeps a span id as a signed 64-bit integer (SQLite's INTEGER) and a trace id as 16 bytes.
- The carried form ``<16 hex span id>:<32 hex trace id>``: the value the Tempo mount gives ``pyroscope.profile.id``,
  which Grafana sends back verbatim as a span selector entry. It names the span *and* its trace, so any bridge
  process resolves the click with one trace-by-ID call, whichever process served the trace view. It never reaches
  Pyroscope (which refuses any entry that is not 16 hex): the span selector is cut back to the span id first.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

from bridge.errors import InvalidArgument

SPAN_ID_CHARS: Final = 16
TRACE_ID_CHARS: Final = 32
_HEX: Final = re.compile(r"[0-9a-fA-F]+")


def span_id(value: str) -> str | None:
    """16 hex characters in either case (blanks around allowed) → lower case; anything else, all zeros included →
    None."""
    text = value.strip()
    if len(text) != SPAN_ID_CHARS or not _HEX.fullmatch(text) or not text.strip("0"):
        return None
    return text.lower()


def trace_id(value: str, *, padded: bool = True) -> str | None:
    """1–32 hex characters in either case → 32 lower-case hex, left-padded with zeros (``padded=False``: exactly 32,
    as a ``trace_id`` label must be); anything else, all zeros included → None."""
    text = value.strip()
    low = 1 if padded else TRACE_ID_CHARS
    if not low <= len(text) <= TRACE_ID_CHARS or not _HEX.fullmatch(text) or not text.strip("0"):
        return None
    return text.lower().rjust(TRACE_ID_CHARS, "0")


CARRIED_SEPARATOR: Final = ":"


def carried_profile_id(span: str, trace: str) -> str:
    """The carried form of a span: ``<16 hex span id>:<32 hex trace id>`` (both already canonical)."""
    return f"{span}{CARRIED_SEPARATOR}{trace}"


def selector_entry(value: str) -> tuple[str, str | None] | None:
    """A span selector entry (or a span id as a user pastes it from a span's ``pyroscope.profile.id``) → (span id,
    the trace id it carries or None). 16 hex, or 16 hex ``:`` 1–32 hex; anything else → None."""
    span_part, sep, trace_part = value.strip().partition(CARRIED_SEPARATOR)
    sid = span_id(span_part)
    if sid is None:
        return None
    if not sep:
        return sid, None
    tid = trace_id(trace_part)
    return None if tid is None else (sid, tid)


def span_of_trace(raw_trace: str, raw_span: str) -> tuple[str, str]:
    """A span named by the user (a URL's path, a command's arguments): its trace id and its span id, which may be
    pasted as pyroscope.profile.id's carried ``<span>:<trace>``. ``InvalidArgument`` naming the bad one."""
    tid = trace_id(raw_trace)
    if tid is None:
        raise InvalidArgument(f"trace id {raw_trace[:80]!r} is not 1-32 hex characters")
    entry = selector_entry(raw_span)
    if entry is None:
        raise InvalidArgument(f"span id {raw_span[:80]!r} is not 16 hex characters")
    sid, carried = entry
    if carried is not None and carried != tid:
        raise InvalidArgument(f"span id {raw_span[:80]!r} carries trace {carried}, not the trace id given ({tid})")
    return tid, sid


def tempo_trace_id(raw: str) -> str:
    """Tempo's ``util.HexStringToTraceID``: any hex up to 128 bits, either case, left-padded → 32 lower-case hex (all
    zeros too: Tempo answers "not found" for it). Anything else → ``InvalidArgument`` in Tempo's own words."""
    for pos, char in enumerate(raw):
        if not ("0" <= char <= "9" or "a" <= char <= "f" or "A" <= char <= "F"):
            raise InvalidArgument(
                f"trace IDs can only contain hex characters: invalid character '{char}' at position {pos + 1}"
            )
    text = "0" + raw if len(raw) % 2 else raw
    if len(text) > TRACE_ID_CHARS:
        raise InvalidArgument("trace IDs can't be larger than 128 bits")
    return text.lower().rjust(TRACE_ID_CHARS, "0")


def from_bytes(raw: bytes, size: int) -> str | None:
    """OTLP id bytes (8 for a span, 16 for a trace) → canonical hex; a wrong length or all zeros → None."""
    if len(raw) != size or not any(raw):
        return None
    return raw.hex()


def from_base64(value: str) -> str:
    """Tempo's JSON ids are standard base64 of the id bytes → hex (``ValueError`` when it is not base64)."""
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        raise ValueError(f"id {value!r} is not base64") from None


def from_hex(value: str) -> str:
    """OTLP/JSON's ids are hex → lower case (``ValueError`` when it is not hex; empty stays empty)."""
    low = value.strip().lower()
    if low and not _HEX.fullmatch(low):
        raise ValueError(f"id {value!r} is not hex")
    return low


def span_id_to_int(value: str) -> int | None:
    """A span id in any accepted form → the store's signed 64-bit integer; not a span id → None."""
    canonical = span_id(value)
    if canonical is None:
        return None
    return int.from_bytes(bytes.fromhex(canonical), "big", signed=True)


def span_id_bytes_to_int(raw: bytes) -> int | None:
    canonical = from_bytes(raw, SPAN_ID_CHARS // 2)
    return None if canonical is None else int.from_bytes(raw, "big", signed=True)


def int_to_span_id(number: int) -> str:
    return number.to_bytes(8, "big", signed=True).hex()


def trace_id_to_bytes(value: str) -> bytes | None:
    """A full 32-hex trace id (a sample's ``trace_id`` label) → its 16 bytes; anything else → None."""
    canonical = trace_id(value, padded=False)
    return None if canonical is None else bytes.fromhex(canonical)
