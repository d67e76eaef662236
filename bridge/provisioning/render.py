"""``profile-bridge provision``: Grafana provisioning files for this bridge, rendered with jinja2.

Pure core: ``ProvisionSettings.from_env(environ, settings)`` parses and checks the ``PROFILE_BRIDGE_PROVISION_*``
settings, ``render(p)`` returns ``{relative path: text}`` (same input, same bytes). Thin shell: ``write_files`` and
``run_provision``. The bridge's own data sources take their uids from ``PROFILE_BRIDGE_GRAFANA_TEMPO_UID`` and
``PROFILE_BRIDGE_GRAFANA_PROFILES_UID``, the settings the span pages use for their Explore links, so the two always
agree.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
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
    "PROVISION_FIELDS", "PROVISION_PREFIX", "TEMPLATES", "ProvisionSettings", "provision_help", "provision_markdown",
    "render", "run_provision", "write_files", "yaml_str",
]

# output path (relative, POSIX) -> template name
TEMPLATES: Final[dict[str, str]] = {
    "datasources/profile-bridge.yaml": "datasources/profile-bridge.yaml.j2",
    "dashboards/profile-bridge.yaml": "dashboards/profile-bridge.yaml.j2",
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


def render(provision: ProvisionSettings) -> dict[str, str]:
    """``{relative POSIX path: file text}``, in a fixed order."""
    env = _environment()
    return {path: env.get_template(name).render(p=provision) for path, name in TEMPLATES.items()}


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


def run_provision(settings: Settings, out_dir: Path, environ: Mapping[str, str], out: TextIO | None = None) -> int:
    """``profile-bridge provision --out DIR``. A bad setting raises ``ConfigError`` (the CLI prints it, exit 2)."""
    provision = ProvisionSettings.from_env(environ, settings)
    files = render(provision)
    stream = sys.stdout if out is None else out
    for path in write_files(files, out_dir):
        print(f"wrote {path}", file=stream)
    return 0
