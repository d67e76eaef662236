"""The ingest routes of standalone mode over real HTTP: the shop capture replayed as the SDKs sent it, OTLP/JSON,
partial success, Pyroscope's legacy /ingest (multipart as the Go SDK sends it, raw pprof, folded), and bad bodies
on every route — each with a clear error and nothing stored."""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp_trace_svc
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace

from bridge._proto import push_pb2
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.app import create_app
from bridge.config import Settings
from bridge.state import RUNTIME
from bridge.store import Store
from tests.paths import GO_CPU_PPROF, SHOP_CAPTURE
from tests.store.test_store import ALL_MS, CAPTURE_END_S, CPU, ctx

Client = Callable[..., Awaitable[TestClient[Any, Any]]]


FIXTURES_AGE_S = 10 * 365 * 86_400.0  # a retention age that keeps every fixture, stamped 2021 to 2026


def make_app(tmp_path: Path, **changes: Any) -> web.Application:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), **changes)
    return create_app(settings, wall_clock=lambda: CAPTURE_END_S)


def store_of(client: TestClient[Any, Any]) -> Store:
    store = client.app[RUNTIME].backends.profiles  # the store itself (ingest goes through the disk-full watch)
    assert isinstance(store, Store)
    return store


async def replay_capture(client: TestClient[Any, Any]) -> None:
    for line in (SHOP_CAPTURE / "index.jsonl").read_text().splitlines():
        entry = json.loads(line)
        body = (SHOP_CAPTURE / entry["file"]).read_bytes()
        headers = {"Content-Type": entry["content_type"]}
        if entry["content_encoding"] == "gzip":
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        resp = await client.post(entry["path"], data=body, headers=headers)
        assert resp.status == 200, await resp.text()
        if entry["path"] == "/v1/traces":
            assert resp.content_type == "application/x-protobuf"
            answer = otlp_trace_svc.ExportTraceServiceResponse.FromString(await resp.read())
            assert not answer.HasField("partial_success")
        else:
            assert resp.content_type == "application/proto"
            push_pb2.PushResponse.FromString(await resp.read())


async def test_replaying_the_capture_stores_exactly_what_the_readme_states(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    await replay_capture(client)
    c = await store_of(client).counts()
    assert (c.spans, c.traces, c.uploads, c.samples, c.sample_value) == (434, 186, 6, 201, 3_590_000_000)
    assert (c.samples_with_span, c.distinct_span_ids) == (185, 114)
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert 'profile_bridge_ingested_total{kind="spans"} 434.0' in metrics
    assert 'profile_bridge_ingested_total{kind="samples"} 201.0' in metrics


def _one_span_request(trace_id: bytes, span_id: bytes, name: str = "op") -> otlp_trace_svc.ExportTraceServiceRequest:
    req = otlp_trace_svc.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "json-svc"
    span = rs.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = trace_id, span_id, name
    # within the retention age of the app's clock (older spans are refused)
    start = int(CAPTURE_END_S - 60) * 1_000_000_000
    span.start_time_unix_nano, span.end_time_unix_nano = start, start + 250_000_000
    span.kind = otlp_trace.Span.SPAN_KIND_SERVER
    return req


def _hex_json(req: otlp_trace_svc.ExportTraceServiceRequest) -> bytes:
    doc = json_format.MessageToDict(req)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(doc).encode()


async def test_otlp_json_with_hex_ids(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    trace_id, span_id = bytes.fromhex("5b8efff798038103d269b633813fc700"), bytes.fromhex("eee19b7ec3c1b100")
    body = _hex_json(_one_span_request(trace_id, span_id))
    assert b"5b8efff798038103d269b633813fc700" in body
    resp = await client.post("/v1/traces", data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert await resp.json() == {}
    trace = await store_of(client).trace_by_id("5b8efff798038103d269b633813fc700", ctx())
    assert trace is not None and trace.get("eee19b7ec3c1b100") is not None


@pytest.mark.parametrize("as_json", [False, True])
async def test_partial_success_rejects_only_bad_spans(tmp_path: Path, aiohttp_client: Client, as_json: bool) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    req = _one_span_request(bytes.fromhex("11" * 16), bytes.fromhex("22" * 8), "good")
    bad = req.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id, bad.span_id, bad.name = bytes(16), bytes.fromhex("33" * 8), "zero trace id"
    if as_json:
        resp = await client.post("/v1/traces", data=_hex_json(req), headers={"Content-Type": "application/json"})
        doc = await resp.json()
        assert doc["partialSuccess"]["rejectedSpans"] == "1"
        message = doc["partialSuccess"]["errorMessage"]
    else:
        resp = await client.post(
            "/v1/traces", data=req.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
        )
        answer = otlp_trace_svc.ExportTraceServiceResponse.FromString(await resp.read())
        assert answer.partial_success.rejected_spans == 1
        message = answer.partial_success.error_message
    assert resp.status == 200
    assert "zero trace id" in message
    assert (await store_of(client).counts()).spans == 1


def _push(labels: dict[str, str], raw_profiles: list[bytes]) -> push_pb2.PushRequest:
    req = push_pb2.PushRequest()
    series = req.series.add()
    series.labels.extend(tpb.LabelPair(name=k, value=v) for k, v in labels.items())
    for raw in raw_profiles:
        series.samples.add(raw_profile=raw)
    return req


GOOD_LABELS = {"__name__": "process_cpu", "service_name": "go-app"}


def _bad_cases() -> list[Any]:
    good = GO_CPU_PPROF.read_bytes()
    two_series = _push(GOOD_LABELS, [good])
    two_series.series.add().samples.add(raw_profile=b"\x1f\x8bnot gzip at all")
    two_series.series[1].labels.add(name="__name__", value="process_cpu")
    return [
        pytest.param(
            "/v1/traces",
            {"Content-Type": "application/x-protobuf"},
            b"\xff\xff\xff\xff",
            400,
            "not a valid OTLP",
            id="traces-garbage-protobuf",
        ),
        pytest.param(
            "/v1/traces",
            {"Content-Type": "application/json"},
            b'{"resourceSpans": [',
            400,
            "not JSON",
            id="traces-truncated-json",
        ),
        pytest.param(
            "/v1/traces",
            {"Content-Type": "application/json"},
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}',
            400,
            "not hex",
            id="traces-json-bad-hex",
        ),
        pytest.param(
            "/v1/traces",
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            b"\x1f\x8b\x08\x00" + b"broken" * 5,
            400,
            "gzip|not a valid OTLP",
            id="traces-truncated-gzip",
        ),
        pytest.param(
            "/v1/traces",
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            gzip.compress(b"x" * 1000)[:12] + b"\xff" * 20,
            400,
            "gzip|not a valid OTLP",
            id="traces-corrupt-gzip",
        ),
        pytest.param(
            "/push.v1.PusherService/Push",
            {"Content-Type": "application/proto", "Content-Encoding": "gzip"},
            b"\x1f\x8b\x08\x00broken-and-long-enough",
            400,
            "gzip|not a valid push",
            id="push-truncated-gzip",
        ),
        pytest.param(
            "/v1/traces", {"Content-Type": "text/plain"}, b"hello", 415, "Content-Type", id="traces-wrong-content-type"
        ),
        pytest.param(
            "/push.v1.PusherService/Push",
            {"Content-Type": "application/proto"},
            b"\xff\xff\xff",
            400,
            "not a valid push.v1.PushRequest",
            id="push-garbage",
        ),
        pytest.param(
            "/push.v1.PusherService/Push",
            {"Content-Type": "application/proto"},
            two_series.SerializeToString(),
            400,
            "series #1 sample #0",
            id="push-second-series-bad",
        ),
        pytest.param(
            "/push.v1.PusherService/Push",
            {"Content-Type": "application/proto"},
            _push({"service_name": "x"}, [good]).SerializeToString(),
            400,
            "__name__",
            id="push-no-name",
        ),
        pytest.param(
            "/push.v1.PusherService/Push",
            {"Content-Type": "text/xml"},
            b"<x/>",
            400,
            "Content-Type",
            id="push-wrong-content-type",
        ),
        pytest.param("/ingest?format=folded", {}, b"a;b 1\n", 400, "'name' is required", id="ingest-no-name"),
        pytest.param("/ingest?name=app.cpu&format=jfr", {}, b"...", 400, "truncated chunk", id="ingest-jfr"),
        pytest.param(
            "/ingest?name=app.cpu&format=folded", {}, b"a;b 1\nc;d many\n", 400, "line 2", id="ingest-folded-bad-count"
        ),
        pytest.param(
            "/ingest?name=app.cpu&format=pprof", {}, b"\x00\x01garbage", 400, "pprof", id="ingest-pprof-garbage"
        ),
        pytest.param(
            "/ingest?name=app{bad-label=1}&format=folded",
            {},
            b"a;b 1\n",
            400,
            "not a valid label",
            id="ingest-bad-label",
        ),
        pytest.param(
            "/ingest?name=app.cpu&format=folded&from=yesterday", {}, b"a;b 1\n", 400, "from=", id="ingest-bad-from"
        ),
    ]


@pytest.mark.parametrize(("path", "headers", "body", "status", "message"), _bad_cases())
async def test_bad_bodies_are_rejected_whole(
    tmp_path: Path,
    aiohttp_client: Client,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
    message: str,
) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    resp = await client.post(path, data=body, headers=headers)
    assert resp.status == status
    text = await resp.read()
    if path == "/v1/traces" and headers.get("Content-Type") == "application/json":
        assert re.search(message, (await resp.json())["message"])
    elif path == "/v1/traces":
        assert re.search(message.encode(), text)  # google.rpc.Status protobuf carries the message bytes
        assert text.startswith(b"\x08")
    elif path.startswith("/push"):
        doc = json.loads(text)
        assert doc["code"] == "invalid_argument" and re.search(message, doc["message"])
    else:
        assert re.search(message, text.decode())
    assert "Traceback" not in text.decode(errors="replace")
    c = await store_of(client).counts()
    assert (c.spans, c.samples, c.series, c.profiles) == (0, 0, 0, 0)


async def test_body_over_the_limit(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path, max_body_bytes=1024))
    big = gzip.compress(b"\x00" * 100_000)
    resp = await client.post(
        "/v1/traces", data=big, headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    )
    assert resp.status == 413
    assert (await store_of(client).counts()).spans == 0


async def _merge(client: TestClient[Any, Any], profile_type: str, selector: str) -> qpb.FlameGraph:
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=profile_type, label_selector=selector, start=ALL_MS[0], end=ALL_MS[1]
    )
    return (await store_of(client).select_merge_stacktraces(req, ctx())).flamegraph


async def test_legacy_ingest_multipart_pprof_as_the_go_sdk_sends_it(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    form = aiohttp.FormData()
    form.add_field(
        "profile", GO_CPU_PPROF.read_bytes(), filename="profile.pprof", content_type="application/octet-stream"
    )
    url = "/ingest?name=go-app.cpu%7Benv%3Dstaging%7D&from=1795945290&until=1795945300&spyName=gospy&sampleRate=100"
    resp = await client.post(url, data=form)
    assert resp.status == 200, await resp.text()
    assert await resp.read() == b""
    types = await store_of(client).profile_types(qpb.ProfileTypesRequest(), ctx())
    assert {t.ID for t in types.profile_types} == {CPU, "process_cpu:samples:count:cpu:nanoseconds"}
    fg = await _merge(client, CPU, '{service_name="go-app", env="staging"}')
    from bridge.pprof import decode_pprof

    profile = decode_pprof(GO_CPU_PPROF.read_bytes())
    assert fg.total == sum(s.value[1] for s in profile.sample)


async def test_legacy_ingest_sample_type_config_limits_types(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    form = aiohttp.FormData()
    form.add_field("profile", GO_CPU_PPROF.read_bytes(), filename="profile.pprof")
    form.add_field("sample_type_config", json.dumps({"cpu": {"units": "nanoseconds"}}), filename="config.json")
    resp = await client.post("/ingest?name=go-app&format=pprof&from=1795945290", data=form)
    assert resp.status == 200, await resp.text()
    types = await store_of(client).profile_types(qpb.ProfileTypesRequest(), ctx())
    assert [t.ID for t in types.profile_types] == [CPU]


async def test_legacy_ingest_raw_pprof_and_folded(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    resp = await client.post("/ingest?name=raw-app&format=pprof&from=1795945290", data=GO_CPU_PPROF.read_bytes())
    assert resp.status == 200
    folded = b"main;handler;render 3\nmain;handler;query 1\n\nmain;gc 2\n"
    resp = await client.post(
        "/ingest?name=folded-app.cpu%7Bregion%3Deu%7D&from=1795945290&until=1795945300&sampleRate=100&spyName=rbspy",
        data=folded,
    )
    assert resp.status == 200
    fg = await _merge(client, CPU, '{service_name="folded-app", region="eu"}')
    from bridge.flamegraph import decode, iter_stacks

    assert dict(iter_stacks(decode(fg))) == {
        ("main", "handler", "render"): 30_000_000,
        ("main", "handler", "query"): 10_000_000,
        ("main", "gc"): 20_000_000,
    }
    resp = await client.post(
        "/ingest?name=lines-app&format=lines&from=1795945290&sampleRate=50", data=b"main;a\nmain;a\nmain;b c\n"
    )
    assert resp.status == 200
    fg = await _merge(client, CPU, '{service_name="lines-app"}')
    assert dict(iter_stacks(decode(fg))) == {("main", "a"): 40_000_000, ("main", "b c"): 20_000_000}


async def test_ingest_routes_exist_only_in_standalone_mode(tmp_path: Path) -> None:
    proxy = create_app(Settings.for_tests(mode="proxy", data_dir=str(tmp_path)))
    paths = {r.resource.canonical for r in proxy.router.routes() if r.resource is not None}
    assert not paths & {"/v1/traces", "/push.v1.PusherService/Push", "/ingest"}
    standalone = make_app(tmp_path)
    paths = {r.resource.canonical for r in standalone.router.routes() if r.resource is not None}
    assert {"/v1/traces", "/push.v1.PusherService/Push", "/ingest"} <= paths


async def test_the_pyroscope_mount_answers_from_the_store(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    await replay_capture(client)
    base = "/pyroscope/querier.v1.QuerierService/"
    resp = await client.post(
        base + "LabelValues",
        json={"name": "service_name", "start": "0", "end": "4000000000000"},
        headers={"Connect-Protocol-Version": "1"},
    )
    assert resp.status == 200
    assert await resp.json() == {"names": ["shop-backend", "shop-frontend"]}
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=CPU, label_selector='{env="capture"}', start=ALL_MS[0], end=ALL_MS[1], max_nodes=16
    )
    resp = await client.post(
        base + "SelectMergeStacktraces",
        data=req.SerializeToString(),
        headers={"Content-Type": "application/proto", "Accept-Encoding": "gzip"},
    )
    assert resp.status == 200
    fg = qpb.SelectMergeStacktracesResponse.FromString(await resp.read()).flamegraph
    assert fg.total == 3_590_000_000 and "other" in fg.names
    resp = await client.post("/pyroscope/adhocprofiles.v1.AdHocProfileService/Get", json={})
    assert resp.status == 501
    assert (await resp.json())["code"] == "unimplemented"


async def test_background_retention_drops_expired_data(tmp_path: Path, aiohttp_client: Client) -> None:
    import asyncio

    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), retention_age=60.0)
    now = [CAPTURE_END_S]
    client = await aiohttp_client(create_app(settings, wall_clock=lambda: now[0]))
    await replay_capture(client)
    store = store_of(client)
    now[0] += 86_400  # a day passes: everything in the capture has expired
    for _ in range(300):  # the retention task runs every 6 s here (a tenth of the age); give it up to 30 s
        c = await store.counts()
        if (c.spans, c.samples, c.series) == (0, 0, 0):  # series go after their samples, in a later statement
            break
        await asyncio.sleep(0.1)
    assert (c.spans, c.samples, c.series) == (0, 0, 0)


# --------------------------------------------------------------------------------------------- decompression budget


def _padded_pprof(pad: int) -> bytes:
    """The Go SDK's CPU profile with a ``pad``-byte string added to its string table, gzipped: a real profile, a few
    KB on the wire, ``pad`` bytes once inflated."""
    from bridge.pprof import decode_pprof

    profile = decode_pprof(GO_CPU_PPROF.read_bytes())
    profile.string_table.append("a" * pad)
    return gzip.compress(profile.SerializeToString())


async def test_nested_gzip_payloads_share_one_decompression_budget_per_request(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    """Issue 11, item 2: each pprof of a Push may inflate, but all of them together (and the body) at most 4 × the body
    limit: past it the request is 413 and nothing of it is stored — however many payloads it carries."""
    # budget: 4 MiB per request; a retention age that keeps the Go pprof fixture (2021) and the pushes below (2023)
    client = await aiohttp_client(make_app(tmp_path, max_body_bytes=1024**2, retention_age=FIXTURES_AGE_S))
    one = _padded_pprof(1536 * 1024)
    assert len(one) < 16 * 1024
    headers = {"Content-Type": "application/proto"}
    ok = _push(GOOD_LABELS, [one, one]).SerializeToString()  # 3 MiB inflated: within the budget
    resp = await client.post("/push.v1.PusherService/Push", data=ok, headers=headers)
    assert resp.status == 200, await resp.text()
    before = await store_of(client).counts()

    bomb = _push(GOOD_LABELS, [one, one, one]).SerializeToString()  # 4.5 MiB inflated, 36 KB sent
    resp = await client.post("/push.v1.PusherService/Push", data=bomb, headers=headers)
    assert resp.status == 413
    doc = await resp.json()
    assert doc["code"] == "resource_exhausted" and "decompression budget of 4194304 bytes" in doc["message"]
    assert await store_of(client).counts() == before  # nothing of it stored

    # /ingest: the body's own gzip and the pprof's gzip inside it, charged to the same budget
    raw = _padded_pprof(5 * 1024**2)
    resp = await client.post(
        "/ingest?name=bomb.cpu&format=pprof", data=gzip.compress(raw), headers={"Content-Encoding": "gzip"}
    )
    assert resp.status == 413 and "decompression budget" in await resp.text()
    assert await store_of(client).counts() == before


async def test_a_gzipped_multipart_part_is_inflated_whole_within_the_budget(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    client = await aiohttp_client(make_app(tmp_path, max_body_bytes=1024**2, retention_age=FIXTURES_AGE_S))
    boundary = "pb-boundary"

    def multipart(part: bytes) -> bytes:
        return (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="profile"; filename="p.pprof"\r\n'
                f"Content-Type: application/octet-stream\r\nContent-Encoding: gzip\r\n\r\n"
            ).encode()
            + part
            + f"\r\n--{boundary}--\r\n".encode()
        )

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    fine = gzip.compress(gzip.decompress(_padded_pprof(200 * 1024)))  # 200 KB inflated: over 64 KiB, in budget
    resp = await client.post("/ingest?name=part.cpu&format=pprof", data=multipart(fine), headers=headers)
    assert resp.status == 200, await resp.text()
    assert (await store_of(client).counts()).samples > 0
    bomb = gzip.compress(gzip.decompress(_padded_pprof(5 * 1024**2)))
    resp = await client.post("/ingest?name=part.cpu&format=pprof", data=multipart(bomb), headers=headers)
    assert resp.status == 413 and "decompression budget" in await resp.text()


# --------------------------------------------------------------------------------------------- extreme but valid input


@pytest.mark.parametrize("stamp", [2**63, 2**64 - 1, 7_258_118_400 * 10**9])
async def test_span_times_past_2200_are_rejected_with_partial_success_and_the_good_spans_kept(
    tmp_path: Path, aiohttp_client: Client, stamp: int
) -> None:
    """Issue 11, item 5: an OTLP timestamp ≥ 2^63 (valid uint64, no int64) rejected the whole batch with a 500; now
    that span alone is rejected (OTLP partial success, with the reason) and the others are stored."""
    client = await aiohttp_client(make_app(tmp_path))
    req = _one_span_request(bytes.fromhex("11" * 16), bytes.fromhex("22" * 8), "good")
    far = req.resource_spans[0].scope_spans[0].spans.add()
    far.trace_id, far.span_id, far.name = bytes.fromhex("11" * 16), bytes.fromhex("33" * 8), "far"
    far.start_time_unix_nano = far.end_time_unix_nano = stamp
    resp = await client.post(
        "/v1/traces", data=req.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
    )
    assert resp.status == 200
    answer = otlp_trace_svc.ExportTraceServiceResponse.FromString(await resp.read())
    assert answer.partial_success.rejected_spans == 1
    assert (
        "'far'" in answer.partial_success.error_message
        and "between 1970 and 2200" in answer.partial_success.error_message
    )
    trace = await store_of(client).trace_by_id("11" * 16, ctx())
    assert trace is not None and set(trace.spans) == {"22" * 8}


@pytest.mark.parametrize(
    "query",
    [
        "from=99999999999999999999999",
        "from=-99999999999999999999",
        "until=9223372036854775808",
        "from=1795945290&until=99999999999999999999999999",
        "from=-5",
    ],
)
@pytest.mark.parametrize("fmt", ["folded", "pprof"])
async def test_ingest_times_outside_1970_to_2200_are_a_400(
    tmp_path: Path, aiohttp_client: Client, query: str, fmt: str
) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    body = b"a;b 5\n" if fmt == "folded" else GO_CPU_PPROF.read_bytes()
    resp = await client.post(f"/ingest?name=x.cpu&format={fmt}&{query}", data=body)
    assert resp.status == 400
    text = await resp.text()
    assert "is not a Unix time between 1970 and 2200" in text and "Traceback" not in text
    assert (await store_of(client).counts()).samples == 0


@pytest.mark.parametrize(("start", "end"), [(0, 2**63 - 1), (-(2**63), 0), (-1, 1000), (5000, 1000)])
async def test_span_queries_with_impossible_time_ranges_are_a_400(
    tmp_path: Path, aiohttp_client: Client, start: int, end: int
) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    for method, cls in (
        ("SelectMergeSpanProfile", qpb.SelectMergeSpanProfileRequest),
        ("SelectMergeStacktraces", qpb.SelectMergeStacktracesRequest),
    ):
        msg = cls(
            profile_typeID=CPU,
            label_selector='{service_name="x"}',
            start=start,
            end=end,
            span_selector=["0123456789abcdef"],
        )
        resp = await client.post(
            f"/pyroscope/querier.v1.QuerierService/{method}",
            data=msg.SerializeToString(),
            headers={"Content-Type": "application/proto"},
        )
        assert resp.status == 400
        doc = await resp.json()
        assert doc["code"] == "invalid_argument" and f"({start}, {end})" in doc["message"]


async def test_no_answer_header_repeats_a_long_label_selector_uncapped(tmp_path: Path, aiohttp_client: Client) -> None:
    """Issue 11, item 12: the reason header once repeated the caller's label selector whole. Every header the
    bridge writes from caller text is cut at 400 characters, ASCII."""
    from tests.doubles.shop import load_shop

    client = await aiohttp_client(make_app(tmp_path))
    await replay_capture(client)
    span = load_shop().pick("frontend-io")  # known, no linked samples: the time window answers, or says why not
    long_value = "x" * 60_000
    for selector in (f'{{service_name="shop-frontend",pod="{long_value}"}}', f'{{service_name="{long_value}"}}'):
        msg = qpb.SelectMergeSpanProfileRequest(
            profile_typeID=CPU, label_selector=selector, start=ALL_MS[0], end=ALL_MS[1], span_selector=[span.span_id]
        )
        resp = await client.post(
            "/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile",
            data=msg.SerializeToString(),
            headers={"Content-Type": "application/proto"},
        )
        assert resp.status in (200, 400), await resp.text()
        for name, value in resp.headers.items():
            assert len(value) <= 400, (name, len(value))
        assert sum(len(k) + len(v) for k, v in resp.headers.items()) < 4096
