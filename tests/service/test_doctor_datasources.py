"""``doctor`` and Grafana's data sources (``bridge.commands.datasources``): Tempo through the bridge with its profiles
straight to Pyroscope breaks every "Profiles for this span" while the bridge writes ``<span id>:<trace id>`` — doctor
says so, reading the provisioning files ``provision`` writes (and hand-written ones) and Grafana's own API (an
aiohttp app on 127.0.0.1 that answers ``/api/datasources`` as Grafana does, only with the right token)."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bridge.commands.datasources import check_datasources, parse_provisioning, wiring_check
from bridge.commands.doctor import doctor
from bridge.config import Settings
from bridge.provisioning.render import render
from bridge.provisioning.settings import ProvisionSettings
from tests.span_stack import CPU, Stack, start_doubles

TEMPO = {"name": "Tempo", "type": "tempo", "uid": "t1", "url": "http://bridge:4041/tempo"}
DIRECT = {"name": "Pyroscope", "type": "grafana-pyroscope-datasource", "uid": "p1", "url": "http://pyroscope:4040"}
VIA = {**DIRECT, "name": "Profiles", "url": "http://bridge:4041/pyroscope/"}


def tempo_to(uid: str) -> dict[str, Any]:
    return {**TEMPO, "jsonData": {"tracesToProfiles": {"datasourceUid": uid, "profileTypeId": CPU}}}


def provisioning(tmp_path: Path, *sources: dict[str, Any]) -> Path:
    folder = tmp_path / "datasources"
    folder.mkdir()
    (folder / "grafana.yaml").write_text(json.dumps({"apiVersion": 1, "datasources": list(sources)}))  # JSON is YAML
    (folder / "notes.txt").write_text("not a provisioning file")
    return folder


def test_the_wiring_provision_writes_passes() -> None:
    environ = {"PROFILE_BRIDGE_PROVISION_BRIDGE_URL": "http://bridge:4041"}
    files = render(ProvisionSettings.from_env(environ, Settings.from_env(environ), compose=True))
    [text] = [text for path, text in files.items() if path.startswith("datasources/")]
    check = wiring_check(parse_provisioning(text), "read from x", "span-and-trace")
    assert check.ok is True and "both through the bridge" in check.detail


@pytest.mark.parametrize(
    ("sources", "form", "ok", "words"),
    [
        ([tempo_to("p1"), DIRECT], "span-and-trace", False, "Pyroscope refuses the <span id>:<trace id>"),
        ([tempo_to("p1"), DIRECT], "span", True, "writes plain span ids"),
        ([tempo_to("p1"), VIA], "span-and-trace", True, "both through the bridge"),
        ([{**tempo_to("p1"), "url": "http://tempo:3200"}, DIRECT], "span-and-trace", True, "no Tempo data source"),
        ([TEMPO, DIRECT], "span-and-trace", True, "no Tempo data source goes through the bridge to a Profiles"),
    ],
)
def test_tempo_through_the_bridge_and_pyroscope_direct_is_found(
    sources: list[dict[str, Any]], form: str, ok: bool, words: str
) -> None:
    text = json.dumps({"apiVersion": 1, "datasources": sources})
    check = wiring_check(parse_provisioning(text), "read from the test", form)
    assert check.ok is ok and words in check.detail, check
    if not ok:
        assert "'Pyroscope'" in check.fix and "/pyroscope" in check.fix and "PROFILE_ID_FORM=span" in check.fix


@pytest.fixture
async def stack(aiohttp_server: Any) -> Stack:
    return await start_doubles(aiohttp_server)


async def run(stack: Stack, settings: Settings, **kwargs: Any) -> tuple[int, str]:
    root = stack.shop.pick("frontend-root")
    out, err = io.StringIO(), io.StringIO()
    code = await doctor(
        settings,
        trace_id=root.trace_id,
        span_id=root.span_id,
        expect_function=None,
        profile_type=CPU,
        out=out,
        err=err,
        clock=stack.capture_clock,
        **kwargs,
    )
    assert err.getvalue() == ""
    return code, out.getvalue()


async def test_doctor_fails_the_wiring_it_reads_from_provisioning_files(stack: Stack, tmp_path: Path) -> None:
    folder = provisioning(tmp_path, tempo_to("p1"), DIRECT)
    code, out = await run(stack, stack.settings, datasources=folder)
    assert code == 1, out
    assert "✗ Grafana's data sources: 'Tempo' goes through the bridge, its profiles 'Pyroscope' to " in out
    assert f"read from provisioning files in {folder}" in out
    assert "1 of 8 checks failed: Grafana's data sources" in out


async def test_doctor_reads_grafanas_api_with_a_token(stack: Stack, tmp_path: Path, aiohttp_server: Any) -> None:
    async def datasources(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer glsa_test":
            return web.json_response({"message": "Unauthorized"}, status=401)
        return web.json_response([tempo_to("p1"), VIA])

    app = web.Application()
    app.router.add_get("/api/datasources", datasources)
    grafana = await aiohttp_server(app)
    settings = dataclasses.replace(stack.settings, grafana_url=str(grafana.make_url("")).rstrip("/"))
    missing = tmp_path / "absent"
    code, out = await run(stack, settings, datasources=missing)
    assert code == 0, out
    assert "Grafana's data sources not checked" in out and "HTTP 401" in out and "--grafana-token-file" in out
    token = tmp_path / "token"
    token.write_text("glsa_test\n")
    code, out = await run(stack, settings, datasources=missing, grafana_token_file=token)
    assert code == 0, out
    assert "✓ Grafana's data sources: 'Tempo' → 'Profiles': both through the bridge (read from Grafana's API" in out


async def test_with_nothing_to_read_doctor_says_what_it_looked_for(tmp_path: Path) -> None:
    check = await check_datasources(Settings.for_tests(), tmp_path / "absent")
    assert isinstance(check, str)
    assert f"no provisioning files at {tmp_path / 'absent'}" in check and "PROFILE_BRIDGE_GRAFANA_URL is unset" in check
