"""Pure: search answers in Tempo's protobuf (``pkg/tempopb/tempo.proto`` ``SearchResponse``), from the same
documents the JSON answers are (gogo jsonpb's JSON: int64 as strings, zero values left out), and an instant metrics
answer from a range answer (``translateQueryRangeToInstant``: each series' first sample). Metrics answer JSON only over
HTTP, as Tempo's frontend does.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.common.v1 import common_pb2

from bridge._proto import tempo_pb2


def _key_value(doc: dict[str, Any]) -> bytes:
    kv = common_pb2.KeyValue()
    json_format.ParseDict(doc, kv)
    return kv.SerializeToString()


def _metrics(doc: dict[str, Any]) -> tempo_pb2.SearchMetrics:
    m = tempo_pb2.SearchMetrics()
    for key, value in doc.items():
        if key == "additionalMetrics":
            for k, v in value.items():
                m.additionalMetrics[k] = int(v)
        else:
            setattr(m, key, int(value))
    return m


def _span(doc: dict[str, Any]) -> tempo_pb2.Span:
    return tempo_pb2.Span(
        spanID=doc["spanID"],
        name=doc.get("name", ""),
        startTimeUnixNano=int(doc["startTimeUnixNano"]),
        durationNanos=int(doc["durationNanos"]),
        attributes=[_key_value(a) for a in doc.get("attributes", [])],
    )


def _spanset(doc: dict[str, Any]) -> tempo_pb2.SpanSet:
    return tempo_pb2.SpanSet(
        spans=[_span(s) for s in doc["spans"]],
        matched=doc.get("matched", 0),
        attributes=[_key_value(a) for a in doc.get("attributes", [])],
    )


def search_protobuf(doc: dict[str, Any]) -> bytes:
    out = tempo_pb2.SearchResponse(metrics=_metrics(doc.get("metrics", {})))
    for t in doc.get("traces", []):
        meta = out.traces.add(
            traceID=t["traceID"],
            rootServiceName=t.get("rootServiceName", ""),
            rootTraceName=t.get("rootTraceName", ""),
            startTimeUnixNano=int(t.get("startTimeUnixNano", 0)),
            durationMs=t.get("durationMs", 0),
        )
        sets = [_spanset(s) for s in t.get("spanSets", [])]
        meta.spanSets.extend(sets)
        if sets:
            meta.spanSet.CopyFrom(sets[0])
        for svc, stats in t.get("serviceStats", {}).items():
            meta.serviceStats[svc].spanCount = stats.get("spanCount", 0)
            meta.serviceStats[svc].errorCount = stats.get("errorCount", 0)
    return out.SerializeToString()


def instant_json(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    series = [
        {"labels": s["labels"], **({"value": s["samples"][0]["value"]} if "value" in s["samples"][0] else {})}
        for s in doc.get("series", [])
        if s.get("samples")
    ]
    if series:
        out["series"] = series
    out["metrics"] = doc.get("metrics", {})
    for key in ("status", "message"):
        if key in doc:
            out[key] = doc[key]
    return out
