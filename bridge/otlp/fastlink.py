"""Linking on the wire: an ``ExportProfilesServiceRequest``'s bytes in, linked bytes out.

The link gateway receives protobuf bytes and forwards protobuf bytes, so it can link without building and
re-serialising 100,000 sample messages in Python. Two implementations, same results (``tests/otlp/test_fastlink.py``):

- ``native``: the optional C extension ``bridge.otlp._fastlink`` (built by ``setup.py`` when a C compiler is
  there) walks the serialized samples, decides once per distinct attribute-indices payload with link.py's rules
  (ported; link.py stays the reference), rewrites the linked samples and appends the new links to the dictionary.
  Every other byte is kept as it came, unknown fields included.
- ``python``: parse, ``link.link_request``, serialise.

``IMPLEMENTATION`` says which one runs ("native" or "python"). The caller parses the request first (to reject a
malformed body with its own message) and hands its dictionary in; ``link_wire`` never modifies it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.profiles.v1development import profiles_pb2 as ppb

from bridge.errors import InvalidArgument
from bridge.otlp.link import (
    LinkKeys,
    LinkStats,
    _Linker,
    attribute_index_error,
    key_strindex_error,
    link_index_error,
    link_request,
)

_native: ModuleType | None
try:
    _native = importlib.import_module("bridge.otlp._fastlink")
except ImportError:  # not built (no C compiler where the package was installed): the pure path runs
    _native = None

NATIVE: Final = _native is not None
IMPLEMENTATION: Final = "native" if NATIVE else "python"


def link_wire(data: bytes, dictionary: ppb.ProfilesDictionary, link_keys: LinkKeys) -> tuple[bytes, LinkStats]:
    """Link the serialized request ``data`` whose parsed dictionary is ``dictionary``; the linked bytes and what
    linking did. Raises ``InvalidArgument`` for out-of-range indices (nothing should be forwarded then)."""
    if _native is None:
        return link_wire_python(data, link_keys)
    return link_wire_native(data, dictionary, link_keys)


def link_wire_python(data: bytes, link_keys: LinkKeys) -> tuple[bytes, LinkStats]:
    """The reference: parse, link the message, serialise."""
    req = svc.ExportProfilesServiceRequest.FromString(data)
    stats = link_request(req, link_keys)
    return req.SerializeToString(), stats


def link_wire_native(data: bytes, dictionary: ppb.ProfilesDictionary, link_keys: LinkKeys) -> tuple[bytes, LinkStats]:
    """The C path (``NATIVE`` must be true)."""
    if _native is None:
        raise RuntimeError("bridge.otlp._fastlink is not built")
    if not isinstance(data, bytes):  # the extension takes bytes exactly
        data = bytes(data)
    linker = _Linker(dictionary, link_keys)
    tables = (linker.key_roles, linker.has_keys, linker.link_of, linker.n_links_in)
    try:
        # the request's own dictionary bytes serve when it has one dictionary record; else the merged form
        result = _native.link(data, None, *tables)
        if result is None:
            result = _native.link(data, dictionary.SerializeToString(), *tables)
        out, samples, linked, invalid, already, added = result
    except _native.OutOfRange as exc:
        raise _range_error(exc.args) from exc
    except ValueError as exc:  # bytes the protobuf parser accepted never get here; kept for callers that skip it
        raise InvalidArgument(f"request is not a valid ExportProfilesServiceRequest protobuf message ({exc})") from exc
    return out, LinkStats(samples, linked, invalid, already, added)


def _range_error(args: tuple[object, ...]) -> InvalidArgument:
    kind, *numbers = args
    values = [int(n) for n in numbers if isinstance(n, int)]
    if kind == "attribute" and len(values) == 2:
        return attribute_index_error(*values)
    if kind == "key_strindex" and len(values) == 3:
        return key_strindex_error(*values)
    if kind == "link" and len(values) == 2:
        return link_index_error(*values)
    raise RuntimeError(f"unexpected OutOfRange{args!r} from bridge.otlp._fastlink")
