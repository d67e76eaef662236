"""``settings.v1.SettingsService`` answered by the store: each tenant's named settings (``tenant_settings``, schema 8).

Profiles Drilldown keeps its plugin settings here (one setting, ``pluginSettings``, a JSON text: grafana/
explore-profiles ``src/shared/infrastructure/settings/settingsApiClient.ts``). The semantics are Pyroscope's
(grafana/pyroscope ``pkg/settings/settings.go`` and ``bucket.go``, read at 3fe6a457):

- ``Get``: every setting of the tenant, sorted by name.
- ``Set``: no setting → ``invalid_argument`` ("no setting values provided"); ``modifiedAt`` ≤ 0 is stamped with
  now (ms); a stored setting of that name modified *later* than the one sent is kept and the call fails with
  ``already_exists`` ("newer update already written"); otherwise it is stored as sent and returned.
- ``Delete``: no name → ``invalid_argument``; unknown names are no error; a setting modified after now is kept
  (``already_exists``).

Bounded where Pyroscope is not (its bucket store keeps everything in memory): a name of at most ``MAX_NAME_CHARS``,
a value of at most ``MAX_VALUE_BYTES``, at most ``MAX_SETTINGS`` per tenant — each refused with a message naming the
limit. Writes need the ``ingest`` permission when tokens are on (``bridge.auth``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

from bridge._proto import settings_pb2 as spb
from bridge.errors import BridgeError, Code, InvalidArgument
from bridge.store.database import Database

MAX_NAME_CHARS: Final = 256
MAX_VALUE_BYTES: Final = 1024 * 1024
MAX_SETTINGS: Final = 1000
NEWER: Final = "newer update already written"


def _older(action: str, name: str) -> BridgeError:
    return BridgeError(f"failed to {action} {name}: {NEWER}", code=Code.ALREADY_EXISTS)


def check_setting(setting: spb.Setting) -> None:
    """Pure: the bounds a stored setting keeps to."""
    if not setting.name:
        raise InvalidArgument("the setting has no name")
    if len(setting.name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"setting name is {len(setting.name)} characters long, more than {MAX_NAME_CHARS}")
    size = len(setting.value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        raise InvalidArgument(f"setting {setting.name[:80]!r} is {size} bytes long, more than {MAX_VALUE_BYTES}")


class TenantSettings:
    """The settings service of the store (``settings.v1.SettingsService``)."""

    def __init__(self, db: Database, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def get(self, req: spb.GetSettingsRequest, tenant: str) -> spb.GetSettingsResponse:
        def read(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
            return conn.execute(
                "SELECT name, value, modified_at FROM tenant_settings WHERE tenant = ? ORDER BY name", (tenant,)
            ).fetchall()

        out = spb.GetSettingsResponse()
        for name, value, modified_at in await self._db.read(read):
            out.settings.add(name=name, value=value, modifiedAt=modified_at)
        return out

    async def set(self, req: spb.SetSettingsRequest, tenant: str) -> spb.SetSettingsResponse:
        if not req.HasField("setting"):
            raise InvalidArgument("no setting values provided")
        setting = spb.Setting()
        setting.CopyFrom(req.setting)
        check_setting(setting)
        if setting.modifiedAt <= 0:
            setting.modifiedAt = self._now_ms()

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT modified_at FROM tenant_settings WHERE tenant = ? AND name = ?", (tenant, setting.name)
            ).fetchone()
            if row is not None and row[0] > setting.modifiedAt:
                raise _older("update", setting.name)
            if row is None:
                (count,) = conn.execute("SELECT count(*) FROM tenant_settings WHERE tenant = ?", (tenant,)).fetchone()
                if count >= MAX_SETTINGS:
                    raise InvalidArgument(f"this tenant holds {MAX_SETTINGS} settings, the most the store keeps")
            conn.execute(
                "INSERT INTO tenant_settings (tenant, name, value, modified_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (tenant, name) DO UPDATE SET value = excluded.value, modified_at = excluded.modified_at",
                (tenant, setting.name, setting.value, setting.modifiedAt),
            )

        await self._db.commit(write)
        return spb.SetSettingsResponse(setting=setting)

    async def delete(self, req: spb.DeleteSettingsRequest, tenant: str) -> spb.DeleteSettingsResponse:
        if not req.name:
            raise InvalidArgument("no setting name provided")
        now_ms = self._now_ms()

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT modified_at FROM tenant_settings WHERE tenant = ? AND name = ?", (tenant, req.name)
            ).fetchone()
            if row is None:
                return
            if row[0] > now_ms:
                raise _older("delete", req.name)
            conn.execute("DELETE FROM tenant_settings WHERE tenant = ? AND name = ?", (tenant, req.name))

        await self._db.commit(write)
        return spb.DeleteSettingsResponse()
