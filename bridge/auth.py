"""Optional authentication: tokens bound to a tenant, with ``read`` and ``ingest`` permissions.

Off unless tokens are configured (``PROFILE_BRIDGE_AUTH_TOKENS_FILE`` / ``PROFILE_BRIDGE_AUTH_TOKENS``, parsed by
``bridge.config``). When on, every HTTP route but ``/healthz`` and ``/readyz`` (and ``/metrics`` unless
``PROFILE_BRIDGE_AUTH_METRICS=read``) and both gRPC exports need a token:

- **Where the token comes from**: ``X-Profile-Bridge-Token: <token>`` (gRPC metadata ``x-profile-bridge-token``);
  otherwise ``Authorization: Bearer <token>``, or ``Authorization: Basic`` with the token as the password (the user
  name is not checked) — what Grafana's data sources and a browser's login prompt send.
- **What it may do**: ``ingest`` for the ingest routes (OTLP traces and profiles, Pyroscope Push and ``/ingest``,
  and writes passed through the mounts: Pyroscope's push and ingest paths, its tenant settings' ``Set`` and
  ``Delete``, any non-GET under ``/tempo``); ``read``
  for everything else — Grafana's mounts, the API, the pages (a browser gets a login prompt: any user name, the
  token as password).
- **Which tenant**: a token bound to a tenant acts for that tenant only: ``X-Scope-OrgID`` is set to it (absent) or
  must equal it (403 otherwise). A token bound to ``*`` leaves the header as the caller sent it.
- **What goes upstream** (proxy mode): the bridge's token is the bridge's business and never leaves it — the
  ``X-Profile-Bridge-Token`` header is dropped, and so is ``Authorization`` when it carried the token. Credentials
  meant for Tempo and Pyroscope keep passing as before: send the bridge's token in ``X-Profile-Bridge-Token`` and
  keep ``Authorization`` for the upstreams.

The token is compared by its SHA-256 (the configuration may hold only digests); an error never echoes it. This
module is the pure part; ``bridge.gate`` applies it to HTTP requests, ``bridge.otlp.grpc_server`` to gRPC calls.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from bridge.config import ANY_TENANT, Settings, TokenEntry, token_digest
from bridge.errors import PermissionDenied, Unauthenticated

TOKEN_HEADER: Final = "X-Profile-Bridge-Token"
TENANT_HEADER: Final = "X-Scope-OrgID"
REALM: Final = 'Bearer realm="profile-bridge", Basic realm="profile-bridge", charset="UTF-8"'
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
INGEST_PATHS: Final = frozenset({"/v1/traces", "/push.v1.PusherService/Push", "/ingest", "/v1development/profiles"})
# writes under the /pyroscope mount: to Pyroscope itself, or (standalone) to the store's tenant settings
PYROSCOPE_WRITES: Final = (
    "/pyroscope/push.v1.PusherService/",
    "/pyroscope/ingest",
    "/pyroscope/opentelemetry.proto.collector.",
    "/pyroscope/v1development/",
    "/pyroscope/settings.v1.SettingsService/Set",
    "/pyroscope/settings.v1.SettingsService/Delete",
)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one authenticated request may do, and the tenant it acts for (None: no tenant header)."""

    tenant: str | None
    drop_authorization: bool  # Authorization carried the bridge's token: it does not go upstream


class Auth:
    """The accepted tokens, by digest."""

    def __init__(self, entries: tuple[TokenEntry, ...], *, metrics_open: bool = True) -> None:
        self._tokens = {entry.digest: entry for entry in entries}
        self.metrics_open = metrics_open

    @classmethod
    def from_settings(cls, settings: Settings) -> Auth | None:
        """None when no token is configured: authentication is off."""
        tokens = settings.auth_tokens
        return cls(tokens, metrics_open=settings.auth_metrics == "open") if tokens else None

    def __len__(self) -> int:
        return len(self._tokens)

    def required(self, path: str, method: str) -> str | None:
        """Pure: the permission a request needs (``read``, ``ingest``), or None for the open routes."""
        if path in OPEN_PATHS or (path == "/metrics" and self.metrics_open):
            return None
        if path in INGEST_PATHS or path.startswith(PYROSCOPE_WRITES):
            return "ingest"
        if path.startswith("/tempo/") and method not in ("GET", "HEAD"):
            return "ingest"
        return "read"

    def accepts(self, token: str | None) -> bool:
        """Whether ``token`` is one of the accepted ones (whatever it may do)."""
        return token is not None and token_digest(token) in self._tokens

    def grant(self, need: str, token: str | None, from_authorization: bool, tenant: str | None) -> Grant:
        """Check one credential for ``need`` and the tenant the caller asked for; ``Unauthenticated`` or
        ``PermissionDenied`` saying why (never quoting the token)."""
        if token is None:
            raise Unauthenticated(
                f"this bridge needs a token: send {TOKEN_HEADER}: <token> or Authorization: "
                "Bearer <token> (see docs/security.md)"
            )
        entry = self._tokens.get(token_digest(token))
        if entry is None:
            raise Unauthenticated("the token is not one this bridge accepts")
        if need not in entry.permissions:
            raise PermissionDenied(f"this token may {' and '.join(sorted(entry.permissions))}, not {need}")
        if entry.tenant == ANY_TENANT:
            return Grant(tenant, from_authorization)
        if tenant is not None and tenant != entry.tenant:
            raise PermissionDenied(
                f"this token acts for tenant {entry.tenant!r} only, not for X-Scope-OrgID {tenant[:80]!r}"
            )
        return Grant(entry.tenant, from_authorization)


def credential(headers: Mapping[str, str]) -> tuple[str | None, bool]:
    """Pure: the token a caller sent and whether it came in ``Authorization`` (``TOKEN_HEADER`` first)."""
    own = (headers.get(TOKEN_HEADER) or "").strip()
    if own:
        return own, False
    authorization = (headers.get("Authorization") or "").strip()
    scheme, _, value = authorization.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer" and value:
        return value, True
    if scheme == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None, True
        _, sep, password = decoded.partition(":")
        return (password, True) if sep and password else (None, True)
    return None, False


def grpc_grant(auth: Auth | None, metadata: Mapping[str, str]) -> tuple[str | None, str | None]:
    """For a gRPC export (``ingest``): the tenant and the ``authorization`` to pass on, from the call's metadata
    (keys in lower case). Raises ``Unauthenticated`` / ``PermissionDenied``."""
    tenant = metadata.get("x-scope-orgid") or None
    authorization = metadata.get("authorization") or None
    if auth is None:
        return tenant, authorization
    token, from_authorization = credential(
        {TOKEN_HEADER: metadata.get(TOKEN_HEADER.lower(), ""), "Authorization": authorization or ""}
    )
    grant = auth.grant("ingest", token, from_authorization, tenant)
    return grant.tenant, None if grant.drop_authorization else authorization
