"""``profile-bridge provision``: Grafana provisioning files for this bridge, rendered with jinja2.

Pure core: ``ProvisionSettings.from_env(environ, settings, compose=…)`` parses and checks the
``PROFILE_BRIDGE_PROVISION_*`` settings, ``render(p)`` returns ``{relative path: text}`` (same input, same bytes):
data sources, a dashboards provider, and the dashboards themselves (``dashboards/json/*.json``, from the package's
``dashboards/`` — their one source), so the rendered tree is complete without this repository, and the Grafana app
plugin's settings (``plugins/profile-bridge-app.yaml``) — only when asked (``--app-plugin``, or ``--compose``), since
Grafana refuses to start when a provisioned app is not installed. Thin shell: ``write_files`` and ``run_provision``,
which also removes a plugin file an earlier render wrote when this one leaves it out (recognised by
``PLUGIN_HEADER``; a file of anyone else's is left, and said so). The bridge's own data sources take their uids from
``PROFILE_BRIDGE_GRAFANA_TEMPO_UID`` and ``PROFILE_BRIDGE_GRAFANA_PROFILES_UID``, the settings the span pages use for
their Explore links, so the two always agree.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Final, TextIO

import jinja2

from bridge.config import ConfigError, Settings
from bridge.provisioning.settings import (
    PROVISION_FIELDS,
    PROVISION_PREFIX,
    ProvisionSettings,
    provision_help,
    provision_markdown,
)

__all__ = [
    "DASHBOARDS_OUT",
    "PLUGIN_HEADER",
    "PLUGIN_OUT",
    "PROVISION_FIELDS",
    "PROVISION_PREFIX",
    "TEMPLATES",
    "ProvisionSettings",
    "dashboard_sources",
    "provision_help",
    "provision_markdown",
    "render",
    "remove_stale_plugin",
    "render_dashboard",
    "run_provision",
    "write_files",
    "yaml_str",
]

# the Grafana app plugin (grafana/profile-bridge-app) enabled with the bridge's URLs (apps provisioning)
PLUGIN_OUT: Final = "plugins/profile-bridge-app.yaml"
# the first lines of every plugin file `provision` has written (the template's, unchanged since the file was first
# rendered): how a later render recognises its own file before removing it
PLUGIN_HEADER: Final = (
    "# The profile-bridge Grafana app plugin (grafana/profile-bridge-app): enabled, with the bridge's URLs.\n"
    "# Rendered by `profile-bridge provision`: change the PROFILE_BRIDGE_* settings and render again instead of "
    "editing.\n"
)

# output path (relative, POSIX) -> template name
TEMPLATES: Final[dict[str, str]] = {
    "datasources/profile-bridge.yaml": "datasources/profile-bridge.yaml.j2",
    "dashboards/profile-bridge.yaml": "dashboards/profile-bridge.yaml.j2",
    PLUGIN_OUT: "plugins/profile-bridge-app.yaml.j2",
}

# where the dashboards go in the output: beside the provider, in a folder Grafana's provider scan skips (it reads only
# *.yaml and *.yml directly in dashboards/); PROFILE_BRIDGE_PROVISION_DASHBOARDS_PATH says where Grafana finds it
DASHBOARDS_OUT: Final = "dashboards/json"

# plugin type of a dashboard's data source variable -> (name, uid, URL that renders it or "" for always) attributes
# of the data source the variable defaults to
_DATASOURCE_VARIABLES: Final[dict[str, tuple[str, str, str]]] = {
    "tempo": ("tempo_name", "tempo_uid", ""),
    "grafana-pyroscope-datasource": ("profiles_name", "profiles_uid", ""),
    "prometheus": ("prometheus_name", "prometheus_uid", "prometheus_url"),
}


# --------------------------------------------------------------------------------------------- rendering (pure)


def yaml_str(value: object) -> str:
    """A YAML scalar: JSON's double-quoted form (valid YAML), with ``$`` written ``$$`` because Grafana expands
    ``$NAME`` and ``${NAME}`` in provisioning files from its environment."""
    return json.dumps(value, ensure_ascii=False).replace("$", "$$")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("bridge.provisioning", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.filters["yaml_str"] = yaml_str
    return env


def dashboard_sources() -> dict[str, str]:
    """``{file name: JSON text}`` of the dashboards shipped in the package (``bridge/provisioning/dashboards/``),
    sorted by name."""
    folder = resources.files("bridge.provisioning").joinpath("dashboards")
    entries = sorted((entry for entry in folder.iterdir() if entry.name.endswith(".json")), key=lambda e: e.name)
    return {entry.name: entry.read_text(encoding="utf-8") for entry in entries}


def render_dashboard(text: str, provision: ProvisionSettings) -> str:
    """A shipped dashboard whose data source variables default to the data sources this render provisions.

    Panels and queries select data sources only through those variables (``${traces}``, ``${profiles}``,
    ``${prometheus}``), so a variable's ``current`` is the one place a uid appears. When that data source is not
    rendered (``PROFILE_BRIDGE_PROVISION_PROMETHEUS_URL`` empty), ``current`` is emptied: Grafana then picks the
    first data source of the variable's type, e.g. the user's own Prometheus. Grafana does not expand
    environment variables in dashboard JSON: ``$`` is written as is (no ``$$`` here, unlike the YAML files).
    Written as ``json.dumps(indent=2)`` plus a newline — the shipped files' own format, so a default render leaves
    them byte for byte."""
    doc = json.loads(text)
    for var in doc.get("templating", {}).get("list", []):
        attrs = _DATASOURCE_VARIABLES.get(var.get("query")) if var.get("type") == "datasource" else None
        if attrs is None:
            continue
        name_attr, uid_attr, url_attr = attrs
        if url_attr and not getattr(provision, url_attr):
            var["current"] = {}
        else:
            current = var.setdefault("current", {})
            current["text"] = getattr(provision, name_attr)
            current["value"] = getattr(provision, uid_attr)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def render(provision: ProvisionSettings) -> dict[str, str]:
    """``{relative POSIX path: file text}``, in a fixed order: the YAML files (the app plugin's only when
    ``provision.app_plugin``), then ``dashboards/json/<name>.json`` for every shipped dashboard."""
    env = _environment()
    files = {
        path: env.get_template(name).render(p=provision)
        for path, name in TEMPLATES.items()
        if path != PLUGIN_OUT or provision.app_plugin
    }
    for name, text in dashboard_sources().items():
        files[f"{DASHBOARDS_OUT}/{name}"] = render_dashboard(text, provision)
    return files


# --------------------------------------------------------------------------------------------- I/O shell


def write_files(files: Mapping[str, str], out_dir: Path) -> list[Path]:
    """Write each file (directories created; each file replaced atomically). Raises ``ConfigError`` naming
    ``--out`` when the directory cannot be written."""
    written: list[Path] = []
    for rel, text in files.items():
        target = out_dir / rel
        tmp = target.with_name(target.name + ".tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            raise ConfigError("--out", str(out_dir), f"cannot write {rel}: {exc.strerror or exc}") from None
        written.append(target)
    return written


def remove_stale_plugin(out_dir: Path) -> str | None:
    """A render without the app plugin: the plugin file an earlier render wrote into ``out_dir`` would still enable
    it, so it is removed — only when it is that render's own file (it starts with ``PLUGIN_HEADER``). What was done,
    as one line for the user, or None when there is no such file."""
    target = out_dir / PLUGIN_OUT
    try:
        with target.open("rb") as fh:
            head = fh.read(len(PLUGIN_HEADER.encode()))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"left {target}: cannot read it ({exc.strerror or exc}); it enables the app plugin if Grafana reads it"
    if head != PLUGIN_HEADER.encode():
        return f"left {target}: not written by `profile-bridge provision` (it enables the app plugin, if it is valid)"
    try:
        target.unlink()
    except OSError as exc:
        raise ConfigError("--out", str(out_dir), f"cannot remove {PLUGIN_OUT}: {exc.strerror or exc}") from None
    return f"removed {target}: an earlier render wrote it, this one leaves the app plugin out"


def run_provision(
    settings: Settings,
    out_dir: Path,
    environ: Mapping[str, str],
    out: TextIO | None = None,
    *,
    bridge_url: str | None = None,
    compose: bool = False,
    app_plugin: bool = False,
) -> int:
    """``profile-bridge provision --out DIR [--bridge-url URL] [--compose] [--app-plugin]``: writes the files (and
    removes the app plugin's, when an earlier render wrote it and this one leaves it out), then says what they wire
    and what they leave out. A bad or missing setting raises ``ConfigError`` (the CLI prints it, exit 2) before
    anything is written."""
    provision = ProvisionSettings.from_env(
        environ, settings, compose=compose, bridge_url=bridge_url, app_plugin=app_plugin
    )
    files = render(provision)
    stream = sys.stdout if out is None else out
    for path in write_files(files, out_dir):
        print(f"wrote {path}", file=stream)
    if PLUGIN_OUT not in files and (removed := remove_stale_plugin(out_dir)) is not None:
        print(removed, file=stream)
    if compose:
        print("rendered for the docker compose stack (--compose): unset URLs are its service names", file=stream)
    for line in provision.summary():
        print(line, file=stream)
    return 0
