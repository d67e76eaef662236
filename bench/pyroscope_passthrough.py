"""Pass-through cost of the /pyroscope mount, against a tuned nginx doing the same job, in one interleaved run.

    .venv/bin/python bench/pyroscope_passthrough.py [--workers N] [--rounds 200] [--wrk-rounds 5] [--seconds 3]

Three paths to the same upstream: direct, through nginx (Debian's ``nginx-light``) and through the bridge
(``profile-bridge serve --proxy --workers N``). The upstream stands in for Pyroscope (a Go server): a second nginx
that answers every RPC from a file, so neither proxy is measured against a slow upstream. Two calls: a
``SelectMergeStacktraces`` answered with ~1 MB and a small ``ProfileTypes``.

"Tuned nginx" is what an operator would put in front of Pyroscope: as many worker processes as the bridge has,
keepalive connections to the upstream (``keepalive 64``, HTTP/1.1), ``proxy_buffering off`` and
``proxy_request_buffering off`` (answers and bodies stream, as the bridge's do), ``proxy_buffer_size 256k`` (with
buffering off this is the most nginx reads from the upstream at a time: a 1 MB answer goes through in four reads
instead of 256 of nginx's default 4 KiB page), and a buffered access log (``buffer=64k``).

A fourth path, "front", is ``deploy/nginx-front.conf`` with ``deploy/nginx-front.js`` as shipped (nginx in front of
the bridge: calls the bridge only relays go straight to the upstream — a ``SelectMergeStacktraces`` without a span
selector among them, told apart by the script from its body — span queries through the bridge), with the same number
of worker processes.

A fifth, "front-raw", is the same front with the auth cache keyed on the raw credential headers (the alternative
line the shipped file names in a comment) instead of their SHA-256 from the njs script: what that hash costs.

Tokens are on (``--no-tokens`` turns them off): the bridge requires one and every client sends it, so the bridge
checks it on each call and the front asks the bridge (``auth_request``, its answer kept 10 s per credential) before
it relays a call itself — the deployment docs/security.md describes.

Two measurements, each interleaved (rotating order, same run):

- **1 client** (an aiohttp client, one request at a time): each path's added latency over direct, median and p99.
  Target for 1 MB: the bridge and the front add ≤ 1.5 × what nginx adds (median).
- **32 clients** (``wrk -t2 -c32``, a Lua script for the POST body): requests per second and p50/p99 latency, in
  ``--wrk-rounds`` rounds of ``--seconds`` each per path. Targets (median over rounds of the per-round ratio): the
  bridge ≥ 0.5 × nginx's req/s for small calls, ≥ 0.75 × for 1 MB answers; the front ≥ 0.9 × for small calls, ≥ 0.75 ×
  for 1 MB answers.

Everything runs on 127.0.0.1 as child processes of this script; loops are bounded in count and time. Absolute
figures on a shared machine are noise: read the ratios, and the load average printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchkit import free_port, loadavg, pct, stop_children, wait_up  # noqa: E402

from bridge import flamegraph  # noqa: E402
from bridge._proto import querier_pb2 as qpb  # noqa: E402

QUERIER = "/querier.v1.QuerierService/"
BIG, SMALL = "SelectMergeStacktraces", "ProfileTypes"
TARGET_BIG_LATENCY = 1.5  # bridge added / nginx added, 1 MB, 1 client (at most)
TARGET_RPS = {  # req/s / nginx req/s, 32 clients (at least)
    "bridge": {SMALL: 0.5, BIG: 0.75},
    "front": {SMALL: 0.9, BIG: 0.75},
    "front-raw": {SMALL: 0.9, BIG: 0.75},
}
COMPARED: Final = ("bridge", "front", "front-raw")  # each against nginx
SHIPPED_KEY = 'proxy_cache_key "$profile_bridge_asked $profile_bridge_credential";'
# the alternative the shipped file names in a comment: the auth cache keyed on the raw credential headers
RAW_KEY = re.compile(r'#\s+(proxy_cache_key "\$profile_bridge_asked \$http_x_profile_bridge_token [^;]*;)')
TOKEN = "bench-read-token-0123456789"  # the one token the bridge accepts (read, any tenant)
COMMON_NGINX = """
daemon off;
master_process {master};
pid {tmp}/{name}.pid;
error_log {tmp}/{name}-error.log warn;
events {{ worker_connections 1024; }}
"""
TEMP_PATHS = """
  client_body_temp_path {tmp}/{name}-body;
  proxy_temp_path {tmp}/{name}-proxy;
  fastcgi_temp_path {tmp}/{name}-fastcgi;
  uwsgi_temp_path {tmp}/{name}-uwsgi;
  scgi_temp_path {tmp}/{name}-scgi;
"""
UPSTREAM_CONF = (
    COMMON_NGINX
    + """
worker_processes 1;
http {{
"""
    + TEMP_PATHS
    + """
  access_log off;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    root {tmp}/static;
    default_type application/proto;
    # every RPC is answered from its file (POST to a static file is 405 until error_page makes it 200)
    location /querier.v1.QuerierService/ {{ error_page 405 =200 $uri; }}
  }}
}}
"""
)
PROXY_CONF = (
    COMMON_NGINX
    + """
worker_processes {workers};
http {{
"""
    + TEMP_PATHS
    + """
  access_log {tmp}/access.log combined buffer=64k;
  keepalive_requests 1000000;
  upstream pyroscope {{ server 127.0.0.1:{upstream}; keepalive 64; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    location /pyroscope/ {{
      proxy_pass http://pyroscope/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_buffer_size 256k;
      proxy_buffers 8 256k;
      proxy_busy_buffers_size 256k;
    }}
  }}
}}
"""
)
NJS_MODULE = Path("/usr/lib/nginx/modules/ngx_http_js_module.so")  # Debian's libnginx-mod-http-js
FRONT_CONF = (
    f"load_module {NJS_MODULE};"
    + COMMON_NGINX
    + """
worker_processes {workers};
http {{
"""
    + TEMP_PATHS
    + """
  access_log {tmp}/{name}-access.log combined buffer=64k;
  keepalive_requests 1000000;
  include {tmp}/{name}-site.conf;
}}
"""
)
WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/proto"
{token_header}
wrk.headers["Connect-Protocol-Version"] = "1"
local f = io.open("{body}", "rb")
wrk.body = f:read("*a")
f:close()
"""


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
    return qpb.ProfileTypesResponse(
        profile_types=[
            {
                "ID": "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
                "name": "process_cpu",
                "sample_type": "cpu",
                "sample_unit": "nanoseconds",
                "period_type": "cpu",
                "period_unit": "nanoseconds",
            },
        ]
    ).SerializeToString()


REQUESTS = {
    BIG: qpb.SelectMergeStacktracesRequest(
        profile_typeID="process_cpu:cpu:nanoseconds:cpu:nanoseconds", label_selector="{}", start=1, end=2
    ).SerializeToString(),
    SMALL: qpb.ProfileTypesRequest().SerializeToString(),
}


class Stack:
    """The three paths as child processes: upstream nginx, proxy nginx, bridge."""

    def __init__(self, tmp: Path, workers: int, tokens: bool = True) -> None:
        self.tmp = tmp
        self.workers = workers
        self.tokens = tokens
        self.headers = {"X-Profile-Bridge-Token": TOKEN} if tokens else {}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.up, self.nginx_port, self.bridge_port = free_port(), free_port(), free_port()
        self.front_port, self.front_raw_port = free_port(), free_port()
        self.bases = {
            "direct": f"http://127.0.0.1:{self.up}",
            "nginx": f"http://127.0.0.1:{self.nginx_port}/pyroscope",
            "bridge": f"http://127.0.0.1:{self.bridge_port}/pyroscope",
            "front": f"http://127.0.0.1:{self.front_port}/pyroscope",
            "front-raw": f"http://127.0.0.1:{self.front_raw_port}/pyroscope",
        }

    def start(self) -> None:
        tmp = self.tmp
        static = tmp / "static" / QUERIER.strip("/")
        static.mkdir(parents=True)
        tmp.chmod(0o755)  # nginx's workers (user nobody) keep the front's auth cache under it
        (static / BIG).write_bytes(big_answer())
        (static / SMALL).write_bytes(small_answer())
        for name, body in REQUESTS.items():
            (tmp / f"{name}.req").write_bytes(body)
            token = f'wrk.headers["X-Profile-Bridge-Token"] = "{TOKEN}"' if self.tokens else ""
            (tmp / f"{name}.lua").write_text(WRK_LUA.format(body=tmp / f"{name}.req", token_header=token))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise SystemExit("nginx is not installed: apt-get install -y nginx-light")
        if not NJS_MODULE.exists():
            raise SystemExit("nginx's njs module is not installed: apt-get install -y libnginx-mod-http-js")
        if shutil.which("wrk") is None:
            raise SystemExit("wrk is not installed: apt-get install -y wrk")
        (tmp / "upstream.conf").write_text(UPSTREAM_CONF.format(tmp=tmp, name="upstream", port=self.up, master="off"))
        (tmp / "proxy.conf").write_text(
            PROXY_CONF.format(
                tmp=tmp, name="proxy", port=self.nginx_port, upstream=self.up, workers=self.workers, master="on"
            )
        )
        self.procs.append(
            subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "upstream.conf")], stderr=subprocess.DEVNULL)
        )
        self.procs.append(
            subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "proxy.conf")], stderr=subprocess.DEVNULL)
        )
        for name, port in (("front", self.front_port), ("front-raw", self.front_raw_port)):
            self.write_front(name, port)
        env = {
            **os.environ,
            "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false",
            "PROFILE_BRIDGE_LOG_LEVEL": "info",
            "PROFILE_BRIDGE_DATA_DIR": str(tmp / "data"),
        }
        if self.tokens:
            env["PROFILE_BRIDGE_AUTH_TOKENS"] = f"{TOKEN} * read"
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bridge",
                    "serve",
                    "--proxy",
                    "--workers",
                    str(self.workers),
                    "--listen",
                    f"127.0.0.1:{self.bridge_port}",
                    "--pyroscope-url",
                    f"http://127.0.0.1:{self.up}",
                    "--tempo-url",
                    f"http://127.0.0.1:{self.up}",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp / "bridge.log", "wb"),  # noqa: SIM115
            )
        )
        for name in ("front", "front-raw"):
            self.procs.append(
                subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / f"{name}.conf")], stderr=subprocess.DEVNULL)
            )

    def write_front(self, name: str, port: int) -> None:
        """The shipped front as ``name`` on ``port``; "front-raw" with the raw-header cache key its comment offers."""
        tmp = self.tmp
        front = (ROOT / "deploy" / "nginx-front.conf").read_text()
        raw = RAW_KEY.search(front)
        if raw is None:
            raise SystemExit("deploy/nginx-front.conf no longer names the raw-header cache key: update this bench")
        for old, new in (
            ("server bridge:4041;", f"server 127.0.0.1:{self.bridge_port};"),
            ("server pyroscope:4040;", f"server 127.0.0.1:{self.up};"),
            ("server tempo:3200;", f"server 127.0.0.1:{self.up};"),
            ("listen 4041;", f"listen 127.0.0.1:{port} backlog=1024;"),
            ("/etc/nginx/njs/nginx-front.js", str(ROOT / "deploy" / "nginx-front.js")),
            ("/var/cache/nginx/profile-bridge-auth", str(tmp / f"{name}-auth-cache")),
            *([(SHIPPED_KEY, raw.group(1))] if name == "front-raw" else []),
        ):
            if old not in front:
                raise SystemExit(f"deploy/nginx-front.conf has no {old!r} any more: update this bench")
            front = front.replace(old, new)
        (tmp / f"{name}-site.conf").write_text(front)
        (tmp / f"{name}.conf").write_text(FRONT_CONF.format(tmp=tmp, name=name, workers=self.workers, master="on"))

    def stop(self) -> None:
        stop_children(self.procs)


async def latency_rounds(stack: Stack, rounds: int) -> list[str]:
    lines: list[str] = []
    connector = aiohttp.TCPConnector(limit=8)
    timeout = aiohttp.ClientTimeout(total=30, connect=5)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        for proc, base in zip(stack.procs, stack.bases.values(), strict=True):
            await wait_up(session, base + QUERIER + SMALL, proc, post=b"", tries=1200, headers=stack.headers)
        for method, n in ((BIG, rounds), (SMALL, rounds * 4)):
            times: dict[str, list[float]] = {name: [] for name in stack.bases}
            size = 0
            headers = {"Content-Type": "application/proto", "Connect-Protocol-Version": "1", **stack.headers}
            order = list(stack.bases)
            for i in range(n + 20):  # 20 warm-up rounds, discarded
                order = order[1:] + order[:1]  # rotate: no path always goes first
                for name in order:
                    started = time.perf_counter()
                    async with session.post(
                        stack.bases[name] + QUERIER + method, data=REQUESTS[method], headers=headers
                    ) as resp:
                        data = await resp.read()
                    elapsed = time.perf_counter() - started
                    if resp.status != 200:
                        raise SystemExit(f"{name} {method}: HTTP {resp.status}")
                    size = len(data)
                    if i >= 20:
                        times[name].append(elapsed * 1000)
            if n:  # rounds=0: only the warm-up, to wait for every path (--skip-latency)
                lines.extend(latency_report(method, size, times))
    return lines


def latency_report(method: str, size: int, times: dict[str, list[float]]) -> list[str]:
    med = {k: statistics.median(v) for k, v in times.items()}
    p99 = {k: pct(v, 0.99) for k, v in times.items()}
    added = {k: (med[k] - med["direct"], p99[k] - p99["direct"]) for k in ("nginx", *COMPARED)}
    lines = [
        f"{method} ({size / 1e6:.2f} MB answer, 1 client, {len(times['direct'])} interleaved rounds): "
        f"direct median {med['direct']:.3f} ms p99 {p99['direct']:.3f} ms",
    ]
    for k in ("nginx", *COMPARED):
        lines.append(f"  {k:9s} added: median {added[k][0]:+.3f} ms, p99 {added[k][1]:+.3f} ms")
    for k in COMPARED:
        ratio = added[k][0] / max(added["nginx"][0], 1e-3)
        if method == BIG:
            lines.append(
                f"RATIO 1 MB, 1 client, {k}/nginx added latency (median): {ratio:.2f} "
                f"(target <= {TARGET_BIG_LATENCY}) {'OK' if ratio <= TARGET_BIG_LATENCY else 'MISSED'}"
            )
        else:
            lines.append(f"ratio small call, 1 client, {k}/nginx added latency (median): {ratio:.2f} (informational)")
    return lines


WRK_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
WRK_PCT = re.compile(r"^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)
WRK_ERRORS = re.compile(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)")


def run_wrk(url: str, lua: Path, seconds: int, clients: int) -> tuple[float, float, float]:
    """(req/s, p50 ms, p99 ms) of one wrk run; a run with errors stops the bench."""
    out = subprocess.run(
        ["wrk", "-t2", f"-c{clients}", f"-d{seconds}s", "--latency", "-s", str(lua), url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    ).stdout
    if (bad := WRK_ERRORS.search(out)) is not None:
        raise SystemExit(f"wrk against {url}: {bad.group(0)}\n{out}")
    rps = float(WRK_RPS.search(out).group(1))  # type: ignore[union-attr]
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    lat = {q: float(v) * unit[u] for q, v, u in WRK_PCT.findall(out)}
    return rps, lat["50"], lat["99"]


def throughput_rounds(stack: Stack, rounds: int, seconds: int, clients: int) -> list[str]:
    lines: list[str] = []
    names = ("nginx", *COMPARED)
    for method in (SMALL, BIG):
        lua = stack.tmp / f"{method}.lua"
        for name in names:  # warm-up: the bridge's workers and nginx's upstream connections
            run_wrk(stack.bases[name] + QUERIER + method, lua, 1, clients)
        got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
        ratios: dict[str, list[float]] = {k: [] for k in COMPARED}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                got[name].append(run_wrk(stack.bases[name] + QUERIER + method, lua, seconds, clients))
            for k in ratios:
                ratios[k].append(got[k][-1][0] / got["nginx"][-1][0])
        lines.append(f"{method} ({clients} clients, wrk -t2, {rounds} interleaved rounds of {seconds} s):")
        for name in names:
            rps = statistics.median(x[0] for x in got[name])
            p50 = statistics.median(x[1] for x in got[name])
            p99 = statistics.median(x[2] for x in got[name])
            lines.append(f"  {name:9s} {rps:9.0f} req/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms (medians over rounds)")
        what = "1 MB answers" if method == BIG else "small calls"
        for k, values in ratios.items():
            target = TARGET_RPS[k][method]
            ratio = statistics.median(values)
            lines.append(
                f"RATIO {what}, {clients} clients, {k}/nginx req/s: median {ratio:.2f} "
                f"(rounds {min(values):.2f}-{max(values):.2f}; target >= {target}) "
                f"{'OK' if ratio >= target else 'MISSED'}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="bridge workers and nginx worker processes (default: this machine's processors)",
    )
    parser.add_argument("--rounds", type=int, default=200, help="1-client rounds for the 1 MB call (x4 for small)")
    parser.add_argument("--wrk-rounds", type=int, default=5, help="32-client rounds per path and call")
    parser.add_argument("--seconds", type=int, default=3, help="length of one 32-client round")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--no-tokens", action="store_true", help="run the bridge (and so the front) without tokens")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    print(f"load average before: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-passthrough-") as tmp:
        stack = Stack(Path(tmp), max(1, min(args.workers, 64)), tokens=not args.no_tokens)
        tokens = "off" if args.no_tokens else "on (every client sends one; the bridge and the front check it)"
        print(f"tokens: {tokens}", flush=True)
        try:
            stack.start()
            lines: list[str] = []
            if not args.skip_latency:
                lines += asyncio.run(latency_rounds(stack, max(10, min(args.rounds, 5000))))
            else:
                asyncio.run(latency_rounds(stack, 0))  # waits for every path to answer
            for line in lines:
                print(line, flush=True)
            if not args.skip_throughput:
                for line in throughput_rounds(
                    stack,
                    max(1, min(args.wrk_rounds, 50)),
                    max(1, min(args.seconds, 60)),
                    max(1, min(args.clients, 512)),
                ):
                    print(line, flush=True)
        finally:
            stack.stop()
    print(f"load average after: {loadavg()}  (bridge and nginx: {args.workers} worker processes each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
