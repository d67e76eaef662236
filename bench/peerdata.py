"""One data set, sent the same way to a real Tempo + Pyroscope and to a bridge: what ``bench/differential.py`` (every
answer compared) and ``bench/peers.py`` (the same work timed side by side) share.

The data is made here, deterministically from a seed, stamped in the ``SPAN_S`` seconds before ``now``, as live data
arrives: Pyroscope refuses profiles older than its ``validation.reject-older-than`` (1 h), and Tempo's live store
clamps the time range it records for a trace that arrives more than its ``ingestion_time_range_slack`` (2 min,
grafana/tempo ``tempodb/wal/wal.go`` ``IngestionSlack``; the clamp in ``modules/livestore/instance.go``) after it
started — a search with ``start``/``end`` then misses such traces (measured: data stamped over the 10 minutes before
the upload, Tempo's windowed search found only the last ~3 minutes of it; trace by ID found all). Recorded data with
old stamps would not do, and neither would a longer span:

- traces (OTLP protobuf): per request a ``GET /checkout`` server root in ``shop-web`` with an internal child
  ``render-cart``, a client span calling ``shop-api``'s server span ``GET /price``, whose client child
  ``SELECT prices`` has db attributes; every fourth request fails (status error, an exception event); every
  third carries a link; string, int, float and bool attributes on spans and resources;
- profiles (pprof through ``/ingest``, as the Go SDK sends them: ``spyName=gospy``, ``from``/``until`` in
  nanoseconds, a multipart ``profile`` part, no ``format``): 10 s windows for both services with the Go CPU
  profile's two sample types (``samples/count`` and ``cpu/nanoseconds``); ``shop-web``'s CPU of each request
  labelled with its root's ``span_id`` and ``span_name`` as otel-profiling-go labels it, ``shop-api``'s never (a
  service profiled without span ids, as pull or eBPF profiling gives: its spans resolve by time window).

Clients: ``Peers`` holds the addresses (real Tempo's HTTP API and OTLP/HTTP receiver, real Pyroscope, the bridge)
and sends with one ``aiohttp`` session; every call has a timeout.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import aiohttp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from bridge._proto import profile_pb2

WINDOW_S: Final = 10
SPAN_S: Final = 90  # the data's span: sent at once, its oldest trace still within Tempo's 2 min ingestion slack
CPU_PERIOD_NS: Final = 10_000_000  # 100 Hz, as the Go SDK samples
SERVICES: Final = ("shop-web", "shop-api")
HOT: Final = {"shop-web": "main.renderCart", "shop-api": "main.priceLookup"}
TIMEOUT: Final = aiohttp.ClientTimeout(total=60, connect=5)


@dataclass(frozen=True, slots=True)
class Request:
    """One generated request: its trace, its spans by role, when it ran."""

    trace_id: str
    spans: dict[str, str]  # role -> span id (hex)
    start_ns: int
    end_ns: int
    error: bool


@dataclass(slots=True)
class DataSet:
    traces: list[otlp_svc.ExportTraceServiceRequest] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    profiles: list[tuple[dict[str, str], bytes]] = field(default_factory=list)  # (/ingest query, pprof)
    start_ns: int = 0
    end_ns: int = 0

    @property
    def samples(self) -> int:
        return sum(len(profile_pb2.Profile.FromString(raw).sample) for _, raw in self.profiles)

    @property
    def spans(self) -> int:
        return sum(len(ss.spans) for t in self.traces for rs in t.resource_spans for ss in rs.scope_spans)


def _id(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "big")


def _attrs(**values: str | int | float | bool) -> list[common_pb2.KeyValue]:
    out = []
    for key, value in values.items():
        key = key.replace("__", ".")
        if isinstance(value, bool):
            any_value = common_pb2.AnyValue(bool_value=value)
        elif isinstance(value, int):
            any_value = common_pb2.AnyValue(int_value=value)
        elif isinstance(value, float):
            any_value = common_pb2.AnyValue(double_value=value)
        else:
            any_value = common_pb2.AnyValue(string_value=value)
        out.append(common_pb2.KeyValue(key=key, value=any_value))
    return out


def _resource_spans(service: str, pod: str, spans: list[trace_pb2.Span]) -> trace_pb2.ResourceSpans:
    rs = trace_pb2.ResourceSpans()
    rs.resource.attributes.extend(
        _attrs(service__name=service, k8s__pod__name=pod, deployment__environment="prod", host__cores=2)
    )
    ss = rs.scope_spans.add()
    ss.scope.name = "shop"
    ss.scope.version = "1.0.0"
    ss.spans.extend(spans)
    return rs


def _span(trace_id: bytes, span_id: bytes, parent: bytes, name: str, kind: int, start: int, end: int) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=start,
        end_time_unix_nano=end,
    )


def _request(rng: random.Random, n: int, start: int) -> tuple[otlp_svc.ExportTraceServiceRequest, Request]:
    """One request: 5 spans over two services."""
    tid = _id(rng, 16)
    root, render, call, price, sql = (_id(rng, 8) for _ in range(5))
    dur = 40_000_000 + rng.randrange(400) * 1_000_000
    error = n % 4 == 3
    k = trace_pb2.Span.SpanKind
    web = [
        _span(tid, root, b"", "GET /checkout", k.SPAN_KIND_SERVER, start, start + dur),
        _span(tid, render, root, "render-cart", k.SPAN_KIND_INTERNAL, start + 1_000_000, start + dur // 2),
        _span(tid, call, root, "GET /price", k.SPAN_KIND_CLIENT, start + dur // 2, start + dur - 2_000_000),
    ]
    web[0].attributes.extend(
        _attrs(http__method="GET", http__route="/checkout", http__status_code=500 if error else 200, cart__items=n % 7)
    )
    web[1].attributes.extend(_attrs(cart__total=12.5 + n, cart__cached=n % 2 == 0))
    api = [
        _span(tid, price, call, "GET /price", k.SPAN_KIND_SERVER, start + dur // 2 + 500_000, start + dur - 3_000_000),
        _span(
            tid, sql, price, "SELECT prices", k.SPAN_KIND_CLIENT, start + dur // 2 + 900_000, start + dur - 4_000_000
        ),
    ]
    api[0].attributes.extend(_attrs(http__method="GET", http__route="/price", http__status_code=200))
    api[1].attributes.extend(_attrs(db__system="postgresql", db__statement="SELECT * FROM prices WHERE sku = $1"))
    if error:
        for span in (web[0], web[2], api[0]):
            span.status.code = trace_pb2.Status.STATUS_CODE_ERROR
            span.status.message = "price lookup failed"
        ev = web[0].events.add()
        ev.name, ev.time_unix_nano = "exception", start + dur - 1_000_000
        ev.attributes.extend(_attrs(exception__type="PriceError", exception__message="no price"))
    else:
        web[0].status.code = trace_pb2.Status.STATUS_CODE_OK
    if n % 3 == 0:
        link = web[1].links.add()
        link.trace_id, link.span_id = _id(rng, 16), _id(rng, 8)
        link.attributes.extend(_attrs(link__kind="follows"))
    req = otlp_svc.ExportTraceServiceRequest(
        resource_spans=[_resource_spans("shop-web", f"web-{n % 2}", web), _resource_spans("shop-api", "api-0", api)]
    )
    roles = {"root": root, "render": render, "call": call, "api-root": price, "sql": sql}
    return req, Request(tid.hex(), {r: s.hex() for r, s in roles.items()}, start, start + dur, error)


class _Pprof:
    """A pprof under construction: strings, functions and locations interned."""

    def __init__(self, sample_types: list[tuple[str, str]], period: tuple[str, str]) -> None:
        self.p = profile_pb2.Profile()
        self.strings: dict[str, int] = {}
        self.locations: dict[str, int] = {}
        self._s("")
        for t, u in sample_types:
            self.p.sample_type.add(type=self._s(t), unit=self._s(u))
        self.p.period_type.type, self.p.period_type.unit = self._s(period[0]), self._s(period[1])
        self.p.period = CPU_PERIOD_NS

    def _s(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.p.string_table)
            self.p.string_table.append(text)
        return self.strings[text]

    def _loc(self, name: str) -> int:
        if name not in self.locations:
            fid = len(self.p.function) + 1
            self.p.function.add(id=fid, name=self._s(name), system_name=self._s(name), filename=self._s("main.go"))
            lid = len(self.p.location) + 1
            loc = self.p.location.add(id=lid, address=0x1000 + lid)
            loc.line.add(function_id=fid, line=10 + fid)
            self.locations[name] = lid
        return self.locations[name]

    def sample(self, stack: tuple[str, ...], values: list[int], labels: dict[str, str]) -> None:
        """``stack`` root first (pprof wants the leaf first)."""
        s = self.p.sample.add(location_id=[self._loc(f) for f in reversed(stack)], value=values)
        for key, value in labels.items():
            s.label.add(key=self._s(key), str=self._s(value))


def _stacks(service: str) -> list[tuple[str, ...]]:
    base = ("runtime.main", "main.main", "net/http.(*conn).serve", "net/http.serverHandler.ServeHTTP")
    hot = HOT[service]
    return [
        (*base, "main.handler", hot),
        (*base, "main.handler", hot, "crypto/sha256.block"),
        (*base, "main.handler", "encoding/json.Marshal"),
        (*base, "main.handler", "main.writeResponse", "syscall.write"),
        ("runtime.main", "main.main", "runtime.gcBgMarkWorker"),
    ]


def _cpu_profile(service: str, window: tuple[int, int], requests: list[Request], rng: random.Random) -> bytes:
    """One 10 s Go CPU pprof of ``service``: each request's samples under its root's span_id/span_name, plus
    unlabelled background."""
    prof = _Pprof([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"))
    prof.p.time_nanos, prof.p.duration_nanos = window[0], window[1] - window[0]
    stacks = _stacks(service)
    for req in requests:
        if not window[0] <= req.start_ns < window[1]:
            continue
        # shop-web is profiled with otel-profiling-go (its roots' span ids); shop-api without (like pull or eBPF)
        labels = {"span_id": req.spans["root"], "span_name": "GET /checkout"} if service == "shop-web" else {}
        for i, stack in enumerate(stacks[:4]):
            count = 1 + rng.randrange(6) + (8 if i < 2 else 0)
            prof.sample(stack, [count, count * CPU_PERIOD_NS], labels)
    count = 3 + rng.randrange(5)
    prof.sample(stacks[4], [count, count * CPU_PERIOD_NS], {})
    return bytes(prof.p.SerializeToString())


def build(now_ns: int, *, requests: int = 60, seed: int = 23, span_s: int = SPAN_S) -> DataSet:
    """``requests`` requests spread over the ``span_s`` seconds before ``now_ns`` (whole 10 s windows), and the CPU
    profiles of both services for every window."""
    rng = random.Random(seed)
    window_ns = WINDOW_S * 1_000_000_000
    end = now_ns // window_ns * window_ns - window_ns
    start = end - span_s // WINDOW_S * window_ns
    data = DataSet(start_ns=start, end_ns=end)
    step = (end - start - window_ns) // requests
    for n in range(requests):
        trace, req = _request(rng, n, start + n * step + rng.randrange(step // 2))
        data.traces.append(trace)
        data.requests.append(req)
    for w in range(start, end, window_ns):
        for service in SERVICES:
            # as pyroscope-go's upstream/remote/remote.go sends it: from/until in ns, no ``format`` (with
            # ``format=pprof`` Pyroscope reads the body as a bare pprof, pkg/ingester/pyroscope/ingest_handler.go)
            query = {
                "name": f"{service}{{env=prod,region=eu}}",
                "from": str(w),
                "until": str(w + window_ns),
                "spyName": "gospy",
                "sampleRate": "100",
                "units": "samples",
                "aggregationType": "sum",
            }
            data.profiles.append((query, _cpu_profile(service, (w, w + window_ns), data.requests, rng)))
    return data


def multipart(pprof: bytes) -> tuple[bytes, str]:
    """The body and Content-Type of an /ingest upload as pyroscope-go sends it (upstream/remote/remote.go: a
    ``profile`` form file)."""
    boundary = hashlib.sha1(pprof).hexdigest()[:24]
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="profile"; filename="profile.pprof"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + pprof
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def chunks(data: DataSet, size: int) -> Iterator[otlp_svc.ExportTraceServiceRequest]:
    """The traces in exports of ``size`` requests each."""
    for i in range(0, len(data.traces), size):
        out = otlp_svc.ExportTraceServiceRequest()
        for t in data.traces[i : i + size]:
            out.resource_spans.extend(t.resource_spans)
        yield out


def run_id() -> str:
    return uuid.uuid4().hex[:8]
