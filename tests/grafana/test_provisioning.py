"""``profile-bridge provision``: the rendered Grafana provisioning, golden files, the committed ``provisioning/``
directory, the dashboards in the render (a complete tree, also from a built wheel), and one-line errors for bad
settings."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.cli import main
from bridge.config import ConfigError, Settings
from bridge.provisioning.render import (
    DASHBOARDS_OUT,
    PLUGIN_OUT,
    PROVISION_FIELDS,
    ProvisionSettings,
    dashboard_sources,
    provision_markdown,
    render,
    run_provision,
    yaml_str,
)
from tests.paths import GOLDEN, ROOT

REPO_PROVISIONING = ROOT / "provisioning"

CUSTOM_ENV = {
    "PROFILE_BRIDGE_PROVISION_BRIDGE_URL": "https://bridge.example.com:8443/",
    "PROFILE_BRIDGE_PROVISION_BROWSER_URL": "https://profiles.example.com/$team/",
    "PROFILE_BRIDGE_PROVISION_TEMPO_NAME": "Traces $team (bridge)",
    "PROFILE_BRIDGE_PROVISION_PROFILES_NAME": 'Profiles: "bridge" ${HOME}',
    "PROFILE_BRIDGE_GRAFANA_TEMPO_UID": "tempo-1",
    "PROFILE_BRIDGE_GRAFANA_PROFILES_UID": "prof_1",
    "PROFILE_BRIDGE_PROFILE_TYPE": "memory:alloc_space:bytes:space:bytes",
    "PROFILE_BRIDGE_PROVISION_TAGS": "service.name=service_name,k8s.pod.name=pod",
    "PROFILE_BRIDGE_PROVISION_TEMPO_DIRECT_URL": "",
    "PROFILE_BRIDGE_PROVISION_PYROSCOPE_DIRECT_URL": "http://pyro.internal:4040",
    "PROFILE_BRIDGE_PROVISION_PYROSCOPE_DIRECT_UID": "pyro",
    "PROFILE_BRIDGE_PROVISION_PROMETHEUS_URL": "",
    "PROFILE_BRIDGE_PROVISION_DASHBOARDS_PATH": "/etc/dashboards/profile-bridge",
    "PROFILE_BRIDGE_PROVISION_DASHBOARDS_FOLDER": "Profiling ünd $$ more",
}


def _render_env(environ: dict[str, str], compose: bool = True) -> dict[str, str]:
    """The render of ``provision --compose`` (``compose=False``: of ``provision`` without it)."""
    return render(ProvisionSettings.from_env(environ, Settings.from_env(environ), compose=compose))


def _read_tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _grafana_unescape(text: str) -> str:
    """What Grafana makes of a provisioning scalar: ``$$`` is a literal ``$``; ``$NAME``/``${NAME}`` would be
    expanded from its environment (here: must not occur)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$":
            assert text[i + 1 : i + 2] == "$", f"unescaped $ in {text!r} would be expanded by Grafana"
            out.append("$")
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _datasources(files: dict[str, str]) -> list[dict[str, object]]:
    doc = yaml.safe_load(files["datasources/profile-bridge.yaml"])
    assert doc["apiVersion"] == 1
    return list(doc["datasources"])


def _yaml_files(files: dict[str, str]) -> dict[str, str]:
    """The YAML part of a render. The dashboards (``dashboards/json/``) have no golden copy: a default render leaves
    the shipped files byte for byte and a custom one only changes data source defaults (both tested below)."""
    return {rel: text for rel, text in files.items() if not rel.startswith(DASHBOARDS_OUT + "/")}


def _grafana_dashboards(tree: Path, provisioning_dir: str) -> dict[str, dict[str, Any]]:
    """What Grafana loads from ``tree`` mounted as its provisioning directory ``provisioning_dir``: the providers of
    the ``*.yaml``/``*.yml`` files directly in ``dashboards/`` (its config reader reads no subfolder), each ``file``
    provider's ``options.path`` walked for ``*.json`` (dot folders skipped). ``{path inside Grafana: dashboard}``."""
    found: dict[str, dict[str, Any]] = {}
    configs = [p for p in sorted((tree / "dashboards").iterdir()) if p.is_file() and p.suffix in (".yaml", ".yml")]
    assert configs
    for config in configs:
        for provider in yaml.safe_load(config.read_text(encoding="utf-8"))["providers"]:
            assert provider["type"] == "file"
            path = _grafana_unescape(provider["options"]["path"])
            assert path.startswith(provisioning_dir + "/"), f"{path} is not inside {provisioning_dir}: not in the tree"
            local = tree / path.removeprefix(provisioning_dir + "/")
            assert local.is_dir(), f"the provider looks in {path}, which the render does not fill"
            for file in sorted(local.rglob("*.json")):
                if not any(part.startswith(".") for part in file.relative_to(local).parts[:-1]):
                    found[f"{path}/{file.relative_to(local).as_posix()}"] = json.loads(file.read_text("utf-8"))
    return found


@pytest.mark.parametrize(("name", "environ"), [("default", {}), ("custom", CUSTOM_ENV)], ids=["default", "custom"])
def test_golden(name: str, environ: dict[str, str], update_golden: bool) -> None:
    files = _render_env(environ)
    golden_dir = GOLDEN / "provisioning" / name
    if update_golden:
        for rel, text in _yaml_files(files).items():
            (golden_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / rel).write_text(text, encoding="utf-8")
    assert _yaml_files(files) == _read_tree(golden_dir)
    assert sorted(set(files) - set(_yaml_files(files))) == [f"{DASHBOARDS_OUT}/{n}" for n in dashboard_sources()]


def test_committed_provisioning_is_a_fresh_default_render() -> None:
    assert _read_tree(REPO_PROVISIONING) == _render_env({}), (
        "provisioning/ differs from a fresh render: run `profile-bridge provision --compose --out provisioning` with "
        "no PROFILE_BRIDGE_* settings in the environment"
    )


def test_default_render_wires_tempo_to_the_bridge_profiles() -> None:
    by_name = {ds["name"]: ds for ds in _datasources(_render_env({}))}
    assert list(by_name) == ["Tempo", "Profiles", "Tempo (direct)", "Pyroscope (direct)", "Prometheus (profile-bridge)"]
    tempo, profiles = by_name["Tempo"], by_name["Profiles"]
    assert tempo["type"] == "tempo"
    assert tempo["uid"] == Settings().grafana_tempo_uid == "profile-bridge-tempo"
    assert tempo["url"] == "http://bridge:4041/tempo"
    assert profiles["type"] == "grafana-pyroscope-datasource"
    assert profiles["uid"] == Settings().grafana_profiles_uid == "profile-bridge-pyroscope"
    assert profiles["url"] == "http://bridge:4041/pyroscope"
    t2p = tempo["jsonData"]["tracesToProfiles"]  # type: ignore[index]
    assert t2p == {
        "datasourceUid": "profile-bridge-pyroscope",
        "profileTypeId": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        "customQuery": False,
        "tags": [
            {"key": "service.name", "value": "service_name"},
            {"key": "service.namespace", "value": "service_namespace"},
        ],
    }
    assert tempo["jsonData"]["streamingEnabled"] == {"search": False, "metrics": False}  # type: ignore[index]
    direct = by_name["Tempo (direct)"]
    assert direct["url"] == "http://tempo:3200"
    assert direct["jsonData"]["tracesToProfiles"]["datasourceUid"] == "pyroscope-direct"  # type: ignore[index]
    assert by_name["Pyroscope (direct)"]["url"] == "http://pyroscope:4040"
    assert by_name["Prometheus (profile-bridge)"]["type"] == "prometheus"
    for ds in by_name.values():
        assert ds["access"] == "proxy"

    provider = yaml.safe_load(_render_env({})["dashboards/profile-bridge.yaml"])
    assert provider["apiVersion"] == 1
    (prov,) = provider["providers"]
    assert prov["type"] == "file"
    assert prov["options"]["path"] == "/etc/grafana/provisioning/dashboards/json"


def test_custom_render_uses_every_setting_and_escapes_dollars() -> None:
    files = _render_env(CUSTOM_ENV)
    by_uid = {ds["uid"]: ds for ds in _datasources(files)}
    assert list(by_uid) == ["tempo-1", "prof_1", "pyro"]  # empty URLs leave Tempo (direct) and Prometheus out
    tempo, profiles = by_uid["tempo-1"], by_uid["prof_1"]
    assert _grafana_unescape(str(tempo["name"])) == "Traces $team (bridge)"
    assert _grafana_unescape(str(profiles["name"])) == 'Profiles: "bridge" ${HOME}'
    assert tempo["url"] == "https://bridge.example.com:8443/tempo"
    assert profiles["url"] == "https://bridge.example.com:8443/pyroscope"
    t2p = tempo["jsonData"]["tracesToProfiles"]  # type: ignore[index]
    assert t2p["datasourceUid"] == "prof_1"
    assert t2p["profileTypeId"] == "memory:alloc_space:bytes:space:bytes"
    assert t2p["tags"] == [{"key": "service.name", "value": "service_name"}, {"key": "k8s.pod.name", "value": "pod"}]
    assert by_uid["pyro"]["url"] == "http://pyro.internal:4040"
    (prov,) = yaml.safe_load(files["dashboards/profile-bridge.yaml"])["providers"]
    assert _grafana_unescape(prov["folder"]) == "Profiling ünd $$ more"
    assert prov["options"]["path"] == "/etc/dashboards/profile-bridge"
    for text in _yaml_files(files).values():  # every $ in the YAML output is doubled
        _grafana_unescape(text.replace("$$", ""))
    # Grafana does not expand dashboard JSON: there a $ stays single (template variables like $service work)
    dashboards = {rel: text for rel, text in files.items() if rel not in _yaml_files(files)}
    assert dashboards and all("$$" not in text for text in dashboards.values())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", '"plain"'),
        ("a $b", '"a $$b"'),
        ("${X}", '"$${X}"'),
        ('q"uote', '"q\\"uote"'),
        (15, "15"),
        ("ünï", '"ünï"'),
        ("line\nbreak", '"line\\nbreak"'),
    ],
)
def test_yaml_str(value: object, expected: str) -> None:
    assert yaml_str(value) == expected
    assert yaml.safe_load(expected.replace("$$", "$")) == value


def test_cli_render_is_deterministic_and_matches_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["provision", "--out", str(first)], environ=CUSTOM_ENV) == 0
    assert main(["provision", "--out", str(second)], environ=CUSTOM_ENV) == 0
    assert _read_tree(first) == _read_tree(second) == _render_env(CUSTOM_ENV, compose=False)
    assert PLUGIN_OUT not in _read_tree(first)  # not asked for (--app-plugin)
    out = capsys.readouterr().out
    assert f"wrote {first / 'datasources' / 'profile-bridge.yaml'}" in out
    # rendering over an existing render replaces the files, leaves nothing else behind
    assert main(["provision", "--compose", "--out", str(first)], environ={}) == 0
    assert _read_tree(first) == _render_env({})


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"PROFILE_BRIDGE_PROVISION_BRIDGE_URL": "bridge:4041"}, "PROFILE_BRIDGE_PROVISION_BRIDGE_URL"),
        ({"PROFILE_BRIDGE_PROVISION_TAGS": "service.name"}, "PROFILE_BRIDGE_PROVISION_TAGS"),
        ({"PROFILE_BRIDGE_PROVISION_TAGS": "service.name=service-name"}, "PROFILE_BRIDGE_PROVISION_TAGS"),
        ({"PROFILE_BRIDGE_PROVISION_PROFILE_TYPE": "process_cpu"}, "PROFILE_BRIDGE_PROVISION_PROFILE_TYPE"),
        ({"PROFILE_BRIDGE_PROFILE_TYPE": "cpu:x"}, "PROFILE_BRIDGE_PROFILE_TYPE"),
        ({"PROFILE_BRIDGE_PROVISION_TEMPO_NAME": "  "}, "PROFILE_BRIDGE_PROVISION_TEMPO_NAME"),
        ({"PROFILE_BRIDGE_PROVISION_TEMPO_NAME": "two\nlines"}, "PROFILE_BRIDGE_PROVISION_TEMPO_NAME"),
        ({"PROFILE_BRIDGE_PROVISION_TEMPO_DIRECT_UID": "has space"}, "PROFILE_BRIDGE_PROVISION_TEMPO_DIRECT_UID"),
        ({"PROFILE_BRIDGE_GRAFANA_TEMPO_UID": "x" * 41}, "PROFILE_BRIDGE_GRAFANA_TEMPO_UID"),
        ({"PROFILE_BRIDGE_PROVISION_PROFILES_NAME": "Tempo"}, "PROFILE_BRIDGE_PROVISION_PROFILES_NAME"),
        (
            {"PROFILE_BRIDGE_PROVISION_PYROSCOPE_DIRECT_UID": "tempo-direct"},
            "PROFILE_BRIDGE_PROVISION_PYROSCOPE_DIRECT_UID",
        ),
        ({"PROFILE_BRIDGE_PROVISION_DASHBOARDS_PATH": "relative/dir"}, "PROFILE_BRIDGE_PROVISION_DASHBOARDS_PATH"),
        ({"PROFILE_BRIDGE_PROVISION_PROMETHEUS_URL": "ftp://x"}, "PROFILE_BRIDGE_PROVISION_PROMETHEUS_URL"),
        ({"PROFILE_BRIDGE_PROVISION_BRIDGEURL": "http://x"}, "PROFILE_BRIDGE_PROVISION_BRIDGEURL"),
    ],
)
def test_bad_setting_is_one_line_exit_2_and_writes_nothing(
    environ: dict[str, str], key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    assert main(["provision", "--compose", "--out", str(out_dir)], environ=environ) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"profile-bridge: {key} has value ")
    assert "Traceback" not in err
    assert not out_dir.exists()


def test_unwritable_out_dir_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["provision", "--compose", "--out", str(blocker)], environ={}) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("profile-bridge: --out has value ")


def test_run_provision_writes_to_the_given_stream(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_provision(Settings(), tmp_path, {}, out, compose=True) == 0
    lines = out.getvalue().splitlines()
    wrote = [f"wrote {tmp_path / rel}" for rel in _render_env({})]
    assert lines[: len(wrote)] == wrote
    assert lines[len(wrote) :] == [
        "rendered for the docker compose stack (--compose): unset URLs are its service names",
        "Tempo data source 'Tempo' → http://bridge:4041/tempo",
        "Profiles data source 'Profiles' → http://bridge:4041/pyroscope",
        "'Tempo (direct)' → http://tempo:3200",
        "'Pyroscope (direct)' → http://pyroscope:4040",
        "'Prometheus (profile-bridge)' → http://prometheus:9090",
        "dashboards in folder 'profile-bridge', read by Grafana from /etc/grafana/provisioning/dashboards/json",
        "the Grafana app plugin profile-bridge-app is enabled (plugins/profile-bridge-app.yaml): Grafana refuses to "
        "start unless the plugin is installed (docs/grafana-plugin.md)",
    ]
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_without_a_bridge_url_or_compose_nothing_is_assumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run with no settings, provision does not quietly write compose host names: it asks for the bridge URL (one
    line, exit 2, nothing written)."""
    out_dir = tmp_path / "out"
    assert main(["provision", "--out", str(out_dir)], environ={}) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("profile-bridge: PROFILE_BRIDGE_PROVISION_BRIDGE_URL is not set: give --bridge-url URL")
    assert "--compose" in err
    assert not out_dir.exists()


def test_a_render_for_your_own_grafana_has_no_compose_host_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    environ = {"PROFILE_BRIDGE_PROVISION_BRIDGE_URL": "http://from-env:4041"}
    assert (
        main(
            ["provision", "--bridge-url", "http://profile-bridge.internal:4041", "--out", str(out_dir)], environ=environ
        )
        == 0
    )
    files = _read_tree(out_dir)
    datasources = _datasources(files)
    assert [(ds["name"], ds["url"]) for ds in datasources] == [
        ("Tempo", "http://profile-bridge.internal:4041/tempo"),  # --bridge-url beats the environment
        ("Profiles", "http://profile-bridge.internal:4041/pyroscope"),
    ]
    text = "\n".join(files.values())
    for compose_host in ("bridge:4041", "tempo:3200", "pyroscope:4040", "prometheus:9090", "from-env"):
        assert compose_host not in text.replace("profile-bridge.internal:4041", "")
    out = capsys.readouterr().out
    assert "'Tempo (direct)' left out (PROFILE_BRIDGE_PROVISION_TEMPO_DIRECT_URL not set)" in out
    assert "'Prometheus (profile-bridge)' left out (PROFILE_BRIDGE_PROVISION_PROMETHEUS_URL not set)" in out
    assert "--compose" not in out
    # the metrics dashboard's Prometheus variable has no default then: Grafana picks the user's own
    metrics = json.loads(files[f"{DASHBOARDS_OUT}/profile-bridge.json"])
    assert _datasource_variables(metrics)["prometheus"]["current"] == {}


def test_docs_document_every_provision_setting() -> None:
    """docs/grafana.md's table is generated from PROVISION_FIELDS (regenerate it with provision_markdown())."""
    docs = (ROOT / "docs" / "grafana.md").read_text(encoding="utf-8")
    start = docs.index("<!-- provision-table")
    table = docs[docs.index("\n", start) + 1 : docs.index("<!-- /provision-table -->")].strip()
    assert table == provision_markdown()
    for spec in PROVISION_FIELDS:
        assert spec.key in docs


def test_templates_are_package_data() -> None:
    """The templates ship inside the package (pyproject's package-data globs cover them)."""
    import bridge.provisioning

    templates = Path(bridge.provisioning.__file__).parent / "templates"
    shipped = sorted(p.relative_to(templates).as_posix() for p in templates.rglob("*.j2"))
    assert shipped == sorted(
        [
            "datasources/profile-bridge.yaml.j2",
            "dashboards/profile-bridge.yaml.j2",
            "plugins/profile-bridge-app.yaml.j2",
        ]
    )


def test_default_render_ships_the_packaged_dashboards_byte_for_byte() -> None:
    files = _render_env({})
    sources = dashboard_sources()
    assert list(sources) == ["profile-bridge.json", "span-profiles.json"]
    for name, text in sources.items():
        assert files[f"{DASHBOARDS_OUT}/{name}"] == text, (
            f"bridge/provisioning/dashboards/{name} is not in the render's format (json.dumps(doc, indent=2, "
            "ensure_ascii=False) + newline) or its data source variables do not default to the default data sources"
        )


def _datasource_variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {var["name"]: var for var in dashboard["templating"]["list"] if var["type"] == "datasource"}


def test_custom_render_points_the_dashboards_at_its_own_data_sources() -> None:
    files = _render_env(CUSTOM_ENV)
    spans = json.loads(files[f"{DASHBOARDS_OUT}/span-profiles.json"])
    metrics = json.loads(files[f"{DASHBOARDS_OUT}/profile-bridge.json"])
    # names as Grafana shows them: the YAML's $$ is a single $ once provisioned, and the JSON is not expanded
    assert _datasource_variables(spans)["traces"]["current"] == {
        "selected": False,
        "text": "Traces $team (bridge)",
        "value": "tempo-1",
    }
    assert _datasource_variables(spans)["profiles"]["current"] == {
        "selected": False,
        "text": 'Profiles: "bridge" ${HOME}',
        "value": "prof_1",
    }
    # no Prometheus in this render: no default, Grafana picks the first Prometheus it has
    assert _datasource_variables(metrics)["prometheus"]["current"] == {}
    # nothing else changes
    for name, text in dashboard_sources().items():
        rendered, source = json.loads(files[f"{DASHBOARDS_OUT}/{name}"]), json.loads(text)
        for doc in (rendered, source):
            for var in _datasource_variables(doc).values():
                del var["current"]
        assert rendered == source, name


@pytest.mark.parametrize(
    ("environ", "provisioning_dir"),
    [
        ({}, "/etc/grafana/provisioning"),
        (
            CUSTOM_ENV | {"PROFILE_BRIDGE_PROVISION_DASHBOARDS_PATH": "/srv/grafana/prov/dashboards/json"},
            "/srv/grafana/prov",
        ),
    ],
    ids=["default", "custom"],
)
def test_rendered_tree_is_self_contained(environ: dict[str, str], provisioning_dir: str, tmp_path: Path) -> None:
    """Copied to Grafana's provisioning directory, the render is all Grafana needs: the provider's path is the
    render's dashboards/json/, which holds every shipped dashboard, and their data source variables default to data
    sources of the same render."""
    out = tmp_path / "provisioning"
    assert main(["provision", "--compose", "--out", str(out)], environ=environ) == 0
    loaded = _grafana_dashboards(out, provisioning_dir)
    assert sorted(loaded) == [f"{provisioning_dir}/dashboards/json/{name}" for name in dashboard_sources()]
    assert sorted(doc["uid"] for doc in loaded.values()) == ["profile-bridge-metrics", "profile-bridge-span-profiles"]
    provisioned = {ds["uid"]: ds for ds in _datasources(_read_tree(out))}
    defaults = 0
    for doc in loaded.values():
        for var in _datasource_variables(doc).values():
            if not var["current"]:
                assert var["query"] not in {ds["type"] for ds in provisioned.values()}, var
                continue
            ds = provisioned[var["current"]["value"]]
            assert ds["type"] == var["query"]
            assert _grafana_unescape(str(ds["name"])) == var["current"]["text"]
            defaults += 1
    assert defaults == (3 if not environ else 2)
    # Grafana's provider scan would choke on a dashboard among the provider files: they stay apart
    assert sorted(p.name for p in (out / "dashboards").iterdir()) == ["json", "profile-bridge.yaml"]


@pytest.mark.slow  # builds a wheel and renders provisioning from it; provisioning holds no time: date-safe
def test_a_built_wheel_renders_the_dashboards_without_the_repository(tmp_path: Path) -> None:
    """``pip install .`` (not editable) ships the dashboards as package data: build the wheel from a copy of the
    sources (offline, with the setuptools of this environment), unpack it as pip would, and run ``provision`` from it
    in a directory that has no repository around it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "bridge", src / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("profile_bridge-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        shipped = sorted(n for n in archive.namelist() if n.startswith("bridge/provisioning/dashboards/"))
        assert shipped == [f"bridge/provisioning/dashboards/{name}" for name in dashboard_sources()]
        assert "bridge/traceql/lalr_tables.json" in archive.namelist()  # the TraceQL parser's tables are data too
        archive.extractall(site)
    out, cwd = tmp_path / "out", tmp_path / "elsewhere"
    cwd.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import bridge, runpy; print(bridge.__file__); runpy.run_module('bridge', run_name='__main__')",
            "provision",
            "--compose",
            "--out",
            str(out),
        ],
        cwd=cwd,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(site / "bridge" / "__init__.py")
    assert _read_tree(out) == _render_env({})


def test_provision_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["provision", "--help"], environ={})
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for spec in PROVISION_FIELDS:
        assert spec.key in out
    assert "PROFILE_BRIDGE_GRAFANA_PROFILES_UID" in out


# --------------------------------------------------------------------------------------------- the app plugin


def _app(files: dict[str, str]) -> dict[str, Any]:
    doc = yaml.safe_load(files[PLUGIN_OUT])
    assert doc["apiVersion"] == 1
    (app,) = doc["apps"]
    return dict(app)


def _plugin_settings_keys() -> set[str]:
    """The keys of the plugin's ``AppSettings`` (its jsonData), read from its TypeScript source."""
    source = (ROOT / "grafana" / "profile-bridge-app" / "src" / "types.ts").read_text(encoding="utf-8")
    block = source[source.index("export type AppSettings = {") :]
    block = block[: block.index("\n};")]
    return set(re.findall(r"^  (\w+)\?:", block, re.MULTILINE))


def test_the_app_plugin_is_enabled_with_the_bridges_urls() -> None:
    app = _app(_render_env({}))
    plugin = json.loads((ROOT / "grafana" / "profile-bridge-app" / "src" / "plugin.json").read_text("utf-8"))
    assert app["type"] == plugin["id"] == "profile-bridge-app"
    assert app["disabled"] is False and app["org_id"] == 1
    data = app["jsonData"]
    assert set(data) == _plugin_settings_keys()  # every setting the plugin reads, nothing it does not
    assert data["bridgeUrl"] == "http://localhost:4041"  # the browser's (compose publishes 4041)
    assert data["bridgeServerUrl"] == "http://bridge:4041"  # Grafana's server's, the same as the data sources'
    through_bridge = [ds for ds in _datasources(_render_env({})) if ds["url"].startswith(data["bridgeServerUrl"])]
    datasources = {ds["type"]: ds for ds in through_bridge}
    assert data["tracesUid"] == datasources["tempo"]["uid"]
    assert data["profilesUid"] == datasources["grafana-pyroscope-datasource"]["uid"]
    assert data["profileTypeId"] == datasources["tempo"]["jsonData"]["tracesToProfiles"]["profileTypeId"]
    assert data["tags"] == datasources["tempo"]["jsonData"]["tracesToProfiles"]["tags"]


def test_the_app_plugins_values_are_escaped_for_grafana() -> None:
    data = _app(_render_env(CUSTOM_ENV))["jsonData"]
    assert _grafana_unescape(data["bridgeUrl"]) == "https://profiles.example.com/$team"
    assert data["bridgeServerUrl"] == "https://bridge.example.com:8443"
    assert data["profilesUid"] == "prof_1" and data["profileTypeId"] == "memory:alloc_space:bytes:space:bytes"


def test_without_compose_the_browser_reaches_the_bridge_where_grafana_does_unless_told() -> None:
    settings = Settings.for_tests()
    own = ProvisionSettings.from_env({}, settings, compose=False, bridge_url="http://bridge.internal:4041")
    assert own.browser_url == "http://bridge.internal:4041"
    told = ProvisionSettings.from_env(
        {"PROFILE_BRIDGE_PROVISION_BROWSER_URL": "https://bridge.example.com"},
        settings,
        compose=False,
        bridge_url="http://bridge.internal:4041",
    )
    assert told.browser_url == "https://bridge.example.com"
    assert ProvisionSettings.from_env({}, settings).browser_url == "http://localhost:4041"  # the compose stack


def test_an_empty_browser_url_leaves_the_app_plugin_out() -> None:
    """Grafana refuses to start when a provisioned app is not installed: a Grafana without the plugin renders
    without it."""
    files = _render_env({"PROFILE_BRIDGE_PROVISION_BROWSER_URL": ""})
    assert PLUGIN_OUT not in files and "datasources/profile-bridge.yaml" in files


def test_a_bad_browser_url_is_a_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(
        ["provision", "--compose", "--out", str(tmp_path)],
        environ={"PROFILE_BRIDGE_PROVISION_BROWSER_URL": "localhost"},
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "PROFILE_BRIDGE_PROVISION_BROWSER_URL" in err and "'localhost'" in err


def test_the_bridges_token_comes_from_grafanas_environment_never_from_the_file() -> None:
    """Issue 11, item 3: with PROFILE_BRIDGE_PROVISION_TOKEN_ENV the data sources through the bridge and the app
    plugin send the bridge's token, which Grafana reads from its own environment when it loads the files (``${NAME}``
    is expanded by Grafana; nothing secret is written)."""
    files = _render_env({"PROFILE_BRIDGE_PROVISION_TOKEN_ENV": "BRIDGE_TOKEN"})
    by_uid = {ds["uid"]: ds for ds in _datasources(files)}
    for uid in ("profile-bridge-tempo", "profile-bridge-pyroscope"):
        ds = by_uid[uid]
        assert ds["jsonData"]["httpHeaderName1"] == "X-Profile-Bridge-Token"  # type: ignore[index]
        assert ds["secureJsonData"] == {"httpHeaderValue1": "${BRIDGE_TOKEN}"}
    for uid in ("tempo-direct", "pyroscope-direct", "profile-bridge-prometheus"):
        assert "secureJsonData" not in by_uid[uid] and "httpHeaderName1" not in by_uid[uid]["jsonData"]  # type: ignore
    plugin = yaml.safe_load(files["plugins/profile-bridge-app.yaml"])
    assert plugin["apps"][0]["secureJsonData"] == {"bridgeToken": "${BRIDGE_TOKEN}"}
    # without it: no header, no secure data (the committed provisioning/ is the default render)
    plain = _render_env({})
    assert "secureJsonData" not in plain["datasources/profile-bridge.yaml"]
    assert "secureJsonData" not in plain["plugins/profile-bridge-app.yaml"]
    with pytest.raises(ConfigError, match="PROFILE_BRIDGE_PROVISION_TOKEN_ENV has value '1 bad'"):
        _render_env({"PROFILE_BRIDGE_PROVISION_TOKEN_ENV": "1 bad"})
