"""Ground floor: one incoming request's call context, whichever mode answers it — who asked (the tenant as sent,
credentials) and how long is left (one ``Deadline`` per request, from ``Connect-Timeout-Ms`` capped by the settings;
every call made on the request's behalf, to Tempo, Pyroscope or the store, gets what remains). Both modes use it, so
it lives here and not under ``upstream/`` (proxy mode only)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

# request headers carried from Grafana to every upstream call made on its behalf
FORWARDED_HEADERS: Final = ("X-Scope-OrgID", "Authorization")
# the tenant of a request without X-Scope-OrgID, as Pyroscope and Tempo without multi-tenancy name it (Pyroscope
# pkg/tenant: DefaultTenantID; Tempo pkg/util: FakeTenantID "single-tenant" is Tempo's, but the store keeps one name)
ANONYMOUS: Final = "anonymous"


def tenant_key(tenant: str | None) -> str:
    """The tenant as the store keeps it: no tenant is ``anonymous``, as in Pyroscope without multi-tenancy."""
    return tenant or ANONYMOUS


@dataclass(frozen=True, slots=True)
class Deadline:
    """One budget per request: every upstream call gets what remains. ``clock`` is injectable for tests."""

    expires_at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def start(cls, requested: float | None, cap: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        budget = cap if requested is None else min(requested, cap)
        return cls(clock() + budget, clock)

    def remaining(self) -> float:
        return max(0.0, self.expires_at - self.clock())

    def expired(self) -> bool:
        return self.remaining() <= 0.0


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who asked (tenant, credentials) and how long is left (deadline) for one incoming request."""

    deadline: Deadline
    tenant: str | None = None
    authorization: str | None = None
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        out = dict(self.extra_headers)
        if self.tenant:
            out["X-Scope-OrgID"] = self.tenant
        if self.authorization:
            out["Authorization"] = self.authorization
        return out

    @property
    def tenant_key(self) -> str:
        """The tenant as the store keeps it: no tenant is ``anonymous``, as in Pyroscope without multi-tenancy."""
        return tenant_key(self.tenant)

    @property
    def cache_scope(self) -> str:
        """What the bridge's caches are keyed by (``scope_key``): an answer fetched for one caller is reused only for
        a caller who sent the same tenant header and the same credentials."""
        return scope_key(self.tenant, self.authorization)


def scope_key(tenant: str | None, authorization: str | None = None) -> str:
    """Pure: the cache scope of a caller. The tenant exactly as sent — no header is not ``anonymous`` nor any other
    value — and a digest of the credentials when there are any: a caller without them (or with others) is never
    shown what the upstream answered someone else."""
    key = "-" if tenant is None else "t:" + tenant
    if authorization:
        key += "|" + hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return key
