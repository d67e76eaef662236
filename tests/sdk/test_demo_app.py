"""Run the real demo shop (``profile-bridge demo``: two processes, stock OpenTelemetry and Pyroscope SDKs) against the
recording double and check what arrived: traces whose local roots carry ``pyroscope.profile.id``, CPU profiles whose
samples carry the matching ``span_id`` labels, ``count_primes`` in the backend's samples and ``render_json`` in the
frontend's.

pyroscope-io uploads on 10 s windows aligned to the wall clock, and flushes the current window when it shuts down.
The tests wait for no timer of the SDKs: they drive a fixed number of request rounds (enough CPU for 100 Hz sampling
to see both hot functions), then stop the app with SIGTERM, which flushes every span and the last profile window, and
check what arrived. So they take the same few seconds whatever the wall clock says, also under libfaketime (which
leaves the SDKs' timed waits on the real clock, so nothing is sent before shutdown).

``profile-bridge serve --demo`` runs the same way: a real process on a free loopback port, driven a fixed number of
rounds through the demo's frontend (whose address it logs), stopped with SIGTERM — the demo's services flush into the
still-running bridge before it exits — and its store then read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp import ClientError, ClientSession, ClientTimeout

from bridge._proto import push_pb2
from bridge.app import create_app
from bridge.config import Settings
from bridge.pprof import decode_pprof, iter_samples
from bridge.spans import PROFILE_ID_ATTR, SPAN_KIND_CLIENT, SPAN_KIND_SERVER, Span, spans_from_otlp
from tests.doubles.recorder import RECORDER, Recorder, build_recorder
from tests.faketime import both_clocks_ahead
from tests.paths import ROOT
from tests.serving import closed_port

STARTUP_SECONDS = 20.0
DRIVE_ROUNDS = 8  # each round: two /checkout (render_json + the backend's count_primes) and /health
DRIVE_ROUND = ("/checkout", "/checkout", "/health")
# spans that only wait (300 ms each), sent together after the rounds so their waits overlap; several, because a
# request's own bit of CPU is now and then sampled and links its span, and one unlinked span must remain
SLOW_IO_REQUESTS = 8
STOP_SECONDS = 20.0
INGEST_SECONDS = 10.0


def _samples(recorder: Recorder) -> Iterator[tuple[str, tuple[str, ...], int, dict[str, str]]]:
    """(service_name, frames root first, value, labels) of every pprof sample pushed so far."""
    for request in recorder.pushes:
        for series in request.series:
            labels = {label.name: label.value for label in series.labels}
            for raw in series.samples:
                profile = decode_pprof(raw.raw_profile)
                for frames, value, sample_labels in iter_samples(profile, 0):
                    yield labels.get("service_name", ""), frames, value, sample_labels


def _linked_count_primes(recorder: Recorder) -> bool:
    return any(
        service == "shop-backend" and "count_primes" in frames and "span_id" in labels
        for service, frames, _, labels in _samples(recorder)
    )


def _spans(recorder: Recorder) -> list[Span]:
    return [span for request in recorder.traces for span in spans_from_otlp(request.resource_spans)]


async def _get(session: ClientSession, url: str) -> None:
    async with session.get(url) as resp:
        assert resp.status == 200, (url, resp.status, await resp.text())
        await resp.read()


async def _wait_ready(session: ClientSession, urls: list[str]) -> None:
    """Both services answer ``GET /health`` (the backend may start later than the frontend)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_SECONDS
    for url in urls:
        while True:
            try:
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        break
            except (ClientError, TimeoutError):
                pass
            assert loop.time() < deadline, f"the demo app did not start ({url})"
            await asyncio.sleep(0.2)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (the app flushes spans and profiles), then SIGKILL the whole process group if it hangs."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_SECONDS)
        except TimeoutError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group holds only the demo's own processes
    except ProcessLookupError:
        pass
    await proc.wait()


@pytest.fixture
def demo_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "demo.log"
    yield path
    if path.exists():  # shown by pytest when the test fails
        print(path.read_text(errors="replace")[-4000:])


def _demo_env() -> dict[str, str]:
    """The demo's environment: no OTEL_/PYROSCOPE_/PROFILE_BRIDGE_ settings of ours, spans exported every 200 ms, and
    under libfaketime both clocks set ahead (tests/faketime.py): pyroscope-io's sampler is Rust, whose sleeps the
    wall-clock-only mode breaks — the demo then ran three times slower."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYROSCOPE_", "PROFILE_BRIDGE_"))}
    env.update(OTEL_BSP_SCHEDULE_DELAY="200")
    return both_clocks_ahead(env)


@contextlib.asynccontextmanager
async def run_demo(sink_args: list[str], log_path: Path) -> AsyncIterator[tuple[list[str], asyncio.subprocess.Process]]:
    """Run ``profile-bridge demo SINK_ARGS --no-load``; yields the [frontend, backend] URLs and the process, and always
    stops it (SIGTERM, then SIGKILL of its process group)."""
    frontend_port, backend_port = closed_port(), closed_port()
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bridge",
            "demo",
            *sink_args,
            "--no-load",
            "--frontend-port",
            str(frontend_port),
            "--backend-port",
            str(backend_port),
            cwd=ROOT,
            env=_demo_env(),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            yield [f"http://127.0.0.1:{frontend_port}", f"http://127.0.0.1:{backend_port}"], proc
        finally:
            await _stop(proc)


async def _drive_rounds(session: ClientSession, urls: list[str]) -> None:
    await _wait_ready(session, urls)
    for _ in range(DRIVE_ROUNDS):
        for path in DRIVE_ROUND:
            await _get(session, urls[0] + path)
    await asyncio.gather(*(_get(session, urls[0] + "/slow-io") for _ in range(SLOW_IO_REQUESTS)))


async def _eventually(done: Callable[[], Awaitable[bool]], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + INGEST_SECONDS
    while not await done():
        assert loop.time() < deadline, f"{what} did not arrive within {INGEST_SECONDS:g} s"
        await asyncio.sleep(0.1)


async def test_demo_app_sends_linked_traces_and_profiles(aiohttp_server: Any, demo_log: Path) -> None:
    app = build_recorder()
    server = await aiohttp_server(app)
    recorder = app[RECORDER]

    async def linked_count_primes() -> bool:
        return _linked_count_primes(recorder)

    sink = str(server.make_url("")).rstrip("/")
    async with run_demo(["--traces-to", sink, "--profiles-to", sink], demo_log) as (urls, proc):
        async with ClientSession(timeout=ClientTimeout(total=10, connect=2)) as session:
            await _drive_rounds(session, urls)
    assert proc.returncode == 0  # stopped: the SDKs flushed their last spans and profile window
    await _eventually(linked_count_primes, "linked count_primes samples")
    assert not recorder.rejected

    # ---- traces: local roots carry pyroscope.profile.id = their own span id; children do not
    spans = _spans(recorder)
    by_id = {span.span_id: span for span in spans}
    by_name: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_name[span.name].append(span)
    assert {
        "GET /checkout",
        "renderCart",
        "HTTP GET shop-backend",
        "GET /price",
        "countPrimes",
        "GET /health",
        "GET /slow-io",
        "waitForInventory",
    } <= set(by_name)
    servers = {
        "GET /checkout": {"shop-frontend"},
        "GET /price": {"shop-backend"},
        "GET /health": {"shop-frontend", "shop-backend"},
        "GET /slow-io": {"shop-frontend"},
    }
    for name, services in servers.items():
        for span in by_name[name]:
            assert span.service in services and span.kind == SPAN_KIND_SERVER
            assert span.profile_id == span.span_id, span
            assert dict(span.attributes)[PROFILE_ID_ATTR] == span.span_id
    for name in ("renderCart", "HTTP GET shop-backend", "countPrimes", "waitForInventory"):
        for span in by_name[name]:
            assert span.profile_id == "" and PROFILE_ID_ATTR not in dict(span.attributes), span
    assert all(dict(span.resource)["service.namespace"] == "shop" for span in spans)

    # ---- W3C context: every backend root continues a frontend CLIENT span of the same trace
    for span in by_name["GET /price"]:
        parent = by_id[span.parent_span_id]
        assert parent.name == "HTTP GET shop-backend" and parent.kind == SPAN_KIND_CLIENT
        assert parent.service == "shop-frontend" and parent.trace_id == span.trace_id

    # ---- profiles: count_primes / render_json, labelled with the ids of the local roots that ran them
    roots = {span.span_id: span for span in spans if span.profile_id}
    linked: dict[str, set[str]] = defaultdict(set)  # service -> span ids seen as labels
    functions: dict[str, set[str]] = defaultdict(set)
    for service, frames, value, labels in _samples(recorder):
        assert value > 0
        functions[service] |= set(frames)
        if "span_id" not in labels:
            continue
        span_id = labels["span_id"]
        assert span_id in roots, f"{service} sample labelled with unknown span {span_id}"
        root = roots[span_id]
        assert root.service == service
        # pyroscope-otel keeps its three tags per *thread*, set and removed one after the other: a sample taken in
        # between has only some, and the demo's aiohttp services run every request on one thread, so while roots
        # overlap (the concurrent /slow-io requests) the thread holds the tags of all of them and a sample may carry
        # span_id of one and trace_id of another. What holds: each tag comes from a root of this service open then.
        overlapping = [
            other
            for other in roots.values()
            if other.service == service and other.start_ns <= root.end_ns and root.start_ns <= other.end_ns
        ]
        assert labels.get("trace_id", root.trace_id) in {other.trace_id for other in overlapping}, labels
        assert labels.get("span_name", root.name) in {other.name for other in overlapping}, labels
        linked[service].add(span_id)
        if "count_primes" in frames:
            assert root.name == "GET /price"
        if "render_json" in frames:
            assert root.name == "GET /checkout"
    assert "count_primes" in functions["shop-backend"]
    assert "render_json" in functions["shop-frontend"]
    assert linked["shop-backend"] and linked["shop-frontend"]
    series_labels = {
        label.name: label.value for request in recorder.pushes for series in request.series for label in series.labels
    }
    assert series_labels["__name__"] == "process_cpu" and series_labels["service_namespace"] == "shop"
    assert all(isinstance(request, push_pb2.PushRequest) for request in recorder.pushes)


async def _ingested(client: ClientSession, bridge: str, kind: str) -> float:
    async with client.get(bridge + "/metrics") as resp:
        text = await resp.text()
    match = re.search(rf'^profile_bridge_ingested_total\{{kind="{kind}"\}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def _samples_between(client: ClientSession, bridge: str, service: str, start_ns: int, end_ns: int) -> int:
    """The CPU time (ns) of ``service`` the store holds between the two instants, widened by the SDK's upload
    interval each side (a profile is stamped with its 10 s window's start), asked of the bridge's own Pyroscope API."""
    body = {
        "profileTypeID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
        "labelSelector": f'{{service_name="{service}"}}',
        "start": str(start_ns // 1_000_000 - UPLOAD_MS),
        "end": str(end_ns // 1_000_000 + UPLOAD_MS),
    }
    async with client.post(bridge + "/pyroscope/querier.v1.QuerierService/SelectMergeStacktraces", json=body) as resp:
        assert resp.status == 200, await resp.text()
        doc = await resp.json()
    return int((doc.get("flamegraph") or {}).get("total") or 0)  # int64: a string in Connect's JSON


async def _span_answers(client: ClientSession, bridge: str, name: str) -> list[tuple[str, str, str]]:
    """(resolution mode, collapsed stacks, the bridge's reason) of the profile of every span named ``name`` (Tempo
    search through the bridge's /tempo mount, then the bridge's span profile API). A ``none`` is checked true: the
    store then holds no CPU of the span's service around the span's time (the SDK's upload of that window did not
    arrive: it happens under load), and the answer is left out."""
    async with client.get(bridge + "/tempo/api/search", params={"q": f'{{name="{name}"}}', "limit": "20"}) as resp:
        assert resp.status == 200, await resp.text()
        doc = await resp.json()
    answers = []
    for hit in doc["traces"]:
        for span_set in hit.get("spanSets") or [hit["spanSet"]]:
            for span in span_set["spans"]:
                url = f"{bridge}/api/v1/spans/{hit['traceID']}/{span['spanID']}/profile"
                async with client.get(url, params={"format": "collapsed"}) as resp:
                    assert resp.status == 200, await resp.text()
                    reason = f"{resp.headers.get('X-Profile-Bridge-Reason', '')} (span {span['spanID']})"
                    mode, stacks = resp.headers["X-Profile-Bridge-Resolution"], await resp.text()
                if mode == "none" and name in TRUE_NONE_CHECKED:
                    start = int(span["startTimeUnixNano"])
                    end = start + int(span.get("durationNanos") or 0)
                    held = await _samples_between(client, bridge, TRUE_NONE_CHECKED[name], start, end)
                    assert held == 0, f"{name}: 'none' while the store holds {held} ns of CPU around it: {reason}"
                    continue
                answers.append((mode, stacks, reason))
    assert answers, f"no {name} spans found"
    return answers


UPLOAD_MS: Final = 10_000  # pyroscope-io's upload interval
# spans with CPU of their own that can only be `none` when no profile of their service covers their time: the service
TRUE_NONE_CHECKED: Final = {"GET /price": "shop-backend", "GET /checkout": "shop-frontend"}
# span name: (modes allowed, mode that must show up at least once, function in its flame graph)
EXPECTED_MODES: dict[str, tuple[set[str], str, str]] = {
    "GET /price": ({"linked", "time-window"}, "linked", "count_primes"),
    "countPrimes": ({"local-root", "time-window"}, "local-root", "count_primes"),
    "GET /checkout": ({"linked", "time-window"}, "linked", "render_json"),
    "renderCart": ({"local-root", "time-window"}, "local-root", "render_json"),
    "GET /health": ({"linked", "time-window", "none"}, "time-window", ""),
    "waitForInventory": ({"local-root", "time-window", "none"}, "time-window", ""),
}


async def _assert_every_mode(client: ClientSession, bridge: str) -> None:
    """Each kind of demo span resolves as README's table says: roots linked, in-process children local-root, a short
    or sleeping span time-window (or none)."""
    for name, (allowed, required, function) in EXPECTED_MODES.items():
        answers = await _span_answers(client, bridge, name)
        modes = {mode for mode, _, _ in answers}
        assert modes <= allowed, (name, [(mode, reason) for mode, _, reason in answers if mode not in allowed])
        assert required in modes or (required == "time-window" and "none" in modes), (name, modes)
        if function:  # samples are sparse (100 Hz): some, not every, answer of that mode holds the function
            assert any(mode == required and function in stacks for mode, stacks, _ in answers), (name, answers[:3])


async def test_demo_app_through_the_standalone_bridge_shows_every_mode(
    aiohttp_server: Any, tmp_path: Path, demo_log: Path
) -> None:
    """The demo app sends to a standalone bridge (its embedded store); each kind of span then resolves the way the
    README's table says: roots linked, in-process children local-root, a short or sleeping span time-window/none."""
    bridge_app = create_app(Settings.for_tests(mode="standalone", data_dir=str(tmp_path / "data")))
    server = await aiohttp_server(bridge_app)
    bridge = str(server.make_url("")).rstrip("/")
    async with ClientSession(timeout=ClientTimeout(total=10, connect=2)) as client:

        async def both_services_pushed() -> bool:
            return await _ingested(client, bridge, "profiles") >= 2

        async with run_demo(["--to", bridge], demo_log) as (urls, proc):
            await _drive_rounds(client, urls)
        assert proc.returncode == 0  # stopped: the SDKs flushed their last spans and profile window
        await _eventually(both_services_pushed, "profiles of both services")

        await _assert_every_mode(client, bridge)


def test_count_primes_counts_primes() -> None:
    from bridge.demo.service import count_primes

    assert [count_primes(n) for n in (2, 3, 10, 100, 1000)] == [0, 1, 4, 25, 168]


async def test_frontend_answers_502_when_the_backend_is_down(aiohttp_client: Any) -> None:
    """In-process (no SDK configured: OpenTelemetry's default no-op tracer)."""
    from bridge.demo.service import FRONTEND, build_app

    client = await aiohttp_client(build_app(FRONTEND, f"http://127.0.0.1:{closed_port()}"))
    resp = await client.get("/checkout", params={"rounds": "1"})
    assert resp.status == 502
    assert "shop-backend did not answer" in await resp.text()
    assert (await client.get("/health")).status == 200


async def test_load_loop_drives_every_endpoint(aiohttp_server: Any) -> None:
    """The load loop in-process against both services (no SDK configured: OpenTelemetry's no-op tracer)."""
    from bridge.demo.load import ROUND, run_load
    from bridge.demo.service import BACKEND, FRONTEND, build_app

    backend = await aiohttp_server(build_app(BACKEND))
    backend_url = str(backend.make_url("")).rstrip("/")
    seen: list[str] = []

    frontend_app = build_app(FRONTEND, backend_url)
    frontend_app.on_response_prepare.append(lambda request, response: _record(seen, request.path))
    frontend = await aiohttp_server(frontend_app)
    stop = asyncio.Event()
    sent = await run_load(str(frontend.make_url("")).rstrip("/"), backend_url, 0.01, stop, rounds=2)
    assert sent == 2 * len(ROUND)
    assert seen.count("/checkout") == 4 and seen.count("/slow-io") == 2 and seen.count("/health") >= 3


async def _record(seen: list[str], path: str) -> None:
    seen.append(path)


# --------------------------------------------------------------------------------------------- serve --demo


class _Lines:
    """A subprocess's merged output, read as it comes (so its pipe never fills), kept for the failure report."""

    def __init__(self, stream: asyncio.StreamReader, log_path: Path) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._read(stream, log_path))

    async def _read(self, stream: asyncio.StreamReader, log_path: Path) -> None:
        with log_path.open("w") as log:
            async for raw in stream:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                log.write(line + "\n")
                log.flush()
                self._changed.set()

    async def wait_for(self, pattern: str, proc: asyncio.subprocess.Process) -> re.Match[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_SECONDS
        while True:
            for line in self.lines:
                if match := re.search(pattern, line):
                    return match
            assert proc.returncode is None, f"the bridge exited ({proc.returncode}) before logging {pattern!r}"
            assert loop.time() < deadline, f"no log line matching {pattern!r}"
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), 0.5)
            except TimeoutError:
                pass

    async def closed(self) -> None:
        await self._task


async def test_serve_demo_runs_the_shop_against_itself_and_stops_cleanly(
    aiohttp_server: Any, tmp_path: Path, demo_log: Path
) -> None:
    """`profile-bridge serve --demo` on a free loopback port: the bridge logs where the shop listens and where to look;
    the test drives fixed rounds through the shop's frontend, stops the bridge with SIGTERM (the shop flushes into the
    still-running bridge first, exit code 0), then reads the store back: every resolution mode is there, and the
    span page the bridge pointed to shows the profile."""
    port, data_dir = closed_port(), tmp_path / "data"
    env = _demo_env() | {"PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "serve",
        "--demo",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    output = _Lines(proc.stdout, demo_log)
    try:
        frontend = (await output.wait_for(r"shop-frontend (http://127\.0\.0\.1:\d+)", proc)).group(1)
        backend = (await output.wait_for(r"shop-backend (http://127\.0\.0\.1:\d+)", proc)).group(1)
        await output.wait_for(rf"sends traces to http://127\.0\.0\.1:{port}/v1/traces", proc)
        await output.wait_for(rf"look: http://localhost:{port}/ ", proc)
        span_page = (
            await output.wait_for(rf"look: http://localhost:{port}(/spans/[0-9a-f]{{32}}/[0-9a-f]{{16}})", proc)
        ).group(1)
        async with ClientSession(timeout=ClientTimeout(total=10, connect=2)) as session:
            await _drive_rounds(session, [frontend, backend])
    finally:
        await _stop(proc)
        await output.closed()
    assert proc.returncode == 0, "\n".join(output.lines[-20:])
    assert "Traceback" not in "\n".join(output.lines)

    # the store the bridge wrote, read by a bridge of our own on the same directory
    server = await aiohttp_server(create_app(Settings.for_tests(mode="standalone", data_dir=str(data_dir))))
    bridge = str(server.make_url("")).rstrip("/")
    async with ClientSession(timeout=ClientTimeout(total=10, connect=2)) as client:
        await _assert_every_mode(client, bridge)
        async with client.get(bridge + span_page) as resp:
            page = await resp.text()
            assert resp.status == 200, page
        assert "GET /checkout" in page and "shop-frontend" in page
        assert re.search(r'class="badge mode-(linked|time-window)"', page), page[:2000]
        async with client.get(bridge + "/") as resp:
            index = await resp.text()
        assert "shop-frontend" in index and "shop-backend" in index


def test_serve_demo_refuses_proxy_mode_in_one_line() -> None:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--demo", "--tempo-url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_demo_env(),
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--demo" in proc.stderr and "PROFILE_BRIDGE_TEMPO_URL set selects proxy mode" in proc.stderr


async def test_demo_without_a_bridge_says_to_start_one(tmp_path: Path) -> None:
    port = closed_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "demo",
        "--to",
        f"http://127.0.0.1:{port}",
        cwd=tmp_path,
        env=_demo_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), STARTUP_SECONDS)
    assert proc.returncode == 1
    text = err.decode()
    assert text.count("\n") == 1 and f"no bridge answers at http://127.0.0.1:{port}" in text
    assert "profile-bridge serve --demo" in text


def test_the_demo_reports_missing_sdks_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel installed without the demo extra: `serve --demo` says which extra to install."""
    from bridge.demo import shop

    monkeypatch.setattr(shop, "SDK_MODULES", ("pyroscope", "no_such_sdk_module.sub"))
    assert shop.missing_sdks() == ["no_such_sdk_module.sub"]
    with pytest.raises(shop.DemoUnavailable, match=r"pip install 'profile-bridge\[demo\]'"):
        shop.check_sdks()


def test_traceresponse_parses_only_w3c_values() -> None:
    from bridge.demo.load import parse_traceresponse

    value = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert parse_traceresponse(value) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert parse_traceresponse(value.upper()) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    for bad in (None, "", "00-xyz-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad-01"):
        assert parse_traceresponse(bad) is None
