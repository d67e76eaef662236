"""Tempo's TraceQL conformance, as data, counted per section of Tempo's corpus (``tests/fixtures/tempo/traceql/``, from
``grafana/tempo`` at ``REVISION``). Four corpora, each case judged by what Tempo asserts or answers:

- ``test_examples.yaml`` (``pkg/traceql/test_examples.yaml``), through the HTTP API: a ``valid`` query answers 200 on
  its endpoint; a ``parse_fails`` / ``validate_fails`` one 400 with Tempo's very text (``printed.json``: what Tempo's
  ``Parse`` and ``validate()`` returned), framed as Tempo's search frames it; an ``unsupported`` one Tempo's
  ``… not yet supported``.
- ``search_cases.json`` (``tempodb/tempodb_search_test.go``'s runners), through the standalone store's ``/api/search``:
  the trace found where Tempo finds it, not where Tempo does not, the exact spansets Tempo asserts.
- ``metrics_cases.json`` (``pkg/traceql/engine_metrics*_test.go``): Tempo's interval tables and the series its engine
  answered, on Tempo's own mock spans, through ``bridge.traceql.metrics``.
- ``binary_answers.json``: what a real Tempo binary at that revision answered over HTTP for every example on
  ``/api/search``, ``/api/metrics/query_range`` and ``/api/metrics/query``, and for every search case, holding the same
  trace (recorded on loopback; times and ids put back on the case's own clock). The answers are compared normalized
  (``normalize``): JSON values, not their text; attributes by key; series by labels; exemplars counted.
- ``drilldown_answers.json``: what that binary answered to each request shape of Grafana Traces Drilldown
  (``drilldown_requests``) holding the shop capture, compared as ``drilldown_normalize`` puts them.

Every case gets a verdict: ``correct``, ``unsupported-400`` (the bridge's own ``unsupported: <construct>``: built in
Tempo, not here) or ``wrong``. ``known_differences`` lists the answers that differ from the binary's on purpose, each
with why; ``tests/traceql/test_conformance.py`` asserts nothing else differs, ``scripts/traceql_conformance.py`` prints
the counts.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from bridge.store import Store, tempo_api
from bridge.traceql import timeseries
from bridge.traceql.aggregate import log2_bucket
from bridge.traceql.parser import parse
from tests.store.test_store import ctx
from tests.traceql.test_search_cases import BROKEN_ID

FIXTURES: Final = Path(__file__).resolve().parents[1] / "fixtures/tempo/traceql"
REVISION: Final = "ad33aa8fafc41a4ea58519f7b7a88b1aa1383224"
EXAMPLES: Final = yaml.safe_load((FIXTURES / "test_examples.yaml").read_text())
PRINTED: Final = json.loads((FIXTURES / "printed.json").read_text())
SEARCH: Final = json.loads((FIXTURES / "search_cases.json").read_text())
METRICS: Final = json.loads((FIXTURES / "metrics_cases.json").read_text())
BINARY: Final = json.loads((FIXTURES / "binary_answers.json").read_text())
DRILLDOWN: Final = json.loads((FIXTURES / "drilldown_answers.json").read_text())
SECTIONS: Final = ("valid", "parse_fails", "validate_fails", "unsupported")
ENDPOINTS: Final = ("api/search", "api/metrics/query_range", "api/metrics/query")
CORRECT, UNSUPPORTED, WRONG = "correct", "unsupported-400", "wrong"
TRACE_START_S: Final = 1000  # the search cases' trace starts at 1,000 s on its own clock
SEARCH_WINDOW: Final = {"start": str(TRACE_START_S - 600), "end": str(TRACE_START_S + 600)}
METRICS_WINDOW: Final = {"start": str(TRACE_START_S - 120), "end": str(TRACE_START_S + 180)}


_MATH = "math between sub-queries on /api/search: Tempo's querier fails it with a 500, the bridge answers 400"
_SAMPLED = "with(sample=0.1): Tempo samples spans and scales the counts; the bridge counts every span exactly"
_OR_ATTRIBUTES = (
    "conditions that need not all hold (`||`, `&&` between spansets): Tempo's parquet scan also returns an "
    "attribute whose value passes another condition's predicate of its column group (vparquet5 "
    "createAttributeIterator: key IN keys, values OR'ed), which depends on Tempo's dedicated columns; the bridge "
    "shows the attributes whose own condition holds. The same spans match"
)
_ID_ZEROS = (
    "Tempo's id predicate drops the query's leading zeros and compares bytes (util.HexStringToSpanID), so an 8-byte "
    "span id that starts with a zero byte never matches; Tempo's own test passes with 3-byte ids. The bridge matches"
)


# The queries where Tempo's scan shows more attributes than the bridge (measured against the binary)
_OR_ATTRIBUTE_QUERIES: Final = (
    "{resource.res-dedicated.02=`nfvpcFoiTz` || .foo=`BTebzWbqVa` || resource.k8s.container.name=`rpXQufjqqg` || "
    "span.numericString!=`tMhxVmsXjM` || .foo=`BTebzWbqVa`}",
    "{rootServiceName=`kbAAegiuEL`} || {.span-dedicated.02=`LVUMDUuCFa`} || {.res-dedicated.01=`NVaHpSCvAu`} || "
    "{.http.url!=`fGGHEljnJw`} || {.namespace=`fvqPfQXtQc`}",
    "{span.span-dedicated.02=`gRiqEBJKqk` && duration>10h} || {.pod!=`QVHitiArgy`}",
    "{resource.namespace=`khDJvaeKVg` || .cluster=`MyCluster`} | {resource.res-dedicated.01!=`UtnGsBEgxH`}",
    "{span.span-dedicated.02=`YMKpmpsciw` || .k8s.container.name!=`iirbKQeXkv`} | {resource.container!=`zgsnxNtjRU`}",
    "{resource.namespace=`khDJvaeKVg` || span.numericString!=`tMhxVmsXjM`} | {.foo!=`sSEDYtdbcf`}",
    "({.namespace!=`RUzDHWWUdQ`} | count() > 0) || ({resource.res-dedicated.02=`OtkprohgJS`} | count() > 0)",
    "{ .http.method=`Get` && .foo=`Bar` } && { resource.res-dedicated.01!=`DcohQYbieo` && "
    "resource.res-dedicated.02=`res-2b` } && { resource.service.name!=`JKjPtTwTMq` && .service.name!=`ePJpyFdMab` }  "
    "&& { duration=1000000000ns && rootName=`RootSpan` }| sum(duration) = 5000000000ns",
)


def _is_math(q: str) -> bool:
    root = parse(q)
    return root.is_metrics and root.single_pipeline() is None


@functools.cache
def known_differences() -> dict[tuple[str, str], str]:
    """Where the bridge answers otherwise than the binary, on purpose: (endpoint, query) → why."""
    out = {("api/search", q): _MATH for q in EXAMPLES["valid"] if _is_math(q)}
    for q in EXAMPLES["valid"]:
        if "sample=0.1" in q and "by (name)" in q:
            out |= {("api/metrics/query_range", q): _SAMPLED, ("api/metrics/query", q): _SAMPLED}
    out[("api/search", '{ span:parentID = "0000000000040506" }')] = _ID_ZEROS
    out |= {("api/search", q): _OR_ATTRIBUTES for q in _OR_ATTRIBUTE_QUERIES}
    return out


@dataclass(frozen=True, slots=True)
class Outcome:
    corpus: str
    section: str
    case: str
    verdict: str
    detail: str = ""


def _verdict(ok: bool, status: int, body: bytes) -> str:
    if ok:
        return CORRECT
    if status == 400 and body.startswith(b"unsupported: "):
        return UNSUPPORTED
    return WRONG


async def call(store: Store, path: str, query: dict[str, str]) -> tuple[int, bytes]:
    """One request to the store's Tempo API; the same request twice in a run is answered once (``everything`` asks
    each corpus's questions as the binary was asked them)."""
    key = (id(store), path, tuple(sorted(query.items())))
    if key not in _ANSWERS:
        status, _, body = await tempo_api.answer(store, "GET", path, query, {}, ctx())
        _ANSWERS[key] = (status, body)
    return _ANSWERS[key]


_ANSWERS: dict[tuple[int, str, tuple[tuple[str, str], ...]], tuple[int, bytes]] = {}


# ------------------------------------------------------------------------------------------ test_examples.yaml


def _expected_text(section: str, q: str) -> str | None:
    if section == "parse_fails":
        return "invalid TraceQL query: " + PRINTED["errors"][q]
    if section == "validate_fails":
        return "invalid TraceQL query: " + PRINTED["invalid"][q]
    return None


async def examples(store: Store) -> list[Outcome]:
    out = []
    for section in SECTIONS:
        for q in EXAMPLES[section]:
            path = "api/metrics/query_range" if section == "valid" and parse(q).is_metrics else "api/search"
            status, body = await call(store, path, binary_query(path, q, 0, 0))
            text = body.decode(errors="replace")
            if section == "valid":
                ok = status == 200
            elif section == "unsupported":
                ok = (
                    status == 400 and text.startswith("invalid TraceQL query: ") and text.endswith(" not yet supported")
                )
            else:
                ok = status == 400 and text == _expected_text(section, q)
            out.append(Outcome("test_examples.yaml", section, q, _verdict(ok, status, body), f"{status} {text[:200]}"))
    return out


# -------------------------------------------------------------------------------------- tempodb_search_test.go

MATCH: Final = ("suite_match", "runner_match", "advanced_match", "nil_match", "duration_match")
MATCH_ALSO: Final = ("event_link_instrumentation_match",)
NO_MATCH: Final = ("suite_nomatch", "runner_nomatch", "advanced_nomatch", "structural_nomatch", "nil_nomatch")
NO_MATCH_ALSO: Final = ("duration_nomatch", "existence_nomatch")
ROOT_SPAN: Final = "0000000000040506"


def case(item: str | dict[str, Any]) -> tuple[str, int, int]:
    return (item, 0, 0) if isinstance(item, str) else (item["q"], item.get("start", 0), item.get("end", 0))


async def api_search(store: Store, q: str, start: int = 0, end: int = 0) -> tuple[int, bytes, list[dict[str, Any]]]:
    status, body = await call(store, "api/search", binary_query("api/search", q, start, end))
    if status != 200:
        return status, body, []
    traces: list[dict[str, Any]] = json.loads(body.replace(BROKEN_ID.encode(), b"0" * 16)).get("traces", [])
    return status, body, traces


def _metadata(trace: dict[str, Any]) -> dict[str, Any]:
    return {k: trace.get(k) for k in SEARCH["want"]}


def _has_root(traces: list[dict[str, Any]]) -> bool:
    return any(s["spanID"] == ROOT_SPAN for t in traces for ss in t["spanSets"] for s in ss["spans"])


async def search_runners(store: Store) -> list[Outcome]:
    out = []
    for key in (*MATCH, *MATCH_ALSO, *NO_MATCH, *NO_MATCH_ALSO):
        for item in SEARCH[key]:
            q, start, end = case(item)
            status, body, traces = await api_search(store, q, start, end)
            want = [SEARCH["want"]] if key in MATCH or key in MATCH_ALSO else []
            ok = status == 200 and [_metadata(t) for t in traces] == want
            out.append(Outcome("tempodb_search_test.go", key, q, _verdict(ok, status, body)))
    for item in SEARCH["spansets"]:
        status, body, traces = await api_search(store, item["q"])
        ok = status == 200 and bool(traces) and traces[0]["spanSets"] == item["spanSets"]
        out.append(Outcome("tempodb_search_test.go", "spansets", item["q"], _verdict(ok, status, body)))
    for item in SEARCH["existence"]:
        status, body, traces = await api_search(store, item["q"])
        spans = [s for t in traces for ss in t["spanSets"] for s in ss["spans"]]
        shown = item["key"] in ("name", "duration") or all(
            item["key"] in {a["key"] for a in s.get("attributes", [])} for s in spans
        )  # Go's NotNil on a string or a number always holds: Tempo's test checks nothing more for those two
        out.append(
            Outcome("tempodb_search_test.go", "existence", item["q"], _verdict(bool(spans) and shown, status, body))
        )
    for item in SEARCH["existence_root"]:
        c = item["condition"]
        for q in (f"{{ .child }} < {{ {c} }}", f"{{ {c} }}"):
            status, body, traces = await api_search(store, q)
            ok = status == 200 and _has_root(traces) is item["containsRootSpan"]
            out.append(Outcome("tempodb_search_test.go", "existence_root", q, _verdict(ok, status, body)))
    return out


# ------------------------------------------------------------------------------------- engine_metrics*_test.go

_TEST_FILES: Final = {
    "TestAvgOverTime": "engine_metrics_average_test.go",
    "TestCompare": "engine_metrics_compare_test.go",
}


def metrics_cases() -> list[Outcome]:
    from tests.traceql import test_metrics_cases as tm  # the engine's runner for Tempo's mock spans

    out = []
    for c in METRICS["cases"]:
        got = tm.run(c)
        want = {
            tm.label_key([(k, tm.static(kind, v)) for k, kind, v in s["labels"]]): values
            for s in c["series"]
            if tm.on_the_wire(values := [float(v) for v in s["values"]])
        }
        ok = sorted(got) == sorted(want) and all(tm.same(got[k], v) for k, v in want.items())
        section = _TEST_FILES.get(c["test"], "engine_metrics_test.go")
        out.append(Outcome("engine_metrics*_test.go", section, f"{c['test']}: {c['query']}", _ok(ok)))
    for name, check in _TABLE_CHECKS.items():
        for row in METRICS["tables"][name]:
            ok = check(*row)
            out.append(Outcome("engine_metrics*_test.go", "engine_metrics_test.go tables", f"{name} {row}", _ok(ok)))
    return out


def _ok(ok: bool) -> str:
    return CORRECT if ok else WRONG


def _intervals(start: int, end: int, step: int, instant: bool) -> timeseries.Intervals:
    return timeseries.Intervals.of(timeseries.QueryRange("", start, end, step, instant))


# TestDefaultQueryRangeStep, TestStepRangeToIntervals (count, TimestampOf, IntervalOf), TestLog2Bucketize
_TABLE_CHECKS: Final[dict[str, Callable[..., bool]]] = {
    "default_step": lambda window, step: timeseries.default_step(0, window) == step,
    "interval_count": lambda start, end, step, instant, n: _intervals(start, end, step, instant).count == n,
    "timestamp_of": lambda i, start, end, step, instant, ts: _intervals(start, end, step, instant).timestamp(i) == ts,
    "interval_of": lambda ts, start, end, step, instant, i: _intervals(start, end, step, instant).index(ts) == i,
    "log2_bucketize": lambda value, bucket: log2_bucket(value) == bucket,
}


# ------------------------------------------------------------------------------------------ the real binary


def _canon(v: Any) -> Any:
    """A sort key where JSON's 1 and 1.0 are one value."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, dict):
        return sorted((k, _canon(x)) for k, x in v.items())
    return [_canon(x) for x in v]


def _norm_trace(t: dict[str, Any], shift_ns: int, trace_id: str) -> dict[str, Any]:
    t = copy.deepcopy(t)
    t.pop("serviceStats", None)
    if t.get("traceID") == trace_id.lstrip("0"):
        t["traceID"] = SEARCH["want"]["traceID"]
    if "startTimeUnixNano" in t:
        t["startTimeUnixNano"] = str(int(t["startTimeUnixNano"]) - shift_ns)
    if {k: t.get(k) for k in SEARCH["want"]} == SEARCH["want"]:  # the one trace, as Tempo's test wants it
        t = {"trace": "want", **{k: v for k, v in t.items() if k not in SEARCH["want"]}}
    sets = t.get("spanSets", [])
    if sets and t.get("spanSet") == sets[0]:
        t.pop("spanSet")
    for ss in [t.get("spanSet") or {}, *sets]:
        for span in ss.get("spans", []):
            span["startTimeUnixNano"] = str(int(span["startTimeUnixNano"]) - shift_ns)
            span["attributes"] = sorted(span.get("attributes", []), key=lambda a: a["key"])
            if not span["attributes"]:
                del span["attributes"]
            if span["spanID"] == BROKEN_ID:
                span["spanID"] = "0" * 16
    return t


def _norm_series(s: dict[str, Any], instant: bool, shift_ms: int) -> dict[str, Any]:
    out: dict[str, Any] = {"labels": sorted(s.get("labels", []), key=lambda label: label["key"])}
    if instant:
        out["value"] = s.get("value")
    else:
        out["samples"] = [[int(x["timestampMs"]) - shift_ms, x.get("value")] for x in s.get("samples", [])]
    out["exemplars"] = len(s.get("exemplars", []))
    return out


def normalize(path: str, status: int, body: bytes, shift_s: int = 0, trace_id: str = "") -> dict[str, Any]:
    """An answer as compared: the status and text of an error; the traces (times back on the case's clock, the
    broken span's id as Tempo's test writes it, attributes by key, ``spanSet`` only when it is not ``spanSets[0]``,
    ``"trace": "want"`` for the metadata Tempo's test wants) or
    the series (sorted by labels; samples as ``[ms, value]``; exemplars counted) of a 200."""
    if status != 200:
        return {"status": status, "body": body.decode(errors="replace").rstrip("\n")}
    doc = json.loads(body)
    out: dict[str, Any] = {"status": 200}
    if path == "api/search":
        out["traces"] = [
            _norm_trace(t, shift_s * 10**9, trace_id or SEARCH["want"]["traceID"]) for t in doc.get("traces", [])
        ]
    else:
        series = [_norm_series(s, path.endswith("query"), shift_s * 1000) for s in doc.get("series", [])]
        out["series"] = sorted(series, key=lambda s: json.dumps(_canon(s["labels"])))
    for key in ("status", "message"):
        if key in doc:
            out[f"doc_{key}"] = doc[key]
    return out


def same(a: Any, b: Any) -> bool:
    """JSON values alike: numbers by value (1 is 1.0; floats within 1e-12 relative: Go's ``math.Exp`` on amd64 may
    round the last bit differently from C's), everything else exactly."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return False


def binary_query(path: str, q: str, start: int, end: int) -> dict[str, str]:
    """The parameters each answer of ``binary_answers.json`` was asked with, on the case's own clock."""
    if path == "api/search":
        return {"q": q, "start": str(start), "end": str(end)} if start or end else {"q": q, **SEARCH_WINDOW}
    extra = {"step": "60s"} if path.endswith("query_range") else {}
    return {"q": q, **METRICS_WINDOW, **extra}


async def binary(store: Store) -> list[Outcome]:
    known = known_differences()
    out = []
    for item in BINARY["answers"]:
        path, q = item["path"], item["q"]
        status, body = await call(store, path, binary_query(path, q, item["start"], item["end"]))
        got = normalize(path, status, body)
        ok = same(got, item["answer"])
        verdict = _verdict(ok, status, body)
        detail = "" if ok else known.get((path, q), f"unexpected: {json.dumps(got)[:300]}")
        corpus, _, section = item["section"].partition(" ")
        section = f"{corpus if corpus != 'test_examples.yaml' else section} → {path.removeprefix('api/')}"
        out.append(Outcome("Tempo binary", section, f"{path} {q}", verdict, detail))
    return out


# --------------------------------------------------------------------------------------- Traces Drilldown shapes


def drilldown_requests() -> list[tuple[str, dict[str, str]]]:
    """Each request shape Grafana Traces Drilldown sends (``tests/traceql/test_drilldown.py`` names the source file of
    each), on the shop capture's clock: RED rates and errors with and without ``by()``, duration quantiles and
    histogram, a breakdown tile, the comparison tab's ``compare()``, the primary signals, ``topk``, an instant query,
    the exceptions, structure and span-list searches (limits above the matches: which ``limit`` of more traces Tempo
    returns is not defined)."""
    from tests.traceql.test_drilldown import END_S, FILTERS, START_S

    key, window = "resource.service.name", {"start": str(START_S), "end": str(END_S)}
    sel = (
        " && status = error} | select(resource.service.name, event.exception.message,event.exception.stacktrace,"
        "event.exception.type) with(most_recent=true)"
    )
    roots = f"{FILTERS} && status = error"
    metrics = [
        f"{{{FILTERS}}} | rate() ",
        f"{{{FILTERS} && {key} != nil}} | rate() by({key})",
        f"{{{FILTERS} && status=error}} | rate() ",
        f"{{{FILTERS} && status=error && {key} != nil}} | rate() by({key})",
        f"{{{FILTERS}}} | quantile_over_time(duration, 0.9) ",
        f"{{{FILTERS} && {key} != nil}} | quantile_over_time(duration, 0.9) by({key})",
        f'{{{FILTERS} && name="GET /checkout"}} | rate() by(name)',
        f"{{{FILTERS}}} | histogram_over_time(duration) ",
        "{kind=server && true} | rate() ",
        "{kind=consumer && true} | rate() ",
        '{span.db.system.name!="" && true} | rate() ',
        "{true && true} | rate() ",
        f"{{{FILTERS}}} | rate() by(name) | topk(10)",
    ]
    out = [("api/metrics/query_range", {"q": q, **window, "step": "2s"}) for q in metrics]
    compare = f"{{{FILTERS}}} | compare({{status = error}}, 10, {START_S * 10**9}, {END_S * 10**9})"
    out.append(("api/metrics/query_range", {"q": compare, **window, "step": f"{END_S - START_S}s"}))
    out.append(("api/metrics/query", {"q": f"{{{FILTERS}}} | rate() by(name)", **window}))
    structure = f"({{{roots}}} &>> {{ status = error }}) || ({{{roots}}}) | select(status, {key}, name, nestedSetParent"
    searches = [
        ("{true && true" + sel, "400", "10"),
        ("{" + FILTERS + sel, "400", "10"),
        (structure + ", nestedSetLeft, nestedSetRight)", "200", "20"),
        (f"{{{FILTERS}&& duration >= 250ms && duration <= 2s}} | select(name, {key})", "200", "10"),
        (f"{{{FILTERS}}}", "200", "3"),
    ]
    out += [("api/search", {"q": q, "limit": limit, "spss": spss, **window}) for q, limit, spss in searches]
    return out


def drilldown_normalize(path: str, status: int, body: bytes, shift_s: int = 0) -> dict[str, Any]:
    """``normalize``, less what Tempo itself answers differently from one call to the next: exemplars (sampled), and
    the values of an attribute ``compare()`` cut at its top 10 (ties come out in Go's map order)."""
    out = normalize(path, status, body, shift_s)
    series = out.get("series", [])
    for s in series:
        s.pop("exemplars", None)
    cut = Counter(json.dumps(s["labels"][:1]) + s["labels"][1]["key"] for s in series if len(s["labels"]) == 2)
    out["series"] = [
        s for s in series if len(s["labels"]) != 2 or cut[json.dumps(s["labels"][:1]) + s["labels"][1]["key"]] < 10
    ]
    if not out["series"]:
        del out["series"]
    return out


async def drilldown(store: Store) -> list[Outcome]:
    """Each shape against what the real Tempo answered holding the same capture (``drilldown_answers.json``)."""
    out = []
    for item in DRILLDOWN["answers"]:
        status, body = await call(store, item["path"], item["query"])
        ok = same(drilldown_normalize(item["path"], status, body), item["answer"])
        detail = "" if ok else f"unexpected: {body[:300]!r}"
        section = f"Traces Drilldown → {item['path'].removeprefix('api/')}"
        out.append(Outcome("Tempo binary", section, item["query"]["q"], _verdict(ok, status, body), detail))
    return out


# -------------------------------------------------------------------------------------------------- counting


async def everything(store: Store, shop: Store) -> list[Outcome]:
    """Every corpus: ``store`` holds the search cases' trace, ``shop`` the shop capture as ``open_shop`` fills it."""
    try:
        corpora = [*await examples(store), *await search_runners(store), *metrics_cases(), *await binary(store)]
        return corpora + await drilldown(shop)
    finally:
        _ANSWERS.clear()


async def open_stores(root: Path) -> tuple[Store, Store]:
    """The two stores the corpora run on, each with its clock injected far after its data (no end cutoff bites)."""
    from tests.store.test_store import CAPTURE_END_S, ingest_capture
    from tests.traceql.test_drilldown import failing_checkouts
    from tests.traceql.test_search_cases import store_trace

    store = await Store.open(root / "cases", clock=lambda: 1_000_000.0)
    await store.ingest_otlp_traces(store_trace(), None)
    shop = await Store.open(root / "shop", clock=lambda: CAPTURE_END_S + 3600)
    await ingest_capture(shop)
    await shop.ingest_otlp_traces(failing_checkouts(), None)
    return store, shop


def table(outcomes: list[Outcome]) -> str:
    """The counts per corpus and section as a Markdown table."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    for o in outcomes:
        counts.setdefault((o.corpus, o.section), Counter())[o.verdict] += 1
    lines = [
        "| Tempo corpus | section | cases | correct | unsupported-400 | wrong |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (corpus, section), c in counts.items():
        total = sum(c.values())
        lines.append(f"| {corpus} | {section} | {total} | {c[CORRECT]} | {c[UNSUPPORTED]} | {c[WRONG]} |")
    return "\n".join(lines)
