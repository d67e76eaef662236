"""Pure: what the ``/pyroscope`` and ``/tempo`` mounts relay — the calls Grafana, its apps (Profiles Drilldown, Traces
Drilldown) and Perses make, and the SDKs' ingest — and nothing else. One table, ``ALLOWED``; each row names the
client code the call comes from, so a row is added with its evidence (read the client's source first).

Both Tempo and Pyroscope serve far more on the same port: Tempo ``/shutdown``, ``/flush``, ``/status/config``,
``/api/overrides`` (writes), ring pages; Pyroscope ``ingester.v1.*``, ``storegateway.v1.*``,
``/ops/object-store/…``, ``/runtime_config``… (grafana/tempo ``cmd/tempo/app/modules.go``, grafana/pyroscope
``pkg/api/api.go``). None of that is anyone's business through the bridge: a call that is not in the table is refused
with 403, and the answer names the setting that opens it (``PROFILE_BRIDGE_UPSTREAM_ALLOW=tempo:/flush``; an opened
call needs ``ingest`` when tokens are on — it is the operator's own).

Paths are normalised first, the same way for the check and for the request sent on (``normalise``): runs of ``/``
collapse into one; a ``.`` or ``..`` segment, a percent-encoded ``.`` or ``\\``, a ``\\``, or a NUL is refused (400);
so is a percent-encoded ``/``, except inside a tag name (``{tag}``: Grafana and Perses send tag names through
``encodeURIComponent``, and Tempo's own route takes the tag as ``{tagName:.*}``, grafana/tempo
``pkg/api/search_tags.go:20``). What is checked is what is sent: ``//push.v1.PusherService/Push`` is Push.

Permissions (``bridge.auth``): ``read`` for reads, ``ingest`` for writes — SDK ingest and the few writes Grafana's
apps make (Profiles Drilldown's settings, recording rules, ad-hoc uploads). ``ingest`` is the one write permission
the bridge has; these writes are the tenant's own data and settings, as ingest is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import unquote

from bridge.errors import InvalidArgument, PermissionDenied

Need = Literal["read", "ingest"]
SETTING: Final = "PROFILE_BRIDGE_UPSTREAM_ALLOW"
MOUNTS: Final = {"pyroscope": "/pyroscope", "tempo": "/tempo"}
OPENED_NEED: Final[Need] = "ingest"

# client sources, cited once (paths inside each repository; grafana/explore-profiles is Profiles Drilldown)
_DRILLDOWN: Final = "grafana/explore-profiles v1.4.0 "
_GRAFANA_PYRO: Final = "grafana/grafana pkg/tsdb/grafana-pyroscope-datasource/"
_GRAFANA_TEMPO: Final = "grafana/grafana public/app/plugins/datasource/tempo/"
_PERSES_PYRO: Final = "perses/plugins pyroscope/src/model/pyroscope-client.ts"
_PERSES_TEMPO: Final = "perses/plugins tempo/src/model/tempo-client.ts"
_QUERIER: Final = "/querier.v1.QuerierService/"


@dataclass(frozen=True, slots=True)
class Allowed:
    """One call a mount relays. ``path`` is under the upstream's root; a ``{id}`` segment matches any one segment,
    ``{tag}`` one segment that may hold a percent-encoded ``/``. ``GET`` allows ``HEAD`` too."""

    upstream: Literal["pyroscope", "tempo"]
    method: Literal["GET", "POST"]
    path: str
    need: Need
    source: str


def _rpc(method: str, need: Need, source: str) -> Allowed:
    return Allowed("pyroscope", "POST", _QUERIER + method, need, source)


ALLOWED: Final[tuple[Allowed, ...]] = (
    # --- Pyroscope: the querier (Connect unary POSTs, protobuf from Grafana's backend, JSON from the apps)
    _rpc("ProfileTypes", "read", _GRAFANA_PYRO + "pyroscopeClient.go ProfileTypes; " + _PERSES_PYRO + ":128"),
    _rpc("LabelNames", "read", _GRAFANA_PYRO + "pyroscopeClient.go LabelNames; " + _DRILLDOWN + "LabelsApiClient.ts"),
    _rpc("LabelValues", "read", _GRAFANA_PYRO + "pyroscopeClient.go LabelValues; " + _PERSES_PYRO + ":160"),
    _rpc(
        "Series", "read", _DRILLDOWN + "src/pages/ProfilesExplorerView/infrastructure/series/http/SeriesApiClient.ts:22"
    ),
    _rpc("SelectMergeStacktraces", "read", _GRAFANA_PYRO + "pyroscopeClient.go GetProfile"),
    _rpc("SelectMergeSpanProfile", "read", _GRAFANA_PYRO + "pyroscopeClient.go GetSpanProfile"),
    _rpc(
        "SelectMergeProfile", "read", _DRILLDOWN + "…/SceneExploreServiceFlameGraph/infrastructure/PprofApiClient.ts:36"
    ),
    _rpc("SelectSeries", "read", _GRAFANA_PYRO + "pyroscopeClient.go GetSeries"),
    _rpc("SelectHeatmap", "read", _GRAFANA_PYRO + "heatmap/heatmap.go"),
    _rpc("Diff", "read", "Profiles Drilldown's diff view (grafana/profiles-drilldown; querier.proto Diff)"),
    _rpc("GetProfileStats", "read", _DRILLDOWN + "src/app/components/Onboarding/infrastructure/statsApiClient.ts:11"),
    _rpc(
        "AnalyzeQuery", "read", _DRILLDOWN + "src/shared/components/QueryAnalysisTooltip/…/queryAnalysisApiClient.ts:8"
    ),
    # --- Pyroscope: the apps' other services
    Allowed(
        "pyroscope",
        "POST",
        "/capabilities.v1.FeatureFlagsService/GetFeatureFlags",
        "read",
        "Profiles Drilldown (grafana/profiles-drilldown) feature flags; grafana/pyroscope "
        "api/capabilities/v1/feature_flags.proto",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/settings.v1.SettingsService/Get",
        "read",
        _DRILLDOWN + "src/shared/infrastructure/settings/settingsApiClient.ts:13",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/settings.v1.SettingsService/Set",
        "ingest",
        _DRILLDOWN + "src/shared/infrastructure/settings/settingsApiClient.ts:28",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/settings.v1.SettingsService/Delete",
        "ingest",
        "Set's pair in grafana/pyroscope api/settings/v1/setting.proto:8, served by the standalone store "
        "(docs/standalone.md); no Grafana client seen calling it (explore-profiles v1.4.0)",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/settings.v1.RecordingRulesService/ListRecordingRules",
        "read",
        _DRILLDOWN + "src/shared/infrastructure/recording-rules/recordingRulesApiClient.ts:30",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/settings.v1.RecordingRulesService/UpsertRecordingRule",
        "ingest",
        _DRILLDOWN + "src/shared/infrastructure/recording-rules/recordingRulesApiClient.ts:47",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/settings.v1.RecordingRulesService/DeleteRecordingRule",
        "ingest",
        _DRILLDOWN + "src/shared/infrastructure/recording-rules/recordingRulesApiClient.ts:64",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/adhocprofiles.v1.AdHocProfileService/Get",
        "read",
        _DRILLDOWN + "src/pages/AdHocView/infrastructure/adHocProfileClient.ts:8",
    ),
    Allowed(
        "pyroscope",
        "POST",
        "/adhocprofiles.v1.AdHocProfileService/Upload",
        "ingest",
        _DRILLDOWN + "src/pages/AdHocView/infrastructure/adHocProfileClient.ts:29",
    ),
    *(
        Allowed(
            "pyroscope", "POST", f"/vcs.v1.VCSService/{rpc}", "read", _DRILLDOWN + "…/SceneFunctionDetailsPanel/" + f
        )
        for rpc, f in (
            ("GithubApp", "infrastructure/VcsClient.ts:23"),
            ("GithubLogin", "infrastructure/VcsClient.ts:9"),
            ("GithubRefresh", "components/GitHubContextProvider/infrastructure/PrivateVcsClient.ts:192"),
            ("GetFile", "components/GitHubContextProvider/infrastructure/PrivateVcsClient.ts:76"),
            ("GetCommit", "components/GitHubContextProvider/infrastructure/PrivateVcsClient.ts:126"),
        )
    ),
    # --- Pyroscope: HTTP reads (Flamebearer JSON)
    Allowed(
        "pyroscope",
        "GET",
        "/pyroscope/render",
        "read",
        _PERSES_PYRO
        + ":116; "
        + _DRILLDOWN
        + "src/pages/ProfilesExplorerView/infrastructure/profiles/ProfileApiClient.ts:32",
    ),
    Allowed(
        "pyroscope",
        "GET",
        "/pyroscope/render-diff",
        "read",
        _DRILLDOWN + "…/SceneDiffFlameGraph/infrastructure/DiffProfileApiClient.ts:35",
    ),
    # --- Pyroscope: ingest (SDKs, Alloy, Collectors; grafana/pyroscope pkg/api/api.go RegisterDistributor)
    Allowed("pyroscope", "POST", "/push.v1.PusherService/Push", "ingest", "Grafana Alloy, pyroscope-go's push client"),
    Allowed("pyroscope", "POST", "/ingest", "ingest", "Pyroscope SDKs (pyroscope-io, pyroscope-java, pyroscope-go)"),
    Allowed("pyroscope", "POST", "/pyroscope/ingest", "ingest", "Pyroscope SDKs pointed at a /pyroscope base URL"),
    Allowed(
        "pyroscope",
        "POST",
        "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
        "ingest",
        "OpenTelemetry Collector / SDK profile exporters (OTLP over HTTP, protobuf)",
    ),
    Allowed("pyroscope", "POST", "/v1development/profiles", "ingest", "OpenTelemetry profile exporters (OTLP/HTTP)"),
    # --- Tempo: the query API (grafana/tempo pkg/api/http.go:83-100)
    Allowed("tempo", "GET", "/api/traces/{id}", "read", "grafana/grafana pkg/tsdb/tempo/trace.go (v1 fallback)"),
    Allowed(
        "tempo",
        "GET",
        "/api/v2/traces/{id}",
        "read",
        "grafana/grafana pkg/tsdb/tempo/trace.go; " + _PERSES_TEMPO + ":111",
    ),
    Allowed("tempo", "GET", "/api/search", "read", _GRAFANA_TEMPO + "datasource.ts; " + _PERSES_TEMPO + ":102"),
    Allowed("tempo", "GET", "/api/search/tags", "read", _GRAFANA_TEMPO + "language_provider.ts (v1 tags)"),
    Allowed(
        "tempo",
        "GET",
        "/api/v2/search/tags",
        "read",
        _GRAFANA_TEMPO + "language_provider.ts; " + _PERSES_TEMPO + ":131",
    ),
    Allowed(
        "tempo", "GET", "/api/search/tag/{tag}/values", "read", _GRAFANA_TEMPO + "language_provider.ts (v1 values)"
    ),
    Allowed(
        "tempo",
        "GET",
        "/api/v2/search/tag/{tag}/values",
        "read",
        _GRAFANA_TEMPO + "language_provider.ts getOptionsV2; " + _PERSES_TEMPO + ":143",
    ),
    Allowed(
        "tempo",
        "GET",
        "/api/metrics/query_range",
        "read",
        "grafana/traces-drilldown src/components/Explore/queries/generateMetricsQuery.ts (via the Tempo data source)",
    ),
    Allowed(
        "tempo", "GET", "/api/metrics/query", "read", "Tempo data source instant TraceQL metrics (Traces Drilldown)"
    ),
    Allowed("tempo", "GET", "/api/echo", "read", _GRAFANA_TEMPO + "datasource.ts testDatasource (the health check)"),
    Allowed(
        "tempo",
        "GET",
        "/api/status/buildinfo",
        "read",
        "Tempo's version probe (grafana/tempo cmd/tempo/app/app.go:200)",
    ),
)


@dataclass(frozen=True, slots=True)
class Call:
    """A request the mount relays: ``path`` normalised and still percent-encoded (what goes upstream), ``decoded``
    the same path decoded, and the permission it needs."""

    path: str
    decoded: str
    need: Need


def _table() -> tuple[dict[tuple[str, str], Allowed], tuple[tuple[str, re.Pattern[str], Allowed], ...]]:
    exact: dict[tuple[str, str], Allowed] = {}
    patterns: list[tuple[str, re.Pattern[str], Allowed]] = []
    for row in ALLOWED:
        if "{" not in row.path:
            exact[(row.upstream, row.path)] = row
            continue
        parts = [f"(?P<{seg[1:-1]}>[^/]+)" if seg.startswith("{") else re.escape(seg) for seg in row.path.split("/")]
        patterns.append((row.upstream, re.compile("/".join(parts)), row))
    return exact, tuple(patterns)


_EXACT, _PATTERNS = _table()
_PLAIN_PATH: Final = re.compile(r"[A-Za-z0-9_\-./~]*")  # no escapes, no backslash: decoding is the identity
_DOT_SEGMENT: Final = re.compile(r"(?:^|/)\.\.?(?:/|$)")


def normalise(raw: str) -> str:
    """Pure: a raw (percent-encoded) path → the same with runs of ``/`` collapsed. ``InvalidArgument`` for what may
    never go upstream: ``.``/``..`` segments (also once decoded), encoded ``.`` or ``\\``, ``\\``, NUL. (An
    encoded ``/`` is ``match``'s to judge: only a tag name may hold one.)"""
    path = re.sub("/{2,}", "/", raw) if "//" in raw else raw
    if _PLAIN_PATH.fullmatch(path) is None:
        lowered = path.lower()
        for bad, what in (("%2e", "a percent-encoded '.'"), ("%5c", "a percent-encoded '\\'"), ("\\", "a '\\'")):
            if bad in lowered:
                raise InvalidArgument(f"path {raw[:200]!r} has {what}; not forwarded")
        if "%00" in path or "\x00" in path:
            raise InvalidArgument(f"path {raw[:200]!r} has a NUL; not forwarded")
    if ("/." in path and _DOT_SEGMENT.search(path)) or ("%" in path and _DOT_SEGMENT.search(unquote(path))):
        raise InvalidArgument(f"path {raw[:200]!r} has a '.' or '..' segment; not forwarded")
    return path


def match(upstream: str, method: str, raw: str, opened: tuple[tuple[str, str], ...] = ()) -> Call:
    """Pure: the call ``method raw`` (a raw path under the upstream's root, query excluded) as the mount relays it,
    or ``InvalidArgument`` (a malformed path) / ``PermissionDenied`` (not a call Grafana's clients make; the message
    names the setting that opens it). ``opened``: ``(upstream, path)`` pairs from ``PROFILE_BRIDGE_UPSTREAM_ALLOW``,
    a path ending in ``*`` opening everything under it."""
    path = normalise(raw)
    decoded = unquote(path) if "%" in path else path
    if "%2f" in path.lower():  # only a tag name may hold an encoded '/': matched on the raw path, segment by segment
        row = _tag_row(upstream, path)
        if row is None:
            raise InvalidArgument(f"path {raw[:200]!r} has a percent-encoded '/'; not forwarded")
    else:
        row = _EXACT.get((upstream, decoded)) or next(
            (r for u, pattern, r in _PATTERNS if u == upstream and pattern.fullmatch(decoded)), None
        )
    if row is not None and _method_fits(row.method, method):
        return Call(path, decoded, row.need)
    if any(u == upstream and (decoded == p or (p.endswith("*") and decoded.startswith(p[:-1]))) for u, p in opened):
        return Call(path, decoded, OPENED_NEED)
    raise PermissionDenied(refusal(upstream, method, decoded, row))


def _tag_row(upstream: str, path: str) -> Allowed | None:
    for u, pattern, row in _PATTERNS:
        found = pattern.fullmatch(path) if u == upstream else None
        if found is not None and "tag" in found.groupdict():
            return row
    return None


def refusal(upstream: str, method: str, decoded: str, row: Allowed | None) -> str:
    """Why ``method decoded`` is not relayed, and the setting that would relay it."""
    shown = decoded[:200]
    what = f"{method} {MOUNTS[upstream]}{shown}"
    if row is not None:
        why = f"Grafana's clients send it as {row.method} only"
    else:
        why = "it is not one of the calls Grafana, its apps and Perses make, which are all this bridge relays"
    return (
        f"{what} is not relayed to {upstream.capitalize()}: {why} (docs/security.md). To relay it anyway, set "
        f"{SETTING}={upstream}:{shown} (with tokens on, it then needs the ingest permission)"
    )


def _method_fits(allowed: str, method: str) -> bool:
    return method == allowed or (allowed == "GET" and method == "HEAD")


def upstream_of(path: str) -> str | None:
    """Which mount a request path (as routed: decoded) is under, if any."""
    for upstream, mount in MOUNTS.items():
        if path.startswith(mount + "/"):
            return upstream
    return None


def mount_call(upstream: str, method: str, raw_path: str, opened: tuple[tuple[str, str], ...] = ()) -> Call:
    """``match`` for a request's raw path and query (``request.raw_path``) under ``upstream``'s mount."""
    raw = raw_path.partition("?")[0]
    mount = MOUNTS[upstream]
    if not raw.startswith(mount + "/"):
        raise InvalidArgument(f"path {raw[:200]!r} does not start with {mount}/ as sent; not forwarded")
    return match(upstream, method, raw[len(mount) :], opened)


def need_of(upstream: str, method: str, raw_path: str, opened: tuple[tuple[str, str], ...] = ()) -> Need:
    """The permission a mount request needs; ``read`` when the mount refuses it anyway (its handler says why, once
    the caller has shown a token)."""
    try:
        return mount_call(upstream, method, raw_path, opened).need
    except (InvalidArgument, PermissionDenied):
        return "read"


# --------------------------------------------------------------------------------------------- the front's copy

FRONT_MAP_BEGIN: Final = "# BEGIN allowlist"
FRONT_MAP_END: Final = "# END allowlist"


def nginx_map() -> str:
    """``ALLOWED`` as the nginx ``map`` ``deploy/nginx-front.conf`` holds between ``FRONT_MAP_BEGIN`` and
    ``FRONT_MAP_END`` (``scripts/front_allowlist.py`` rewrites it; a test keeps the two in step): the permission a call
    needs, from nginx's normalised ``$uri`` and the method, for a request whose raw URI holds nothing the bridge
    refuses (``$profile_bridge_raw``). Anything else maps to "" and goes to the bridge, which answers it."""
    lines = [
        f"{FRONT_MAP_BEGIN}: generated from bridge/wire/allowlist.py by scripts/front_allowlist.py; do not edit",
        'map "$profile_bridge_raw $request_method $uri" $profile_bridge_need {',
        '  default "";',
    ]
    for row in ALLOWED:
        methods = "(?:GET|HEAD)" if row.method == "GET" else row.method
        path = "/".join("[^/]+" if seg.startswith("{") else re.escape(seg) for seg in row.path.split("/"))
        lines.append(f'  "~^plain {methods} {MOUNTS[row.upstream]}{path}$" {row.need};')
    lines += ["}", FRONT_MAP_END]
    return "\n".join(lines) + "\n"


DOCS_TABLE_BEGIN: Final = "<!-- allowlist-table -->"
DOCS_TABLE_END: Final = "<!-- /allowlist-table -->"


def markdown_table() -> str:
    """``ALLOWED`` as docs/security.md shows it (between ``DOCS_TABLE_BEGIN`` and ``DOCS_TABLE_END``; a test keeps the
    two in step, ``scripts/front_allowlist.py`` rewrites it)."""
    rows = [DOCS_TABLE_BEGIN, "| call (under the mount) | method | needs | made by |", "|---|---|---|---|"]
    for row in ALLOWED:
        rows.append(f"| `{MOUNTS[row.upstream]}{row.path}` | {row.method} | {row.need} | {row.source} |")
    return "\n".join([*rows, DOCS_TABLE_END]) + "\n"
