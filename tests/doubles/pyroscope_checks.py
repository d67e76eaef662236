"""What the Pyroscope double checks as Pyroscope checks it, with Pyroscope's words (grafana/pyroscope 3fe6a457, and
that Pyroscope running: ``bench/differential.py``): span selectors (``pkg/model/profile.go`` ``NewSpanSelector``),
profile types (``ParseProfileTypeSelector``), the heatmap's query and exemplar types
(``pkg/querybackend/query_heatmap.go``), and how an error of the v2 query backend reaches the client."""

from __future__ import annotations

import json
from collections.abc import Iterable

from bridge._proto import querier_pb2, types_pb2
from bridge.errors import Code


def check_span_ids(ids: Iterable[str]) -> list[str]:
    """Pyroscope's ``NewSpanSelector``: each entry exactly 16 characters, then hex (Go's error for the first bad
    byte)."""
    out = []
    for sid in ids:
        if len(sid) != 16:
            raise BackendError("Unknown", f"invalid span id length: {json.dumps(sid)}")
        bad = next((c for c in sid if c not in "0123456789abcdefABCDEF"), None)
        if bad is not None:
            raise BackendError("Unknown", f"encoding/hex: invalid byte: U+{ord(bad):04X} {bad!r}")
        out.append(sid.lower())
    return out


class BackendError(Exception):
    """An error of v2's query backend as the query frontend relays it to the client (measured against
    grafana/pyroscope 3fe6a457): gRPC's ``rpc error: code = … desc = …`` as the message, Connect ``invalid_argument``
    for an InvalidArgument, ``unknown`` (HTTP 500) for anything else — an Unimplemented included. The backend only
    runs when the range holds data: with none the frontend answers empty first (``BackendError`` is never raised
    then, see ``PyroscopeDouble.holds_data``)."""

    def __init__(self, grpc_code: str, desc: str) -> None:
        super().__init__(desc)
        self.grpc_code, self.desc = grpc_code, desc

    @property
    def connect_code(self) -> Code:
        return Code.INVALID_ARGUMENT if self.grpc_code == "InvalidArgument" else Code.UNKNOWN

    @property
    def text(self) -> str:
        return f"rpc error: code = {self.grpc_code} desc = {self.desc}"


def check_profile_type(type_id: str) -> None:
    parts = type_id.split(":")
    if len(parts) not in (5, 6):
        raise ValueError(
            "profile-type selection must be of the form <name>:<sample-type>:<sample-unit>:<period-type>:"
            f"<period-unit>(:delta), got({len(parts)}): {json.dumps(type_id)}"
        )


def heatmap_exemplars(query_type: int, exemplar_type: int) -> bool:
    """``queryHeatmap``'s checks: whether the answer has exemplars; a mismatch is an error."""
    if query_type not in (querier_pb2.HEATMAP_QUERY_TYPE_INDIVIDUAL, querier_pb2.HEATMAP_QUERY_TYPE_SPAN):
        raise BackendError("Unknown", "valid heatmap query type must be specified")
    if exemplar_type in (types_pb2.EXEMPLAR_TYPE_UNSPECIFIED, types_pb2.EXEMPLAR_TYPE_NONE):
        return False
    if exemplar_type == types_pb2.EXEMPLAR_TYPE_INDIVIDUAL:
        if query_type != querier_pb2.HEATMAP_QUERY_TYPE_INDIVIDUAL:
            raise BackendError("Unknown", "individual exemplars only available for individual query type")
        return True
    if exemplar_type == types_pb2.EXEMPLAR_TYPE_SPAN:
        if query_type != querier_pb2.HEATMAP_QUERY_TYPE_SPAN:
            raise BackendError("Unknown", "span exemplars only available for span query type")
        return True
    raise BackendError("Unknown", f"unknown exemplar type: {exemplar_type}")
