"""The Grafana app plugin's plugin.json (``grafana/profile-bridge-app/src/plugin.json``) against Grafana's plugin.json
schema, vendored under the plugin's ``tests/schema/`` (SOURCE.txt says where from and what changed since), and the
pieces of the plugin the bridge's own files must agree with (its id, its routes, its app settings)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import jsonschema
import pytest

from tests.paths import ROOT

PLUGIN_DIR = ROOT / "grafana" / "profile-bridge-app"
PLUGIN_JSON = PLUGIN_DIR / "src" / "plugin.json"
SCHEMA_DIR = PLUGIN_DIR / "tests" / "schema"
PLUGIN_ID = "profile-bridge-app"


def plugin_json() -> dict[str, Any]:
    doc = json.loads(PLUGIN_JSON.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    plugin = json.loads((SCHEMA_DIR / "plugin.schema.json").read_text(encoding="utf-8"))
    extensions = json.loads((SCHEMA_DIR / "extensions-v2.schema.json").read_text(encoding="utf-8"))
    return plugin, extensions


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every error of ``doc`` against Grafana's schema, ``extensions`` checked in its second form (SOURCE.txt)."""
    plugin_schema, extensions_schema = _schemas()
    rest = {k: v for k, v in doc.items() if k != "extensions"}
    checker = jsonschema.FormatChecker()
    errors = [
        f"{list(e.path)}: {e.message}"
        for e in jsonschema.Draft7Validator(plugin_schema, format_checker=checker).iter_errors(rest)
    ]
    if "extensions" in doc:
        errors += [
            f"['extensions', {', '.join(map(repr, e.path))}]: {e.message}"
            for e in jsonschema.Draft7Validator(extensions_schema).iter_errors(doc["extensions"])
        ]
    return errors


def test_the_vendored_schema_is_the_one_source_txt_names() -> None:
    source = (SCHEMA_DIR / "SOURCE.txt").read_text(encoding="utf-8")
    digest = hashlib.sha256((SCHEMA_DIR / "plugin.schema.json").read_bytes()).hexdigest()
    assert f"sha256 {digest}" in source
    assert "grafana/plugin-validator config/plugin.schema.json @ 0c58a47886aa2b27c7bb484f8beee74dce4c37e5" in source
    plugin_schema, extensions_schema = _schemas()
    jsonschema.Draft7Validator.check_schema(plugin_schema)
    jsonschema.Draft7Validator.check_schema(extensions_schema)
    assert plugin_schema["$id"] == "https://grafana.com/plugin-metadata"


def test_plugin_json_validates_against_grafanas_schema() -> None:
    errors = schema_errors(plugin_json())
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d.update(id="Profile Bridge"), "does not match"),
        (lambda d: d.update(type="application"), "is not one of"),
        (lambda d: d["dependencies"].pop("grafanaDependency"), "'grafanaDependency' is a required property"),
        (lambda d: d["dependencies"].update(grafanaDependency="twelve"), "does not match"),
        (lambda d: d["info"].update(keywords=[]), "should be non-empty"),
        (lambda d: d["routes"][0].update(urll="x"), "Additional properties"),
        (lambda d: d["extensions"]["addedLinks"][0].pop("targets"), "'targets' is a required property"),
        (lambda d: d["extensions"]["addedLinks"][0].update(targets=["traceview/x"]), "does not match"),
        (lambda d: d["extensions"].update(addedLink=[]), "Additional properties"),
    ],
    ids=[
        "id",
        "type",
        "no-grafana-dependency",
        "bad-grafana-dependency",
        "no-keywords",
        "route-typo",
        "link-without-targets",
        "bad-target",
        "extensions-typo",
    ],
)
def test_the_validation_catches_a_broken_plugin_json(change: Any, needle: str) -> None:
    doc = copy.deepcopy(plugin_json())
    change(doc)
    errors = schema_errors(doc)
    assert any(needle in e for e in errors), errors


def test_plugin_json_is_the_app_the_bridge_expects() -> None:
    doc = plugin_json()
    assert doc["id"] == PLUGIN_ID and doc["type"] == "app"
    assert doc["backend"] is False and "executable" not in doc  # frontend only: no binary to sign or ship
    assert doc["preload"] is True  # the trace view's links register without opening the app
    assert doc["dependencies"]["grafanaDependency"] == ">=12.4.0"
    # the routes reach the bridge only through the app's setting, and only the two endpoints the pages use
    assert {r["path"]: r["url"] for r in doc["routes"]} == {
        "api/v1/requests/slowest": "{{ .JsonData.bridgeServerUrl }}/api/v1/requests/slowest",
        "readyz": "{{ .JsonData.bridgeServerUrl }}/readyz",
    }
    # the bridge's token (docs/security.md), from the app's secure settings, on the route that needs it (/readyz
    # is open); Grafana's server adds it, the browser never sees it
    headers = {r["path"]: r.get("headers", []) for r in doc["routes"]}
    assert headers["api/v1/requests/slowest"] == [
        {"name": "X-Profile-Bridge-Token", "content": "{{ .SecureJsonData.bridgeToken }}"}
    ]
    assert headers["readyz"] == []
    links = {link["title"]: link["targets"] for link in doc["extensions"]["addedLinks"]}
    assert links == {
        "Related profiles": ["grafana/traceview/resource-attributes"],
        "Related profiles in Explore": ["grafana/traceview/resource-attributes"],
        "Compare with usual": ["grafana/traceview/resource-attributes"],
        "Hot functions and their requests": ["grafana/traceview/resource-attributes"],
        "Request profile": ["grafana/traceview/header/actions"],
    }


def test_the_bridge_serves_the_routes_the_plugin_declares() -> None:
    """Each proxy route's target path is a GET route of the bridge."""
    from bridge.app import create_app
    from bridge.config import Settings

    app = create_app(Settings.for_tests(mode="standalone", data_dir="unused"))
    served = {r.resource.canonical for r in app.router.routes() if r.method == "GET" and r.resource is not None}
    for route in plugin_json()["routes"]:
        path = re.sub(r"^\{\{ \.JsonData\.bridgeServerUrl \}\}", "", route["url"])
        assert path in served, path


def test_the_lock_file_pins_what_package_json_asks_for() -> None:
    package = json.loads((PLUGIN_DIR / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((PLUGIN_DIR / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["lockfileVersion"] >= 3 and lock["packages"][""]["name"] == package["name"]
    root = lock["packages"][""]
    assert root["dependencies"] == package["dependencies"]
    assert root["devDependencies"] == package["devDependencies"]
    # the GitHub tarball @grafana/ui would pull is replaced by the npm-published fork (no network but the registry)
    assert package["overrides"]["react-data-grid"].startswith("npm:@grafana/react-data-grid@")
    resolved = [p.get("resolved", "") for p in lock["packages"].values()]
    assert resolved and not [r for r in resolved if r and not r.startswith("https://registry.npmjs.org/")]
