"""The settings of ``profile-bridge provision`` (``PROFILE_BRIDGE_PROVISION_*``): a table of fields, their parsers, and
``ProvisionSettings`` — kept apart from the jinja2 rendering so ``provision --help`` lists them cheaply."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bridge.config import PREFIX, ConfigError, Settings
from bridge.parsing import parse_label_map, parse_nonempty, parse_optional_url, parse_url

PROVISION_PREFIX: Final = PREFIX + "PROVISION_"

_UID_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


# --------------------------------------------------------------------------------------------- parsers (pure)


def parse_name(value: str) -> str:
    """A data source or folder name: not empty, one line."""
    name = parse_nonempty(value)
    if _CONTROL_RE.search(name):
        raise ValueError("must be one line of printable text")
    return name


def parse_uid(value: str) -> str:
    """A Grafana uid: 1-40 characters of letters, digits, '-' and '_'."""
    uid = value.strip()
    if not _UID_RE.match(uid):
        raise ValueError("not a Grafana uid (1-40 letters, digits, '-' or '_')")
    return uid


def parse_profile_type(value: str) -> str:
    """``name:sample_type:sample_unit:period_type:period_unit``, e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds."""
    text = value.strip()
    parts = text.split(":")
    if len(parts) != 5 or not all(parts) or _CONTROL_RE.search(text) or " " in text:
        raise ValueError("not a profile type like process_cpu:cpu:nanoseconds:cpu:nanoseconds")
    return text


_ENV_NAME_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def parse_env_name(value: str) -> str:
    """The name of an environment variable (of Grafana's process), or empty."""
    name = value.strip()
    if name and not _ENV_NAME_RE.match(name):
        raise ValueError("not an environment variable name (letters, digits and '_', not starting with a digit)")
    return name


def parse_path(value: str) -> str:
    path = parse_name(value)
    if not path.startswith("/"):
        raise ValueError("must be an absolute path inside the Grafana container or host")
    return path


# --------------------------------------------------------------------------------------------- the settings


@dataclass(frozen=True, slots=True)
class ProvisionField:
    key: str  # environment key
    attr: str
    parse: Callable[[str], Any]
    default: str  # as a user would write it; "" means "unset: left out"
    help: str
    compose: str | None = None  # the default with --compose (the docker compose stack's service names)


def _p(
    name: str, attr: str, parse: Callable[[str], Any], default: str, help: str, compose: str | None = None
) -> ProvisionField:
    return ProvisionField(PROVISION_PREFIX + name, attr, parse, default, help, compose)


REQUIRED: Final = "(required)"
SAME_AS_BRIDGE: Final = "(the bridge URL)"


class MissingSetting(ConfigError):
    """A setting that has no default is not set. ``str()`` is the one line the CLI prints."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(key, "", reason)
        self.args = (f"{key} is not set: {reason}",)


DEFAULT_TAGS: Final = "service.name=service_name,service.namespace=service_namespace"

PROVISION_FIELDS: Final[tuple[ProvisionField, ...]] = (
    _p(
        "BRIDGE_URL",
        "bridge_url",
        parse_url,
        REQUIRED,
        "the bridge's base URL as Grafana's server reaches it; data sources use its /tempo and /pyroscope "
        "(also --bridge-url)",
        "http://bridge:4041",
    ),
    _p(
        "BROWSER_URL",
        "browser_url",
        parse_optional_url,
        SAME_AS_BRIDGE,
        "the bridge's base URL as the browser reaches it, for the Grafana app plugin's links "
        "(plugins/profile-bridge-app.yaml, written only with --app-plugin or --compose: Grafana refuses to start "
        "when a provisioned app is not installed); empty leaves that file out",
        "http://localhost:4041",
    ),
    _p("TEMPO_NAME", "tempo_name", parse_name, "Tempo", "name of the Tempo data source that goes through the bridge"),
    _p(
        "PROFILES_NAME",
        "profiles_name",
        parse_name,
        "Profiles",
        "name of the Pyroscope data source that goes through the bridge (its uid: PROFILE_BRIDGE_GRAFANA_PROFILES_UID)",
    ),
    _p(
        "PROFILE_TYPE",
        "profile_type",
        parse_profile_type,
        "(PROFILE_BRIDGE_PROFILE_TYPE)",
        'profile type of "Profiles for this span" (tracesToProfiles.profileTypeId)',
    ),
    _p(
        "TAGS",
        "tags",
        parse_label_map,
        DEFAULT_TAGS,
        'span attributes → profile labels of "Profiles for this span" (tracesToProfiles.tags)',
    ),
    _p(
        "TEMPO_DIRECT_URL",
        "tempo_direct_url",
        parse_optional_url,
        "",
        'Tempo as Grafana reaches it, for a "Tempo (direct)" data source; empty leaves it out',
        "http://tempo:3200",
    ),
    _p("TEMPO_DIRECT_NAME", "tempo_direct_name", parse_name, "Tempo (direct)", "name of that data source"),
    _p("TEMPO_DIRECT_UID", "tempo_direct_uid", parse_uid, "tempo-direct", "uid of that data source"),
    _p(
        "PYROSCOPE_DIRECT_URL",
        "pyroscope_direct_url",
        parse_optional_url,
        "",
        'Pyroscope as Grafana reaches it, for a "Pyroscope (direct)" data source; empty leaves it out',
        "http://pyroscope:4040",
    ),
    _p("PYROSCOPE_DIRECT_NAME", "pyroscope_direct_name", parse_name, "Pyroscope (direct)", "name of that data source"),
    _p("PYROSCOPE_DIRECT_UID", "pyroscope_direct_uid", parse_uid, "pyroscope-direct", "uid of that data source"),
    _p(
        "PROMETHEUS_URL",
        "prometheus_url",
        parse_optional_url,
        "",
        'a Prometheus that scrapes the bridge\'s /metrics, for the "profile-bridge" dashboard; empty leaves it out',
        "http://prometheus:9090",
    ),
    _p("PROMETHEUS_NAME", "prometheus_name", parse_name, "Prometheus (profile-bridge)", "name of that data source"),
    _p("PROMETHEUS_UID", "prometheus_uid", parse_uid, "profile-bridge-prometheus", "uid of that data source"),
    _p(
        "TOKEN_ENV",
        "token_env",
        parse_env_name,
        "",
        "the name of an environment variable of Grafana's process holding the bridge's token (docs/security.md): the "
        "data sources through the bridge and the app plugin send it as X-Profile-Bridge-Token; the files name the "
        "variable, never the token; empty: no token",
    ),
    _p(
        "DASHBOARDS_PATH",
        "dashboards_path",
        parse_path,
        "/etc/grafana/provisioning/dashboards/json",
        "where Grafana finds the rendered dashboards/json/*.json (the default: --out DIR is Grafana's provisioning "
        "directory)",
    ),
    _p("DASHBOARDS_FOLDER", "dashboards_folder", parse_name, "profile-bridge", "Grafana folder of the dashboards"),
)

PROVISION_FIELDS_BY_KEY: Final[dict[str, ProvisionField]] = {spec.key: spec for spec in PROVISION_FIELDS}


@dataclass(frozen=True, slots=True)
class ProvisionSettings:
    """What the provisioning files say. Build with ``from_env``; every value is already checked."""

    bridge_url: str
    browser_url: str
    tempo_name: str
    tempo_uid: str
    profiles_name: str
    profiles_uid: str
    profile_type: str
    tags: tuple[tuple[str, str], ...]
    tempo_direct_url: str
    tempo_direct_name: str
    tempo_direct_uid: str
    pyroscope_direct_url: str
    pyroscope_direct_name: str
    pyroscope_direct_uid: str
    prometheus_url: str
    prometheus_name: str
    prometheus_uid: str
    dashboards_path: str
    dashboards_folder: str
    token_env: str = ""
    app_plugin: bool = False  # plugins/profile-bridge-app.yaml is written (asked for, with a browser URL)
    dashboards_folder_uid: str = "profile-bridge"
    plugin_id: str = "profile-bridge-app"

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        settings: Settings,
        *,
        compose: bool = True,
        bridge_url: str | None = None,
        app_plugin: bool = False,
    ) -> ProvisionSettings:
        """Parse ``PROFILE_BRIDGE_PROVISION_*``; raises ``ConfigError`` naming the first bad or unknown key.

        ``compose``: what is not set takes the docker compose stack's service names (``bridge:4041``, ``tempo:3200``,
        ``pyroscope:4040``, ``prometheus:9090``) — the committed ``provisioning/``. Without it the bridge URL must be
        given (``bridge_url``, the ``--bridge-url`` flag, beats the environment) and the direct and Prometheus data
        sources are left out unless their URLs are set: a render for someone's own Grafana never points at host
        names that only exist inside the compose network.

        ``app_plugin`` (``--app-plugin``; ``--compose`` asks too, its Grafana image carries the plugin): enable the
        Grafana app plugin (``plugins/profile-bridge-app.yaml``). Never by default — Grafana refuses to start when a
        provisioned app is not installed. Asked for with ``PROFILE_BRIDGE_PROVISION_BROWSER_URL`` set empty, it is a
        ``ConfigError``; with ``--compose`` alone an empty browser URL leaves the file out."""
        for key in sorted(environ):
            if key.startswith(PROVISION_PREFIX) and key not in PROVISION_FIELDS_BY_KEY:
                raise ConfigError(key, environ[key], "unknown setting (see docs/grafana.md)")
        values: dict[str, Any] = {}
        for spec in PROVISION_FIELDS:
            if spec.attr == "bridge_url" and bridge_url is not None:
                text = bridge_url
            elif spec.key in environ:
                text = environ[spec.key]
            elif spec.attr == "profile_type":
                text = settings.profile_type
            elif compose and spec.compose is not None:
                text = spec.compose
            elif spec.default == SAME_AS_BRIDGE:
                text = values["bridge_url"]  # parsed already: the table lists the bridge URL first
            elif spec.default == REQUIRED:
                raise MissingSetting(
                    spec.key,
                    "give --bridge-url URL (the bridge as Grafana's server reaches it, "
                    "e.g. http://profile-bridge.internal:4041), or --compose to render "
                    "for docker-compose.yaml's stack",
                )
            else:
                text = spec.default
            try:
                values[spec.attr] = spec.parse(text)
            except ValueError as exc:
                if spec.attr == "bridge_url" and bridge_url is not None:
                    source = "--bridge-url"
                elif spec.key not in environ and spec.attr == "profile_type":
                    source = PREFIX + "PROFILE_TYPE"
                else:
                    source = spec.key
                raise ConfigError(source, text, str(exc)) from None
        for attr, key in (("tempo_uid", "GRAFANA_TEMPO_UID"), ("profiles_uid", "GRAFANA_PROFILES_UID")):
            text = getattr(settings, "grafana_" + attr)
            try:
                values[attr] = parse_uid(text)
            except ValueError as exc:
                raise ConfigError(PREFIX + key, text, str(exc)) from None
        if app_plugin and not values["browser_url"]:
            raise ConfigError(
                PROVISION_PREFIX + "BROWSER_URL",
                "",
                "empty, but --app-plugin enables the Grafana app plugin, whose links need the bridge's URL as the "
                "browser reaches it",
            )
        values["app_plugin"] = (app_plugin or compose) and bool(values["browser_url"])
        provision = cls(**values)
        provision.check_unique()
        return provision

    @property
    def token_ref(self) -> str:
        """``${NAME}``: what Grafana replaces with its environment variable when it reads the file."""
        return "${" + self.token_env + "}" if self.token_env else ""

    def datasources(self) -> list[tuple[str, str, str, str]]:
        """(name, uid, name key, uid key) of every data source rendered, in file order."""
        rows = [
            (self.tempo_name, self.tempo_uid, "TEMPO_NAME", PREFIX + "GRAFANA_TEMPO_UID"),
            (self.profiles_name, self.profiles_uid, "PROFILES_NAME", PREFIX + "GRAFANA_PROFILES_UID"),
        ]
        if self.tempo_direct_url:
            rows.append((self.tempo_direct_name, self.tempo_direct_uid, "TEMPO_DIRECT_NAME", "TEMPO_DIRECT_UID"))
        if self.pyroscope_direct_url:
            rows.append(
                (self.pyroscope_direct_name, self.pyroscope_direct_uid, "PYROSCOPE_DIRECT_NAME", "PYROSCOPE_DIRECT_UID")
            )
        if self.prometheus_url:
            rows.append((self.prometheus_name, self.prometheus_uid, "PROMETHEUS_NAME", "PROMETHEUS_UID"))
        return [
            (
                name,
                uid,
                PROVISION_PREFIX + name_key,
                uid_key if uid_key.startswith(PREFIX) else PROVISION_PREFIX + uid_key,
            )
            for name, uid, name_key, uid_key in rows
        ]

    def check_unique(self) -> None:
        """Grafana refuses two data sources with one name or one uid: say which setting clashes."""
        names: set[str] = set()
        uids: set[str] = set()
        for name, uid, name_key, uid_key in self.datasources():
            if name in names:
                raise ConfigError(name_key, name, "another data source already has this name")
            if uid in uids:
                raise ConfigError(uid_key, uid, "another data source already has this uid")
            names.add(name)
            uids.add(uid)

    def summary(self) -> list[str]:
        """What the render wires, one line per data source, and what it left out (for the user to check)."""
        lines = [
            f"Tempo data source {self.tempo_name!r} → {self.bridge_url}/tempo",
            f"Profiles data source {self.profiles_name!r} → {self.bridge_url}/pyroscope",
        ]
        for name, url, key in (
            (self.tempo_direct_name, self.tempo_direct_url, "TEMPO_DIRECT_URL"),
            (self.pyroscope_direct_name, self.pyroscope_direct_url, "PYROSCOPE_DIRECT_URL"),
            (self.prometheus_name, self.prometheus_url, "PROMETHEUS_URL"),
        ):
            lines.append(f"{name!r} → {url}" if url else f"{name!r} left out ({PROVISION_PREFIX}{key} not set)")
        lines.append(f"dashboards in folder {self.dashboards_folder!r}, read by Grafana from {self.dashboards_path}")
        lines.append(self.plugin_summary())
        if self.token_env:
            lines.append(
                f"the bridge's token: from Grafana's environment variable {self.token_env} (X-Profile-Bridge-Token)"
            )
        return lines

    def plugin_summary(self) -> str:
        """Whether the render enables the Grafana app plugin, and what that asks of Grafana."""
        if self.app_plugin:
            return (
                f"the Grafana app plugin {self.plugin_id} is enabled (plugins/{self.plugin_id}.yaml): Grafana refuses "
                "to start unless the plugin is installed (docs/grafana-plugin.md)"
            )
        return (
            f"the Grafana app plugin {self.plugin_id} is not enabled: install it in Grafana, then render again with "
            "--app-plugin (docs/grafana-plugin.md)"
        )


def _default_text(spec: ProvisionField) -> str:
    return "unset" if not spec.default else spec.default if spec.default == REQUIRED else f"`{spec.default}`"


def provision_markdown() -> str:
    """The PROFILE_BRIDGE_PROVISION_* table for the docs (a test keeps them in step)."""
    rows = ["| setting | default | with `--compose` | what it does |", "|---|---|---|---|"]
    for spec in PROVISION_FIELDS:
        compose = f"`{spec.compose}`" if spec.compose is not None else ""
        rows.append(f"| `{spec.key}` | {_default_text(spec)} | {compose} | {spec.help} |")
    return "\n".join(rows)


def provision_help() -> str:
    """The settings list for ``provision --help``."""
    lines = ["settings (environment only; --bridge-url beats PROFILE_BRIDGE_PROVISION_BRIDGE_URL):"]
    for spec in PROVISION_FIELDS:
        compose = f"; with --compose: {spec.compose}" if spec.compose is not None else ""
        lines.append(f"  {spec.key}\n      {spec.help} (default: {spec.default or 'unset'}{compose})")
    lines.append(
        "  PROFILE_BRIDGE_GRAFANA_TEMPO_UID, PROFILE_BRIDGE_GRAFANA_PROFILES_UID\n"
        "      uids of the Tempo and Profiles data sources (the bridge's span pages use the same)"
    )
    return "\n".join(lines)
