"""Profiles Drilldown runs only in a browser, so its requests are replayed here exactly as its source builds them
(issue 20 §5) — bodies, field spellings (snake_case, camelCase, enum numbers as protobuf-es serialises them),
content types and the fields it reads from each answer — against a standalone bridge holding the shop capture.
Each test names the file it comes from: grafana/explore-profiles at 697f3c77 (1.4.0, ``/work``'s mirror) or its
successor grafana/profiles-drilldown (2026, read from the public index).

Through Grafana's data-source proxy a call to ``<data source URL>/X`` arrives as ``/pyroscope/X``: the data
source's URL is the bridge's ``/pyroscope`` mount."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from bridge._proto import profile_pb2
from bridge._proto import querier_pb2 as qpb
from tests.store.test_pyroscope_api import CPU, MakeClient, open_bridge, total_of, window_s

Client = TestClient[Any, Any]
DS = "/pyroscope"  # the data source's URL, as Grafana's proxy forwards it
JSON = {"content-type": "application/json"}  # ApiClient.ts sends it on every call


@pytest.fixture
async def client(aiohttp_client: MakeClient, tmp_path: Path) -> Client:
    return await open_bridge(aiohttp_client, tmp_path)


def ms() -> tuple[int, int]:
    lo, hi = window_s()
    return lo * 1000, hi * 1000


async def test_onboarding_stats(client: Client) -> None:
    """explore-profiles src/app/components/Onboarding/infrastructure/statsApiClient.ts: the onboarding screen shows
    unless ``dataIngested``."""
    resp = await client.post(DS + "/querier.v1.QuerierService/GetProfileStats", data="{}", headers=JSON)
    json_ = await resp.json()
    assert json_["dataIngested"] is True
    assert int(json_["oldestProfileTime"]) <= int(json_["newestProfileTime"])


async def test_plugin_settings_round_trip(client: Client) -> None:
    """grafana/explore-profiles v1.4.0 src/shared/infrastructure/settings/settingsApiClient.ts: ``pluginSettings`` as
    a JSON text."""
    get = await client.post(DS + "/settings.v1.SettingsService/Get", data=json.dumps({}), headers=JSON)
    assert next((s for s in (await get.json()).get("settings", []) if s["name"] == "pluginSettings"), None) is None
    value = json.dumps({"collapsedFlamegraphs": True, "maxNodes": 16384, "enableFlameGraphDotComExport": True})
    body = json.dumps({"setting": {"name": "pluginSettings", "value": value}})
    set_ = await client.post(DS + "/settings.v1.SettingsService/Set", data=body, headers=JSON)
    assert set_.status == 200 and await set_.json()
    get = await client.post(DS + "/settings.v1.SettingsService/Get", data=json.dumps({}), headers=JSON)
    setting = next(s for s in (await get.json())["settings"] if s["name"] == "pluginSettings")
    assert json.loads(setting["value"])["maxNodes"] == 16384


async def test_flame_graph_and_dot_from_render(client: Client) -> None:
    """explore-profiles src/pages/ProfilesExplorerView/infrastructure/profiles/ProfileApiClient.ts: ``from``/``until``
    as ``unix() * 1000``, ``max-nodes``, ``format`` json or dot (read as text)."""
    lo, hi = ms()
    query = CPU + '{service_name="shop-backend"}'
    params = {"query": query, "from": str(lo), "until": str(hi), "format": "json", "max-nodes": "16384"}
    doc = await (await client.get(DS + "/pyroscope/render", params=params)).json()
    assert doc["flamebearer"]["numTicks"] == total_of("shop-backend") and doc["metadata"]["units"] == "samples"
    dot = await client.get(DS + "/pyroscope/render", params={**params, "format": "dot"})
    assert (await dot.text()).startswith("digraph")


async def test_diff_view(client: Client) -> None:
    """explore-profiles …/SceneDiffFlameGraph/infrastructure/DiffProfileApiClient.ts (``unix() * 1000``) and
    profiles-drilldown's same file (``valueOf()``, ms): ``/pyroscope/render-diff`` read as a Flamebearer."""
    lo, hi = ms()
    params = {
        "leftQuery": CPU + '{service_name="shop-backend"}',
        "leftFrom": str(lo),
        "leftUntil": str(hi),
        "rightQuery": CPU + '{service_name="shop-frontend"}',
        "rightFrom": str(lo + 1),
        "rightUntil": str(hi - 1),
        "max-nodes": "16384",
    }
    doc = await (await client.get(DS + "/pyroscope/render-diff", params=params)).json()
    assert doc["metadata"]["format"] == "double"
    assert (doc["leftTicks"], doc["rightTicks"]) == (total_of("shop-backend"), total_of("shop-frontend"))


async def test_pprof_downloads_and_function_details(client: Client) -> None:
    """explore-profiles and profiles-drilldown …/SceneExploreServiceFlameGraph/infrastructure/PprofApiClient.ts: a
    protobufjs ``PprofRequest`` (fields 1–5) with ``profile_id_selector`` appended as field 7 (``uint32(58)``), sent
    as ``application/proto`` and read as a blob; and the JSON form with snake_case, ``stackTraceSelector.call_site``,
    a ``frameFilter`` this Pyroscope does not know, ``maxNodes`` and ``profileIdSelector``."""
    lo, hi = ms()
    request = qpb.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector='{service_name="shop-backend"}', start=lo, end=hi, max_nodes=16384
    ).SerializeToString()
    resp = await client.post(
        DS + "/querier.v1.QuerierService/SelectMergeProfile",
        data=request,
        headers={"content-type": "application/proto"},
    )
    pprof = profile_pb2.Profile.FromString(await resp.read())
    assert sum(s.value[0] for s in pprof.sample) == total_of("shop-backend")
    strings = list(pprof.string_table)
    root = strings[next(f.name for f in pprof.function if f.id == pprof.sample[0].location_id[-1])]

    body = {
        "profile_typeID": CPU,
        "label_selector": '{service_name="shop-backend"}',
        "start": lo // 1000 * 1000,
        "end": hi // 1000 * 1000,
        "stackTraceSelector": {"call_site": [{"name": root}], "frameFilter": {"exclude": ["x"]}},
        "maxNodes": 16384,
    }
    resp = await client.post(DS + "/querier.v1.QuerierService/SelectMergeProfile", data=json.dumps(body), headers=JSON)
    answer = await resp.json()
    assert resp.status == 200 and answer["sample"] and answer["stringTable"][0] == ""

    exemplar = await client.post(
        DS + "/querier.v1.QuerierService/SelectSeries",
        data=json.dumps({"profileTypeID": CPU, "labelSelector": "{}", "start": lo, "end": hi, "step": 15,
                         "exemplarType": 2}),
        headers=JSON,
    )  # fmt: skip
    profile_id = (await exemplar.json())["series"][0]["points"][0]["exemplars"][0]["profileId"]
    one = await client.post(
        DS + "/querier.v1.QuerierService/SelectMergeProfile",
        data=request + b"\x3a" + bytes([len(profile_id)]) + profile_id.encode(),  # uint32(58).string(id)
        headers={"content-type": "application/proto"},
    )
    assert 0 < sum(s.value[0] for s in profile_pb2.Profile.FromString(await one.read()).sample) < total_of()


async def test_function_table_falls_back_as_with_pyroscope(client: Client) -> None:
    """profiles-drilldown src/pages/ProfilesExplorerView/infrastructure/functions/FunctionTableApiClient.ts: format
    ``PROFILE_FORMAT_FUNCTIONS`` (a name no released Pyroscope knows) on ``SelectMergeStacktraces`` and on
    ``Diff`` (where ``format`` and ``maxNodes`` sit beside ``left``/``right``); the app reads ``json.functions`` and,
    absent — "older servers may ignore the format and return a flamegraph" —, draws its table from the flame graph."""
    lo, hi = ms()
    selection = {"profileTypeID": CPU, "labelSelector": '{service_name="shop-backend"}', "start": lo, "end": hi}
    one = await client.post(
        DS + "/querier.v1.QuerierService/SelectMergeStacktraces",
        data=json.dumps({**selection, "format": "PROFILE_FORMAT_FUNCTIONS", "maxNodes": 16384}),
        headers=JSON,
    )
    answer = await one.json()
    assert (
        one.status == 200
        and "functions" not in answer
        and int(answer["flamegraph"]["total"]) == total_of("shop-backend")
    )
    diff = await client.post(
        DS + "/querier.v1.QuerierService/Diff",
        data=json.dumps({"left": selection, "right": {**selection, "spanSelector": []},
                         "format": "PROFILE_FORMAT_FUNCTIONS", "maxNodes": 16384}),
        headers=JSON,
    )  # fmt: skip
    answer = await diff.json()
    assert diff.status == 200 and "functions" not in answer
    assert int(answer["flamegraph"]["leftTicks"]) == int(answer["flamegraph"]["rightTicks"]) == total_of("shop-backend")


async def test_feature_flags_capability(client: Client) -> None:
    """profiles-drilldown's ``functionProjectionsCapability`` (GetFeatureFlags, body ``'{}'``): looks for a
    ``functionProjections`` flag, which Pyroscope does not have, and keeps its local behaviour without it."""
    resp = await client.post(DS + "/capabilities.v1.FeatureFlagsService/GetFeatureFlags", data="{}", headers=JSON)
    flags = (await resp.json())["featureFlags"]
    assert not any(f.get("name") == "functionProjections" and f.get("enabled") is True for f in flags)


async def test_span_heatmap(client: Client) -> None:
    """profiles-drilldown …/SceneExploreServiceHeatmap/infrastructure/HeatmapApiClient.ts: camelCase, ``groupBy``,
    and ``queryType`` / ``exemplarType`` as protobuf-es enum numbers (2, 3); it reads ``series[].slots[]``
    ``timestamp``, ``yMin``, ``counts``, ``exemplars[].spanId/traceId/value``."""
    lo, hi = ms()
    body = {"profileTypeID": CPU, "labelSelector": '{service_name="shop-frontend"}', "start": lo, "end": hi,
            "step": 15, "groupBy": [], "queryType": 2, "exemplarType": 3}  # fmt: skip
    resp = await client.post(DS + "/querier.v1.QuerierService/SelectHeatmap", data=json.dumps(body), headers=JSON)
    answer = await resp.json()
    [series] = answer["series"]
    slot = series["slots"][0]
    assert len(slot["yMin"]) == len(slot["counts"]) == 20 and int(slot["timestamp"]) % 1000 == lo % 1000
    assert all(len(e["spanId"]) == 16 and int(e["value"]) > 0 for s in series["slots"] for e in s["exemplars"])


async def test_labels_series_and_query_analysis(client: Client) -> None:
    """grafana/explore-profiles v1.4.0 src/shared/infrastructure/labels/LabelsApiClient.ts (``queryToMatchers``: the
    profile type as ``__profile_type__``, the rest of the selector after it, a trailing comma and all), …/series/http/
    SeriesApiClient.ts (``labelNames``, empty ``matchers``) and src/shared/components/QueryAnalysisTooltip/
    infrastructure/queryAnalysisApiClient.ts (reads ``queryImpact`` and ``queryScopes``)."""
    lo, hi = ms()
    for matchers in (
        [f'{{__profile_type__="{CPU}", service_name="shop-backend"}}'],
        [f'{{__profile_type__="{CPU}", }}'],
    ):
        names = await client.post(
            DS + "/querier.v1.QuerierService/LabelNames",
            data=json.dumps({"matchers": matchers, "start": lo, "end": hi}),
            headers=JSON,
        )
        assert "service_name" in (await names.json())["names"]
    values = await client.post(
        DS + "/querier.v1.QuerierService/LabelValues",
        data=json.dumps(
            {"name": "service_name", "matchers": [f'{{__profile_type__="{CPU}", }}'], "start": lo, "end": hi}
        ),
        headers=JSON,
    )
    assert (await values.json())["names"] == ["shop-backend", "shop-frontend"]
    series = await client.post(
        DS + "/querier.v1.QuerierService/Series",
        data=json.dumps({"start": lo, "end": hi, "labelNames": ["service_name", "__profile_type__"], "matchers": []}),
        headers=JSON,
    )
    pairs = {tuple(lp["value"] for lp in s["labels"]) for s in (await series.json())["labelsSet"]}
    assert (CPU, "shop-backend") in {tuple(sorted(p, key=lambda v: v != CPU)) for p in pairs}
    analysis = await client.post(
        DS + "/querier.v1.QuerierService/AnalyzeQuery",
        data=json.dumps({"start": lo, "end": hi, "query": CPU + '{service_name="shop-backend"}'}),
        headers=JSON,
    )
    doc = await analysis.json()
    assert int(doc["queryImpact"]["totalBytesInTimeRange"]) > 0 and doc["queryScopes"][0]["componentType"]
