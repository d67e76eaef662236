"""Pure core of the link gateway: turn span-id *sample attributes* into OTLP ``Link`` entries.

For every sample of an ``ExportProfilesServiceRequest`` (open-telemetry/opentelemetry-proto
``opentelemetry/proto/profiles/v1development/profiles.proto``: ``Sample.link_index``,
``ProfilesDictionary.link_table``):

1. A sample that already has a non-zero ``link_index`` keeps it, and keeps its attributes untouched (whoever set the
   link decided what the sample means; we do not second-guess it). Counted as ``already_linked``.
2. Otherwise the configured ``(trace key, span key)`` pairs are tried in order (an empty trace key means the pair
   carries a span id only, like Pyroscope's legacy ``profile_id``). The first pair whose span attribute holds a valid
   id wins: span id 16 hex characters (or 8 raw bytes), trace id 32 hex characters (or 16 raw bytes), neither all
   zeros. A trace attribute that is present but invalid makes the pair invalid.
3. The winning ``(trace_id, span_id)`` is found in — or appended to — ``dictionary.link_table``, de-duplicated against
   every link already there. Index 0 stays the zero sentinel (16 + 8 zero bytes); it is inserted when the table is
   empty. A span-only link gets an empty ``trace_id`` (Pyroscope writes a ``trace_id`` label only for 16 bytes).
4. The consumed attributes are removed from the sample's ``attribute_indices``: the winning pair's span and trace
   attributes, and any other configured link attribute that repeats the same id (``profile_id`` next to ``span_id``)
   — so Pyroscope does not label the sample twice. Other attributes keep their order.
5. A sample whose link attributes are all invalid is left exactly as it was and counted as ``invalid``.

Dictionary indices that point outside their table (a sample's attribute index or link index, an attribute's key
string index) reject the whole request with ``InvalidArgument`` naming the index; the caller forwards nothing.

Speed: the attribute table is shared by all samples, so decisions are made once per distinct attribute index and
once per distinct attribute-index tuple; the per-sample work is a tuple read, one dict lookup and, for linked
samples, two field writes. ``bench/link.py`` measures it against a plain parse + serialise.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as ppb

from bridge.errors import InvalidArgument

SPAN_ID_BYTES: Final = 8
TRACE_ID_BYTES: Final = 16
ZERO_TRACE: Final = bytes(TRACE_ID_BYTES)
ZERO_SPAN: Final = bytes(SPAN_ID_BYTES)

LinkKeys = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class LinkStats:
    """What linking did to one request."""

    samples: int = 0
    linked: int = 0  # samples given a link_index here
    invalid: int = 0  # samples with link attributes, none of them a valid id: left unlinked
    already_linked: int = 0  # samples that arrived with a non-zero link_index
    links_added: int = 0  # entries appended to link_table (sentinel not counted)

    def partial_success_message(self) -> str:
        """The OTLP partial-success ``error_message`` (empty when every id was valid)."""
        if not self.invalid:
            return ""
        noun = "sample has" if self.invalid == 1 else "samples have"
        return (
            f"{self.invalid} {noun} invalid trace or span ids in their link attributes and "
            f"{'was' if self.invalid == 1 else 'were'} left unlinked"
        )


# --------------------------------------------------------------------------------------------- id parsing (pure)


def parse_id(value: common_pb2.AnyValue, size: int) -> bytes | None:
    """An attribute value → raw id bytes of ``size`` bytes, or None when it is not a valid id.

    Strings must be exactly ``2 * size`` hex characters (either case); bytes values may be the raw id (``size``
    bytes) or its hex text. All-zero ids are invalid (OTLP's "no id")."""
    kind = value.WhichOneof("value")
    raw: bytes | None
    if kind == "string_value":
        raw = _unhex(value.string_value.encode("ascii", "replace"), size)
    elif kind == "bytes_value":
        data = value.bytes_value
        raw = data if len(data) == size else _unhex(data, size)
    else:
        raw = None
    if raw is None or not any(raw):
        return None
    return raw


def _unhex(text: bytes, size: int) -> bytes | None:
    if len(text) != 2 * size:
        return None
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        return None


# --------------------------------------------------------------------------------------------- range errors
# (worded here for both paths: this module and the native one of bridge/otlp/fastlink.py)


def attribute_index_error(index: int, n_attrs: int) -> InvalidArgument:
    return InvalidArgument(
        f"a sample refers to attribute_table index {index}, out of range "
        f"(the dictionary's attribute_table has {n_attrs} entries)"
    )


def key_strindex_error(index: int, key: int, n_strings: int) -> InvalidArgument:
    return InvalidArgument(
        f"attribute_table[{index}].key_strindex {key} is out of range "
        f"(the dictionary's string_table has {n_strings} entries)"
    )


def link_index_error(link_index: int, n_links: int) -> InvalidArgument:
    return InvalidArgument(
        f"a sample has link_index {link_index}, out of range (the dictionary's link_table has {n_links} entries)"
    )


# --------------------------------------------------------------------------------------------- the decision tables


# role of one attribute entry: (pair number, is span key, parsed id or None)
_Role = tuple[int, bool, bytes | None]
# what to do with one distinct attribute-index tuple: None = leave alone; _INVALID; or (new indices, link index)
_Decision = tuple[tuple[int, ...], int] | None
_INVALID: Final = ((), -1)
_UNSEEN: Final = ((), -2)


class _Linker:
    """Decisions for one request's dictionary: per attribute index, then per attribute-index tuple."""

    def __init__(self, dictionary: ppb.ProfilesDictionary, link_keys: LinkKeys) -> None:
        self.dictionary = dictionary
        self.strings = dictionary.string_table
        self.attrs = dictionary.attribute_table
        self.n_attrs = len(self.attrs)
        self.n_strings = len(self.strings)
        self.n_pairs = len(link_keys)
        wanted: dict[str, list[tuple[int, bool]]] = {}
        for pair, (trace_key, span_key) in enumerate(link_keys):
            wanted.setdefault(span_key, []).append((pair, True))
            if trace_key:
                wanted.setdefault(trace_key, []).append((pair, False))
        # string index → roles its key plays; only strings that are configured keys appear
        self.key_roles: dict[int, list[tuple[int, bool]]] = {
            i: wanted[s] for i, s in enumerate(self.strings) if s in wanted
        }
        self.has_keys = bool(self.key_roles)
        self.roles: dict[int, tuple[_Role, ...]] = {}
        self.decisions: dict[tuple[int, ...], _Decision] = {}
        links = dictionary.link_table
        self.n_links_in = len(links)
        self.link_of: dict[tuple[bytes, bytes], int] = {}
        for i, link in enumerate(links):
            if i == 0:
                continue
            self.link_of.setdefault((_trace_key(link.trace_id), link.span_id), i)
        self.links_added = 0

    def roles_of(self, index: int) -> tuple[_Role, ...]:
        roles = self.roles.get(index)
        if roles is None:
            if not 0 <= index < self.n_attrs:
                raise attribute_index_error(index, self.n_attrs)
            kv = self.attrs[index]
            key = kv.key_strindex
            if not 0 <= key < self.n_strings:
                raise key_strindex_error(index, key, self.n_strings)
            found = self.key_roles.get(key)
            if found:
                roles = tuple(
                    (pair, is_span, parse_id(kv.value, SPAN_ID_BYTES if is_span else TRACE_ID_BYTES))
                    for pair, is_span in found
                )
            else:
                roles = ()
            self.roles[index] = roles
        return roles

    def decide(self, indices: tuple[int, ...]) -> _Decision:
        """The fate of every sample carrying exactly these attribute indices."""
        roles = self.roles
        hits: list[tuple[int, _Role]] = []  # (position in the sample, role of the attribute there)
        single = True  # every link attribute plays exactly one role (the usual case)
        for pos, index in enumerate(indices):
            found = roles.get(index)
            if found is None:
                found = self.roles_of(index)
            if found:
                single = single and len(found) == 1
                for role in found:
                    hits.append((pos, role))
        if not hits:
            return None
        if single and len(hits) <= 2:
            fast = self._decide_simple(indices, hits)
            if fast is not None:
                return fast
        return self._decide_general(indices, hits)

    def _decide_simple(self, indices: tuple[int, ...], hits: list[tuple[int, _Role]]) -> _Decision:
        """One valid span attribute, optionally with one valid trace attribute of the same pair; None otherwise
        (the general rules decide)."""
        if len(hits) == 1:
            pos, (_, is_span, span_id) = hits[0]
            if not is_span or span_id is None:
                return None
            return indices[:pos] + indices[pos + 1 :], self.link_index(b"", span_id)
        (p1, (pair1, span1, id1)), (p2, (pair2, span2, id2)) = hits
        if pair1 != pair2 or span1 == span2 or id1 is None or id2 is None:
            return None
        span_id, trace_id = (id1, id2) if span1 else (id2, id1)
        return indices[:p1] + indices[p1 + 1 : p2] + indices[p2 + 1 :], self.link_index(trace_id, span_id)

    def _decide_general(self, indices: tuple[int, ...], hits: list[tuple[int, _Role]]) -> _Decision:
        chosen: tuple[bytes, bytes] | None = None
        for pair in sorted({role[0] for _, role in hits}):
            span: bytes | None = None
            trace: bytes | None = None
            trace_seen = False
            for _, (p, is_span, value) in hits:
                if p != pair:
                    continue
                if is_span:
                    if span is None:
                        span = value
                else:
                    trace_seen = True
                    if trace is None:
                        trace = value
            if span is None or (trace_seen and trace is None):
                continue  # no valid span id, or a trace attribute that is not a valid trace id
            chosen = (trace or b"", span)
            break
        if chosen is None:
            return _INVALID if any(role[1] for _, role in hits) else None
        trace_id, span_id = chosen
        consumed = {
            pos
            for pos, (_, is_span, value) in hits
            if value is not None and value == (span_id if is_span else trace_id)
        }
        kept = tuple(index for pos, index in enumerate(indices) if pos not in consumed)
        return kept, self.link_index(trace_id, span_id)

    def link_index(self, trace: bytes, span: bytes) -> int:
        key = (trace, span)
        found = self.link_of.get(key)
        if found is None:
            links = self.dictionary.link_table
            if not links:
                links.add(trace_id=ZERO_TRACE, span_id=ZERO_SPAN)
            found = len(links)
            links.add(trace_id=trace, span_id=span)
            self.link_of[key] = found
            self.links_added += 1
        return found


def _trace_key(trace_id: bytes) -> bytes:
    """Existing links that carry an all-zero trace id mean "span only", like our empty one."""
    return trace_id if any(trace_id) else b""


# --------------------------------------------------------------------------------------------- the entry point


def link_request(req: svc.ExportProfilesServiceRequest, link_keys: LinkKeys) -> LinkStats:
    """Link ``req`` in place (see the module docstring). Raises ``InvalidArgument`` for out-of-range indices; the
    request must then be dropped (it may be half-modified)."""
    linker = _Linker(req.dictionary, link_keys)
    n_links_in = linker.n_links_in
    decide = linker.decide
    decisions = linker.decisions
    get = decisions.get
    samples = linked = invalid = already = 0
    for resource in req.resource_profiles:
        for scope in resource.scope_profiles:
            for profile in scope.profiles:
                profile_samples = profile.samples
                samples += len(profile_samples)
                for sample in profile_samples:
                    li = sample.link_index
                    if li:
                        if not 0 < li < n_links_in:
                            raise link_index_error(li, n_links_in)
                        already += 1
                        continue
                    attrs = sample.attribute_indices
                    key = tuple(attrs)
                    decision = get(key, _UNSEEN)
                    if decision is _UNSEEN:
                        decision = decisions[key] = decide(key) if linker.has_keys else _check_only(linker, key)
                    if decision is None:
                        continue
                    if decision is _INVALID:
                        invalid += 1
                        continue
                    kept, link = decision
                    attrs[:] = kept
                    sample.link_index = link
                    linked += 1
    return LinkStats(samples, linked, invalid, already, linker.links_added)


def _check_only(linker: _Linker, indices: tuple[int, ...]) -> _Decision:
    """No configured key is in the string table: nothing to link, but indices are still range-checked."""
    for index in indices:
        if not 0 <= index < linker.n_attrs:
            linker.roles_of(index)  # raises
    return None
