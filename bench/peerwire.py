"""How ``bench/differential.py`` reads the two sides' answers so that equal data compares equal: every normaliser
turns one peer's wire answer (Tempo's JSON, Pyroscope's Connect JSON) into plain sorted values, keeping what a client
reads (ids, names, values, labels, stacks) and dropping what may differ between two correct servers (inspected bytes,
timings, list order where the API does not promise one). Written for the checker, not taken from the bridge: the
bridge's own decoders are what is being checked.

Pyroscope's flame graph (``querier.v1.FlameGraph``): ``levels[d].values`` is a flat list of quadruples
``[x offset, total, self, name index]`` whose x offset is relative to the end of the previous node of the same level
(grafana/pyroscope ``pkg/model/flamegraph.go``); a node's parent is the node of the level above whose span covers
its x. ``FlameGraphDiff`` has septuples: left offset/total/self, right offset/total/self, name.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

Json = Any


def loads(body: bytes) -> Json:
    try:
        return json.loads(body)
    except ValueError:
        return {"_text": body[:300].decode(errors="replace")}


def hexid(value: str) -> str:
    """A Tempo JSON id (hex, or base64 as OTLP JSON writes it) as lowercase hex without leading zero padding lost."""
    if not value:
        return ""
    if all(c in "0123456789abcdefABCDEF" for c in value) and len(value) in (16, 32):
        return value.lower()
    try:
        return base64.b64decode(value).hex()
    except ValueError:
        return value


def any_value(v: Mapping[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return tuple(any_value(x) for x in v["arrayValue"].get("values", []))
    return json.dumps(v, sort_keys=True)


def attrs(items: list[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: any_value(a.get("value", {})) for a in items or []}


def trace_spans(doc: Json) -> dict[str, dict[str, Any]]:
    """A trace by ID (``/api/traces`` ``batches`` or ``resourceSpans``, ``/api/v2/traces`` under ``trace``):
    span id -> what the trace view reads."""
    doc = doc.get("trace", doc) if isinstance(doc, dict) else {}
    out: dict[str, dict[str, Any]] = {}
    for rs in doc.get("batches", doc.get("resourceSpans", [])):
        resource = attrs(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])):
            for s in ss.get("spans", []):
                out[hexid(s["spanId"])] = {
                    "trace": hexid(s.get("traceId", "")),
                    "parent": hexid(s.get("parentSpanId", "")),
                    "name": s.get("name"),
                    "kind": s.get("kind"),
                    "start": int(s.get("startTimeUnixNano", 0)),
                    "end": int(s.get("endTimeUnixNano", 0)),
                    "attributes": attrs(s.get("attributes")),
                    "status": s.get("status", {}),
                    "events": [(e.get("name"), int(e.get("timeUnixNano", 0))) for e in s.get("events", [])],
                    "links": [(hexid(x.get("traceId", "")), hexid(x.get("spanId", ""))) for x in s.get("links", [])],
                    "resource": resource,
                    "scope": (ss.get("scope", {}).get("name"), ss.get("scope", {}).get("version")),
                }
    return out


def trace_spans_unenriched(doc: Json) -> dict[str, dict[str, Any]]:
    """``trace_spans`` without the ``pyroscope.profile.id`` attribute a bridge in proxy mode adds."""
    spans = trace_spans(doc)
    for span in spans.values():
        span["attributes"].pop("pyroscope.profile.id", None)
    return spans


def search(doc: Json) -> dict[str, Any]:
    """``/api/search``: trace id -> root service/name, start, duration, and the matched spans of each span set."""
    out: dict[str, Any] = {}
    for t in doc.get("traces", []) if isinstance(doc, dict) else []:
        sets = t.get("spanSets") or ([t["spanSet"]] if t.get("spanSet") else [])
        out[hexid(t["traceID"].rjust(32, "0"))] = {
            "rootServiceName": t.get("rootServiceName"),
            "rootTraceName": t.get("rootTraceName"),
            "start": int(t.get("startTimeUnixNano", 0)),
            "durationMs": t.get("durationMs"),
            "spanSets": sorted(
                (
                    s.get("matched"),
                    tuple(sorted(hexid(sp["spanID"].rjust(16, "0")) for sp in s.get("spans", []))),
                    tuple(sorted(a["key"] for a in s.get("attributes", []))),
                )
                for s in sets
            ),
        }
    return out


def tags(doc: Json) -> Any:
    """``/api/search/tags`` (``tagNames``) and ``/api/v2/search/tags`` (``scopes[{name, tags}]``)."""
    if "scopes" in doc:
        return {s["name"]: sorted(s.get("tags", [])) for s in doc["scopes"]}
    return sorted(doc.get("tagNames", []))


def tag_values(doc: Json) -> Any:
    if "tagValues" in doc and doc["tagValues"] and isinstance(doc["tagValues"][0], dict):
        return sorted((v.get("type"), v.get("value", "")) for v in doc["tagValues"])  # JSON omits ""
    return sorted(doc.get("tagValues", []))


def _label_value(v: Mapping[str, Any]) -> str:
    """A series label's AnyValue as text; a double by its value (JSON's ``0`` and ``0.0`` are one number)."""
    if "doubleValue" in v:
        return f"double {float(v['doubleValue'])!r}"
    return json.dumps(v, sort_keys=True)


def metrics(doc: Json) -> list[tuple[tuple[Any, ...], list[tuple[int, float]]]]:
    """``/api/metrics/query_range`` and ``/query``: (labels, samples (``timestampMs``, value) rounded), sorted."""
    out: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
    for s in doc.get("series", []) if isinstance(doc, dict) else []:
        labels = tuple(sorted((lb["key"], _label_value(lb.get("value", {}))) for lb in s["labels"]))
        samples = [(int(p.get("timestampMs", 0)), round(float(p.get("value", 0)), 6)) for p in s.get("samples", [])]
        if "value" in s:  # instant query
            samples = [(0, round(float(s["value"]), 6))]
        out[labels] = sorted(samples)
    return sorted(out.items())


def flame_stacks(fg: Json) -> dict[tuple[str, ...], int]:
    """A Connect JSON ``FlameGraph``: self value per stack (root first)."""
    names = fg.get("names", [])
    stacks: dict[tuple[str, ...], int] = {}
    above: list[tuple[int, int, tuple[str, ...]]] = []  # (x, total, stack) of the previous level
    for level in fg.get("levels", []):
        vals = [int(v) for v in level.get("values", [])]
        here: list[tuple[int, int, tuple[str, ...]]] = []
        x = 0
        for i in range(0, len(vals), 4):
            x += vals[i]
            total, self_, name = vals[i + 1], vals[i + 2], names[vals[i + 3]]
            parent = next((s for px, pt, s in above if px <= x < px + max(pt, 1)), ())
            stack = (*parent, name)
            here.append((x, total, stack))
            if self_:
                stacks[stack] = stacks.get(stack, 0) + self_
            x += total
        above = here
    return stacks


def diff_stacks(fg: Json) -> dict[tuple[str, ...], tuple[int, int]]:
    """A Connect JSON ``FlameGraphDiff``: (left self, right self) per stack."""
    names = fg.get("names", [])
    stacks: dict[tuple[str, ...], tuple[int, int]] = {}
    above: list[tuple[int, int, tuple[str, ...]]] = []
    for level in fg.get("levels", []):
        vals = [int(v) for v in level.get("values", [])]
        here: list[tuple[int, int, tuple[str, ...]]] = []
        x = 0
        for i in range(0, len(vals), 7):
            x += vals[i]
            total = vals[i + 1]
            parent = next((s for px, pt, s in above if px <= x < px + max(pt, 1)), ())
            stack = (*parent, names[vals[i + 6]])
            here.append((x, total, stack))
            if vals[i + 2] or vals[i + 5]:
                stacks[stack] = (vals[i + 2], vals[i + 5])
            x += total
        above = here
    return stacks


def flame_answer(doc: Json) -> Any:
    """``SelectMergeStacktraces`` / ``SelectMergeSpanProfile``: the stacks and the total."""
    fg = doc.get("flamegraph", {}) if isinstance(doc, dict) else {}
    return {"total": int(fg.get("total", 0)), "stacks": sorted(flame_stacks(fg).items())}


def diff_answer(doc: Json) -> Any:
    fg = doc.get("flamegraph", {}) if isinstance(doc, dict) else {}
    return {
        "leftTicks": int(fg.get("leftTicks", 0)),
        "rightTicks": int(fg.get("rightTicks", 0)),
        "stacks": sorted(diff_stacks(fg).items()),
    }


def series(doc: Json) -> Any:
    """``SelectSeries`` / ``SelectHeatmap``: labels -> points (and exemplars' span ids and values). A profile id is
    each store's own name for a profile (Pyroscope's a UUID it draws at ingest): compared by its presence only."""
    out = {}
    for s in doc.get("series", []) if isinstance(doc, dict) else []:
        labels = tuple(sorted((lb["name"], lb["value"]) for lb in s.get("labels", [])))
        points = []
        for p in s.get("points", []) + s.get("slots", []):
            ex = sorted(
                (e.get("spanId", ""), bool(e.get("profileId")), int(e.get("value", 0))) for e in p.get("exemplars", [])
            )
            points.append((int(p.get("timestamp", 0)), p.get("value", p.get("counts")), ex))
        out[labels] = sorted(points, key=lambda p: p[0])
    return sorted(out.items())


def heatmap_values(doc: Json) -> Any:
    """``SelectHeatmap`` with span exemplars: as ``series``, the exemplars by value alone — which of the spans tied
    at a cell's largest value names it is Pyroscope's order among equals, not reproduced (docs/peers.md)."""
    return [
        (labels, [(ts, counts, sorted(v for _, _, v in ex)) for ts, counts, ex in points])
        for labels, points in series(doc)
    ]


def flame_below_root(doc: Json) -> Any:
    """``flame_answer`` without the root frame's name: a bridge names the root bar after how it answered a span."""
    answer = flame_answer(doc)
    return {"total": answer["total"], "stacks": sorted((tuple(s[1:]), v) for s, v in answer["stacks"])}


def profile_types(doc: Json) -> Any:
    return sorted(t["ID"] for t in doc.get("profileTypes", []))


def names(doc: Json) -> Any:
    return sorted(doc.get("names", []))


def label_sets(doc: Json) -> Any:
    return sorted(
        tuple(sorted((lb["name"], lb["value"]) for lb in s.get("labels", []))) for s in doc.get("labelsSet", [])
    )


def flamebearer(doc: Json) -> Any:
    """``/pyroscope/render`` (Flamebearer JSON): stacks from ``levels`` (pairs of x offset, total, self, name — the
    offset relative like the flame graph's), the metadata a client reads, and the timeline's length."""
    fb = doc.get("flamebearer", {}) if isinstance(doc, dict) else {}
    fg = {"names": fb.get("names", []), "levels": [{"values": lv} for lv in fb.get("levels", [])]}
    meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
    timeline = doc.get("timeline") or {}
    return {
        "numTicks": fb.get("numTicks"),
        "maxSelf": fb.get("maxSelf"),
        "stacks": sorted(flame_stacks(fg).items()),
        "metadata": {k: meta.get(k) for k in ("format", "spyName", "sampleRate", "units", "name")},
        "timeline": (timeline.get("startTime"), timeline.get("durationDelta"), sum(timeline.get("samples", []))),
    }


def flamebearer_diff(doc: Json) -> Any:
    """``/pyroscope/render-diff``: (left self, right self) per stack from the septuple levels, the ticks, the
    metadata a client reads."""
    fb = doc.get("flamebearer", {}) if isinstance(doc, dict) else {}
    fg = {"names": fb.get("names", []), "levels": [{"values": lv} for lv in fb.get("levels", [])]}
    meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
    return {
        "numTicks": fb.get("numTicks"),
        "maxSelf": fb.get("maxSelf"),
        "leftTicks": doc.get("leftTicks") if isinstance(doc, dict) else None,
        "rightTicks": doc.get("rightTicks") if isinstance(doc, dict) else None,
        "stacks": sorted(diff_stacks(fg).items()),
        "metadata": {k: meta.get(k) for k in ("format", "spyName", "sampleRate", "units", "name")},
    }


def connect_error(doc: Json) -> Any:
    """What a failed answer says: a Connect error's code and message, a text body (Tempo's ``http.Error``) its
    text — compared to the letter, as a client shows them."""
    if not isinstance(doc, dict):
        return None
    if "_text" in doc:
        return doc["_text"].strip()
    return (doc.get("code"), doc.get("message"))


def raw(doc: Json) -> Any:
    return doc


def status_only(doc: Json) -> Any:
    """For answers compared by status alone (a failing section of the corpus, a sampled metrics query)."""
    return None
