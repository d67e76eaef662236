"""Settings: parsed once in ``cli.main()`` from the environment (prefix ``PROFILE_BRIDGE_``), an optional TOML file and
command-line flags; nothing else reads ``os.environ``.

Precedence, lowest first: built-in default < TOML file (``--config``; keys are the setting names in lower case
without the prefix, e.g. ``pyroscope_url = "http://pyroscope:4040"``) < environment < command-line flags.

Every setting is one row of ``FIELDS``: the environment key, the attribute, a parser, the default and the help text.
``serve --help`` and README's settings table are both generated from that table.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from bridge.parsing import (
    TokenEntry,
    parse_bool,
    parse_bytes,
    parse_choice,
    parse_env_tokens,
    parse_host_port,
    parse_label_map,
    parse_link_keys,
    parse_nonempty,
    parse_optional_url,
    parse_positive_int,
    parse_seconds,
    parse_str,
    parse_token_file,
    parse_upstream_allow,
    parse_url,
    parse_url_list,
    parse_workers,
)

PREFIX: Final = "PROFILE_BRIDGE_"

Mode = Literal["proxy", "standalone"]
EnrichPolicy = Literal["all", "profiled-services", "off"]
ProfileIdForm = Literal["span-and-trace", "span"]


class ConfigError(ValueError):
    """A setting has a value the bridge cannot use. ``str()`` is the one line the CLI prints."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"{key} has value {value!r}: {reason}")


# --------------------------------------------------------------------------------------------- the settings


DEFAULT_PROFILE_TYPE: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
DEFAULT_PYROSCOPE_URL: Final = "http://localhost:4040"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the bridge can be told. Build with ``Settings.from_env``; tests use ``Settings.for_tests``."""

    # where it listens (loopback unless told otherwise: the container image says 0.0.0.0 itself)
    listen_host: str = "127.0.0.1"
    listen_port: int = 4041
    workers: int = 0  # 0: one per processor (proxy mode; standalone runs one)
    # backends; ``mode`` says whether they are used (proxy) or the embedded store serves instead (standalone)
    mode: Mode = "standalone"
    pyroscope_url: str = DEFAULT_PYROSCOPE_URL
    tempo_url: str = "http://localhost:3200"
    # upstream timeouts (seconds) and the per-request budget cap
    connect_timeout: float = 2.0
    upstream_timeout: float = 10.0
    max_request_timeout: float = 30.0
    # resolution
    capture_window: float = 15.0
    clock_skew: float = 2.0
    label_map: tuple[tuple[str, str], ...] = (("service.name", "service_name"),)
    profile_type: str = DEFAULT_PROFILE_TYPE
    # caches
    lookup_cache_size: int = 10_000
    lookup_cache_ttl: float = 300.0
    span_cache_size: int = 200_000
    span_cache_bytes: int = 64 * 1024**2
    span_cache_ttl: float = 3600.0
    services_cache_ttl: float = 60.0
    # limits
    max_body_bytes: int = 32 * 1024**2
    max_upstream_answer_bytes: int = 64 * 1024**2
    # Tempo enrichment
    enrich: EnrichPolicy = "all"
    profile_id_form: ProfileIdForm = "span-and-trace"
    # standalone store
    data_dir: str = "./profile-bridge-data"
    retention_age: float = 7 * 24 * 3600.0
    retention_bytes: int = 10 * 1024**3
    otlp_grpc_listen: tuple[str, int] = ("127.0.0.1", 4317)
    otlp_grpc_enabled: bool = True
    # OTLP profile link gateway
    link_keys: tuple[tuple[str, str], ...] = (
        ("otel.profile.trace_id", "otel.profile.span_id"),
        ("trace_id", "span_id"),
        ("", "profile_id"),
    )
    profiles_forward: Literal["http", "grpc"] = "http"
    pyroscope_grpc_target: str = ""
    pprof_targets: tuple[str, ...] = ()
    pprof_interval: float = 15.0
    # the bridge's own pages
    grafana_url: str = ""
    grafana_profiles_uid: str = "profile-bridge-pyroscope"
    grafana_tempo_uid: str = "profile-bridge-tempo"
    # authentication (bridge.auth): none unless tokens are given
    auth_file_tokens: tuple[TokenEntry, ...] = ()
    auth_env_tokens: tuple[TokenEntry, ...] = ()
    auth_metrics: Literal["open", "read"] = "open"
    # calls the mounts relay beyond Grafana's (bridge.wire.allowlist): (upstream, path or prefix*)
    upstream_allow: tuple[tuple[str, str], ...] = ()
    client_token: str = ""  # what `resolve` and `doctor` present to a standalone bridge that wants a token
    # logs
    log_level: str = "info"
    log_format: Literal["text", "json"] = "text"
    # where the settings came from, for /readyz and doctor (not a setting)
    explicit: frozenset[str] = field(default_factory=frozenset, compare=False)
    # (not a setting) a worker that replaces another on SIGHUP binds the OTLP gRPC port once the other lets go of
    # it, for up to this many seconds (bridge.workers); 0: a port in use stops the start
    otlp_grpc_wait: float = field(default=0.0, compare=False)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        *,
        file_values: Mapping[str, Any] | None = None,
        overrides: Mapping[str, str] | None = None,
    ) -> Settings:
        """Parse settings. ``file_values`` is a parsed TOML table, ``overrides`` are command-line values keyed by
        environment key. Raises ``ConfigError`` naming the first bad key."""
        raw: dict[str, tuple[str, str]] = {}  # env key -> (source description key, text)
        for key, value in (file_values or {}).items():
            env_key = PREFIX + str(key).upper()
            if env_key not in FIELDS_BY_KEY:
                raise ConfigError(f"{key} (config file)", value, "unknown setting")
            raw[env_key] = (env_key, _toml_to_text(value))
        for env_key, value in environ.items():
            if env_key.startswith(PREFIX) and env_key in FIELDS_BY_KEY:
                raw[env_key] = (env_key, value)
        for env_key, value in (overrides or {}).items():
            raw[env_key] = (env_key, value)

        values: dict[str, Any] = {}
        for spec in FIELDS:
            if spec.key not in raw:
                continue
            source, text = raw[spec.key]
            try:
                parsed = spec.parse(text)
            except ValueError as exc:
                raise ConfigError(source, "(hidden)" if spec.secret else text, str(exc)) from None
            spec.assign(values, parsed)

        explicit = frozenset(raw)
        if "mode" not in values:
            # Configured backend URLs select proxy mode; with none, the embedded store serves (fresh machine).
            has_backend = any(k in explicit for k in (PREFIX + "PYROSCOPE_URL", PREFIX + "TEMPO_URL"))
            values["mode"] = "proxy" if has_backend else "standalone"
        if not values.get("pyroscope_grpc_target"):
            values["pyroscope_grpc_target"] = urlsplit(values.get("pyroscope_url", DEFAULT_PYROSCOPE_URL)).netloc
        return cls(**values, explicit=explicit)

    @classmethod
    def for_tests(cls, **changes: Any) -> Settings:
        """Defaults suitable for tests: loopback, ephemeral ports, no gRPC listener unless asked."""
        base = cls(listen_host="127.0.0.1", listen_port=0, otlp_grpc_enabled=False)
        return dataclasses.replace(base, **changes)

    @property
    def is_standalone(self) -> bool:
        return self.mode == "standalone"

    @property
    def auth_tokens(self) -> tuple[TokenEntry, ...]:
        """Every accepted token (file and environment); empty: authentication is off."""
        return self.auth_file_tokens + self.auth_env_tokens


def load_toml(path: str) -> dict[str, Any]:
    """Read a TOML settings file; a missing or malformed file is a ConfigError naming ``--config``."""
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError("--config", path, exc.strerror or "cannot be read") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--config", path, f"not valid TOML ({exc})") from None


def _toml_to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_toml_to_text(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    key: str  # environment key
    attrs: tuple[str, ...]  # attribute(s) of Settings it sets
    parse: Callable[[str], Any]
    default: str  # as a user would write it
    help: str
    flag: str = ""  # serve's command-line flag, when it has one
    secret: bool = False  # its value is never printed (an error says "(hidden)")

    def assign(self, values: dict[str, Any], parsed: Any) -> None:
        if len(self.attrs) == 1:
            values[self.attrs[0]] = parsed
        else:
            for attr, part in zip(self.attrs, parsed, strict=True):
                values[attr] = part


def _f(
    name: str, attrs: str, parse: Callable[[str], Any], default: str, help: str, flag: str = "", secret: bool = False
) -> FieldSpec:
    return FieldSpec(PREFIX + name, tuple(attrs.split(",")), parse, default, help, flag, secret)


FIELDS: Final[tuple[FieldSpec, ...]] = (
    _f(
        "LISTEN",
        "listen_host,listen_port",
        parse_host_port,
        "127.0.0.1:4041",
        "HOST:PORT the HTTP server listens on (Grafana, SDK ingest, pages, API, metrics); 0.0.0.0:4041 for every "
        "interface",
        "--listen",
    ),
    _f(
        "WORKERS",
        "workers",
        parse_workers,
        "auto",
        "worker processes sharing the HTTP port: a number, or auto (one per processor); proxy mode only, "
        "standalone runs one (docs/operations.md)",
        "--workers",
    ),
    _f(
        "MODE",
        "mode",
        parse_choice("proxy", "standalone"),
        "(auto)",
        "proxy (use Tempo and Pyroscope) or standalone (embedded store); auto: proxy when a backend URL is set",
        "",
    ),
    _f(
        "PYROSCOPE_URL",
        "pyroscope_url",
        parse_url,
        "http://localhost:4040",
        "Pyroscope base URL (proxy mode)",
        "--pyroscope-url",
    ),
    _f("TEMPO_URL", "tempo_url", parse_url, "http://localhost:3200", "Tempo base URL (proxy mode)", "--tempo-url"),
    _f("CONNECT_TIMEOUT", "connect_timeout", parse_seconds, "2s", "TCP connect timeout for upstream calls"),
    _f(
        "UPSTREAM_TIMEOUT",
        "upstream_timeout",
        parse_seconds,
        "10s",
        "longest wait for one upstream answer (capped by the request's own budget)",
    ),
    _f(
        "MAX_REQUEST_TIMEOUT",
        "max_request_timeout",
        parse_seconds,
        "30s",
        "cap on a request's whole budget, also when Connect-Timeout-Ms asks for more",
    ),
    _f(
        "CAPTURE_WINDOW",
        "capture_window",
        parse_seconds,
        "15s",
        "profile capture window: time-window lookups start this much before the span",
    ),
    _f("CLOCK_SKEW", "clock_skew", parse_seconds, "2s", "extra widening of time windows for clock skew"),
    _f(
        "LABEL_MAP",
        "label_map",
        parse_label_map,
        "service.name=service_name",
        "span resource attributes → profile labels for time-window lookups, e.g. "
        "service.name=service_name,k8s.pod.name=pod",
    ),
    _f(
        "PROFILE_TYPE",
        "profile_type",
        parse_nonempty,
        DEFAULT_PROFILE_TYPE,
        "profile type the API, pages and doctor use when none is given",
    ),
    _f(
        "LOOKUP_CACHE_SIZE",
        "lookup_cache_size",
        parse_positive_int,
        "10000",
        "span lookups (Tempo search results) kept per bridge",
    ),
    _f("LOOKUP_CACHE_TTL", "lookup_cache_ttl", parse_seconds, "5m", "how long a span lookup is kept"),
    _f(
        "SPAN_CACHE_SIZE",
        "span_cache_size",
        parse_positive_int,
        "200000",
        "spans remembered from enriched traces (entries)",
    ),
    _f("SPAN_CACHE_BYTES", "span_cache_bytes", parse_bytes, "64MiB", "memory bound of the span cache (estimated)"),
    _f("SPAN_CACHE_TTL", "span_cache_ttl", parse_seconds, "1h", "how long a remembered span is kept"),
    _f(
        "SERVICES_CACHE_TTL",
        "services_cache_ttl",
        parse_seconds,
        "60s",
        "how long Pyroscope's list of profiled services is cached (enrich=profiled-services)",
    ),
    _f(
        "MAX_BODY_BYTES",
        "max_body_bytes",
        parse_bytes,
        "32MiB",
        "largest request body the bridge decodes, also after gzip decompression; a request inflates at most 4 "
        "times this across its body and every gzipped payload in it",
    ),
    _f(
        "MAX_UPSTREAM_ANSWER_BYTES",
        "max_upstream_answer_bytes",
        parse_bytes,
        "64MiB",
        "largest Tempo or Pyroscope answer the bridge reads whole (trace by ID, the resolver's queries), also after "
        "gzip; pass-through answers stream and are not limited",
    ),
    _f(
        "ENRICH",
        "enrich",
        parse_choice("all", "profiled-services", "off"),
        "all",
        "which spans of trace-by-ID answers get pyroscope.profile.id: all, profiled-services or off",
    ),
    _f(
        "UPSTREAM_ALLOW",
        "upstream_allow",
        parse_upstream_allow,
        "",
        "more calls for the mounts to relay, e.g. tempo:/flush (docs/security.md); they need ingest",
    ),
    _f(
        "PROFILE_ID_FORM",
        "profile_id_form",
        parse_choice("span-and-trace", "span"),
        "span-and-trace",
        "pyroscope.profile.id as /tempo writes it: span-and-trace, or span (the plain id; docs/grafana.md)",
    ),
    _f(
        "DATA_DIR",
        "data_dir",
        parse_nonempty,
        "./profile-bridge-data",
        "standalone store directory (SQLite, WAL)",
        "--data-dir",
    ),
    _f(
        "RETENTION_AGE",
        "retention_age",
        parse_seconds,
        "7d",
        "standalone store: keep data this long; older data is dropped, and refused at ingest",
    ),
    _f(
        "RETENTION_BYTES",
        "retention_bytes",
        parse_bytes,
        "10GiB",
        "standalone store: size cap; above it the oldest data is dropped before its age",
    ),
    _f(
        "OTLP_GRPC_LISTEN",
        "otlp_grpc_listen",
        parse_host_port,
        "127.0.0.1:4317",
        "HOST:PORT of the OTLP gRPC receiver (traces in standalone mode, profiles for the link gateway)",
        "--otlp-grpc-listen",
    ),
    _f("OTLP_GRPC_ENABLED", "otlp_grpc_enabled", parse_bool, "true", "run the OTLP gRPC receiver"),
    _f(
        "LINK_KEYS",
        "link_keys",
        parse_link_keys,
        "otel.profile.trace_id/otel.profile.span_id,trace_id/span_id,/profile_id",
        "sample attribute keys (trace/span, in order) the link gateway turns into OTLP Links",
    ),
    _f(
        "PROFILES_FORWARD",
        "profiles_forward",
        parse_choice("http", "grpc"),
        "http",
        "how linked OTLP profiles are forwarded to Pyroscope: http (POST /v1development/profiles) or grpc",
    ),
    _f(
        "PYROSCOPE_GRPC_TARGET",
        "pyroscope_grpc_target",
        parse_str,
        "(host:port of the Pyroscope URL)",
        "gRPC target for forwarding OTLP profiles when PROFILES_FORWARD=grpc",
    ),
    _f(
        "PPROF_TARGETS",
        "pprof_targets",
        parse_url_list,
        "",
        "comma-separated /debug/pprof/profile?seconds=N URLs to scrape, link and forward",
    ),
    _f("PPROF_INTERVAL", "pprof_interval", parse_seconds, "15s", "how often each pprof target is scraped"),
    _f("GRAFANA_URL", "grafana_url", parse_optional_url, "", "Grafana base URL; when set, span pages link to Explore"),
    _f(
        "GRAFANA_PROFILES_UID",
        "grafana_profiles_uid",
        parse_nonempty,
        "profile-bridge-pyroscope",
        "uid of the Profiles data source, for Explore links",
    ),
    _f(
        "GRAFANA_TEMPO_UID",
        "grafana_tempo_uid",
        parse_nonempty,
        "profile-bridge-tempo",
        "uid of the Tempo data source, for Explore links",
    ),
    _f(
        "AUTH_TOKENS_FILE",
        "auth_file_tokens",
        parse_token_file,
        "",
        "file of accepted tokens, one 'TOKEN TENANT PERMISSIONS' per line (docs/security.md); set, every route but "
        "/healthz and /readyz needs a token, on HTTP and gRPC",
    ),
    _f(
        "AUTH_TOKENS",
        "auth_env_tokens",
        parse_env_tokens,
        "",
        "the same entries in the environment, separated by ';'",
        secret=True,
    ),
    _f(
        "AUTH_METRICS",
        "auth_metrics",
        parse_choice("open", "read"),
        "open",
        "with tokens set: /metrics open (its labels carry no tenant's data) or needing a read token",
    ),
    _f(
        "TOKEN",
        "client_token",
        parse_str,
        "",
        "the token `resolve` and `doctor` send to a standalone bridge that requires one (X-Profile-Bridge-Token)",
        secret=True,
    ),
    _f("LOG_LEVEL", "log_level", parse_choice("debug", "info", "warning", "error"), "info", "log level"),
    _f("LOG_FORMAT", "log_format", parse_choice("text", "json"), "text", "text or json (one JSON object per line)"),
)

FIELDS_BY_KEY: Final[dict[str, FieldSpec]] = {spec.key: spec for spec in FIELDS}


def settings_help() -> str:
    """The settings table for ``serve --help``."""
    lines = ["settings (environment; also keys of the --config TOML file in lower case without the prefix):"]
    for spec in FIELDS:
        flag = f" [{spec.flag}]" if spec.flag else ""
        lines.append(f"  {spec.key}{flag}\n      {spec.help} (default: {spec.default or 'unset'})")
    return "\n".join(lines)


def settings_markdown() -> str:
    """The settings table for README.md (a test keeps README in step with FIELDS)."""
    rows = ["| setting | flag | default | what it does |", "|---|---|---|---|"]
    for spec in FIELDS:
        default = spec.default.replace("|", "\\|") if spec.default else "unset"
        rows.append(f"| `{spec.key}` | {('`' + spec.flag + '`') if spec.flag else ''} | `{default}` | {spec.help} |")
    return "\n".join(rows)
