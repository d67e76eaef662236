"""The questions ``bench/differential.py`` asks both sides, in groups, each with the normaliser that makes equal
answers compare equal (``bench/peerwire.py``).

- ``tempo.*``: trace by ID (v1 and v2), tags and tag values, search as Traces Drilldown sends it, Tempo's own TraceQL
  corpus (``pkg/traceql/test_examples.yaml``: ``valid`` queries compared by status and matches, the failing
  sections by status), TraceQL metrics (Traces Drilldown's queries, range and instant);
- ``pyroscope.*``: ``ProfileTypes``, labels and series, ``SelectMergeStacktraces``, ``SelectMergeSpanProfile``
  (good, unknown and malformed span ids), ``SelectSeries`` (with and without span exemplars), ``Diff``,
  ``SelectHeatmap``, ``GetProfileStats``, ``AnalyzeQuery``, the settings service, ``/pyroscope/render`` and
  ``render-diff``; a Connect error compares by its code, any other failure by status;
- ``proxy.*`` (with ``--proxy``): the pass-through of the same questions through a bridge in proxy mode against the
  peers directly; trace by ID enriched and otherwise unchanged; the span click in its four modes, each against the
  direct question that answers it (linked: the span's own ``SelectMergeSpanProfile``; local-root: its root's;
  time-window: the service's ``SelectMergeStacktraces`` over the widened window; none: nothing); function → spans
  against each root's own profile; compare against the span's linked total.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import quote, urlencode

import aiohttp
import peerwire as w
import yaml  # type: ignore[import-untyped]
from peerdata import HOT, DataSet

ROOT: Final = Path(__file__).resolve().parent.parent
CORPUS: Final = ROOT / "tests" / "fixtures" / "tempo" / "traceql" / "test_examples.yaml"
CPU: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
QUERIER: Final = "/querier.v1.QuerierService/"


class Sink(Protocol):
    def add(self, group: str, name: str, same: bool, request: str, real: Any, ours: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class Sides:
    tempo: str
    pyroscope: str
    bridge: str
    proxy: str


Norm = Callable[[Any], Any]


async def fetch(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON answer) — a Connect error is ``{"code": …}``, text is ``{"_text": …}``."""
    kwargs: dict[str, Any] = {"json": body} if body is not None else {}
    try:
        async with session.request(method, url, **kwargs) as resp:
            return resp.status, w.loads(await resp.read())
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 599, {"_error": type(exc).__name__}


def verdict(status: tuple[int, int], docs: tuple[Any, Any], norm: Norm) -> tuple[bool, Any, Any]:
    """Same when both succeed with equal normalised answers, or both fail alike (same Connect code, else status)."""
    (rs, os_), (rd, od) = status, docs
    if rs == 200 and os_ == 200:
        real, ours = norm(rd), norm(od)
        return real == ours, real, ours
    real_fail = (rs, w.connect_error(rd)) if rs != 200 else (rs, norm(rd))
    ours_fail = (os_, w.connect_error(od)) if os_ != 200 else (os_, norm(od))
    same = rs == os_ and real_fail[1] == ours_fail[1] if rs >= 400 and os_ >= 400 else False
    return same, {"status": rs, "answer": rd if rs != 200 else real_fail[1]}, {"status": os_, "answer": od}


class Asker:
    """Asks one question of the real peer and of a bridge mount, and reports the verdict."""

    def __init__(self, session: aiohttp.ClientSession, sides: Sides, report: Sink) -> None:
        self.session, self.sides, self.report = session, sides, report
        self.recorded: list[dict[str, Any]] = []  # the peers' own answers (``--record``): what tests replay

    def _record(self, group: str, name: str, peer: str, request: dict[str, Any], norm: Norm, real: Any) -> None:
        self.recorded.append(
            {"group": group, "name": name, "peer": peer, **request, "norm": norm.__name__, "status": real[0]}
            | {"answer": real[1]}
        )

    async def tempo(self, group: str, name: str, path: str, params: dict[str, str], norm: Norm, via: str = "") -> None:
        qs = f"?{urlencode(params)}" if params else ""
        real = await fetch(self.session, "GET", f"{self.sides.tempo}{path}{qs}")
        ours = await fetch(self.session, "GET", f"{via or self.sides.bridge}/tempo{path}{qs}")
        same, r, o = verdict((real[0], ours[0]), (real[1], ours[1]), norm)
        self.report.add(group, name, same, f"GET {path}{qs}", r, o)
        if not via:
            self._record(group, name, "tempo", {"path": path, "params": params}, norm, real)

    async def pyro(self, group: str, name: str, rpc: str, body: Any, norm: Norm, via: str = "") -> None:
        path = rpc if rpc.startswith("/") else QUERIER + rpc
        if body is None:  # a GET with its query in the path
            real = await fetch(self.session, "GET", f"{self.sides.pyroscope}{path}")
            ours = await fetch(self.session, "GET", f"{via or self.sides.bridge}/pyroscope{path}")
        else:
            real = await fetch(self.session, "POST", f"{self.sides.pyroscope}{path}", body)
            ours = await fetch(self.session, "POST", f"{via or self.sides.bridge}/pyroscope{path}", body)
        same, r, o = verdict((real[0], ours[0]), (real[1], ours[1]), norm)
        self.report.add(group, name, same, f"POST {path} {json.dumps(body)}" if body is not None else path, r, o)
        if not via:
            self._record(group, name, "pyroscope", {"path": path, "body": body}, norm, real)


# --------------------------------------------------------------------------------------------- Tempo


def _window(data: DataSet) -> dict[str, str]:
    return {"start": str(data.start_ns // 10**9), "end": str(data.end_ns // 10**9 + 60)}


DRILLDOWN_SEARCH: Final = (
    "{}",
    '{resource.service.name="shop-web"}',
    "{status=error}",
    "{nestedSetParent<0}",
    "{nestedSetParent<0 && true}",
    "{span.http.status_code>=500}",
    "{duration>200ms}",
    '{kind=server && resource.service.name="shop-api"}',
    '{name="SELECT prices"}',
    '{span.db.system="postgresql"}',
    '{event.exception.type="PriceError"}',
    '{link.link.kind="follows"}',
    '{resource.service.name="shop-web"} >> {resource.service.name="shop-api"}',
)

TAG_NAMES: Final = (
    ("/api/search/tags", {}),
    ("/api/search/tags", {"scope": "span"}),
    ("/api/search/tags", {"scope": "intrinsic"}),
    ("/api/v2/search/tags", {}),
    ("/api/v2/search/tags", {"scope": "none"}),
    ("/api/v2/search/tags", {"scope": "resource"}),
    ("/api/v2/search/tags", {"scope": "event"}),
    ("/api/v2/search/tags", {"scope": "link"}),
    ("/api/v2/search/tags", {"scope": "instrumentation"}),
    ("/api/v2/search/tags", {"scope": "intrinsic"}),
    ("/api/v2/search/tags", {"scope": "all"}),
    ("/api/v2/search/tags", {"scope": "bogus"}),
    ("/api/v2/search/tags", {"start": "soon"}),
)
# what Grafana's Tempo data source and Traces Drilldown ask for (scoped v2 names), intrinsics, every value type, errors
V2_TAG_VALUES: Final = (
    "resource.service.name", "span.http.route", "span.http.status_code", "span.cart.cached", "span.cart.total",
    "span.cart.items", "resource.host.cores", ".http.route", ".cart.items", "event.exception.type", "link.link.kind",
    "instrumentation.x", "span.nothere", "name", "span:name", "status", "span:status", "kind", "span:kind", "duration",
    "traceDuration", "statusMessage", "span:statusMessage", "rootName", "rootServiceName", "trace:rootService",
    "event:name", "instrumentation:name", "instrumentation:version", "span:id", "trace:id", "link:traceID",
    "http.route", "resource.", "{}", "1 + 1",
)  # fmt: skip
V1_TAG_VALUES: Final = (
    "service.name", "http.route", "http.status_code", "cart.cached", "k8s.pod.name", "name", "status.code", "error",
    "rootServiceName", "root.service.name", "rootName", "exception.type", "span.http.route", "status", "nothere",
)  # fmt: skip
DRILLDOWN_METRICS: Final = (
    "{} | rate()",
    "{nestedSetParent<0 && true} | rate() by (resource.service.name)",
    "{status=error} | rate() by (resource.service.name)",
    '{resource.service.name="shop-web"} | rate() by (span.http.route)',
    "{nestedSetParent<0} | quantile_over_time(duration, 0.5, 0.9, 0.99)",
    "{} | quantile_over_time(duration, 0.9) by (resource.service.name)",
    "{} | histogram_over_time(duration)",
    "{} | count_over_time() by (name)",
    "{} | avg_over_time(duration) by (resource.service.name)",
    "{} | max_over_time(duration)",
    "{} | compare({status=error})",
    "{} | rate() by (name) | topk(2)",
    "{span.http.status_code != nil} | rate() by (span.http.status_code)",
)


async def tempo_checks(ask: Asker, data: DataSet, args: argparse.Namespace, via: str = "") -> None:
    g = "proxy.tempo" if via else "tempo"
    # both bridges add pyroscope.profile.id to the spans (so Grafana offers "Profiles for this span"): compared
    # without it; enrichment is checked on its own (peerproxy)
    spans = w.trace_spans_unenriched
    for req in data.requests[:: max(1, len(data.requests) // 12)]:
        await ask.tempo(f"{g}.trace", f"v1 {req.trace_id}", f"/api/traces/{req.trace_id}", {}, spans, via)
        await ask.tempo(f"{g}.trace", f"v2 {req.trace_id}", f"/api/v2/traces/{req.trace_id}", {}, spans, via)
    await ask.tempo(f"{g}.trace", "unknown id", "/api/traces/" + "ab" * 16, {}, w.raw, via)
    await ask.tempo(f"{g}.trace", "malformed id", "/api/traces/xyz", {}, w.raw, via)
    win = _window(data)
    for path, params in TAG_NAMES:
        await ask.tempo(f"{g}.tags", f"{path} {params}", path, {**params, **win}, w.tags, via)
    for tag in V2_TAG_VALUES:
        path = f"/api/v2/search/tag/{quote(tag, safe='')}/values"
        await ask.tempo(f"{g}.tags", path, path, win, w.tag_values, via)
    for tag in V1_TAG_VALUES:
        path = f"/api/search/tag/{quote(tag, safe='')}/values"
        await ask.tempo(f"{g}.tags", path, path, win, w.tag_values, via)
    for q in DRILLDOWN_SEARCH:
        await ask.tempo(f"{g}.search", q, "/api/search", {"q": q, "limit": "100", "spss": "10", **win}, w.search, via)
    # a metrics query's end is cut back before now - 30 s (Tempo's query_end_cutoff), so a window ending later would
    # be cut where each side happens to be asked: end it at the data's end (every span ends before) and ask once that
    # is past the cutoff
    past = {**win, "end": str(data.end_ns // 10**9)}
    await asyncio.sleep(max(0.0, data.end_ns / 10**9 + 31 - time.time()))
    for q in DRILLDOWN_METRICS:
        step = {"step": "60s"}
        await ask.tempo(
            f"{g}.metrics", f"range {q}", "/api/metrics/query_range", {"q": q, **past, **step}, w.metrics, via
        )
        await ask.tempo(f"{g}.metrics", f"instant {q}", "/api/metrics/query", {"q": q, **past}, w.metrics, via)
    if not via and args.corpus and Path(args.corpus).is_file():
        await corpus_checks(ask, data, Path(args.corpus))


# a metrics query of the corpus (``| rate()``, ``| compare(…)``, …) goes to the metrics API: Tempo's ``/api/search``
# runs only its span filter (or answers 500 for metrics arithmetic); the bridge refuses it with 400 naming the metrics
# API — a deliberate difference (docs/peers.md), so the checker asks each query where Grafana sends it
METRICS_QUERY: Final = re.compile(
    r"\|\s*(rate|count_over_time|min_over_time|max_over_time|avg_over_time|sum_over_time|quantile_over_time"
    r"|histogram_over_time|compare)\s*\("
)


async def corpus_checks(ask: Asker, data: DataSet, corpus: Path) -> None:
    """Tempo's own TraceQL examples against the data: ``valid`` by status and matches (a metrics query by its
    series, asked of ``query_range``), the rest by status."""
    examples = yaml.safe_load(corpus.read_text())
    win = _window(data)
    for section in ("valid", "parse_fails", "validate_fails", "unsupported"):
        for q in examples.get(section, []):
            if METRICS_QUERY.search(q):
                # a sampled query (``with(sample=…)``) is an estimate from the spans each side happens to keep:
                # compared by status only
                sampled = "sample=" in q.replace(" ", "")
                norm = w.metrics if section == "valid" and not sampled else w.status_only
                params = {"q": q, "step": "60s", **win, "end": str(data.end_ns // 10**9)}  # past the cutoff
                await ask.tempo(f"tempo.corpus.{section}", q, "/api/metrics/query_range", params, norm)
                continue
            norm = w.search if section == "valid" else w.status_only
            params = {"q": q, "limit": "1000", "spss": "100", **win}
            await ask.tempo(f"tempo.corpus.{section}", q, "/api/search", params, norm)


# --------------------------------------------------------------------------------------------- Pyroscope


def _ms(data: DataSet) -> dict[str, int]:
    return {"start": data.start_ns // 10**6, "end": data.end_ns // 10**6 + 60_000}


async def pyroscope_checks(ask: Asker, data: DataSet, via: str = "") -> None:
    g = "proxy.pyroscope" if via else "pyroscope"
    t = _ms(data)
    web = '{service_name="shop-web"}'
    await ask.pyro(f"{g}.types", "ProfileTypes", "ProfileTypes", t, w.profile_types, via)
    await ask.pyro(f"{g}.labels", "LabelNames", "LabelNames", {**t, "matchers": [web]}, w.names, via)
    await ask.pyro(f"{g}.labels", "LabelValues", "LabelValues", {**t, "name": "service_name"}, w.names, via)
    series_req = {**t, "matchers": ["{}"], "labelNames": ["service_name", "__profile_type__", "env"]}
    await ask.pyro(f"{g}.labels", "Series", "Series", series_req, w.label_sets, via)
    for sel in ("{}", web, '{service_name="shop-api", env="prod"}', '{service_name=~"shop-.*"}'):
        body = {"profileTypeID": CPU, "labelSelector": sel, **t}
        await ask.pyro(
            f"{g}.merge", f"SelectMergeStacktraces {sel}", "SelectMergeStacktraces", body, w.flame_answer, via
        )
    body = {"profileTypeID": CPU, "labelSelector": web, "maxNodes": 4, **t}
    await ask.pyro(f"{g}.merge", "maxNodes 4", "SelectMergeStacktraces", body, w.flame_answer, via)
    body = {"profileTypeID": CPU, "labelSelector": web, "format": "PROFILE_FORMAT_TREE", **t}
    await ask.pyro(f"{g}.merge", "format tree", "SelectMergeStacktraces", body, w.raw, via)
    for bad in ("{service_name=}", "service_name"):
        body = {"profileTypeID": CPU, "labelSelector": bad, **t}
        await ask.pyro(f"{g}.errors", f"selector {bad}", "SelectMergeStacktraces", body, w.raw, via)
    body = {"profileTypeID": "nonsense", "labelSelector": web, **t}
    await ask.pyro(f"{g}.errors", "profile type nonsense", "SelectMergeStacktraces", body, w.raw, via)
    roots = [r.spans["root"] for r in data.requests[:6]]
    for ids in ([roots[0]], roots[1:4], ["0" * 16], ["abc"], [roots[0] + data.requests[0].trace_id]):
        body = {"profileTypeID": CPU, "labelSelector": web, "spanSelector": ids, **t}
        await ask.pyro(f"{g}.span", f"spans {ids}", "SelectMergeSpanProfile", body, w.flame_below_root, via)
    step = {"step": 60.0}
    for extra in ({}, {"groupBy": ["service_name"]}, {"aggregation": "TIME_SERIES_AGGREGATION_TYPE_AVERAGE"}):
        body = {"profileTypeID": CPU, "labelSelector": "{}", **t, **step, **extra}
        await ask.pyro(f"{g}.series", f"SelectSeries {extra}", "SelectSeries", body, w.series, via)
    for ex in ("EXEMPLAR_TYPE_SPAN", "EXEMPLAR_TYPE_INDIVIDUAL"):
        body = {"profileTypeID": CPU, "labelSelector": web, **t, **step, "exemplarType": ex}
        await ask.pyro(f"{g}.series", f"SelectSeries {ex}", "SelectSeries", body, w.series, via)
    half = (t["start"] + t["end"]) // 2
    left = {"profileTypeID": CPU, "labelSelector": web, "start": t["start"], "end": half}
    right = {"profileTypeID": CPU, "labelSelector": web, "start": half, "end": t["end"]}
    await ask.pyro(f"{g}.diff", "Diff halves", "Diff", {"left": left, "right": right}, w.diff_answer, via)
    for qt, ex in (
        ("HEATMAP_QUERY_TYPE_INDIVIDUAL", "EXEMPLAR_TYPE_INDIVIDUAL"),
        ("HEATMAP_QUERY_TYPE_SPAN", "EXEMPLAR_TYPE_SPAN"),
    ):
        body = {"profileTypeID": CPU, "labelSelector": web, **t, **step, "queryType": qt, "exemplarType": ex}
        norm = w.heatmap_values if qt.endswith("SPAN") else w.series
        await ask.pyro(f"{g}.heatmap", qt, "SelectHeatmap", body, norm, via)
    await ask.pyro(f"{g}.misc", "GetProfileStats", "GetProfileStats", {}, w.raw, via)
    await ask.pyro(f"{g}.misc", "AnalyzeQuery", "AnalyzeQuery", {**t, "query": f"{CPU}{web}"}, w.raw, via)
    await ask.pyro(f"{g}.misc", "settings Get", "/settings.v1.SettingsService/Get", {}, w.raw, via)
    sec = {"from": str(t["start"] // 1000), "until": str(t["end"] // 1000)}
    sec_from = t["start"] // 1000
    render = "/pyroscope/render?" + urlencode({"query": f"{CPU}{web}", **sec, "format": "json"})
    await ask.pyro(f"{g}.render", "render", render, None, w.flamebearer, via)
    render = "/pyroscope/render?" + urlencode(
        # relative, over this run's data alone (an earlier run's sits further back in a shared peer)
        {"query": f"{CPU}{web}", "from": f"now-{int(time.time()) - sec_from + 5}s", "until": "now", "maxNodes": "3"}
    )
    await ask.pyro(f"{g}.render", "render now-Ns maxNodes", render, None, w.flamebearer, via)
    diff = "/pyroscope/render-diff?" + urlencode(
        {
            "leftQuery": f"{CPU}{web}",
            "rightQuery": f"{CPU}{web}",
            "leftFrom": sec["from"],
            "leftUntil": str(half // 1000),
        }
        | {"rightFrom": str(half // 1000), "rightUntil": sec["until"], "format": "json"}
    )
    await ask.pyro(f"{g}.render", "render-diff", diff, None, w.flamebearer_diff, via)


__all__ = ["HOT", "Asker", "Sides", "corpus_checks", "pyroscope_checks", "tempo_checks"]
