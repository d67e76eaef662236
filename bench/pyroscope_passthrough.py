"""Pass-through overhead of the /pyroscope mount, against nginx doing the same job (issue 2 §9).

One run, interleaved: the same Connect calls go straight to a static upstream, through nginx (Debian's
``nginx-light``: keepalive upstream, ``proxy_buffering off`` — what a user would put there instead) and through the
bridge (``profile-bridge serve`` in proxy mode). Two calls: a ``SelectMergeStacktraces`` answered with ~1 MB and a
small ``ProfileTypes``. Prints each path's added median and p99 over direct, and the ratios against the targets:

- 1 MB: the bridge adds at most 1.5 × what nginx adds (median);
- small: the bridge adds at most 0.5 ms (median) and 2 ms (p99).

Everything runs on 127.0.0.1 as child processes of this script; loops are bounded. Absolute times on a shared
machine are noise: read the ratios. Run: ``.venv/bin/python bench/pyroscope_passthrough.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge import flamegraph  # noqa: E402
from bridge._proto import querier_pb2 as qpb  # noqa: E402

QUERIER = "/querier.v1.QuerierService/"
NGINX_CONF = """
worker_processes 1;
daemon off;
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {tmp}/access.log;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream pyroscope {{ server 127.0.0.1:{upstream}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    location /pyroscope/ {{
      proxy_pass http://pyroscope/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def big_answer(target: int = 1_000_000) -> bytes:
    """A real SelectMergeStacktracesResponse of about ``target`` bytes (a wide synthetic call tree)."""
    stacks = []
    i = 0
    while True:
        stacks.append(((f"main.handler_{i % 97}", f"pkg/service.(*Server).call_{i % 1013}", f"leaf_{i}"), 1 + i % 7))
        i += 1
        if i % 2000 == 0:
            fg = flamegraph.encode(flamegraph.build_tree(stacks))
            body = qpb.SelectMergeStacktracesResponse(flamegraph=fg).SerializeToString()
            if len(body) >= target:
                return body


def small_answer() -> bytes:
    return qpb.ProfileTypesResponse(profile_types=[
        {"ID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "name": "process_cpu", "sample_type": "cpu",
         "sample_unit": "nanoseconds", "period_type": "cpu", "period_unit": "nanoseconds"},
    ]).SerializeToString()


UPSTREAM_SCRIPT = """
import sys
from aiohttp import web
big = open(sys.argv[2], "rb").read()
small = open(sys.argv[3], "rb").read()
async def rpc(request):
    await request.read()
    body = big if request.match_info["m"] == "SelectMergeStacktraces" else small
    return web.Response(body=body, content_type="application/proto")
app = web.Application()
app.router.add_post("/querier.v1.QuerierService/{m}", rpc)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


async def wait_ready(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"child for {url} exited with {proc.returncode}")
        try:
            async with session.post(url, data=b"", headers={"Content-Type": "application/proto"}) as resp:
                await resp.read()
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def measure(rounds: int, tmp: Path) -> list[str]:
    up_port, nginx_port, bridge_port = free_port(), free_port(), free_port()
    (tmp / "big.bin").write_bytes(big_answer())
    (tmp / "small.bin").write_bytes(small_answer())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(up_port), str(tmp / "big.bin"),
                                       str(tmp / "small.bin")]))
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, upstream=up_port, port=nginx_port))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise SystemExit("nginx is not installed: apt-get install -y nginx-light")
        procs.append(subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
                                      stderr=subprocess.DEVNULL))
        env = {**os.environ, "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false", "PROFILE_BRIDGE_LOG_LEVEL": "info",
               "PROFILE_BRIDGE_DATA_DIR": str(tmp / "data")}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", "--proxy", "--listen", f"127.0.0.1:{bridge_port}",
             "--pyroscope-url", f"http://127.0.0.1:{up_port}", "--tempo-url", f"http://127.0.0.1:{up_port}"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        bases = {
            "direct": f"http://127.0.0.1:{up_port}",
            "nginx": f"http://127.0.0.1:{nginx_port}/pyroscope",
            "bridge": f"http://127.0.0.1:{bridge_port}/pyroscope",
        }
        lines: list[str] = []
        connector = aiohttp.TCPConnector(limit=8)
        timeout = aiohttp.ClientTimeout(total=30, connect=5)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
            for (proc, base) in zip(procs, bases.values(), strict=True):
                await wait_ready(session, base + QUERIER + "ProfileTypes", proc)
            for method, body, n in (
                ("SelectMergeStacktraces", qpb.SelectMergeStacktracesRequest(
                    profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds", label_selector="{}",
                    start=1, end=2).SerializeToString(), rounds),
                ("ProfileTypes", qpb.ProfileTypesRequest().SerializeToString(), rounds * 4),
            ):
                times: dict[str, list[float]] = {name: [] for name in bases}
                size = 0
                headers = {"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}
                order = list(bases)
                for i in range(n + 20):  # 20 warm-up rounds, discarded
                    order = order[1:] + order[:1]  # rotate: no path always goes first
                    for name in order:
                        started = time.perf_counter()
                        async with session.post(bases[name] + QUERIER + method, data=body, headers=headers) as resp:
                            data = await resp.read()
                        elapsed = time.perf_counter() - started
                        if resp.status != 200:
                            raise SystemExit(f"{name} {method}: HTTP {resp.status}")
                        size = len(data)
                        if i >= 20:
                            times[name].append(elapsed * 1000)
                lines.extend(report(method, size, times))
        return lines
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def report(method: str, size: int, times: dict[str, list[float]]) -> list[str]:
    med = {k: statistics.median(v) for k, v in times.items()}
    p99 = {k: pct(v, 0.99) for k, v in times.items()}
    added = {k: (med[k] - med["direct"], p99[k] - p99["direct"]) for k in ("nginx", "bridge")}
    lines = [
        f"{method} ({size / 1e6:.2f} MB answer, {len(times['direct'])} interleaved rounds): "
        f"direct median {med['direct']:.3f} ms p99 {p99['direct']:.3f} ms",
    ]
    for k in ("nginx", "bridge"):
        lines.append(f"  {k:6s} added: median {added[k][0]:+.3f} ms, p99 {added[k][1]:+.3f} ms")
    if size > 100_000:
        base = max(added["nginx"][0], 1e-3)
        ratio = added["bridge"][0] / base
        lines.append(f"  ratio bridge/nginx added median: {ratio:.2f} (target <= 1.5) "
                     f"{'OK' if ratio <= 1.5 else 'MISSED'}")
        base99 = max(added["nginx"][1], 1e-3)
        lines.append(f"  ratio bridge/nginx added p99: {added['bridge'][1] / base99:.2f} (informational)")
    else:
        m, p = added["bridge"]
        lines.append(f"  bridge added median {m:.3f} ms / 0.5 ms target = {m / 0.5:.2f} "
                     f"{'OK' if m <= 0.5 else 'MISSED'}; p99 {p:.3f} ms / 2 ms target = {p / 2:.2f} "
                     f"{'OK' if p <= 2 else 'MISSED'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="measured rounds for the 1 MB call (x4 for small)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-passthrough-") as tmp:
        for line in asyncio.run(measure(max(10, min(args.rounds, 5000)), Path(tmp))):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
