"""Pure: Pyroscope's span-capable RPCs at the ``/pyroscope`` mount — which requests the resolver answers, what every
other one looks like when it goes on, and the answer Grafana gets.

The span-capable RPCs are those whose request carries a ``span_selector`` (``bridge.wire.pyroscope.SPAN_RPCS``:
``SelectMergeSpanProfile``, ``SelectMergeStacktraces``, ``Diff``'s left and right). For each request:

- **Resolved** when every side that carries a span selector asks for what the resolver answers — a flame graph of
  the spans in a time range, under a label selector, at most ``max_nodes`` — and nothing else: no stack-trace,
  profile-id or trace-id selector, no async query, no field or enum value the bridge's .proto does not know (an
  unknown ``format`` such as a newer Pyroscope's is not "flame graph", whatever a decoder would default it to). A
  ``Diff`` with a span side is resolved side by side: the span sides by the resolver, the plain sides by the profile
  backend, the two trees diffed as Pyroscope does (``bridge.flamediff``).
- **Passed on as it came**, byte for byte (gzip included), when it carries nothing to change: decoded to look, never
  re-encoded.
- **Passed on changed** when its span selector holds what Pyroscope refuses (``pkg/model/profile.go``
  ``NewSpanSelector``: every entry exactly 16 hex characters): the carried ``<span id>:<trace id>`` form the Tempo
  mount writes (``bridge.ids``) is cut back to the span id, junk entries are dropped (``resolve.clean_span_ids``).
  Everything else survives: protobuf through upb, which keeps unknown fields and unknown enum numbers when it
  re-encodes; JSON by editing the document itself, never through a message (``json_format`` has no room for a
  field or an enum name our .proto lacks).

Requests in other codecs (gRPC, gRPC-Web) are streamed untouched by the mount: the bridge cannot read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from bridge import flamediff, flamegraph
from bridge._proto import querier_pb2 as qpb
from bridge.connect import Codec, decode_document, decode_message, encode_document, strict_message
from bridge.errors import InvalidArgument
from bridge.limits import time_range_problem
from bridge.resolution import Resolution, SpanQuery, Step, carried_traces, clean_span_ids, measure_of
from bridge.sampling import sampling_text
from bridge.units import format_duration_ns
from bridge.wire.pyroscope import DEFAULT_MAX_NODES, FLAMEGRAPH_FORMATS, SPAN_RPCS, SPAN_SELECTOR_FIELD, TOP

_JSON_KEYS: Final = ("spanSelector", SPAN_SELECTOR_FIELD)  # protojson accepts the JSON name and the proto name


@dataclass(frozen=True, slots=True)
class SpanCall:
    """One span-capable request, read: the sides the resolver answers (``TOP``, or ``left`` / ``right`` of a
    ``Diff``), the request decoded, and the body to pass on when it had to change (None: as it came)."""

    method: str
    message: Message | None  # every field known to the bridge's .proto; None when a JSON document held more
    queries: dict[str, SpanQuery] = field(default_factory=dict)
    body: bytes | None = None


def read_span_call(method: str, data: bytes, codec: Codec) -> SpanCall:
    """Read a span-capable request (``method`` in ``SPAN_RPCS``; ``data`` without its Content-Encoding). Malformed
    bodies, bad time ranges and selectors without one valid span id → ``InvalidArgument``."""
    cls, places = SPAN_RPCS[method]
    if codec is Codec.PROTO:
        msg: Message | None = decode_message(data, codec, cls)
        doc: dict[str, Any] | None = None
    else:
        doc = decode_document(data, cls)
        if method != "SelectMergeSpanProfile" and not any(_selector_keys(_side_document(doc, p)) for p in places):
            return SpanCall(method, None)  # no span selector anywhere: passed on as it came, never parsed further
        msg = strict_message(doc, cls)
    queries = _queries(method, msg, places) if msg is not None else {}
    if queries:
        return SpanCall(method, msg, queries)
    if doc is not None:
        changed = any([_clean_document(method, _side_document(doc, place)) for place in places])
        return SpanCall(method, msg, body=encode_document(doc) if changed else None)
    assert msg is not None
    changed = any([_clean_message(method, _side(msg, place)) for place in places])
    return SpanCall(method, msg, body=msg.SerializeToString() if changed else None)


def carried_trace(call: SpanCall) -> str | None:
    """The trace the first span of a resolved request carries (``<span id>:<trace id>``), if any."""
    for query in call.queries.values():
        for trace_id in carried_traces(query.span_ids).values():
            return trace_id
    return None


def _side(msg: Message, place: str) -> Message | None:
    if place == TOP:
        return msg
    return getattr(msg, place) if msg.HasField(place) else None


def _side_document(doc: dict[str, Any], place: str) -> dict[str, Any] | None:
    if place == TOP:
        return doc
    for key in (_json_name(place), place):
        side = doc.get(key)
        if isinstance(side, dict):
            return side
    return None


def _selector_keys(side: dict[str, Any] | None) -> bool:
    """Whether a JSON side names a non-empty span selector."""
    return side is not None and any(side.get(key) for key in _JSON_KEYS)


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _queries(method: str, msg: Message, places: tuple[str, ...]) -> dict[str, SpanQuery]:
    """The sides to resolve: every side with a span selector, when each of them can be; else none."""
    out: dict[str, SpanQuery] = {}
    for place in places:
        side = _side(msg, place)
        if side is None or not _selector_of(method, side):
            continue
        query = _query_of(side)
        if query is None:
            return {}
        clean_span_ids(query.span_ids)  # no valid id → InvalidArgument now, before any side asks anybody
        out[place] = query
    if out and method == "Diff":
        max_nodes = diff_max_nodes(msg)
        out = {place: _with_max_nodes(q, max_nodes) for place, q in out.items()}
    return out


def _selector_of(method: str, side: Message) -> list[str]:
    """The side's span selector; ``SelectMergeSpanProfile`` with none at all is refused (Pyroscope would answer the
    whole profile, unfiltered)."""
    entries = list(getattr(side, SPAN_SELECTOR_FIELD))
    if not entries:
        _refuse_empty(method)
    return entries


def _refuse_empty(method: str) -> None:
    if method == "SelectMergeSpanProfile":
        clean_span_ids(())  # raises InvalidArgument: "span selector is empty"


def _query_of(side: Message) -> SpanQuery | None:
    """The span query a side asks, when the resolver answers every part of it; None when it does not."""
    if not isinstance(side, qpb.SelectMergeStacktracesRequest | qpb.SelectMergeSpanProfileRequest):
        return None
    if len(unknown_fields.UnknownFieldSet(side)) or side.format not in FLAMEGRAPH_FORMATS:
        return None
    if isinstance(side, qpb.SelectMergeStacktracesRequest) and (
        side.HasField("stack_trace_selector")
        or side.HasField("async")
        or side.profile_id_selector
        or side.trace_id_selector
    ):
        return None
    problem = time_range_problem(side.start, side.end)
    if problem is not None:
        raise InvalidArgument(f"{side.DESCRIPTOR.name}: {problem}")
    return SpanQuery(
        span_ids=tuple(side.span_selector),
        profile_type=side.profile_typeID,
        label_selector=side.label_selector,
        start_ms=side.start,
        end_ms=side.end,
        max_nodes=side.max_nodes if side.HasField("max_nodes") and side.max_nodes > 0 else None,
    )


def _with_max_nodes(query: SpanQuery, max_nodes: int) -> SpanQuery:
    return SpanQuery(query.span_ids, query.profile_type, query.label_selector, query.start_ms, query.end_ms, max_nodes)


def _clean_message(method: str, side: Message | None) -> bool:
    """Cut ``side``'s span selector back to what Pyroscope accepts, in place; whether it changed."""
    if side is None:
        return False
    entries = _selector_of(method, side)
    if not entries:
        return False
    cleaned = list(clean_span_ids(entries))
    if cleaned == entries:
        return False
    selector = getattr(side, SPAN_SELECTOR_FIELD)
    del selector[:]
    selector.extend(cleaned)
    return True


def _clean_document(method: str, side: dict[str, Any] | None) -> bool:
    """The same for a JSON document's side, in the document itself. A selector that is not a list of strings is
    left as it came: Pyroscope says what is wrong with it."""
    if side is None:
        return False
    changed = False
    for key in _JSON_KEYS:
        entries = side.get(key)
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            continue
        if not entries:
            _refuse_empty(method)
            continue
        cleaned = list(clean_span_ids(entries))
        if cleaned != entries:
            side[key] = cleaned
            changed = True
    if not any(key in side for key in _JSON_KEYS):
        _refuse_empty(method)  # no selector at all, as in protobuf
    return changed


def diff_max_nodes(msg: Message) -> int:
    """A Diff's node limit as Pyroscope takes it: the larger of the two sides' ``max_nodes``, its default when
    neither sets one (``pkg/frontend/readpath/queryfrontend/query_diff.go``)."""
    assert isinstance(msg, qpb.DiffRequest)
    asked = max(msg.left.max_nodes, msg.right.max_nodes)
    return asked if asked > 0 else DEFAULT_MAX_NODES


def plain_side(side: qpb.SelectMergeStacktracesRequest, max_nodes: int) -> qpb.SelectMergeStacktracesRequest:
    """A Diff's side without a span selector, as the profile backend is asked for it: a flame graph (Pyroscope
    ignores each side's format in a Diff), everything else as sent — unknown fields included."""
    out = qpb.SelectMergeStacktracesRequest()
    out.CopyFrom(side)
    out.format = qpb.PROFILE_FORMAT_FLAMEGRAPH
    out.max_nodes = max_nodes
    return out


# --------------------------------------------------------------------------------------------- answers


def grafana_flamegraph(resolution: Resolution, profile_type: str) -> qpb.FlameGraph:
    """The flame graph Grafana gets; its root bar is all Grafana shows of how it was found and how sure it is.

    - Every answer with samples says what its total is and how many samples make it up, with the 95 % interval
      (``bridge.sampling``): "sampled on-GIL time linked to this span, 83 samples: 830 ms (95 %: 670 ms – 1.03 s)",
      and says when it is more than the span (or, for ``local-root``, its request) lasted beyond sampling noise.
    - A fallback (``local-root``, ``time-window``) says first what its total is — e.g. "shop-frontend CPU during the
      19 s window around this span, not this span's own" — then why.
    - A ``none`` answer would be one row, which span details do not draw at all: it becomes a one-unit placeholder of
      two rows whose bars say why there is nothing (the ``X-Profile-Bridge-Resolution: none`` header and the root's
      label say it is not data)."""
    if resolution.step is Step.NONE:
        return flamegraph.placeholder(
            flamegraph.root_label(f"none: {resolution.reason}"), f"no samples — {resolution.reason}"
        )
    measure = measure_of(resolution, profile_type)
    counted = sampling_text(resolution.sampling)
    flag = _wall_flag(resolution)
    if resolution.step is Step.LINKED:
        if resolution.sampling is None:
            return resolution.flamegraph
        return flamegraph.relabel_root(resolution.flamegraph, flamegraph.root_label(f"{measure.text}, {counted}{flag}"))
    text = f"{measure.text}; {counted}{flag}" if counted else measure.text
    return flamegraph.relabel_root(resolution.flamegraph, flamegraph.root_label(f"{text} — {resolution.reason}"))


def _wall_flag(resolution: Resolution) -> str:
    """``; more than the span lasted (62.9 ms), beyond sampling noise`` when it is (``Sampling.exceeds``): the span's
    wall time for ``linked`` (when the span was read), its request's for ``local-root``."""
    wall = resolution.span if resolution.step is Step.LINKED else None
    if resolution.step is Step.LOCAL_ROOT:
        wall = resolution.local_root
    if wall is None or resolution.sampling is None or not resolution.sampling.exceeds(wall.duration_ns):
        return ""
    what = "span" if resolution.step is Step.LINKED else "request"
    return f"; more than the {what} lasted ({format_duration_ns(wall.duration_ns)}), beyond sampling noise"


def answer_of(method: str, resolution: Resolution, profile_type: str) -> Message:
    fg = grafana_flamegraph(resolution, profile_type)
    if method == "SelectMergeSpanProfile":
        return qpb.SelectMergeSpanProfileResponse(flamegraph=fg)
    return qpb.SelectMergeStacktracesResponse(flamegraph=fg)


def diff_answer(left: flamegraph.Node, right: flamegraph.Node, max_nodes: int) -> qpb.DiffResponse:
    """The two sides' trees (a resolved side's samples as the resolver found them; ``none`` is no samples) as
    Pyroscope's diff flame graph."""
    return qpb.DiffResponse(flamegraph=flamediff.encode_diff(left, right, max_nodes))


def side_tree(resolution: Resolution) -> flamegraph.Node:
    """A resolved Diff side's tree: its samples, none for a ``none`` answer (its placeholder bars are words, not
    samples); the resolution's words travel in the answer's headers."""
    if resolution.step is Step.NONE:
        return flamegraph.Node(flamegraph.ROOT_NAME)
    return flamegraph.decode(resolution.flamegraph)


def diff_headers(headers: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The answer headers of a Diff with resolved sides: one side's own, or each value as ``left: …; right: …``."""
    if len(headers) == 1:
        return dict(next(iter(headers.values())))
    names = sorted({name for side in headers.values() for name in side})
    return {
        name: "; ".join(f"{place}: {side[name]}" for place, side in headers.items() if name in side) for name in names
    }
