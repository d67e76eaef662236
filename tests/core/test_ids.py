"""The one id rule (``bridge.ids``): every form a trace or span id arrives in, one table each."""

from __future__ import annotations

import re

import pytest

from bridge import ids
from bridge.errors import InvalidArgument


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("7F80395FD15DCDC9", "7f80395fd15dcdc9"),
        (" 7f80395fd15dcdc9 ", "7f80395fd15dcdc9"),
        ("0000000000000001", "0000000000000001"),
        ("0000000000000000", None),  # all zeros is no id (W3C, OTLP)
        ("7f80395fd15dcdc", None),
        ("7f80395fd15dcdc9a", None),
        ("7f80395fd15dcdcg", None),
        ("", None),
        ('${__span.tags["pyroscope.profile.id"]}', None),
        ("z" * 16, None),
    ],
)
def test_span_ids_table(raw: str, canonical: str | None) -> None:
    assert ids.span_id(raw) == canonical
    assert (ids.span_id_to_int(raw) is None) is (canonical is None)
    if canonical is not None:
        assert ids.int_to_span_id(ids.span_id_to_int(raw) or 0) == canonical


@pytest.mark.parametrize(
    ("raw", "padded", "exact"),
    [
        ("5B8EFFF798038103D269B633813FC700", "5b8efff798038103d269b633813fc700", "5b8efff798038103d269b633813fc700"),
        ("d269b633813fc700", "0000000000000000d269b633813fc700", None),
        ("1", "00000000000000000000000000000001", None),
        ("0" * 32, None, None),
        ("", None, None),
        ("5b8efff798038103d269b633813fc7000", None, None),
        ("xyz", None, None),
        ("EEE19B7EC3C1B100", "0000000000000000eee19b7ec3c1b100", None),
        ('${__span.tags["pyroscope.profile.id"]}', None, None),
    ],
)
def test_trace_ids_table(raw: str, padded: str | None, exact: str | None) -> None:
    assert ids.trace_id(raw) == padded
    assert ids.trace_id(raw, padded=False) == exact
    assert ids.trace_id_to_bytes(raw) == (bytes.fromhex(exact) if exact else None)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("5B8EFFF798038103D269B633813FC700", "5b8efff798038103d269b633813fc700"),
        ("d269b633813fc700", "0000000000000000d269b633813fc700"),
        ("abc", "00000000000000000000000000000abc"),
        ("", "00000000000000000000000000000000"),  # Tempo's rule: forwarded, Tempo says "not found"
    ],
)
def test_trace_ids_are_read_like_tempo(raw: str, expected: str) -> None:
    assert ids.tempo_trace_id(raw) == expected


@pytest.mark.parametrize(
    ("raw", "words"),
    [("xyz", "invalid character 'x' at position 1"), ("a" * 33, "can't be larger than 128 bits")],
)
def test_tempo_refuses_trace_ids_in_its_own_words(raw: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        ids.tempo_trace_id(raw)


@pytest.mark.parametrize(
    ("raw", "size", "canonical"),
    [(bytes.fromhex("7f80395fd15dcdc9"), 8, "7f80395fd15dcdc9"), (bytes(8), 8, None), (b"\x01", 8, None)],
)
def test_otlp_id_bytes_table(raw: bytes, size: int, canonical: str | None) -> None:
    assert ids.from_bytes(raw, size) == canonical


def test_tempo_json_ids_are_base64_and_otlp_json_ids_are_hex() -> None:
    assert ids.from_base64("7uGbfsPBsQA=") == "eee19b7ec3c1b100"
    assert ids.from_hex("EEE19B7EC3C1B100") == "eee19b7ec3c1b100"
    with pytest.raises(ValueError, match="not base64"):
        ids.from_base64("not base64!")
    with pytest.raises(ValueError, match="not hex"):
        ids.from_hex("zz")


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("7f80395fd15dcdc9", ("7f80395fd15dcdc9", None)),
        (
            " 7F80395FD15DCDC9:E19E0353F421BFCE945F7D1514C6C9F1 ",
            ("7f80395fd15dcdc9", "e19e0353f421bfce945f7d1514c6c9f1"),
        ),
        ("7f80395fd15dcdc9:1", ("7f80395fd15dcdc9", "00000000000000000000000000000001")),
        ("7f80395fd15dcdc9:", None),
        ("7f80395fd15dcdc9:" + "0" * 32, None),
        (":e19e0353f421bfce945f7d1514c6c9f1", None),
        ("7f80395fd15dcdc9:e19e0353f421bfce945f7d1514c6c9f1:x", None),
        ('${__span.tags["pyroscope.profile.id"]}', None),
    ],
)
def test_selector_entries_table(raw: str, parsed: tuple[str, str | None] | None) -> None:
    assert ids.selector_entry(raw) == parsed
    if parsed is not None and parsed[1] is not None:
        assert ids.selector_entry(ids.carried_profile_id(*parsed)) == parsed  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("trace", "span", "want"),
    [
        ("ABCDEF", "1c60f2b8cd2d96d1", ("00000000000000000000000000abcdef", "1c60f2b8cd2d96d1")),
        (
            "e19e0353f421bfce945f7d1514c6c9f1",
            "1c60f2b8cd2d96d1:e19e0353f421bfce945f7d1514c6c9f1",
            ("e19e0353f421bfce945f7d1514c6c9f1", "1c60f2b8cd2d96d1"),
        ),
        ("xyz", "1c60f2b8cd2d96d1", "trace id 'xyz' is not 1-32 hex characters"),
        ("e19e0353f421bfce945f7d1514c6c9f1", "1c60", "span id '1c60' is not 16 hex characters"),
        (
            "e19e0353f421bfce945f7d1514c6c9f1",
            "1c60f2b8cd2d96d1:0000000000000000000000000000beef",
            "carries trace 0000000000000000000000000000beef, not the trace id given",
        ),
    ],
)
def test_a_span_named_by_a_user_is_checked_once_for_every_api_and_command(
    trace: str, span: str, want: tuple[str, str] | str
) -> None:
    """The profile and compare APIs, the pages and ``resolve`` take a span the same way (``ids.span_of_trace``)."""
    if isinstance(want, tuple):
        assert ids.span_of_trace(trace, span) == want
    else:
        with pytest.raises(InvalidArgument, match=re.escape(want)):
            ids.span_of_trace(trace, span)
