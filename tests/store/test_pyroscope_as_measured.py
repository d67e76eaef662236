"""What the real Pyroscope answered when ``bench/differential.py`` checked the standalone store and the Pyroscope double
against it (grafana/pyroscope 3fe6a457, v2 read path): the same uploads go to a standalone bridge and to the double,
the same questions to both, and both must answer as Pyroscope did — or, where the store answers otherwise on purpose
(docs/peers.md), each as documented."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from bridge._proto import profile_pb2
from bridge.app import create_app
from bridge.config import Settings
from tests.doubles.pyroscope import PyroscopeDouble

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
START_MS = 1_796_170_020_000  # on a whole minute
NOW_S = START_MS / 1000 + 3600
QUERIER = "querier.v1.QuerierService/"
ROOT, OTHER = "0100000000000000", "0000000000000002"


def pprof(samples: list[tuple[tuple[str, ...], int, str]], time_ms: int) -> bytes:
    """A Go-like CPU pprof: (stack root first, nanoseconds, span id or "") per sample."""
    p = profile_pb2.Profile()
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        if text not in strings:
            strings[text] = len(p.string_table)
            p.string_table.append(text)
        return strings[text]

    s("")
    p.sample_type.add(type=s("cpu"), unit=s("nanoseconds"))
    p.period_type.type, p.period_type.unit, p.period = s("cpu"), s("nanoseconds"), 10_000_000
    p.time_nanos, p.duration_nanos = time_ms * 1_000_000, 10_000_000_000
    locations: dict[str, int] = {}
    for stack, value, span in samples:
        for name in stack:
            if name not in locations:
                fid = len(p.function) + 1
                p.function.add(id=fid, name=s(name))
                locations[name] = len(p.location) + 1
                p.location.add(id=locations[name]).line.add(function_id=fid)
        sample = p.sample.add(location_id=[locations[n] for n in reversed(stack)], value=[value])
        if span:
            sample.label.add(key=s("span_id"), str=s(span))
    return bytes(p.SerializeToString())


# (capture start in ms, samples): around the first step of a 60 s SelectSeries from START_MS
UPLOADS: list[tuple[int, list[tuple[tuple[str, ...], int, str]]]] = [
    (START_MS - 60_000, [(("main", "a"), 1, "")]),  # exactly one step before start: the first point's
    (START_MS - 30_000, [(("main", "a"), 2, "")]),
    (START_MS, [(("main", "b"), 4, ROOT), (("main", "c"), 4, OTHER)]),
    (START_MS + 1, [(("main", "a"), 8, "")]),  # just after start: the second point's
    (START_MS + 60_000, [(("main", "a"), 16, "")]),
    (START_MS + 120_000, [(("main", "a"), 32, "")]),  # after end: in no point
]
END_MS = START_MS + 90_000


@dataclass
class Sides:
    store: TestClient[Any, Any]
    double: TestClient[Any, Any]

    async def ask(self, rpc: str, body: dict[str, Any]) -> list[tuple[int, Any]]:
        out = []
        for client, prefix in ((self.store, "/pyroscope/"), (self.double, "/")):
            resp = await client.post(prefix + QUERIER + rpc, json=body)
            out.append((resp.status, await resp.json(content_type=None)))
        return out


@pytest.fixture
async def sides(tmp_path: Path, aiohttp_client: Any, aiohttp_server: Any) -> AsyncIterator[Sides]:
    settings = Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data"), otlp_grpc_enabled=False)
    store = await aiohttp_client(create_app(settings, wall_clock=lambda: NOW_S))
    double = PyroscopeDouble(profiles=[])
    double_client = await aiohttp_client(await aiohttp_server(double.app))
    for time_ms, samples in UPLOADS:
        params = {"name": "svc", "from": str(time_ms // 1000), "until": str(time_ms // 1000 + 10)}
        params |= {"format": "pprof", "spyName": "gospy"}
        for client in (store, double_client):
            resp = await client.post("/ingest", params=params, data=pprof(samples, time_ms))
            assert resp.status == 200, await resp.text()
    yield Sides(store, double_client)


def points(doc: Any) -> dict[int, float]:
    return {int(p["timestamp"]): float(p["value"]) for s in doc.get("series", []) for p in s["points"]}


async def test_select_series_sums_the_step_that_ends_at_each_point(sides: Sides) -> None:
    """v2: from one step before start, each profile on the first point at or after it, nothing after end."""
    body = {"profileTypeID": CPU, "labelSelector": "{}", "start": START_MS, "end": END_MS, "step": 60}
    for status, doc in await sides.ask("SelectSeries", body):
        assert status == 200
        assert points(doc) == {START_MS: 1 + 2 + 4 + 4, START_MS + 60_000: 8 + 16}


async def test_span_ids_that_are_not_16_hex(sides: Sides) -> None:
    """Pyroscope fails the whole request from its query backend (a Connect ``unknown``, HTTP 500) — only when the
    range holds data; sixteen zeros it takes and matches nothing. The store merges the valid entries (never a 500:
    docs/peers.md), the double answers as Pyroscope."""
    span = {"profileTypeID": CPU, "labelSelector": "{}", "start": START_MS, "end": END_MS}
    (store, double) = await sides.ask("SelectMergeStacktraces", {**span, "spanSelector": [ROOT, "abc"]})
    assert double == (
        500,
        {"code": "unknown", "message": 'rpc error: code = Unknown desc = invalid span id length: "abc"'},
    )
    assert store[0] == 200 and int(store[1]["flamegraph"]["total"]) == 4  # the store keeps the valid entries
    (store, double) = await sides.ask("SelectMergeStacktraces", {**span, "spanSelector": ["zzzzzzzzzzzzzzzz"]})
    assert double[1]["message"] == "rpc error: code = Unknown desc = encoding/hex: invalid byte: U+007A 'z'"
    empty = {**span, "start": 1_000, "end": 2_000, "spanSelector": ["abc"]}
    (_, double) = await sides.ask("SelectMergeStacktraces", empty)
    assert double == (200, {"flamegraph": {"names": ["total"], "levels": [{"values": ["0", "0", "0", "0"]}]}})
    (store, double) = await sides.ask("SelectMergeStacktraces", {**span, "spanSelector": ["0" * 16]})
    assert double[0] == 200 and int(double[1]["flamegraph"].get("total", 0)) == 0
    assert store[0] == 400 and "OpenTelemetry's invalid span id" in store[1]["message"]  # no span has it


async def test_select_series_span_exemplars_are_not_served(sides: Sides) -> None:
    body = {"profileTypeID": CPU, "labelSelector": "{}", "start": START_MS, "end": END_MS, "step": 60}
    (store, double) = await sides.ask("SelectSeries", {**body, "exemplarType": "EXEMPLAR_TYPE_SPAN"})
    desc = "exemplar type span is not implemented"
    assert double == (500, {"code": "unknown", "message": f"rpc error: code = Unimplemented desc = {desc}"})
    assert store == (501, {"code": "unimplemented", "message": desc, "details": []})


async def test_a_profile_type_of_the_wrong_shape(sides: Sides) -> None:
    """Both refuse it (400); the double in Pyroscope's words, the store in its own (docs/peers.md)."""
    body = {"profileTypeID": "nonsense", "labelSelector": "{}", "start": START_MS, "end": END_MS}
    (store, double) = await sides.ask("SelectMergeStacktraces", body)
    words = "profile-type selection must be of the form <name>:<sample-type>:<sample-unit>:<period-type>:<period-unit>"
    assert double == (400, {"code": "invalid_argument", "message": f'{words}(:delta), got(1): "nonsense"'})
    assert store[0] == 400 and "is not name:sample_type:sample_unit:period_type:period_unit" in store[1]["message"]


async def test_the_double_refuses_a_form_sent_as_a_bare_pprof_as_pyroscope_does(sides: Sides) -> None:
    """With ``format=pprof`` Pyroscope reads the body as a bare pprof, so a multipart form fails (the store takes
    it: docs/peers.md)."""
    form = b'--x\r\nContent-Disposition: form-data; name="profile"; filename="p"\r\n\r\n'
    form += pprof([(("main",), 1, "")], START_MS) + b"\r\n--x--\r\n"
    headers = {"Content-Type": "multipart/form-data; boundary=x"}
    params = {"name": "svc", "format": "pprof", "from": str(START_MS // 1000)}
    resp = await sides.double.post("/ingest", params=params, data=form, headers=headers)
    assert resp.status == 422 and "wrong wireType = 5 for field Function" in (await resp.json())["message"]
    resp = await sides.store.post("/ingest", params=params, data=form, headers=headers)
    assert resp.status == 200
