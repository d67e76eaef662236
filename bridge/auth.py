"""Optional authentication: tokens bound to a tenant, with ``read`` and ``ingest`` permissions.

Off unless tokens are configured (``PROFILE_BRIDGE_AUTH_TOKENS_FILE`` / ``PROFILE_BRIDGE_AUTH_TOKENS``, parsed by
``bridge.config``). When on, every HTTP route but ``/healthz`` and ``/readyz`` (and ``/metrics`` unless
``PROFILE_BRIDGE_AUTH_METRICS=read``) and both gRPC exports need a token:

- **Where the token comes from**: ``X-Profile-Bridge-Token: <token>`` (gRPC metadata ``x-profile-bridge-token``);
  otherwise ``Authorization: Bearer <token>``, or ``Authorization: Basic`` with the token as the password (the user
  name is not checked) — what Grafana's data sources and a browser's login prompt send.
- **What it may do**: ``ingest`` for the ingest routes (OTLP traces and profiles, Pyroscope Push and ``/ingest``)
  and for the writes the mounts relay (``bridge.wire.allowlist``: Pyroscope's ingest paths, Profiles Drilldown's
  settings, recording rules and ad-hoc uploads, whatever ``PROFILE_BRIDGE_UPSTREAM_ALLOW`` opens); ``read`` for
  everything else — Grafana's mounts, the API, the pages (a browser gets a login prompt: any user name, the token as
  password).
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

from bridge.config import Settings
from bridge.errors import PermissionDenied, Unauthenticated
from bridge.parsing import ANY_TENANT, TokenEntry, token_digest
from bridge.wire.allowlist import need_of, upstream_of

TOKEN_HEADER: Final = "X-Profile-Bridge-Token"
TENANT_HEADER: Final = "X-Scope-OrgID"
# nginx in front (deploy/nginx-front.conf) asks FRONT_AUTH_PATH?need=read|ingest with the caller's headers; the answer
# names the tenant to send upstream and whether Authorization carried the bridge's token (so it must not go up)
FRONT_AUTH_PATH: Final = "/api/v1/auth"
TENANT_ANSWER_HEADER: Final = "X-Profile-Bridge-Tenant"
CONSUMED_HEADER: Final = "X-Profile-Bridge-Consumed"
REALM: Final = 'Bearer realm="profile-bridge", Basic realm="profile-bridge", charset="UTF-8"'
OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
INGEST_PATHS: Final = frozenset({"/v1/traces", "/push.v1.PusherService/Push", "/ingest", "/v1development/profiles"})


@dataclass(frozen=True, slots=True)
class Grant:
    """What one authenticated request may do, and the tenant it acts for (None: no tenant header)."""

    tenant: str | None
    drop_authorization: bool  # Authorization carried the bridge's token: it does not go upstream


class Auth:
    """The accepted tokens, by digest."""

    def __init__(
        self,
        entries: tuple[TokenEntry, ...],
        *,
        metrics_open: bool = True,
        upstream_allow: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._tokens = {entry.digest: entry for entry in entries}
        self.metrics_open = metrics_open
        self.upstream_allow = upstream_allow

    @classmethod
    def from_settings(cls, settings: Settings) -> Auth | None:
        """None when no token is configured: authentication is off."""
        tokens = settings.auth_tokens
        if not tokens:
            return None
        return cls(tokens, metrics_open=settings.auth_metrics == "open", upstream_allow=settings.upstream_allow)

    def __len__(self) -> int:
        return len(self._tokens)

    def required(self, path: str, method: str, raw_path: str | None = None) -> str | None:
        """Pure: the permission a request needs (``read``, ``ingest``), or None for the open routes. ``path`` is the
        path as routed (decoded); under a mount the allowlist decides from the path as sent, ``raw_path``."""
        if path in OPEN_PATHS or (path == "/metrics" and self.metrics_open):
            return None
        if path in INGEST_PATHS:
            return "ingest"
        upstream = upstream_of(path)
        if upstream is not None:
            return need_of(upstream, method, path if raw_path is None else raw_path, self.upstream_allow)
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
