"""Static checks of the dashboards (bridge/provisioning/dashboards/*.json, shipped in the package and rendered by
``provision`` into dashboards/json/) against the provisioning the bridge renders, the bridge's metrics and the Grafana
image docker-compose.yaml pins."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from bridge.config import Settings
from bridge.metrics import Metrics
from bridge.provisioning.render import ProvisionSettings, dashboard_sources, render
from tests.paths import ROOT

DASHBOARD_DIR = ROOT / "bridge" / "provisioning" / "dashboards"
DASHBOARDS = sorted(DASHBOARD_DIR.glob("*.json"))
# Grafana's dashboard schema version (DASHBOARD_SCHEMA_VERSION) by major release of the image
SCHEMA_BY_GRAFANA_MAJOR = {"11": 39, "12": 41, "13": 42}
# variables Grafana defines itself
BUILTIN_VARIABLES = {
    "__rate_interval",
    "__interval",
    "__interval_ms",
    "__range",
    "__range_s",
    "__range_ms",
    "__from",
    "__to",
    "__url_time_range",
    "__all_variables",
    "__value",
    "__data",
    "__field",
    "__series",
    "__dashboard",
    "__org",
    "__user",
    "__timezone",
    "__name",
    "__all",
}
VARIABLE_RE = re.compile(
    r"\$\{([A-Za-z0-9_]+)(?:[.:][^}]*)?\}"  # ${name}, ${name:format}, ${__value.raw}
    r"|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]"  # [[name]] (deprecated syntax)
    r"|\$([A-Za-z_][A-Za-z0-9_]*)"  # $name
)
PROFILE_TYPE_RE = re.compile(r"^[^:\s]+(:[^:\s]+){4}$")


def _load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {var["name"]: var for var in dashboard.get("templating", {}).get("list", [])}


def _provisioned() -> dict[str, str]:
    """uid -> type of every data source in the committed default render."""
    files = render(ProvisionSettings.from_env({}, Settings()))
    doc = yaml.safe_load(files["datasources/profile-bridge.yaml"])
    return {ds["uid"]: ds["type"] for ds in doc["datasources"]}


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _referenced_variables(text: str) -> set[str]:
    names = set()
    for match in VARIABLE_RE.finditer(text):
        names.add(next(group for group in match.groups() if group))
    return names


def _resolve_uid(ref: dict[str, Any], variables: dict[str, dict[str, Any]]) -> tuple[str, str | None]:
    """(uid, plugin type the variable is restricted to) of a panel/target datasource reference."""
    uid = ref["uid"]
    refs = _referenced_variables(uid)
    if not refs:
        return uid, None
    (name,) = refs
    var = variables[name]
    assert var["type"] == "datasource", f"{uid} is not a datasource variable"
    return var["current"]["value"], var["query"]


def _compose_grafana_major() -> str:
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text(encoding="utf-8"))
    service = compose["services"]["grafana"]
    image = service["image"]
    if "build" in service:  # Grafana with the app plugin built in: its Dockerfile stage says which Grafana
        dockerfile = (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).read_text("utf-8")
        target = service["build"]["target"]
        stage = re.search(rf"^FROM\s+(\S+)\s+AS\s+{re.escape(target)}\s*$", dockerfile, re.M | re.I)
        assert stage, f"no Dockerfile stage {target}"
        image = stage.group(1)
    name, _, tag = image.partition(":")
    assert name == "grafana/grafana", image
    return tag.split(".")[0]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('{service_name="$service"}', {"service"}),
        (
            "${span_name:regex} ${__value.raw} [[old]] $__rate_interval",
            {"span_name", "__value", "old", "__rate_interval"},
        ),
        ("no variables {{legend}}", set()),
    ],
)
def test_variable_references_are_found(text: str, names: set[str]) -> None:
    assert _referenced_variables(text) == names


def test_there_are_two_dashboards() -> None:
    assert [p.name for p in DASHBOARDS] == ["profile-bridge.json", "span-profiles.json"]
    assert list(dashboard_sources()) == [p.name for p in DASHBOARDS]  # what `provision` renders
    titles = {_load(p)["title"] for p in DASHBOARDS}
    assert titles == {"profile-bridge", "Span profiles"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_schema_version_is_the_pinned_grafana_images(path: Path) -> None:
    assert _load(path)["schemaVersion"] == SCHEMA_BY_GRAFANA_MAJOR[_compose_grafana_major()]


def test_uids_are_unique_and_stable() -> None:
    uids = [_load(p)["uid"] for p in DASHBOARDS]
    assert sorted(uids) == ["profile-bridge-metrics", "profile-bridge-span-profiles"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panel_ids_unique_and_grid_positions_present(path: Path) -> None:
    panels = list(_panels(_load(path)))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), ids
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panel_data_sources_exist_in_the_provisioning(path: Path) -> None:
    dashboard = _load(path)
    variables = _variables(dashboard)
    provisioned = _provisioned()
    refs: list[dict[str, Any]] = []
    for panel in _panels(dashboard):
        if panel["type"] in ("text", "row"):
            assert "targets" not in panel
            continue
        refs.append(panel["datasource"])
        for target in panel["targets"]:
            refs.append(target["datasource"])
            assert target["datasource"] == panel["datasource"], panel["title"]
    refs.extend(var["datasource"] for var in variables.values() if var["type"] == "query")
    assert refs
    for ref in refs:
        uid, restricted_to = _resolve_uid(ref, variables)
        assert uid in provisioned, f"{ref} -> {uid}: no such data source in provisioning/"
        assert provisioned[uid] == ref["type"], ref
        assert restricted_to in (None, ref["type"]), ref


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_queries_use_only_existing_variables(path: Path) -> None:
    dashboard = _load(path)
    variables = _variables(dashboard)
    used: set[str] = set()
    for panel in _panels(dashboard):
        for text in _strings({k: v for k, v in panel.items() if k != "options"}):
            used |= _referenced_variables(text)
    for var in variables.values():
        for text in _strings(var.get("query", "")):
            used |= _referenced_variables(text)
        used |= _referenced_variables(var["datasource"]["uid"]) if "datasource" in var else set()
    unknown = {name for name in used if name not in variables and name not in BUILTIN_VARIABLES}
    assert not unknown, f"{path.name} uses undefined variables {sorted(unknown)}"
    # every defined variable is used somewhere (a leftover variable is a sign of a broken query)
    assert set(variables) <= used, set(variables) - used


def test_variable_queries_reference_no_undefined_variable_in_their_own_definition() -> None:
    for path in DASHBOARDS:
        for var in _variables(_load(path)).values():
            if var["type"] == "textbox":
                assert var["current"]["value"] == var["query"]


def test_flame_graph_targets_have_profile_type_and_label_selector() -> None:
    flamegraphs = [panel for path in DASHBOARDS for panel in _panels(_load(path)) if panel["type"] == "flamegraph"]
    assert flamegraphs
    for panel in flamegraphs:
        assert panel["datasource"]["type"] == "grafana-pyroscope-datasource"
        for target in panel["targets"]:
            assert target["queryType"] == "profile"
            assert PROFILE_TYPE_RE.match(target["profileTypeId"]), target
            selector = target["labelSelector"]
            assert selector.startswith("{") and selector.endswith("}") and "$service" in selector, target
            assert target["groupBy"] == []


def test_span_profiles_dashboard_has_what_issue_4_asks() -> None:
    dashboard = _load(DASHBOARD_DIR / "span-profiles.json")
    variables = _variables(dashboard)
    assert {"service", "span_name"} <= set(variables)
    assert variables["service"]["query"]["labelName"] == "service_name"
    panels = {panel["type"]: panel for panel in _panels(dashboard)}
    # the service's flame graph over the whole range (a second one narrows it to root spans of one name)
    selectors = [p["targets"][0]["labelSelector"] for p in _panels(dashboard) if p["type"] == "flamegraph"]
    assert selectors == ['{service_name="$service"}', '{service_name="$service", span_name=~"$span_name"}']
    # slowest spans of the service, trace ids linked to the trace view
    table = panels["table"]
    (target,) = table["targets"]
    assert target["queryType"] == "traceql" and target["datasource"]["type"] == "tempo"
    assert 'resource.service.name = "$service"' in target["query"] and "$span_name" in target["query"]
    assert table["transformations"][0]["options"]["sort"] == [{"field": "Duration", "desc": True}]
    (override,) = table["fieldConfig"]["overrides"]
    assert override["matcher"]["options"] == "traceIdHidden"  # the trace id column of Tempo's span table
    links = next(p["value"] for p in override["properties"] if p["id"] == "links")
    assert any("var-trace_id=${__value.raw}" in link["url"] for link in links)
    assert any(link["url"].startswith("/explore?") and "${__value.raw}" in link["url"] for link in links)
    assert panels["traces"]["targets"][0]["query"] == "$trace_id"
    # the resolution modes explained
    text = panels["text"]["options"]["content"]
    for mode in ("linked", "local-root", "time-window", "none"):
        assert f"**{mode}**" in text


def _metric_series_names() -> set[str]:
    names: set[str] = set()
    for value in vars(Metrics()).values():
        if isinstance(value, Counter):
            names.add(value._name + "_total")
        elif isinstance(value, Histogram):
            names |= {value._name + suffix for suffix in ("_bucket", "_sum", "_count")}
        elif isinstance(value, Gauge):
            names.add(value._name)
    return names


def test_bridge_dashboard_queries_only_metrics_the_bridge_exports() -> None:
    dashboard = _load(DASHBOARD_DIR / "profile-bridge.json")
    exported = _metric_series_names()
    assert "profile_bridge_requests_total" in exported and "profile_bridge_request_seconds_bucket" in exported
    used: set[str] = set()
    for panel in _panels(dashboard):
        assert panel["datasource"]["type"] == "prometheus"
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            used |= set(re.findall(r"profile_bridge_[a-z_]+", expr))
    assert used <= exported, used - exported
    # requests, resolutions by mode, upstream latency, cache
    for name in (
        "profile_bridge_requests_total",
        "profile_bridge_resolutions_total",
        "profile_bridge_upstream_seconds_bucket",
        "profile_bridge_cache_hits_total",
        "profile_bridge_cache_misses_total",
    ):
        assert name in used


def test_span_table_traceql_is_understood_by_standalone_mode_too() -> None:
    """With the variables at their defaults (and a service chosen), the table's TraceQL is a search the standalone
    store answers, so the dashboard also works against a bridge without Tempo."""
    from bridge.traceql.conditions import extract
    from bridge.traceql.search import compile_search

    dashboard = _load(DASHBOARD_DIR / "span-profiles.json")
    variables = _variables(dashboard)
    values = {
        "service": "shop-backend",
        "span_name": variables["span_name"]["allValue"],
        "min_duration": variables["min_duration"]["query"],
    }
    (table,) = [p for p in _panels(dashboard) if p["type"] == "table"]
    query = table["targets"][0]["query"]
    for name, value in values.items():
        query = query.replace(f"${name}", value)
    plan = compile_search(query)
    assert len(next(iter(extract(plan.root).values())).conditions) == 3
