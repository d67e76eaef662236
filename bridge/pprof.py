"""Pure pprof: decode a ``google.v1.Profile`` (gzip-compressed or plain, as SDKs send it) and walk its samples as
(frames root first, value, string labels); encode merged stacks as one (the bridge's one pprof encoder: the API's
``format=pprof`` export and the store's ``SelectMergeProfile``; callers gzip it).

pprof facts used here: ``Sample.location_id[0]`` is the leaf; a ``Location`` with several ``Line`` entries holds
inlined frames, innermost first; label keys and values are indexes into ``string_table``; a label with ``str == 0``
is numeric (skipped here). A location without lines (unsymbolised) is named by its address, ``0x…``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from google.protobuf.message import DecodeError

from bridge._proto import profile_pb2 as pb
from bridge.compression import GZIP_MAGIC, Budget, GzipError, GzipTooLarge, gunzip
from bridge.errors import InvalidArgument, ResourceExhausted
from bridge.profiletype import ProfileType

# a decompressed pprof larger than this is refused (a gzip bomb is not a profile)
MAX_PPROF_BYTES: Final = 256 * 1024**2


def decode_pprof(raw: bytes, max_bytes: int = MAX_PPROF_BYTES, budget: Budget | None = None) -> pb.Profile:
    """pprof bytes (gzip or plain) → ``Profile``. Anything else is an ``InvalidArgument`` saying what is wrong; a
    profile that inflates past ``max_bytes`` or past what is left of the request's ``budget`` (shared by every
    payload of one request) is ``ResourceExhausted``."""
    data = raw
    if raw[:2] == GZIP_MAGIC:
        try:
            data = budget.gunzip(raw, max_bytes) if budget is not None else gunzip(raw, max_bytes)
        except GzipTooLarge as exc:
            raise ResourceExhausted(f"pprof profile is {exc}") from exc
        except GzipError as exc:
            raise InvalidArgument(f"pprof profile is {exc}") from exc
    profile = pb.Profile()
    try:
        profile.ParseFromString(data)
    except DecodeError as exc:
        raise InvalidArgument(f"not a pprof profile ({exc})") from exc
    _check(profile)
    return profile


def _check(profile: pb.Profile) -> None:
    strings = len(profile.string_table)
    if strings == 0 and (profile.sample or profile.sample_type):
        raise InvalidArgument("not a pprof profile: empty string table")
    if strings and profile.string_table[0] != "":
        raise InvalidArgument("not a pprof profile: string_table[0] must be the empty string")
    for vt in profile.sample_type:
        if not (0 <= vt.type < strings and 0 <= vt.unit < strings):
            raise InvalidArgument("pprof sample_type points outside the string table")
    n_types = len(profile.sample_type)
    for sample in profile.sample:
        if len(sample.value) != n_types:
            raise InvalidArgument(f"pprof sample has {len(sample.value)} values for {n_types} sample types")


def sample_types(profile: pb.Profile) -> list[tuple[str, str]]:
    """(type, unit) of each value index, e.g. ``[("samples", "count"), ("cpu", "nanoseconds")]``."""
    st = profile.string_table
    return [(st[vt.type], st[vt.unit]) for vt in profile.sample_type]


def period_type(profile: pb.Profile) -> tuple[str, str]:
    st = profile.string_table
    pt = profile.period_type
    if not (0 <= pt.type < len(st) and 0 <= pt.unit < len(st)):
        raise InvalidArgument("pprof period_type points outside the string table")
    return st[pt.type], st[pt.unit]


def _location_frames(profile: pb.Profile) -> dict[int, tuple[str, ...]]:
    """Location id → its frame names, leaf (innermost inlined) first."""
    st = profile.string_table
    n_strings = len(st)
    functions: dict[int, str] = {}
    for fn in profile.function:
        functions[fn.id] = st[fn.name] if 0 <= fn.name < n_strings else f"<bad name {fn.name}>"
    out: dict[int, tuple[str, ...]] = {}
    for loc in profile.location:
        if loc.line:
            out[loc.id] = tuple(
                functions.get(line.function_id, f"<unknown function {line.function_id}>") for line in loc.line
            )
        else:
            out[loc.id] = (f"0x{loc.address:x}",)
    return out


def iter_samples(profile: pb.Profile, value_index: int) -> Iterator[tuple[tuple[str, ...], int, dict[str, str]]]:
    """Every sample as (frames root first, its value at ``value_index``, its string labels)."""
    if not 0 <= value_index < len(profile.sample_type):
        raise InvalidArgument(f"pprof has no sample type #{value_index}")
    st = profile.string_table
    n_strings = len(st)
    locations = _location_frames(profile)
    stacks: dict[tuple[int, ...], tuple[str, ...]] = {}
    for sample in profile.sample:
        ids = tuple(sample.location_id)
        frames = stacks.get(ids)
        if frames is None:
            leaf_first: list[str] = []
            for loc_id in ids:
                names = locations.get(loc_id)
                if names is None:
                    raise InvalidArgument(f"pprof sample refers to unknown location {loc_id}")
                leaf_first.extend(names)
            leaf_first.reverse()
            frames = stacks[ids] = tuple(leaf_first)
        labels: dict[str, str] = {}
        for label in sample.label:
            if label.str and 0 <= label.key < n_strings and 0 < label.str < n_strings:
                labels[st[label.key]] = st[label.str]
        yield frames, sample.value[value_index], labels


def encode_pprof(
    stacks: Iterable[tuple[tuple[str, ...], int]],
    profile_type: str,
    *,
    period: int = 0,
    time_nanos: int = 0,
    duration_nanos: int = 0,
) -> pb.Profile:
    """Stacks (root frame first, with their value) → a ``google.v1.Profile`` that ``go tool pprof`` opens: string
    table with ``""`` first, one sample type and the period type from the profile type id (a malformed id is an
    ``InvalidArgument``), one function and one location per distinct frame name, all under one mapping flagged
    ``has_functions`` so pprof does not try to symbolise, one sample per stack in the order given, locations leaf
    first as pprof orders them. Stacks with a zero value are left out."""
    ptype = ProfileType.parse(profile_type)
    strings: list[str] = [""]
    string_index: dict[str, int] = {"": 0}

    def sid(text: str) -> int:
        idx = string_index.get(text)
        if idx is None:
            idx = string_index[text] = len(strings)
            strings.append(text)
        return idx

    prof = pb.Profile()
    prof.sample_type.add(type=sid(ptype.sample_type), unit=sid(ptype.sample_unit))
    prof.period_type.type = sid(ptype.period_type)
    prof.period_type.unit = sid(ptype.period_unit)
    prof.period = period
    prof.time_nanos = time_nanos
    prof.duration_nanos = duration_nanos
    prof.mapping.add(id=1, filename=sid(ptype.name), has_functions=True)

    location_of: dict[str, int] = {}
    for frames, value in stacks:
        if not value:
            continue
        ids: list[int] = []
        for name in reversed(frames):
            loc = location_of.get(name)
            if loc is None:
                loc = location_of[name] = len(location_of) + 1
                prof.function.add(id=loc, name=sid(name), system_name=sid(name))
                prof.location.add(id=loc, mapping_id=1).line.add(function_id=loc)
            ids.append(loc)
        prof.sample.add(location_id=ids, value=[value])
    prof.string_table.extend(strings)
    return prof
