"""Standalone mode serves the Pyroscope API Grafana's Pyroscope data source, Profiles Drilldown and Perses call
(issue 20 §3): a bridge app on its own store, fed the real shop capture over HTTP, asked over HTTP in both Connect
codecs. Expected numbers come from the capture's own pprof samples, read here, not from the bridge's answers."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from google.protobuf import json_format
from google.protobuf.message import Message

from bridge import flamegraph, treeformat
from bridge._proto import profile_pb2, push_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.app import create_app
from bridge.config import Settings
from bridge.flamebearer import point_label
from bridge.pprof import decode_pprof, iter_samples
from bridge.state import RUNTIME
from bridge.store import Store
from tests.paths import SHOP_CAPTURE

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
CAPTURE_END_S = 1795945320.0  # a little after the shop capture's last request: the store's clock
QUERIER = "/pyroscope/querier.v1.QuerierService/"
RENDER = "/pyroscope/pyroscope/render"  # Pyroscope's /pyroscope/render under the bridge's /pyroscope mount
Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable[Client]]


def capture() -> list[tuple[str, bytes, dict[str, str]]]:
    """The capture's requests in arrival order (kept decompressed: tests/fixtures/README.md)."""
    out = []
    for line in (SHOP_CAPTURE / "index.jsonl").read_text().splitlines():
        entry = json.loads(line)
        out.append(
            (entry["path"], (SHOP_CAPTURE / entry["file"]).read_bytes(), {"Content-Type": entry["content_type"]})
        )
    return out


def capture_profiles() -> list[tuple[str, int, list[tuple[tuple[str, ...], int, dict[str, str]]]]]:
    """Every uploaded profile of the capture: (service, capture start in ns, samples)."""
    out = []
    for path, body, _ in capture():
        if path == "/v1/traces":
            continue
        for series in push_pb2.PushRequest.FromString(body).series:
            service = next(p.value for p in series.labels if p.name == "service_name")
            for sample in series.samples:
                profile = decode_pprof(sample.raw_profile)
                out.append((service, profile.time_nanos, list(iter_samples(profile, 0))))
    return out


def stored_profiles() -> Counter[tuple[str, int, frozenset[tuple[str, str]]]]:
    """The profiles a store keeps of the capture, with their totals: Pyroscope splits an upload by its samples'
    labels (span and trace ids aside), so one per (service, capture start in ms, those labels)."""
    out: Counter[tuple[str, int, frozenset[tuple[str, str]]]] = Counter()
    for service, t, samples in capture_profiles():
        for _, value, labels in samples:
            own = frozenset((k, v) for k, v in labels.items() if k not in ("span_id", "trace_id", "profile_id"))
            out[(service, t // 1_000_000, own)] += value
    return out


def total_of(service: str | None = None) -> int:
    return sum(v for s, _, samples in capture_profiles() if service in (None, s) for _, v, _ in samples)


def window_s() -> tuple[int, int]:
    """From a minute before the first profile to a minute after the last, in seconds."""
    times = [t for _, t, _ in capture_profiles()]
    return min(times) // 1_000_000_000 - 60, max(times) // 1_000_000_000 + 60


async def open_bridge(aiohttp_client: MakeClient, tmp_path: Path, **changes: Any) -> Client:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), **changes)
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
    for path, body, headers in capture():
        resp = await client.post(path, data=body, headers=headers)
        assert resp.status == 200, await resp.text()
    return client


@pytest.fixture
async def client(aiohttp_client: MakeClient, tmp_path: Path) -> Client:
    return await open_bridge(aiohttp_client, tmp_path)


async def rpc(
    client: Client, method: str, msg: Message, out: type[Message], *, codec: str = "json", headers: Any = None
) -> Any:
    """One Connect unary call; the answer decoded (asserting 200)."""
    if codec == "json":
        data = json_format.MessageToJson(msg).encode()
        ctype = "application/json"
    else:
        data, ctype = msg.SerializeToString(), "application/proto"
    path = method if method.startswith("/") else QUERIER + method
    resp = await client.post(path, data=data, headers={"Content-Type": ctype, **(headers or {})})
    raw = await resp.read()
    assert resp.status == 200, raw
    answer = out()
    if codec == "json":
        json_format.Parse(raw, answer)
    else:
        answer.ParseFromString(raw)
    return answer


def levels(fg: Any) -> list[list[int]]:
    return [list(level.values) for level in fg.levels]


# --------------------------------------------------------------------------------------------- render


async def test_render_is_the_flame_graph_with_its_timeline(client: Client) -> None:
    lo, hi = window_s()
    query = CPU + '{service_name="shop-frontend"}'
    resp = await client.get(RENDER, params={"query": query, "from": str(lo), "until": str(hi)})
    assert resp.status == 200 and resp.content_type == "application/json"
    assert resp.headers["Content-Encoding"] == "gzip"  # the client takes gzip: Pyroscope's read routes gzip
    raw = await resp.read()
    assert raw.endswith(b"}\n") and b"\n" not in raw[:-1]  # one line and a newline, as Go's json.Encoder
    doc = json.loads(raw)
    flame = await rpc(
        client,
        "SelectMergeStacktraces",
        qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="shop-frontend"}', start=lo * 1000, end=hi * 1000
        ),
        qpb.SelectMergeStacktracesResponse,
    )
    assert doc["flamebearer"] == {
        "names": list(flame.flamegraph.names),
        "levels": levels(flame.flamegraph),
        "numTicks": total_of("shop-frontend"),
        "maxSelf": flame.flamegraph.max_self,
    }
    assert doc["metadata"] == {"format": "single", "spyName": "", "sampleRate": 1_000_000_000, "units": "samples",
                               "name": "cpu"}  # fmt: skip
    timeline = doc["timeline"]
    assert timeline["durationDelta"] == 15 and timeline["startTime"] == lo // 15 * 15
    assert len(timeline["samples"]) == (hi // 15 * 15 - lo // 15 * 15) // 15
    assert sum(timeline["samples"]) == total_of("shop-frontend")
    assert doc["groups"] is None and doc["heatmap"] is None

    plain = await client.get(RENDER, params={"query": query, "from": str(lo), "until": str(hi)},
                             headers={"Accept-Encoding": "identity"})  # fmt: skip
    assert "Content-Encoding" not in plain.headers and await plain.read() == raw
    posted = await client.post(RENDER, params={"query": query})  # a GET route, as in Pyroscope: off the allowlist
    assert posted.status == 403 and "send it as GET only" in (await posted.json())["message"]
    ms = await client.get(RENDER, params={"query": query, "from": str(lo * 1000), "until": str(hi * 1000)})
    assert json.loads(await ms.read()) == doc  # 13 digits are milliseconds
    relative = await client.get(RENDER, params={"query": query, "from": "now-1h"})  # until: now, the store's clock
    assert (await relative.json())["flamebearer"]["numTicks"] == total_of("shop-frontend")


@pytest.mark.parametrize("step_s", [15, 7, 60])
async def test_steps_are_counted_at_their_right_edge_from_one_step_before_start(client: Client, step_s: int) -> None:
    """The timeline's points, added up in SQL, land where Pyroscope v2's RangeSeries puts each profile."""
    store = client.app[RUNTIME].backends.profiles
    assert isinstance(store, Store)
    times = sorted({t // 1_000_000 for _, t, _ in capture_profiles()})
    start, end = times[1] + 1, times[-1]  # the first profile lies more than a step before: left out
    expected: Counter[int] = Counter()
    for (_, t, _), value in stored_profiles().items():
        if start - step_s * 1000 <= t <= end:
            expected[point_label(t, start, step_s * 1000)] += value
    got = await store.step_totals("anonymous", CPU, "{}", start, end, step_s * 1000)
    totals: Counter[int] = Counter()
    for _, edge, total, _ in got:
        totals[edge] += total
    assert totals == expected and sum(n for *_, n in got) == sum(
        1 for _, t, _ in stored_profiles() if start - step_s * 1000 <= t <= end
    )


async def test_render_groups_max_nodes_and_bad_parameters(client: Client) -> None:
    lo, hi = window_s()
    resp = await client.get(RENDER, params={"query": CPU, "from": str(lo), "until": str(hi), "groupBy": "service_name"})
    doc = await resp.json()
    assert sorted(doc["groups"]) == sorted({s for s, _, _ in capture_profiles()})
    for service, timeline in doc["groups"].items():
        assert sum(timeline["samples"]) == total_of(service)
    assert sum(doc["timeline"]["samples"]) == 0  # more than one series: Render's timeline stays empty

    small = await (
        await client.get(RENDER, params={"query": CPU, "from": str(lo), "until": str(hi), "maxNodes": "5"})
    ).json()
    fb = small["flamebearer"]
    kept = sum(fb["names"][level[i + 3]] != "other" for level in fb["levels"][1:] for i in range(0, len(level), 4))
    # Pyroscope's rule (pkg/model/tree.go minValue): every node whose total reaches the 5th largest, ties too
    totals: Counter[tuple[str, ...]] = Counter()
    for _, _, samples in capture_profiles():
        for frames, value, _ in samples:
            for depth in range(1, len(frames) + 1):
                totals[tuple(frames[:depth])] += value
    fifth = sorted((t for t in totals.values() if t > 0), reverse=True)[4]
    assert kept == sum(t >= fifth for t in totals.values()) and "other" in fb["names"]

    for params, words in (
        ({"from": str(lo)}, '"query" is required'),
        ({"query": CPU, "from": "yesterday"}, "from 'yesterday'"),
        ({"query": '{service_name="x"}'}, "must contain a profile-type selection"),
        ({"query": CPU, "maxNodes": str(1 << 21)}, "max flamegraph nodes limit"),
    ):
        bad = await client.get(RENDER, params=params)
        body = await bad.json()
        assert bad.status == 400 and body["code"] == "invalid_argument" and words in body["message"], body


async def test_render_diff_and_the_diff_rpc(client: Client) -> None:
    lo, hi = window_s()
    params = {
        "leftQuery": CPU + '{service_name="shop-frontend"}',
        "leftFrom": str(lo * 1000),
        "leftUntil": str(hi * 1000),
        "rightQuery": CPU + '{service_name="shop-backend"}',
        "rightFrom": str(lo * 1000),
        "rightUntil": str(hi * 1000),
    }
    resp = await client.get(RENDER + "-diff", params=params)
    doc = await resp.json()
    assert resp.status == 200 and doc["metadata"]["format"] == "double"
    assert (doc["leftTicks"], doc["rightTicks"]) == (total_of("shop-frontend"), total_of("shop-backend"))
    assert doc["flamebearer"]["numTicks"] == doc["leftTicks"] + doc["rightTicks"]
    assert all(len(level) % 7 == 0 for level in doc["flamebearer"]["levels"])

    request = qpb.DiffRequest(
        left=qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="shop-frontend"}', start=lo * 1000, end=hi * 1000
        ),
        right=qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="shop-backend"}', start=lo * 1000, end=hi * 1000
        ),
    )
    for codec in ("json", "proto"):
        answer = await rpc(client, "Diff", request, qpb.DiffResponse, codec=codec)
        assert levels(answer.flamegraph) == doc["flamebearer"]["levels"]
        assert list(answer.flamegraph.names) == doc["flamebearer"]["names"]

    other = {**params, "rightQuery": "memory:alloc_space:bytes:space:bytes"}
    mismatch = await client.get(RENDER + "-diff", params=other)
    assert mismatch.status == 400 and (await mismatch.json())["message"] == "profile types must match"


async def test_render_dot(client: Client) -> None:
    lo, hi = window_s()
    resp = await client.get(RENDER, params={"query": CPU, "from": str(lo), "until": str(hi), "format": "dot"})
    text = await resp.text()
    assert resp.status == 200 and text.startswith('digraph "process_cpu" {') and text.endswith("}\n")
    nodes = [line for line in text.splitlines() if line.startswith("N") and " -> " not in line]
    assert "Type: cpu" in text and 0 < len(nodes) <= 100  # format=dot draws 100 nodes unless maxNodes says
    nobody = CPU + '{service_name="nobody"}'
    empty = await client.get(RENDER, params={"query": nobody, "from": str(lo), "until": str(hi), "format": "dot"})
    assert empty.status == 200 and await empty.read() == b""


# --------------------------------------------------------------------------------------------- formats and ids


async def test_every_select_merge_stacktraces_format(client: Client) -> None:
    lo, hi = window_s()
    base = qpb.SelectMergeStacktracesRequest(profile_typeID=CPU, label_selector="{}", start=lo * 1000, end=hi * 1000)
    flame = await rpc(client, "SelectMergeStacktraces", base, qpb.SelectMergeStacktracesResponse)
    stacks = dict(flamegraph.iter_stacks(flamegraph.decode(flame.flamegraph)))

    tree_req = qpb.SelectMergeStacktracesRequest()
    tree_req.CopyFrom(base)
    tree_req.format = qpb.PROFILE_FORMAT_TREE
    tree = await rpc(client, "SelectMergeStacktraces", tree_req, qpb.SelectMergeStacktracesResponse, codec="proto")
    assert not tree.HasField("flamegraph") and tree.tree
    assert dict(flamegraph.iter_stacks(treeformat.unmarshal(tree.tree))) == stacks

    tree_req.format = qpb.PROFILE_FORMAT_PPROF
    pprof = await rpc(client, "SelectMergeStacktraces", tree_req, qpb.SelectMergeStacktracesResponse)
    assert sum(s.value[0] for s in pprof.pprof.profile.sample) == total_of()

    tree_req.format = qpb.PROFILE_FORMAT_DOT
    dot = await rpc(client, "SelectMergeStacktraces", tree_req, qpb.SelectMergeStacktracesResponse)
    assert dot.dot.startswith('digraph "process_cpu"')

    # Profiles Drilldown's function table sends PROFILE_FORMAT_FUNCTIONS, a value no released Pyroscope knows: its
    # JSON codec drops the unknown name and answers a flame graph, which the app reads as "no table here"
    body = json.loads(json_format.MessageToJson(base))
    body["format"] = "PROFILE_FORMAT_FUNCTIONS"
    resp = await client.post(QUERIER + "SelectMergeStacktraces", json=body)
    answer = await resp.json()
    assert resp.status == 200 and "functions" not in answer and answer["flamegraph"]["total"] == str(total_of())


async def test_profile_id_selector_selects_the_exemplar_s_profile(client: Client) -> None:
    lo, hi = window_s()
    series = await rpc(
        client,
        "SelectSeries",
        qpb.SelectSeriesRequest(
            profile_typeID=CPU,
            label_selector='{service_name="shop-backend"}',
            start=lo * 1000,
            end=hi * 1000,
            step=15.0,
            exemplar_type=tpb.EXEMPLAR_TYPE_INDIVIDUAL,
        ),
        qpb.SelectSeriesResponse,
    )
    exemplars = [e for s in series.series for p in s.points for e in p.exemplars]
    assert exemplars and all(e.profile_id and e.value > 0 for e in exemplars)
    per_profile = stored_profiles()
    sample_keys = {k for _, _, own in per_profile for k, _ in own}
    for exemplar in exemplars:
        own = frozenset((lp.name, lp.value) for lp in exemplar.labels if lp.name in sample_keys)
        assert per_profile[("shop-backend", exemplar.timestamp, own)] == exemplar.value  # one profile, its total
        one = qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector="{}", start=lo * 1000, end=hi * 1000,
            profile_id_selector=[exemplar.profile_id],
        )  # fmt: skip
        flame = await rpc(client, "SelectMergeStacktraces", one, qpb.SelectMergeStacktracesResponse)
        assert flame.flamegraph.total == exemplar.value
    pprof = await rpc(
        client,
        "SelectMergeProfile",
        qpb.SelectMergeProfileRequest(
            profile_typeID=CPU, start=lo * 1000, end=hi * 1000, profile_id_selector=[exemplars[0].profile_id]
        ),
        profile_pb2.Profile,
        codec="proto",
    )
    assert sum(s.value[0] for s in pprof.sample) == exemplars[0].value

    unknown = qpb.SelectMergeStacktracesRequest(
        profile_typeID=CPU, start=lo * 1000, end=hi * 1000, profile_id_selector=["7c9e6679-7425-40de-944b-e07fc1f90ae7"]
    )
    assert (
        await rpc(client, "SelectMergeStacktraces", unknown, qpb.SelectMergeStacktracesResponse)
    ).flamegraph.total == 0
    unknown.profile_id_selector[:] = ["not-a-uuid"]
    resp = await client.post(QUERIER + "SelectMergeStacktraces", json=json.loads(json_format.MessageToJson(unknown)))
    assert resp.status == 400 and "not a UUID" in (await resp.json())["message"]
    spans = await client.post(
        QUERIER + "SelectSeries",
        json={
            "profileTypeID": CPU,
            "start": lo * 1000,
            "end": hi * 1000,
            "step": 15,
            "exemplarType": "EXEMPLAR_TYPE_SPAN",
        },
    )
    assert spans.status == 501 and (await spans.json())["message"] == "exemplar type span is not implemented"


async def test_select_heatmap_individual_and_span(client: Client) -> None:
    lo, hi = window_s()
    individual = await rpc(
        client,
        "SelectHeatmap",
        qpb.SelectHeatmapRequest(
            profile_typeID=CPU, label_selector="{}", start=lo * 1000, end=hi * 1000, step=15.0,
            query_type=qpb.HEATMAP_QUERY_TYPE_INDIVIDUAL, exemplar_type=tpb.EXEMPLAR_TYPE_INDIVIDUAL,
            group_by=["service_name"],
        ),
        qpb.SelectHeatmapResponse,
    )  # fmt: skip
    profiles = Counter(service for service, _, _ in stored_profiles())
    by_service = {s.labels[0].value: s for s in individual.series}
    assert set(by_service) == set(profiles)
    for service, heat in by_service.items():
        assert sum(sum(slot.counts) for slot in heat.slots) == profiles[service]  # one point per profile
        for slot in heat.slots:
            assert len(slot.y_min) == 20 and len(slot.exemplars) == sum(1 for c in slot.counts if c)
            assert all(e.profile_id and not e.span_id for e in slot.exemplars)

    span = await rpc(
        client,
        "SelectHeatmap",
        qpb.SelectHeatmapRequest(
            profile_typeID=CPU, label_selector='{service_name="shop-frontend"}', start=lo * 1000, end=hi * 1000,
            step=15.0, query_type=qpb.HEATMAP_QUERY_TYPE_SPAN, exemplar_type=tpb.EXEMPLAR_TYPE_SPAN,
        ),
        qpb.SelectHeatmapResponse,
        codec="proto",
    )  # fmt: skip
    pairs = {
        (t, labels["span_id"])
        for s, t, samples in capture_profiles()
        if s == "shop-frontend"
        for _, _, labels in samples
        if labels.get("span_id")
    }
    [heat] = span.series
    assert not heat.labels and sum(sum(slot.counts) for slot in heat.slots) == len(pairs)
    exemplar = max((e for slot in heat.slots for e in slot.exemplars), key=lambda e: e.value)
    assert len(exemplar.span_id) == 16 and not exemplar.profile_id
    merged = await rpc(
        client,
        "SelectMergeStacktraces",
        qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector='{service_name="shop-frontend"}', start=lo * 1000, end=hi * 1000,
            span_selector=[exemplar.span_id],
        ),
        qpb.SelectMergeStacktracesResponse,
    )  # fmt: skip
    assert merged.flamegraph.total >= exemplar.value > 0

    bad = await client.post(
        QUERIER + "SelectHeatmap",
        json={"profileTypeID": CPU, "start": lo * 1000, "end": hi * 1000, "step": 15,
              "queryType": "HEATMAP_QUERY_TYPE_SPAN", "exemplarType": "EXEMPLAR_TYPE_INDIVIDUAL"},
    )  # fmt: skip
    assert bad.status == 400 and "individual exemplars only available" in (await bad.json())["message"]


# --------------------------------------------------------------------------------------------- stats, settings, flags


async def test_profile_stats_and_query_analysis(client: Client) -> None:
    resp = await client.post(QUERIER + "GetProfileStats", json={})
    stats = await resp.json()
    times = [t for _, t, _ in capture_profiles()]
    assert stats == {
        "dataIngested": True,
        "oldestProfileTime": str(min(times) // 1_000_000),
        "newestProfileTime": str(max(times) // 1_000_000),
    }
    empty = await (await client.post(QUERIER + "GetProfileStats", json={}, headers={"X-Scope-OrgID": "nobody"})).json()
    assert empty == {"oldestProfileTime": str(2**63 - 1), "newestProfileTime": str(-(2**63))}  # dataIngested: false

    lo, hi = window_s()
    analysis = await rpc(
        client,
        "AnalyzeQuery",
        qpb.AnalyzeQueryRequest(start=lo * 1000, end=hi * 1000, query=CPU + '{service_name="shop-frontend"}'),
        qpb.AnalyzeQueryResponse,
    )
    [scope] = analysis.query_scopes
    assert (scope.component_type, scope.component_count, scope.block_count) == ("embedded store", 1, 1)
    stored = stored_profiles()
    series = {(service, own) for service, _, own in stored}
    assert (scope.profile_count, scope.series_count) == (len(stored), len(series))
    assert 0 < scope.sample_count <= sum(len(samples) for _, _, samples in capture_profiles())
    impact = analysis.query_impact
    assert impact.total_queried_series == sum(1 for service, _ in series if service == "shop-frontend")
    assert impact.total_bytes_in_time_range == scope.profile_bytes > 0


async def test_settings_per_tenant_as_pyroscope_keeps_them(client: Client) -> None:
    service = "/pyroscope/settings.v1.SettingsService/"
    assert await (await client.post(service + "Get", json={})).json() == {}
    value = json.dumps({"collapsedFlamegraphs": True})
    resp = await client.post(service + "Set", json={"setting": {"name": "pluginSettings", "value": value}})
    stored = (await resp.json())["setting"]
    assert resp.status == 200 and stored["modifiedAt"] == str(int(CAPTURE_END_S * 1000))  # stamped: the store's clock
    got = await (await client.post(service + "Get", json={})).json()
    assert got == {"settings": [{"name": "pluginSettings", "value": value, "modifiedAt": stored["modifiedAt"]}]}
    assert await (await client.post(service + "Get", json={}, headers={"X-Scope-OrgID": "team-b"})).json() == {}

    older = {"setting": {"name": "pluginSettings", "value": "{}", "modifiedAt": "1000"}}
    resp = await client.post(service + "Set", json=older)
    assert resp.status == 409 and (await resp.json())["code"] == "already_exists"
    resp = await client.post(service + "Set", json={})
    assert resp.status == 400 and (await resp.json())["message"] == "no setting values provided"
    resp = await client.post(service + "Set", json={"setting": {"name": "x" * 300, "value": "1"}})
    assert resp.status == 400 and "more than 256" in (await resp.json())["message"]

    assert (await client.post(service + "Delete", json={"name": "pluginSettings"})).status == 200
    assert await (await client.post(service + "Get", json={})).json() == {}


async def test_feature_flags_are_pyroscope_s_list_with_the_store_s_answers(client: Client) -> None:
    resp = await client.post("/pyroscope/capabilities.v1.FeatureFlagsService/GetFeatureFlags", json={})
    flags = (await resp.json())["featureFlags"]
    assert [f["name"] for f in flags] == [
        "pyroscopeRuler",
        "pyroscopeRulerFunctions",
        "utf8LabelNames",
        "v2StorageLayer",
    ]
    assert {f["name"]: f.get("enabled", False) for f in flags} == {
        "pyroscopeRuler": False, "pyroscopeRulerFunctions": False, "utf8LabelNames": False, "v2StorageLayer": True,
    }  # fmt: skip
    assert all(f["description"] for f in flags)


async def test_other_paths_stay_unimplemented_saying_what_is_served(client: Client) -> None:
    resp = await client.post("/pyroscope/vcs.v1.VCSService/GithubApp", json={})
    body = await resp.json()
    assert resp.status == 501 and body["code"] == "unimplemented"
    assert "SelectHeatmap" in body["message"] and "settings.v1.SettingsService/Get" in body["message"]
    # Connect is POST: a GET is not a call Grafana's clients make, refused by the mount (bridge.wire.allowlist)
    assert (await client.get("/pyroscope/settings.v1.SettingsService/Get")).status == 403


async def test_writing_settings_needs_the_ingest_permission(aiohttp_client: MakeClient, tmp_path: Path) -> None:
    """With tokens on, ``Set`` and ``Delete`` are writes (``ingest``), ``Get`` a read; each token's tenant only."""
    reader, writer = "a-read-token-for-team-b-01", "a-read-ingest-token-team-b-02"
    tokens = Settings.from_env({"PROFILE_BRIDGE_AUTH_TOKENS": f"{reader} team-b read; {writer} team-b read,ingest"})
    settings = Settings.for_tests(
        mode="standalone", data_dir=str(tmp_path / "data"), auth_env_tokens=tokens.auth_env_tokens
    )
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: CAPTURE_END_S))
    service = "/pyroscope/settings.v1.SettingsService/"
    body = {"setting": {"name": "pluginSettings", "value": "{}"}}
    refused = await client.post(service + "Set", json=body, headers={"Authorization": f"Bearer {reader}"})
    assert refused.status == 403 and "not ingest" in (await refused.json())["message"]
    delete = await client.post(service + "Delete", json={"name": "x"}, headers={"Authorization": f"Bearer {reader}"})
    assert delete.status == 403
    assert (await client.post(service + "Set", json=body, headers={"Authorization": f"Bearer {writer}"})).status == 200
    got = await client.post(service + "Get", json={}, headers={"Authorization": f"Bearer {reader}"})
    assert [s["name"] for s in (await got.json())["settings"]] == ["pluginSettings"]  # team-b's, stored once
    assert (await client.post(service + "Get", json={})).status == 401
