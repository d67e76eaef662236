"""Route fuzzing: hostile values in every field of every request the bridge decodes, on every route it serves, read
from the app itself so that routes and RPCs added later are fuzzed too (``tests/service/test_fuzz.py`` runs a short
deterministic pass; ``scripts/fuzz.py`` the long one).

What is enumerated, and from where:

- **Connect RPCs** the app decodes: the ``/pyroscope`` mount's own table (standalone: ``StorePyroscope.table``, every
  querier RPC the store answers; proxy: ``wire.pyroscope.SPAN_RPCS``, the RPCs the bridge resolves itself) and the
  ingest RPCs (``INGEST_MESSAGES``: every POST route of the app must be there — ``check_coverage`` fails for a new
  one). Each message's fields come from its protobuf descriptor, recursively (a repeated message: its first element),
  and each gets every hostile value of its type (``hostile_values``), in protobuf and in JSON; plus bodies that are no
  message at all (truncated, random bytes, an empty body, a JSON value of the wrong type in each field).
- **HTTP routes**: every GET route in the app's router, each path parameter and each query parameter the bridge reads
  anywhere (``query_keys``: found in its source, ``query.get("…")`` / ``query["…"]``) with hostile text; the Tempo
  mount's paths (``TEMPO_PATHS``) the same way.

A case fails when the answer is a 5xx other than the two a bridge gives by design — ``unimplemented`` (501: what
standalone mode does not serve, e.g. a tree-format profile, said in the answer) and ``unavailable`` (503: a store
that cannot take writes) — or when no answer comes within the case's timeout. Every status is counted and printed.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from google.protobuf import descriptor as pbd
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_profiles_svc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc

from bridge._proto import push_pb2
from bridge.wire import pyroscope as wire
from tests.paths import ROOT, SHOP_CAPTURE

QUERIER: Final = f"/pyroscope/{wire.QUERIER_SERVICE}/"
CPU: Final = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
START_MS: Final = 1_795_940_000_000  # the shop capture lies between these
END_MS: Final = 1_795_946_000_000
TRACE_ID: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID: Final = "00f067aa0ba902b7"

# every POST route's request message (a route missing here fails ``check_coverage``): (content type, message)
INGEST_MESSAGES: Final[dict[str, tuple[str, type[Message]]]] = {
    "/v1/traces": ("application/x-protobuf", otlp_trace_svc.ExportTraceServiceRequest),
    "/push.v1.PusherService/Push": ("application/proto", push_pb2.PushRequest),
    "/v1development/profiles": ("application/x-protobuf", otlp_profiles_svc.ExportProfilesServiceRequest),
}
# the OTLP gRPC receiver's methods and their request messages (bridge/otlp/grpc_server.py registers them)
GRPC_METHODS: Final[dict[str, type[Message]]] = {
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export": otlp_trace_svc.ExportTraceServiceRequest,
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export": (
        otlp_profiles_svc.ExportProfilesServiceRequest
    ),
}
# POST routes whose body is no protobuf message: fuzzed through their query parameters and raw bodies
RAW_POSTS: Final = frozenset({"/ingest"})
# Tempo's query API paths (Tempo's docs, api_docs.md), as the /tempo mount sees them
TEMPO_PATHS: Final = (
    f"api/traces/{TRACE_ID}",
    f"api/v2/traces/{TRACE_ID}",
    "api/search",
    "api/search/tags",
    "api/v2/search/tags",
    "api/search/tag/service.name/values",
    "api/v2/search/tag/service.name/values",
    "api/status/buildinfo",
    "api/echo",
    "ready",
)

BY_DESIGN: Final = frozenset({501, 503})  # unimplemented (named in the answer), unavailable (a store refusing writes)
HOSTILE_TEXT: Final = (
    "",
    "0",
    "-1",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "99999999999999999999999999",
    "-9223372036854775809",
    "1h",
    "-1h",
    "99999999999h",
    "0.000000001",
    "x" * 5000,
    "\x00",
    "{",
    '{service_name="',
    "}{",
    "%",
    "../../etc/passwd",
    "🙂",
    "ffffffffffffffffffffffffffffffff",
    "zz",
)
HOSTILE_IDS: Final = ("", "0", "zz", "f" * 16, "f" * 33, "0" * 32, "%2e%2e", "🙂", "x" * 300, "-1")


@dataclass(frozen=True, slots=True)
class Case:
    route: str  # what is counted: "POST /push.v1.PusherService/Push", "GET /api/v1/spans/{trace_id}/…"
    method: str
    path: str
    what: str  # the input, for a failure's message
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- values by type


_INT_TYPES: Final = {
    pbd.FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    pbd.FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    pbd.FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    pbd.FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_FLOATS: Final = (0.0, -0.0, 5e-324, 1e-9, 1.5, 1e308, -1e308, math.inf, -math.inf, math.nan)
# the values a short pass always sends (beside its random pick): a type's ends, where overflows live
EXTREMES: Final = frozenset(
    {repr(v) for v in (1e308, -1e308, math.inf, -math.inf, math.nan)}
    | {str(v) for low, high in _INT_TYPES.values() for v in (low, high)}
)


def hostile_values(fd: pbd.FieldDescriptor) -> list[tuple[str, Any]]:
    """(label, value) for one field of its type; for a message field, None (an empty message)."""
    cpp = fd.cpp_type
    if cpp in _INT_TYPES:
        low, high = _INT_TYPES[cpp]
        values = sorted({low, high, 0, 1, -1 if low < 0 else 2, 10**9 if high > 10**9 else 7, high // 2})
        return [(str(v), v) for v in values]
    if cpp in (pbd.FieldDescriptor.CPPTYPE_DOUBLE, pbd.FieldDescriptor.CPPTYPE_FLOAT):
        return [(repr(v), v) for v in _FLOATS]
    if cpp == pbd.FieldDescriptor.CPPTYPE_BOOL:
        return [("true", True), ("false", False)]
    if cpp == pbd.FieldDescriptor.CPPTYPE_ENUM:
        known = [v.number for v in fd.enum_type.values]
        return [(f"enum {v}", v) for v in sorted({*known, max(known) + 1, 99, -1})]
    if cpp == pbd.FieldDescriptor.CPPTYPE_STRING:
        if fd.type == pbd.FieldDescriptor.TYPE_BYTES:
            return [
                (f"bytes {label}", value)
                for label, value in (
                    ("empty", b""),
                    ("8 ff", b"\xff" * 8),
                    ("16 zero", bytes(16)),
                    ("3", b"abc"),
                    ("gzip magic", b"\x1f\x8b" + bytes(20)),
                    ("64 KiB", b"\x07" * 65536),
                )
            ]
        return [(f"text {value[:12]!r}", value) for value in HOSTILE_TEXT]
    return [("empty message", None)]


# --------------------------------------------------------------------------------------------- message mutations


def _set(msg: Message, fd: pbd.FieldDescriptor, value: Any) -> None:
    if fd.is_repeated:
        container = getattr(msg, fd.name)
        del container[:]
        if fd.cpp_type == pbd.FieldDescriptor.CPPTYPE_MESSAGE:
            container.add()
        else:
            container.append(value)
    elif fd.cpp_type == pbd.FieldDescriptor.CPPTYPE_MESSAGE:
        getattr(msg, fd.name).SetInParent()
        getattr(msg, fd.name).Clear()
    else:
        setattr(msg, fd.name, value)


def _target(msg: Message, path: tuple[pbd.FieldDescriptor, ...]) -> Message:
    """The message holding the last field of ``path`` (a repeated message: its first element, made when absent)."""
    for fd in path[:-1]:
        if fd.is_repeated:
            container = getattr(msg, fd.name)
            msg = container[0] if len(container) else container.add()
        else:
            msg = getattr(msg, fd.name)
    return msg


def field_paths(descriptor: pbd.Descriptor, depth: int = 6) -> Iterator[tuple[pbd.FieldDescriptor, ...]]:
    """Every field of a message and of the messages in it (to ``depth``; a type already on the path is not entered
    again: OTLP's AnyValue holds AnyValues)."""

    def walk(d: pbd.Descriptor, prefix: tuple[pbd.FieldDescriptor, ...], seen: tuple[str, ...]) -> Iterator[Any]:
        for fd in d.fields:
            yield (*prefix, fd)
            if fd.cpp_type == pbd.FieldDescriptor.CPPTYPE_MESSAGE and len(prefix) < depth:
                if fd.message_type.full_name not in seen:
                    yield from walk(fd.message_type, (*prefix, fd), (*seen, fd.message_type.full_name))

    yield from walk(descriptor, (), (descriptor.full_name,))


def mutations(base: Message) -> Iterator[tuple[str, str, Message]]:
    """(field, value label, message): ``base`` with one field set to one hostile value, for every field
    (``field_paths``) and value; a repeated scalar field also 2,000 times over."""
    for path in field_paths(base.DESCRIPTOR):
        name = ".".join(fd.name for fd in path)
        fd = path[-1]
        values = hostile_values(fd)
        for label, value in values:
            msg = copy.deepcopy(base)
            target = _target(msg, path)
            try:
                _set(target, fd, value)
            except (ValueError, TypeError):  # out of the type's range in this language binding
                continue
            yield name, label, msg
        if fd.is_repeated and fd.cpp_type != pbd.FieldDescriptor.CPPTYPE_MESSAGE:
            msg = copy.deepcopy(base)
            container = getattr(_target(msg, path), fd.name)
            del container[:]
            try:
                container.extend([values[1][1]] * 2000)
            except (ValueError, TypeError):
                continue
            yield name, f"2000 × {values[1][0]}", msg


def json_mutations(base: Message) -> Iterator[tuple[str, bytes]]:
    """The JSON form of ``base`` with each top-level field given a value of the wrong JSON type, or a number no
    float holds."""
    doc = json_format.MessageToDict(base)
    for fd in base.DESCRIPTOR.fields:
        key = fd.json_name
        for label, raw in (
            ("string", '"x"'),
            ("object", "{}"),
            ("array", "[[]]"),
            ("null", "null"),
            ("1e999", "1e999"),
        ):
            text = json.dumps({**doc, key: "@@"}).replace('"@@"', raw)
            yield f"{key}=JSON {label}", text.encode()


def base_message(cls: type[Message]) -> Message:
    """A request that is valid — so that one hostile field is what each case changes."""
    if cls is push_pb2.PushRequest:
        return push_pb2.PushRequest.FromString((SHOP_CAPTURE / "003_push.v1.PusherService_Push.bin").read_bytes())
    if cls is otlp_trace_svc.ExportTraceServiceRequest:
        return otlp_trace_svc.ExportTraceServiceRequest.FromString((SHOP_CAPTURE / "001_v1_traces.bin").read_bytes())
    if cls is otlp_profiles_svc.ExportProfilesServiceRequest:
        from tests.store.test_store_otlp import build_request

        return build_request()
    msg = cls()
    good: dict[str, Any] = {
        "profile_typeID": CPU,
        "label_selector": '{service_name="shop-backend"}',
        "start": START_MS,
        "end": END_MS,
        "step": 15.0,
        "name": "service_name",
        "matchers": ['{service_name="shop-backend"}'],
        "label_names": ["service_name"],
        "span_selector": [SPAN_ID],
        "max_nodes": 1024,
        "group_by": ["service_name"],
        "query_type": 1,  # SelectHeatmap: HEATMAP_QUERY_TYPE_INDIVIDUAL (0 is refused before anything else is read)
    }
    for fd in msg.DESCRIPTOR.fields:
        if fd.name in good:
            value = good[fd.name]
            if fd.is_repeated:
                getattr(msg, fd.name).extend(value)
            else:
                setattr(msg, fd.name, value)
    return msg


# --------------------------------------------------------------------------------------------- routes


def rpc_routes(rpcs: Mapping[str, type[Message]]) -> dict[str, tuple[str, type[Message]]]:
    """Path → (content type, request message) of every RPC: the mount's ``rpcs`` (method → request type) and the
    ingest routes."""
    out = {f"{QUERIER}{method}": ("application/proto", cls) for method, cls in rpcs.items()}
    out.update(INGEST_MESSAGES)
    return out


def check_coverage(post_paths: set[str], rpcs: Mapping[str, type[Message]]) -> None:
    """Every POST route of the app is fuzzed: it has a message here, or is a raw route."""
    unknown = post_paths - set(INGEST_MESSAGES) - RAW_POSTS
    assert not unknown, f"POST routes the fuzzer has no message for (add them to INGEST_MESSAGES): {sorted(unknown)}"
    assert rpcs, "the /pyroscope mount decodes no RPC?"


def query_keys() -> list[str]:
    """Every query parameter the bridge reads, found in its source."""
    found: set[str] = set()
    pattern = re.compile(r"""query(?:\.get\(|\[)\s*["']([A-Za-z_][A-Za-z0-9_.]*)["']""")
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        found.update(pattern.findall(path.read_text(encoding="utf-8")))
    return sorted(found)


def rpc_cases(
    path: str, content_type: str, cls: type[Message], *, per_field: int | None, rng: random.Random
) -> list[Case]:
    """Every field of the route's message with hostile values (``per_field``: at most that many per field, picked
    by ``rng``; None: all), in protobuf and JSON; JSON of the wrong type in each top-level field; bodies that are no
    message."""
    route = f"POST {path}"
    base = base_message(cls)
    ctype = {"Content-Type": content_type}
    json_ctype = {"Content-Type": "application/json"}
    by_field: dict[str, list[tuple[str, Message]]] = {}
    for name, label, msg in mutations(base):
        by_field.setdefault(name, []).append((label, msg))
    cases: list[Case] = []
    for name, variants in by_field.items():
        chosen = variants
        if per_field is not None and len(variants) > per_field:
            ends = [v for v in variants if v[0] in EXTREMES]
            chosen = ends + rng.sample([v for v in variants if v[0] not in EXTREMES], per_field)
        for label, msg in chosen:
            what = f"{name}={label}"
            cases.append(Case(route, "POST", path, f"{what} (protobuf)", msg.SerializeToString(), ctype))
            try:
                text = json_format.MessageToJson(msg).encode()
            except (ValueError, TypeError, json_format.Error):
                continue
            cases.append(Case(route, "POST", path, f"{what} (JSON)", text, json_ctype))
    wrong = list(json_mutations(base))
    if per_field is not None and len(wrong) > per_field * len(base.DESCRIPTOR.fields):
        wrong = rng.sample(wrong, per_field * len(base.DESCRIPTOR.fields))
    cases.extend(Case(route, "POST", path, what, body, json_ctype) for what, body in wrong)
    whole = base.SerializeToString()
    for what, body in (
        ("empty body", b""),
        ("truncated", whole[: max(1, len(whole) // 2)]),
        ("random bytes", random.Random(len(whole)).randbytes(512)),
        ("JSON cut short", b'{"start": '),
    ):
        cases.append(Case(route, "POST", path, what, body, ctype))
    return cases


def combined_cases(
    path: str, content_type: str, cls: type[Message], *, rounds: int, rng: random.Random
) -> Iterator[Case]:
    """``rounds`` requests with two to five fields hostile at once (picked by ``rng``), in protobuf."""
    base = base_message(cls)
    paths = list(field_paths(base.DESCRIPTOR))
    for _ in range(rounds):
        msg = copy.deepcopy(base)
        what = []
        for chosen in rng.sample(paths, min(len(paths), rng.randint(2, 5))):
            label, value = rng.choice(hostile_values(chosen[-1]))
            try:
                _set(_target(msg, chosen), chosen[-1], value)
            except (ValueError, TypeError):
                continue
            what.append(f"{'.'.join(fd.name for fd in chosen)}={label}")
        yield Case(
            f"POST {path}", "POST", path, " ".join(what), msg.SerializeToString(), {"Content-Type": content_type}
        )


def get_cases(
    template: str, params: list[str], keys: list[str], *, per_key: int | None, rng: random.Random
) -> Iterator[Case]:
    """A GET route: each path parameter with hostile ids, each query key with hostile text (``per_key`` of them,
    picked by ``rng``; None: all), everything else valid."""
    valid = {"trace_id": TRACE_ID, "span_id": SPAN_ID}

    def fill(overrides: Mapping[str, str]) -> str:
        path = template
        for name in params:
            path = path.replace("{" + name + "}", quote(overrides.get(name, valid.get(name, "x")), safe=""))
        return path

    def pick(values: tuple[str, ...]) -> list[str]:
        return list(values) if per_key is None or len(values) <= per_key else rng.sample(values, per_key)

    route = f"GET {template}"
    for name in params:
        for value in pick(HOSTILE_IDS):
            yield Case(route, "GET", fill({name: value}), f"{name}={value[:20]!r}")
    for key in keys:
        for value in pick(HOSTILE_TEXT):
            yield Case(route, "GET", f"{fill({})}?{quote(key)}={quote(value, safe='')}", f"{key}={value[:20]!r}")


def tempo_cases(keys: list[str], *, per_key: int | None, rng: random.Random) -> Iterator[Case]:
    """The Tempo mount's paths, each query key with hostile text."""
    for sub in TEMPO_PATHS:
        for key in keys:
            values = list(HOSTILE_TEXT) if per_key is None else rng.sample(HOSTILE_TEXT, per_key)
            for value in values:
                path = f"/tempo/{sub}?{quote(key)}={quote(value, safe='')}"
                yield Case(f"GET /tempo/{sub}", "GET", path, f"{key}={value[:20]!r}")


# --------------------------------------------------------------------------------------------- tally


@dataclass(slots=True)
class Tally:
    by_route: Counter[str] = field(default_factory=Counter)
    by_status: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    designed: Counter[str] = field(default_factory=Counter)  # by-design 5xx answers: "status route: message"

    def add(self, case: Case, status: int, text: str) -> None:
        self.by_route[case.route] += 1
        self.by_status[status] += 1
        if status >= 500 and status not in BY_DESIGN:
            self.failures.append(f"{case.route} {case.what}: {status} {text[:200]!r}")
        elif status >= 500:
            self.designed[f"{status} {case.route}: {text[:160]}"] += 1

    def lines(self) -> list[str]:
        total = sum(self.by_route.values())
        fives = sum(n for status, n in self.by_status.items() if status >= 500)
        designed = sum(n for status, n in self.by_status.items() if status in BY_DESIGN)
        out = [
            f"{total:,} inputs on {len(self.by_route)} routes: {fives} answers 5xx, {designed} of them by design "
            f"(501 unimplemented, 503 unavailable), {len(self.failures)} failures"
        ]
        out.append("by status: " + ", ".join(f"{s}: {n:,}" for s, n in sorted(self.by_status.items())))
        out.extend(f"  {n:6,}  {route}" for route, n in sorted(self.by_route.items()))
        out.extend(f"  by design {n:,}×  {what}" for what, n in sorted(self.designed.items()))
        return out


def routes_of(app: Any) -> tuple[list[tuple[str, list[str]]], set[str]]:
    """(GET route templates with their path parameter names, POST paths) from an aiohttp app's router."""
    gets: list[tuple[str, list[str]]] = []
    posts: set[str] = set()
    for resource in app.router.resources():
        info = resource.get_info()
        template = info.get("formatter") or info.get("path")
        if template is None or template.startswith(("/pyroscope/", "/tempo/")):
            continue
        methods = {route.method for route in resource}
        params = re.findall(r"{([^}:]+)", template)
        if "GET" in methods or "*" in methods:
            gets.append((template, params))
        if "POST" in methods:
            posts.add(template)
    return sorted(gets), posts


async def run(client: Any, cases: list[Case], *, timeout: float = 60.0) -> Tally:
    """Each case against an aiohttp test client, one after another."""
    import asyncio

    tally = Tally()
    for case in cases:
        try:
            async with asyncio.timeout(timeout):
                resp = await client.request(case.method, case.path, data=case.body, headers=dict(case.headers))
                text = await resp.text(errors="replace")
                status = resp.status
        except TimeoutError:
            status, text = 599, f"no answer within {timeout} s"
        tally.add(case, status, text)
    return tally


def grpc_cases(method: str, cls: type[Message], *, per_field: int | None, rng: random.Random) -> list[Case]:
    """The protobuf cases of ``rpc_cases`` for a gRPC method (gRPC carries no JSON)."""
    return [
        Case(f"gRPC {method}", "gRPC", method, case.what, case.body)
        for case in rpc_cases(method, "application/grpc", cls, per_field=per_field, rng=rng)
        if not case.what.endswith("(JSON)") and "JSON" not in case.what
    ]


GRPC_FAILURES: Final = frozenset({"INTERNAL", "UNKNOWN", "DATA_LOSS"})


async def run_grpc(target: str, cases: list[Case], *, timeout: float = 60.0) -> Tally:
    """Each case as a unary call with the raw body; a call that ends INTERNAL, UNKNOWN or DATA_LOSS, or with no
    answer in ``timeout``, fails (counted under HTTP-like numbers: 200 OK, 400 for a refusal, 500 for those)."""
    import grpc

    tally = Tally()
    async with grpc.aio.insecure_channel(target) as channel:
        for case in cases:
            call = channel.unary_unary(case.path, request_serializer=None, response_deserializer=None)
            try:
                await call(case.body or b"", timeout=timeout)
                status, text = 200, "OK"
            except grpc.aio.AioRpcError as exc:
                name = exc.code().name
                status = 500 if name in GRPC_FAILURES else 599 if name == "DEADLINE_EXCEEDED" else 400
                text = f"{name}: {exc.details()}"
            tally.add(case, status, text)
    return tally
