"""``doctor``'s look at Grafana's data sources: is the Tempo data source wired through the bridge while its "Profiles
for this span" data source reaches Pyroscope directly?

The ``/tempo`` mount writes ``pyroscope.profile.id`` as ``<span id>:<trace id>`` (``bridge.ids``), and Grafana sends
that value back verbatim as the span selector of the Profiles data source its Tempo data source names
(``jsonData.tracesToProfiles.datasourceUid``). Through the bridge's ``/pyroscope`` mount that is what lets any bridge
resolve the click; sent to Pyroscope itself it is refused (``invalid span id length``, grafana/pyroscope
``pkg/model/profile.go``), so every "Profiles for this span" fails. ``PROFILE_BRIDGE_PROFILE_ID_FORM=span`` writes the
plain 16-hex span id instead, which Pyroscope answers with the span's own samples (and nothing when it has none).

Where the data sources are read, each said in the check's line (when none can be read, ``doctor`` says so in a note
under its first line instead of a check): Grafana's provisioning files (``--datasources`` a
file or directory, by default ``/etc/grafana/provisioning/datasources`` when it exists) and Grafana's HTTP API
(``GET {PROFILE_BRIDGE_GRAFANA_URL}/api/datasources``, with the token in ``--grafana-token-file`` when given). A
data source is "through the bridge" when its URL's path ends with the mount (``/tempo``, ``/pyroscope``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import yaml

from bridge.commands.checks import Check
from bridge.config import Settings

DEFAULT_PROVISIONING: Final = Path("/etc/grafana/provisioning/datasources")
TEMPO_TYPES: Final = frozenset({"tempo"})
PYROSCOPE_TYPES: Final = frozenset({"grafana-pyroscope-datasource", "phlare"})
NAME: Final = "Grafana's data sources"
MAX_FILE_BYTES: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DataSource:
    name: str
    type: str
    uid: str
    url: str
    profiles_uid: str  # a Tempo data source's tracesToProfiles.datasourceUid ("" when none)


def _source(item: Mapping[str, Any]) -> DataSource | None:
    if not isinstance(item, Mapping):
        return None
    json_data = _mapping(item.get("jsonData"))
    profiles = _mapping(json_data.get("tracesToProfiles"))
    return DataSource(
        str(item.get("name") or ""),
        str(item.get("type") or ""),
        str(item.get("uid") or ""),
        str(item.get("url") or ""),
        str(profiles.get("datasourceUid") or ""),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_provisioning(text: str) -> list[DataSource]:
    """Pure: the data sources of one Grafana provisioning file (``apiVersion: 1``, ``datasources: [...]``).
    ``ValueError`` when it is not one."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML ({str(exc).splitlines()[0]})") from exc
    items = doc.get("datasources") if isinstance(doc, Mapping) else None
    if not isinstance(items, list):
        return []
    return [s for s in (_source(item) for item in items) if s is not None]


def parse_api(doc: Any) -> list[DataSource]:
    """Pure: Grafana's ``GET /api/datasources`` answer (a JSON list)."""
    if not isinstance(doc, list):
        raise ValueError("not a list of data sources")
    return [s for s in (_source(item) for item in doc) if s is not None]


def through_bridge(source: DataSource, mount: str) -> bool:
    path = urlsplit(source.url).path.rstrip("/")
    return path == mount or path.endswith(mount)


def wiring_check(sources: Iterable[DataSource], where: str, profile_id_form: str) -> Check:
    """Pure: the check's verdict on the data sources read from ``where``."""
    every = list(sources)
    by_uid = {s.uid: s for s in every if s.uid}
    pairs: list[tuple[DataSource, DataSource]] = []
    for tempo in every:
        if tempo.type in TEMPO_TYPES and through_bridge(tempo, "/tempo"):
            target = by_uid.get(tempo.profiles_uid)
            if target is not None and target.type in PYROSCOPE_TYPES:
                pairs.append((tempo, target))
    if not pairs:
        return Check(NAME, True, f"no Tempo data source goes through the bridge to a Profiles data source ({where})")
    direct = [(t, p) for t, p in pairs if not through_bridge(p, "/pyroscope")]
    if not direct:
        names = ", ".join(f"{t.name!r} → {p.name!r}" for t, p in pairs)
        return Check(NAME, True, f"{names}: both through the bridge ({where})")
    words = "; ".join(
        f"{t.name!r} goes through the bridge, its profiles {p.name!r} to {p.url} directly" for t, p in direct
    )
    if profile_id_form == "span":
        return Check(
            NAME,
            True,
            f"{words} ({where}): the bridge writes plain span ids (PROFILE_BRIDGE_PROFILE_ID_FORM=span), which "
            "Pyroscope answers with the span's own samples, without the bridge's fallbacks",
        )
    return Check(
        NAME,
        False,
        f"{words} ({where}): Pyroscope refuses the <span id>:<trace id> the bridge writes into pyroscope.profile.id "
        "(invalid span id length), so every \u201cProfiles for this span\u201d fails",
        f"point {', '.join(repr(p.name) for _, p in direct)} at the bridge's /pyroscope mount (it resolves every "
        "span), or set PROFILE_BRIDGE_PROFILE_ID_FORM=span on the bridge (plain span ids: Pyroscope answers the "
        "span's own samples, and spans without linked samples show nothing)",
    )


def read_provisioning(path: Path) -> tuple[list[DataSource], str]:
    """The data sources of a provisioning file or of every ``*.yaml`` / ``*.yml`` in a directory, and what was read
    (a file that cannot be read or parsed is named there, not raised)."""
    files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
    found: list[DataSource] = []
    bad: list[str] = []
    for file in files:
        try:
            if file.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            found.extend(parse_provisioning(file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            bad.append(f"{file}: {exc}")
    what = f"provisioning files in {path}" if path.is_dir() else f"provisioning file {path}"
    return found, what + (f" (unreadable: {'; '.join(bad)})" if bad else "")


async def read_api(settings: Settings, token: str | None) -> list[DataSource]:
    """Grafana's own list. ``ValueError`` saying why when it cannot be read."""
    url = settings.grafana_url.rstrip("/") + "/api/datasources"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=settings.upstream_timeout, connect=settings.connect_timeout)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers, allow_redirects=False) as resp,
        ):
            body = await resp.content.read(MAX_FILE_BYTES)
            if resp.status != 200:
                hint = (
                    "; give --grafana-token-file with a token that may read data sources"
                    if resp.status in (401, 403)
                    else ""
                )
                raise ValueError(f"{url} answered HTTP {resp.status}{hint}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ValueError(f"{url} did not answer ({type(exc).__name__}: {exc})") from exc
    try:
        return parse_api(json.loads(body))
    except ValueError as exc:
        raise ValueError(f"{url} answered something else than its data sources ({exc})") from exc


async def check_datasources(
    settings: Settings, provisioning: Path | None = None, token_file: Path | None = None
) -> Check | str:
    """Read what can be read — the provisioning files, Grafana's API — and judge the wiring; when nothing could be
    read, a note saying what it looked for instead of a check."""
    sources: list[DataSource] = []
    read: list[str] = []
    missed: list[str] = []
    path = provisioning if provisioning is not None else DEFAULT_PROVISIONING
    if path.exists():
        found, what = read_provisioning(path)
        sources += found
        read.append(what)
    else:
        missed.append(f"no provisioning files at {path}")
    if settings.grafana_url:
        try:
            token = token_file.read_text(encoding="utf-8").strip() if token_file is not None else None
            sources += await read_api(settings, token)
            read.append(f"Grafana's API at {settings.grafana_url}")
        except (OSError, ValueError) as exc:
            missed.append(str(exc))
    else:
        missed.append("PROFILE_BRIDGE_GRAFANA_URL is unset")
    if not read:
        return (
            f"{NAME} not checked: none could be read ({'; '.join(missed)}); give --datasources with Grafana's "
            "provisioning directory, or PROFILE_BRIDGE_GRAFANA_URL (and --grafana-token-file)"
        )
    return wiring_check(sources, "read from " + " and ".join(read), settings.profile_id_form)
