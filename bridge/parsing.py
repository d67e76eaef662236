"""Pure parsers of setting values (``bridge.config`` applies them to the environment, the TOML file and the flags):
URLs, host:port, durations, byte sizes, label maps, upstream allowances, tokens and token files. Each raises
``ValueError`` with the words the CLI prints after the setting's name."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit


def parse_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("not an http(s) URL like http://host:port")
    return value.rstrip("/")


def parse_optional_url(value: str) -> str:
    return "" if value.strip() == "" else parse_url(value)


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError("not HOST:PORT")
    host = host.strip("[]") or "0.0.0.0"
    return host, parse_port(port)


def parse_port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise ValueError("not a valid port") from None
    if not 0 <= port <= 65535:
        raise ValueError("not a valid port")
    return port


def parse_seconds(value: str) -> float:
    """``15``, ``15s``, ``250ms``, ``5m``, ``24h`` → seconds. Must be positive."""
    text = value.strip().lower()
    units = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0))
    factor = 1.0
    for suffix, mult in units:
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            text, factor = text[: -len(suffix)], mult
            break
    try:
        seconds = float(text) * factor
    except ValueError:
        raise ValueError("not a duration like 15s, 250ms, 5m or 24h") from None
    if not seconds > 0 or seconds != seconds:
        raise ValueError("must be a positive duration")
    return seconds


def parse_bytes(value: str) -> int:
    """``33554432``, ``32MiB``, ``1GiB``, ``512KiB``, ``10MB`` → bytes. Must be positive."""
    text = value.strip()
    units = (
        ("KiB", 1024),
        ("MiB", 1024**2),
        ("GiB", 1024**3),
        ("KB", 1000),
        ("MB", 1000**2),
        ("GB", 1000**3),
        ("B", 1),
    )
    factor = 1
    for suffix, mult in units:
        if text.endswith(suffix):
            text, factor = text[: -len(suffix)].strip(), mult
            break
    try:
        number = int(text)
    except ValueError:
        raise ValueError("not a size like 33554432, 32MiB or 1GiB") from None
    if number <= 0:
        raise ValueError("must be a positive size")
    return number * factor


def parse_positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError("not a whole number") from None
    if number <= 0:
        raise ValueError("must be a positive whole number")
    return number


def parse_workers(value: str) -> int:
    """A number of worker processes; ``0`` or ``auto``: one per processor (decided at start)."""
    text = value.strip().lower()
    if text in ("0", "auto"):
        return 0
    try:
        number = int(text)
    except ValueError:
        raise ValueError("not a number of processes (or auto)") from None
    if not 0 < number <= 256:
        raise ValueError("must be 1-256, or auto (one per processor)")
    return number


def parse_label_map(value: str) -> tuple[tuple[str, str], ...]:
    """``service.name=service_name,k8s.pod.name=pod`` → pairs (resource attribute, profile label)."""
    pairs: list[tuple[str, str]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        attr, sep, label = item.partition("=")
        attr, label = attr.strip(), label.strip()
        if not sep or not attr or not label:
            raise ValueError("not a list like service.name=service_name,k8s.pod.name=pod")
        if not (label[0].isalpha() or label[0] == "_") or not all(c.isalnum() or c == "_" for c in label):
            raise ValueError(f"{label!r} is not a valid profile label name")
        pairs.append((attr, label))
    if not pairs:
        raise ValueError("needs at least one attribute=label pair")
    return tuple(pairs)


def parse_link_keys(value: str) -> tuple[tuple[str, str], ...]:
    """``otel.profile.trace_id/otel.profile.span_id,trace_id/span_id,/profile_id`` → (trace key, span key) pairs,
    tried in order; an empty trace key means the span id comes without a trace id."""
    pairs: list[tuple[str, str]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        trace_key, sep, span_key = item.partition("/")
        if not sep or not span_key.strip():
            raise ValueError("not a list like trace_id/span_id,/profile_id (trace key / span key)")
        pairs.append((trace_key.strip(), span_key.strip()))
    if not pairs:
        raise ValueError("needs at least one trace_key/span_key pair")
    return tuple(pairs)


def parse_url_list(value: str) -> tuple[str, ...]:
    return tuple(parse_url(item.strip()) for item in value.split(",") if item.strip())


UPSTREAMS: Final = ("pyroscope", "tempo")


def parse_upstream_allow(value: str) -> tuple[tuple[str, str], ...]:
    """``tempo:/flush,pyroscope:/adhocprofiles.v1.AdHocProfileService/*`` → ((upstream, path), …): calls the mounts
    relay beyond the ones Grafana's clients make (``bridge.wire.allowlist``); a trailing ``*`` opens a whole prefix."""
    entries: list[tuple[str, str]] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        upstream, sep, path = item.partition(":")
        if not sep or upstream not in UPSTREAMS:
            raise ValueError(f"{item!r} is not UPSTREAM:/PATH with UPSTREAM one of {', '.join(UPSTREAMS)}")
        if path == "*":
            path = "/*"
        if not path.startswith("/") or "*" in path[:-1] or any(c.isspace() for c in path) or "%" in path:
            raise ValueError(f"{item!r}: the path must start with '/', be written decoded, and may end in one '*'")
        entries.append((upstream, path))
    return tuple(entries)


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError("must be one of " + ", ".join(choices))
        return value

    return parse


def parse_bool(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def parse_str(value: str) -> str:
    return value


def parse_nonempty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value.strip()


PERMISSIONS: Final = ("read", "ingest")
ANY_TENANT: Final = "*"
MIN_TOKEN_CHARS: Final = 16


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One accepted credential: the SHA-256 of the token (never the token itself), the tenant it is bound to
    (``*``: the caller's ``X-Scope-OrgID`` decides) and what it may do (``read``, ``ingest``)."""

    digest: bytes
    tenant: str
    permissions: frozenset[str]
    where: str  # "line 3" / "entry 2": for messages, never the token


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def parse_token_entries(text: str, unit: str = "entry") -> tuple[TokenEntry, ...]:
    """``TOKEN TENANT PERMISSIONS`` per line (a file) or per ``;``-separated entry (the environment); ``#`` starts a
    comment. TOKEN: at least 16 characters, or ``sha256:`` and the token's SHA-256 in hex (nothing secret on disk).
    TENANT: the tenant the token acts for, or ``*`` for any. PERMISSIONS: ``read``, ``ingest`` or ``read,ingest``.
    A reason never quotes a token."""
    entries: list[TokenEntry] = []
    seen: dict[bytes, str] = {}
    chunks = text.splitlines() if unit == "line" else text.replace("\n", ";").split(";")
    for n, raw in enumerate(chunks, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{unit} {n}"
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(
                f"{where} has {len(fields)} fields: write TOKEN TENANT PERMISSIONS, e.g. '<token> team-a read,ingest'"
            )
        token, tenant, perms = fields
        if token.startswith("sha256:"):
            hexdigest = token[len("sha256:") :]
            if len(hexdigest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in hexdigest):
                raise ValueError(f"{where}: a sha256: token must be followed by 64 hex characters")
            digest = bytes.fromhex(hexdigest)
        elif len(token) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters (make one with "
                "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        else:
            digest = token_digest(token)
        permissions = frozenset(p.strip() for p in perms.split(",") if p.strip())
        unknown = sorted(permissions - set(PERMISSIONS))
        if unknown or not permissions:
            raise ValueError(f"{where}: permissions {perms!r} are not read, ingest or read,ingest")
        if digest in seen:
            raise ValueError(f"{where}: the same token as {seen[digest]}")
        seen[digest] = where
        entries.append(TokenEntry(digest, tenant, permissions, where))
    return tuple(entries)


def parse_token_file(path: str) -> tuple[TokenEntry, ...]:
    """A tokens file (``parse_token_entries``, one per line), read once at start."""
    if not path.strip():
        return ()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot be read ({reason})") from None
    entries = parse_token_entries(text, "line")
    if not entries:
        raise ValueError("holds no token (TOKEN TENANT PERMISSIONS per line)")
    return entries


def parse_env_tokens(value: str) -> tuple[TokenEntry, ...]:
    return parse_token_entries(value, "entry")
