"""N bridge processes behind a round-robin front, Tempo's search lagging: does every span click get the right answer?

    .venv/bin/python bench/replicas.py [--replicas 3] [--traces 60]

What Grafana does, through a front that sends each request to the next bridge in turn (nginx ``upstream``
round-robin, no stickiness): open a trace (``GET /tempo/api/v2/traces/{id}``, protobuf), then click "Profiles for
this span" on each of its spans (``SelectMergeSpanProfile`` with the span's ``pyroscope.profile.id`` verbatim as
the span selector) — so most clicks land on a process that did not serve the trace view. Tempo's search finds
nothing the whole time (the double's ``search_lag``: a fresh trace).

The anchor, in the same run and interleaved trace by trace: one more bridge, not behind the front, that opens each
trace itself and answers the same clicks (one replica: the span cache always has the trace). A click answered
differently from the anchor (mode or reason) is wrong.

Targets: 0 wrong answers; no Tempo search; at most one trace-by-ID call per trace per bridge, however many workers it
has (``--workers``: its workers send what a trace's owner keeps to the owner, ``bridge.upstream.peers``). Each bridge
has its own Tempo double (sharing the same traces) so Tempo's calls are counted per bridge. Everything runs on
127.0.0.1; loops are bounded by the number of traces.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchkit import free_port, loadavg, stop_children, wait_up  # noqa: E402
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace  # noqa: E402

from bridge._proto import querier_pb2 as qpb  # noqa: E402
from bridge._proto import tempo_pb2  # noqa: E402
from bridge.config import DEFAULT_PROFILE_TYPE  # noqa: E402
from bridge.spans import PROFILE_ID_ATTR  # noqa: E402
from tests.doubles.pyroscope import PyroscopeDouble  # noqa: E402
from tests.doubles.shop import load_shop  # noqa: E402
from tests.doubles.tempo import TempoDouble  # noqa: E402

SPAN_PROFILE = "/pyroscope/querier.v1.QuerierService/SelectMergeSpanProfile"
FRONT_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/front.pid;
error_log {tmp}/front-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream bridges {{ {servers} keepalive 16; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://bridges;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def open_trace(session: aiohttp.ClientSession, base: str, trace_id: str) -> list[tuple[otlp_trace.Span, str]]:
    async with session.get(f"{base}/tempo/api/v2/traces/{trace_id}", headers={"Accept": "application/protobuf"}) as r:
        if r.status != 200:
            raise SystemExit(f"trace {trace_id} through {base}: HTTP {r.status}")
        body = await r.read()
    out = []
    for raw in tempo_pb2.TraceByIDResponse.FromString(body).trace.resource_spans:
        rs = otlp_trace.ResourceSpans.FromString(raw)
        service = next((kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"), "")
        out.extend((span, service) for ss in rs.scope_spans for span in ss.spans)
    return out


async def click(session: aiohttp.ClientSession, base: str, span: otlp_trace.Span, service: str) -> tuple[str, str]:
    values = [kv.value.string_value for kv in span.attributes if kv.key == PROFILE_ID_ATTR]
    req = qpb.SelectMergeSpanProfileRequest(
        profile_typeID=DEFAULT_PROFILE_TYPE,
        label_selector=f'{{service_name="{service}"}}',
        span_selector=values[:1],
        start=span.start_time_unix_nano // 1_000_000 - 60_000,
        end=span.end_time_unix_nano // 1_000_000 + 60_000,
    )
    async with session.post(
        base + SPAN_PROFILE,
        data=req.SerializeToString(),
        headers={"Content-Type": "application/proto", "Accept-Encoding": "gzip"},
        auto_decompress=False,
    ) as resp:
        raw = await resp.read()
        if resp.status != 200:
            return f"HTTP {resp.status}", raw[:200].decode(errors="replace")
        if resp.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        qpb.SelectMergeSpanProfileResponse.FromString(raw)
        return resp.headers["X-Profile-Bridge-Resolution"], resp.headers["X-Profile-Bridge-Reason"]


async def run(replicas: int, n_traces: int, workers: int, tmp: Path) -> list[str]:
    shop = load_shop()
    trace_ids = shop.trace_ids()[:n_traces]
    shared = TempoDouble()
    shared.add_shop(trace_ids)
    tempos = []
    runners = []
    for _ in range(replicas + 1):  # one per bridge process; the last is the anchor's
        double = TempoDouble()
        double.traces = shared.traces
        double.faults.search_lag = 10**9  # every search finds nothing
        runner, double.url = await serve(double.app)
        tempos.append(double)
        runners.append(runner)
    pyro = PyroscopeDouble()
    runner, pyro.url = await serve(pyro.app)
    runners.append(runner)

    procs: list[subprocess.Popen[bytes]] = []
    ports = [free_port() for _ in range(replicas + 1)]
    env = {**os.environ, "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false", "PROFILE_BRIDGE_LOG_LEVEL": "warning"}
    try:
        for port, double in zip(ports, tempos, strict=True):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bridge",
                        "serve",
                        "--proxy",
                        "--workers",
                        str(workers),
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--tempo-url",
                        double.url,
                        "--pyroscope-url",
                        pyro.url,
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        front_port = free_port()
        servers = " ".join(f"server 127.0.0.1:{p};" for p in ports[:replicas])
        (tmp / "front.conf").write_text(FRONT_CONF.format(tmp=tmp, servers=servers, port=front_port))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise SystemExit("nginx is not installed: apt-get install -y nginx-light")
        procs.append(
            subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "front.conf")], stderr=subprocess.DEVNULL)
        )
        front = f"http://127.0.0.1:{front_port}"
        anchor = f"http://127.0.0.1:{ports[-1]}"
        timeout = aiohttp.ClientTimeout(total=60, connect=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for port, proc in zip(ports, procs, strict=False):
                await wait_up(session, f"http://127.0.0.1:{port}/healthz", proc)
            await wait_up(session, front + "/healthz", procs[-1])
            clicks = wrong = 0
            modes: Counter[str] = Counter()
            examples: list[str] = []
            for trace_id in trace_ids:
                spans = await open_trace(session, front, trace_id)
                mine = [await click(session, front, span, service) for span, service in spans]
                reference_spans = await open_trace(session, anchor, trace_id)
                assert len(reference_spans) == len(spans)
                theirs = [await click(session, anchor, span, service) for span, service in reference_spans]
                for got, want in zip(mine, theirs, strict=True):
                    clicks += 1
                    modes[got[0]] += 1
                    if got != want:
                        wrong += 1
                        if len(examples) < 3:
                            examples.append(f"    got {got[0]} ({got[1][:90]}), anchor {want[0]} ({want[1][:90]})")
    finally:
        stop_children(procs)
        for runner in runners:
            await runner.cleanup()

    behind = tempos[:replicas]
    searches = sum(len(d.search_calls) for d in behind)
    per_trace = [
        len(d.calls(f"/api/v2/traces/{t}")) + len(d.calls(f"/api/traces/{t}")) for d in behind for t in trace_ids
    ]
    tempo_calls = sum(len(d.calls("/api/")) for d in behind)
    views = len(trace_ids)
    extra = (tempo_calls - views) / max(1, clicks)
    anchor_extra = (len(tempos[-1].calls("/api/")) - views) / max(1, clicks)
    spread = ", ".join(f"{m} {n}" for m, n in sorted(modes.items()))
    lines = [
        f"{replicas} bridge processes ({workers} worker{'s' if workers > 1 else ''} each) behind nginx round-robin, "
        f"Tempo search lagging: {views} traces opened, {clicks} span clicks ({spread})",
        f"  Tempo calls behind the front: {tempo_calls} ({views} trace views + {tempo_calls - views} for clicks: "
        f"{extra:.2f} extra per click); the one-replica anchor: {anchor_extra:.2f} extra per click",
        *examples,
        f"RATIO wrong answers: {wrong}/{clicks} = {wrong / max(1, clicks):.1%} (target 0) "
        f"{'OK' if wrong == 0 else 'MISSED'}",
        f"RATIO Tempo searches: {searches} (target 0) {'OK' if searches == 0 else 'MISSED'}",
        f"RATIO trace-by-ID calls per trace per bridge: max {max(per_trace, default=0)} (target <= 1 with "
        f"{workers} worker{'s' if workers > 1 else ''} each) {'OK' if max(per_trace, default=0) <= 1 else 'MISSED'}",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3, help="bridge processes behind the front")
    parser.add_argument("--traces", type=int, default=60, help="shop traces opened (each then clicked span by span)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per bridge (serve --workers)")
    args = parser.parse_args()
    print(f"load average before: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        lines = asyncio.run(
            run(max(2, min(args.replicas, 16)), max(1, min(args.traces, 186)), max(1, min(args.workers, 8)), Path(tmp))
        )
    for line in lines:
        print(line)
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
