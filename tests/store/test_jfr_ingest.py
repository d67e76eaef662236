"""``POST /ingest?format=jfr`` in standalone mode over real HTTP, as Pyroscope's Java SDK sends it
(``agent/src/main/java/io/pyroscope/javaagent/impl/PyroscopeExporter.java``: multipart/form-data, a gzipped ``jfr``
part and an optional gzipped ``labels`` part, no Content-Encoding on either), and raw; the series it makes, a span
linked through the recording's span ids; and bad recordings refused whole with a message naming what is wrong."""

from __future__ import annotations

import gzip
import io
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from bridge._proto import jfr_labels_pb2 as lpb
from bridge._proto import querier_pb2 as qpb
from bridge._proto import types_pb2 as tpb
from bridge.compression import Budget
from bridge.errors import BridgeError
from bridge.store.decode import parse_legacy_name
from bridge.store.decode_jfr import records_from_jfr
from tests.jfr_writer import Recording
from tests.paths import JFR_FIXTURES
from tests.store.test_ingest import Client, make_app, store_of
from tests.store.test_store import ALL_MS, CAPTURE_END_S, CPU, ctx

FIXTURES = JFR_FIXTURES
FROM_S = int(CAPTURE_END_S) - 60
UNTIL_S = FROM_S + 10


def sdk_url(name: str = "java-app{env=test}", rate: int | None = 100, **extra: str) -> str:
    """The query the Java SDK sends (urlForSnapshot): name with labels, units, aggregationType, from, until, spyName,
    sampleRate for cpu/itimer/wall, format last."""
    query = {
        "name": name,
        "units": "samples",
        "aggregationType": "sum",
        "from": str(FROM_S),
        "until": str(UNTIL_S),
        "spyName": "javaspy",
        **({"sampleRate": str(rate)} if rate is not None else {}),
        "format": "jfr",
        **extra,
    }
    from urllib.parse import urlencode

    return "/ingest?" + urlencode(query)


def sdk_form(jfr_gz: bytes, labels: bytes | None = None) -> aiohttp.FormData:
    """The Java SDK's body: part ``jfr`` (filename ``jfr``, no content type), part ``labels`` (filename ``labels``,
    application/x-protobuf) when it has labels; both gzipped."""
    form = aiohttp.FormData()
    form.add_field("jfr", jfr_gz, filename="jfr", content_type="application/octet-stream")
    if labels is not None:
        form.add_field("labels", gzip.compress(labels), filename="labels", content_type="application/x-protobuf")
    return form


async def types_of(client: TestClient[Any, Any]) -> set[str]:
    answer = await store_of(client).profile_types(qpb.ProfileTypesRequest(start=ALL_MS[0], end=ALL_MS[1]), ctx())
    return {t.ID for t in answer.profile_types}


async def test_the_java_sdks_multipart_upload_makes_pyroscopes_series(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    resp = await client.post(sdk_url(), data=sdk_form((FIXTURES / "example.jfr.gz").read_bytes()))
    assert resp.status == 200, await resp.text()
    assert await types_of(client) == {
        CPU,
        "memory:alloc_in_new_tlab_objects:count:space:bytes",
        "memory:alloc_in_new_tlab_bytes:bytes:space:bytes",
        "memory:alloc_outside_tlab_objects:count:space:bytes",
        "memory:alloc_outside_tlab_bytes:bytes:space:bytes",
        "mutex:contentions:count:mutex:count",
        "mutex:delay:nanoseconds:mutex:count",
    }
    store = store_of(client)
    names = await store.label_names(tpb.LabelNamesRequest(start=ALL_MS[0], end=ALL_MS[1]), ctx())
    assert {"service_name", "env", "pyroscope_spy", "jfr_event"} <= set(names.names)
    values = await store.label_values(tpb.LabelValuesRequest(name="jfr_event", start=ALL_MS[0], end=ALL_MS[1]), ctx())
    assert list(values.names) == ["cpu"]
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=CPU,
        label_selector='{service_name="java-app", env="test", pyroscope_spy="javaspy"}',
        start=FROM_S * 1000,
        end=UNTIL_S * 1000,
    )
    fg = (await store.select_merge_stacktraces(req, ctx())).flamegraph
    assert fg.total > 0 and fg.total % 10_000_000 == 0  # whole samples of 10 ms (sampleRate 100)
    assert any("java/lang/Thread.run" in n for n in fg.names)  # the JVM's internal class form, not dotted


async def test_a_raw_body_plain_or_gzipped_and_the_service_name_tag(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    gz = (FIXTURES / "wall_tick_sample.jfr.gz").read_bytes()
    plain = gzip.decompress(gz)
    for body in (gz, plain):
        resp = await client.post(sdk_url("other{service_name=svc}"), data=body)
        assert resp.status == 200, await resp.text()
    assert await types_of(client) == {CPU, "wall:wall:nanoseconds:wall:nanoseconds"}
    store = store_of(client)
    values = await store.label_values(tpb.LabelValuesRequest(name="app_name", start=ALL_MS[0], end=ALL_MS[1]), ctx())
    assert list(values.names) == ["other"]  # Pyroscope: a service_name tag wins, the app name becomes app_name


def span_request(trace_id: str, span_id: str, name: str, start_s: float, end_s: float) -> dict[str, Any]:
    span = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 2,
        "startTimeUnixNano": str(int(start_s * 1e9)),
        "endTimeUnixNano": str(int(end_s * 1e9)),
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "java-app"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}


async def test_span_ids_in_the_recording_link_samples_to_their_span(tmp_path: Path, aiohttp_client: Client) -> None:
    """async-profiler with the OpenTelemetry extension writes each sample's span id (``spanId``) and its name as a
    constant of the labels part (``spanName``): the span answers ``linked`` with exactly those samples."""
    client = await aiohttp_client(make_app(tmp_path))
    labels = gzip.decompress((FIXTURES / "new_spancontext.labels.gz").read_bytes())
    resp = await client.post(sdk_url(), data=sdk_form((FIXTURES / "new_spancontext.jfr.gz").read_bytes(), labels))
    assert resp.status == 200, await resp.text()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    body = span_request(trace_id, "00000000000000ef", "Fibonachi", FROM_S + 1, FROM_S + 9)
    assert (await client.post("/v1/traces", json=body)).status == 200
    resp = await client.get(f"/api/v1/spans/{trace_id}/00000000000000ef/profile")
    doc = await resp.json()
    assert resp.status == 200 and doc["mode"] == "linked", doc
    assert any("TracingContextKt.fib" in n for n in doc["flamegraph"]["names"])
    assert "TracingContextKt.inf" not in doc["flamegraph"]["names"]  # the other span's samples (0x1092) stay out


async def test_a_labels_part_built_as_the_sdk_builds_it_links_by_context_id(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    """The Java SDK's labels part (``Pyroscope.LabelsWrapper.dump``): context id → {string id: string id} over one
    string table numbered from 1. A context labelled ``profile_id`` (what ``ScopedContext`` with the span's id
    records) links its samples to that span: Pyroscope reads ``profile_id`` as ``span_id``."""
    client = await aiohttp_client(make_app(tmp_path))
    real = lpb.LabelsSnapshot.FromString(gzip.decompress((FIXTURES / "dump1.labels.pb.gz").read_bytes()))
    context_ids = sorted(real.contexts)  # the contexts this recording's events carry
    assert context_ids
    span_ids = [f"{0x1000 + n:016x}" for n in range(len(context_ids))]
    snapshot = lpb.LabelsSnapshot()
    strings: dict[str, int] = {}

    def sid(s: str) -> int:  # StringTableBuilder: ids from 1 in order of first use
        return strings.setdefault(s, len(strings) + 1)

    for cid, span_id in zip(context_ids, span_ids, strict=True):
        snapshot.contexts[cid].labels[sid("profile_id")] = sid(span_id)
        snapshot.contexts[cid].labels[sid("span_name")] = sid("GET /work")
    for s, i in strings.items():
        snapshot.strings[i] = s
    form = sdk_form((FIXTURES / "dump1.jfr.gz").read_bytes(), snapshot.SerializeToString())
    assert (await client.post(sdk_url(), data=form)).status == 200
    linked = 0
    for span_id in span_ids:
        trace_id = "5bf92f3577b34da6a3ce9" + span_id[5:]
        await client.post("/v1/traces", json=span_request(trace_id, span_id, "GET /work", FROM_S + 1, FROM_S + 9))
        doc = await (await client.get(f"/api/v1/spans/{trace_id}/{span_id}/profile")).json()
        linked += doc["mode"] == "linked"
    assert linked >= 1
    values = await store_of(client).label_values(
        tpb.LabelValuesRequest(name="span_name", start=ALL_MS[0], end=ALL_MS[1]), ctx()
    )
    assert list(values.names) == ["GET /work"]


# --------------------------------------------------------------------------------------------- bad input


def _bad_recordings() -> list[Any]:
    good = Recording().chunk()
    dangling = Recording(samples=[(99, 5)]).chunk()
    bad_method = Recording(stacks={1: [1, 77]}).chunk()
    longer = bytearray(good)
    at = len(good) - len(Recording().checkpoint()) - len(Recording().events()) - 200  # inside the events
    del at
    huge_event = good[:68] + b"\xff\xff\x03" + good[71:]  # the first event claims ~64 KiB
    return [
        pytest.param(good[:40], "truncated chunk", id="truncated-header"),
        pytest.param(good[:-10], "truncated chunk", id="truncated-chunk"),
        pytest.param(b"FLX\x00" + good[4:], "not a JFR chunk", id="wrong-magic"),
        pytest.param(dangling, "stack trace 99", id="stack-pointing-nowhere"),
        pytest.param(bad_method, "method 77", id="method-pointing-nowhere"),
        pytest.param(huge_event, "past the end of its chunk", id="event-bigger-than-chunk"),
        pytest.param(bytes(longer[:68]) + b"\x00" * 10, "truncated chunk", id="short-garbage"),
        pytest.param(good + b"FLR\x00", "truncated chunk", id="trailing-partial-chunk"),
    ]


@pytest.mark.parametrize(("body", "needle"), _bad_recordings())
async def test_bad_recordings_are_a_400_naming_the_fault_and_store_nothing(
    tmp_path: Path, aiohttp_client: Client, body: bytes, needle: str
) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    for form in (False, True):
        data: Any = sdk_form(gzip.compress(body)) if form else body
        resp = await client.post(sdk_url(), data=data)
        text = await resp.text()
        assert resp.status == 400, text
        assert needle in text and text.startswith("JFR recording: "), text
    assert (await store_of(client).counts()).samples == 0


async def test_a_good_recording_from_the_writer_is_stored(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    resp = await client.post(sdk_url(), data=Recording().chunk())
    assert resp.status == 200, await resp.text()
    req = qpb.SelectMergeStacktracesRequest(
        profile_typeID=CPU, label_selector='{service_name="java-app"}', start=ALL_MS[0], end=ALL_MS[1]
    )
    fg = (await store_of(client).select_merge_stacktraces(req, ctx())).flamegraph
    assert fg.total == 3 * 10_000_000  # three runnable samples; the sleeping one is not CPU
    assert "demo/Main.hot" in fg.names and "java/lang/Thread.run" in fg.names


async def test_a_million_constants_and_a_gzip_bomb_stay_within_the_budget(
    tmp_path: Path, aiohttp_client: Client
) -> None:
    client = await aiohttp_client(make_app(tmp_path, max_body_bytes=4 * 1024 * 1024))
    many = Recording(extra_symbols=1_000_000).chunk()  # 3 MB: 10^6 constant-pool entries
    form = aiohttp.FormData()
    form.add_field("jfr", io.BytesIO(gzip.compress(many)), filename="jfr")
    resp = await client.post(sdk_url(), data=form)
    text = await resp.text()
    assert resp.status == 413 and "decompression budget" in text and "constant pools" in text, text
    bomb = gzip.compress(Recording().chunk() + b"\x00" * (64 * 1024 * 1024))
    form = aiohttp.FormData()
    form.add_field("jfr", io.BytesIO(bomb), filename="jfr")
    resp = await client.post(sdk_url(), data=form)
    text = await resp.text()
    assert resp.status == 413 and "JFR recording is over" in text, text
    assert (await store_of(client).counts()).samples == 0


@pytest.mark.slow  # tracemalloc over a 10^6-constant recording refused by its budget; the clock is injected (now_ns=0):
# date-safe
def test_memory_a_million_constants_take_is_bounded_by_the_budget() -> None:
    many = Recording(extra_symbols=1_000_000).chunk()
    budget = Budget(4 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(BridgeError, match="decompression budget"):
            records_from_jfr(
                many,
                parse_legacy_name("a"),
                from_s=FROM_S,
                until_s=UNTIL_S,
                sample_rate=100,
                now_ns=0,
                max_bytes=budget.limit,
                budget=budget,
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < budget.limit + 2 * len(many), (peak, budget.limit)


# --------------------------------------------------------------------------------------------- fuzz


def _mutations(seed_inputs: list[bytes], count: int, rng: random.Random) -> list[bytes]:
    out = []
    for _ in range(count):
        data = bytearray(rng.choice(seed_inputs))
        for _ in range(rng.randint(1, 8)):
            op = rng.random()
            if op < 0.4 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif op < 0.55:
                del data[rng.randrange(len(data) + 1) :]
            elif op < 0.7 and data:
                i = rng.randrange(len(data))
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            elif op < 0.85 and data:
                i, j = sorted(rng.randrange(len(data)) for _ in range(2))
                data[i:i] = data[i:j][:4096]
            else:  # a varint's continuation bit
                if data:
                    data[rng.randrange(len(data))] |= 0x80
        out.append(bytes(data))
    return out


FUZZ_INPUTS = 1000


def test_fuzzed_recordings_are_refused_cleanly_or_read(capsys: pytest.CaptureFixture[str]) -> None:
    """Mutated real and written recordings: each is read or refused with a BridgeError (400/413), never another
    exception, and never beyond its budget."""
    rng = random.Random(21)
    seeds = [Recording().chunk(), gzip.decompress((FIXTURES / "new_spancontext.jfr.gz").read_bytes())[:20_000]]
    refused = read = 0
    for data in _mutations(seeds, FUZZ_INPUTS, rng):
        budget = Budget(8 * 1024 * 1024)
        try:
            records_from_jfr(
                data,
                parse_legacy_name("fuzz"),
                from_s=FROM_S,
                until_s=UNTIL_S,
                sample_rate=100,
                now_ns=0,
                max_bytes=budget.limit,
                budget=budget,
            )
            read += 1
        except BridgeError as exc:
            assert exc.http_status in (400, 413), exc.message
            refused += 1
    with capsys.disabled():
        print(f"\nJFR fuzz: {FUZZ_INPUTS} inputs, {read} read, {refused} refused (4xx), 0 other errors")


async def test_fuzzed_uploads_never_answer_5xx(tmp_path: Path, aiohttp_client: Client) -> None:
    client = await aiohttp_client(make_app(tmp_path))
    rng = random.Random(2021)
    seeds = [Recording().chunk()]
    statuses: dict[int, int] = {}
    for data in _mutations(seeds, 150, rng):
        resp = await client.post(sdk_url(), data=sdk_form(gzip.compress(data)))
        statuses[resp.status] = statuses.get(resp.status, 0) + 1
    assert not [s for s in statuses if s >= 500], statuses
    assert set(statuses) <= {200, 400, 413}, statuses
    assert json.dumps(statuses)
