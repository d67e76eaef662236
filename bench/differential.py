"""Differential check: the same data into a real Tempo + Pyroscope and into a standalone bridge, the same questions to
both, and every difference reported (issue 23 §3). With ``--proxy`` a second bridge runs in proxy mode in front of the
real peers, and what Grafana would get through it is checked against what it gets from the peers directly (§4).

Point it at peers you run yourself (docs/development.md says how; it never builds or starts them):

    .venv/bin/python bench/differential.py --tempo http://127.0.0.1:3200 --tempo-otlp http://127.0.0.1:4318 \\
        --pyroscope http://127.0.0.1:4040 [--corpus tests/fixtures/tempo/traceql/test_examples.yaml] [--proxy] \\
        [--jfr recording.jfr] [--only tempo|pyroscope] [--show 20] [--json report.json]

It starts its own bridges (``python -m bridge serve`` on free loopback ports, data in a temporary directory), sends a
fresh data set (``bench/peerdata.py``: traces over OTLP/HTTP protobuf, Go-SDK-shaped pprof through ``/ingest``, and
each ``--jfr`` file through ``/ingest?format=jfr``), waits until the peers answer for it, then asks the questions of
``bench/peerchecks.py``. Each difference is printed with the request and both answers (shortened), unless
``bench/peerknown.py`` knows it (a deliberate difference, with its reason); the last lines count per group what is
the same, what differs for a known reason, and what differs. Exit 0 when nothing else differs, 1 otherwise, 2 on bad
arguments or unreachable peers.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import peerchecks  # noqa: E402
import peerdata  # noqa: E402
import peerknown  # noqa: E402
import peerproxy  # noqa: E402
from benchkit import free_port, stop_children, wait_up  # noqa: E402


@dataclass(slots=True)
class Report:
    show: int
    lines: list[dict[str, Any]] = field(default_factory=list)

    def add(self, group: str, name: str, same: bool, request: str, real: Any, ours: Any) -> None:
        why = None if same else peerknown.known(group, name)
        line = {"group": group, "name": name, "same": same, "request": request, "real": real, "ours": ours}
        self.lines.append(line | {"known": f"{why.kind}: {why.why}" if why else None})
        if not same and why is None and sum(1 for x in self.lines if self.differs(x, group)) <= self.show:
            print(f"DIFF {group} {name}\n  request: {request}\n  real: {_short(real)}\n  ours: {_short(ours)}")

    @staticmethod
    def differs(line: dict[str, Any], group: str) -> bool:
        return line["group"] == group and not line["same"] and not line["known"]

    def counts(self) -> dict[str, tuple[int, int, int]]:
        """Per group: (same, known — bench/peerknown.py, total)."""
        out: dict[str, tuple[int, int, int]] = {}
        for line in self.lines:
            same, known, total = out.get(line["group"], (0, 0, 0))
            out[line["group"]] = (same + line["same"], known + bool(line["known"]), total + 1)
        return out


async def run_all(
    session: aiohttp.ClientSession,
    sides: peerchecks.Sides,
    data: peerdata.DataSet,
    args: argparse.Namespace,
    report: peerchecks.Sink,
) -> list[dict[str, Any]]:
    """Every question (the peers' own, then, with a proxy, the proxy's); returns the peers' recorded answers."""
    ask = peerchecks.Asker(session, sides, report)
    if args.only != "pyroscope":
        await peerchecks.tempo_checks(ask, data, args)
    if args.only != "tempo":
        await peerchecks.pyroscope_checks(ask, data)
    if sides.proxy:
        await peerproxy.proxy_checks(ask, data, args)
    return ask.recorded


def _short(value: Any, limit: int = 600) -> str:
    text = json.dumps(value, default=str, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def bridge_process(
    mode: str, data_dir: str, port: int, grpc_port: int, env_extra: dict[str, str]
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROFILE_BRIDGE_")}
    env.update(
        PROFILE_BRIDGE_LISTEN=f"127.0.0.1:{port}",
        PROFILE_BRIDGE_OTLP_GRPC_LISTEN=f"127.0.0.1:{grpc_port}",
        PROFILE_BRIDGE_DATA_DIR=data_dir,
        PROFILE_BRIDGE_LOG_LEVEL="warning",
        **env_extra,
    )
    log = open(Path(data_dir).parent / f"bridge-{mode}.log", "wb")  # noqa: SIM115 (kept for the process's life)
    return subprocess.Popen([sys.executable, "-m", "bridge", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log)


async def ingest(session: aiohttp.ClientSession, data: peerdata.DataSet, args: argparse.Namespace, bridge: str) -> None:
    """The same uploads to the peers and to the standalone bridge; any refusal stops the run (exit 2)."""
    sends: list[tuple[str, bytes, dict[str, str]]] = []
    for export in peerdata.chunks(data, 10):
        body = export.SerializeToString()
        headers = {"Content-Type": "application/x-protobuf"}
        if args.only != "pyroscope":
            sends += [(f"{args.tempo_otlp}/v1/traces", body, headers), (f"{bridge}/v1/traces", body, headers)]
    for query, pprof in data.profiles if args.only != "tempo" else []:
        body, ctype = peerdata.multipart(pprof)
        qs = "&".join(f"{k}={aiohttp.helpers.quote(v, safe='')}" for k, v in query.items())
        for base in (args.pyroscope_ingest, bridge):
            sends.append((f"{base}/ingest?{qs}", body, {"Content-Type": ctype}))
    for jfr in args.jfr if args.only != "tempo" else []:
        raw = Path(jfr).read_bytes()
        raw = gzip.decompress(raw) if jfr.endswith(".gz") else raw  # e.g. tests/fixtures/jfr/*.jfr.gz
        qs = f"name=shop-java{{env=prod}}&from={data.start_ns // 10**9}&until={data.end_ns // 10**9}"
        qs += "&format=jfr&spyName=javaspy&sampleRate=100"
        for base in (args.pyroscope_ingest, bridge):
            sends.append((f"{base}/ingest?{qs}", raw, {"Content-Type": "application/octet-stream"}))
    for url, body, headers in sends:
        async with session.post(url, data=body, headers=headers) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise SystemExit(f"{url.split('?')[0]} refused an upload: {resp.status} {text[:300]}")


async def settle(session: aiohttp.ClientSession, data: peerdata.DataSet, args: argparse.Namespace) -> None:
    """Until the peers answer for the data: Tempo finds every trace by ID and by search, Pyroscope has the samples."""
    deadline = time.monotonic() + args.settle
    last = data.requests[-1]
    while time.monotonic() < deadline:
        ok = True
        if args.only != "pyroscope":
            async with session.get(f"{args.tempo}/api/traces/{last.trace_id}") as resp:
                ok &= resp.status == 200
            params = {"q": "{}", "start": str(data.start_ns // 10**9), "end": str(data.end_ns // 10**9 + 60)}
            params["limit"] = "1000"
            async with session.get(f"{args.tempo}/api/search", params=params) as resp:
                ok &= resp.status == 200 and len((await resp.json()).get("traces", [])) >= len(data.requests)
        if args.only != "tempo":
            body = {"profileTypeID": peerchecks.CPU, "labelSelector": "{}", "start": data.start_ns // 10**6}
            body["end"] = data.end_ns // 10**6 + 60_000
            url = f"{args.pyroscope}/querier.v1.QuerierService/SelectMergeStacktraces"
            async with session.post(url, json=body) as resp:
                doc = await resp.json(content_type=None)
                want = sum(int(v) for _, raw in data.profiles for v in _cpu_values(raw))
                ok &= resp.status == 200 and int(doc.get("flamegraph", {}).get("total", 0)) >= want
        if ok:
            return
        await asyncio.sleep(2)
    raise SystemExit(f"the peers did not answer for the data within {args.settle:g} s")


async def quiet(session: aiohttp.ClientSession, args: argparse.Namespace) -> None:
    """Until the peers hold nothing in the window the new data set will span (its ``SPAN_S`` before now and the
    two minutes before that, the minute after): a peer is shared across runs, and an earlier run's traces or profiles in
    the window would differ from the fresh bridge's answers without either being wrong."""
    deadline = time.monotonic() + args.settle
    while True:
        now = time.time()
        # a metrics query's start is aligned down to its step (60 s here) and its first point counts the step before
        # that: two minutes more
        start, end = int(now) - peerdata.SPAN_S - 2 * peerdata.WINDOW_S - 120, int(now) + 60
        found = 0
        if args.only != "pyroscope":
            params = {"q": "{}", "start": str(start), "end": str(end), "limit": "1"}
            async with session.get(f"{args.tempo}/api/search", params=params) as resp:
                found += len((await resp.json(content_type=None)).get("traces", []))
        if args.only != "tempo":
            body = {"profileTypeID": peerchecks.CPU, "labelSelector": "{}", "start": start * 1000, "end": end * 1000}
            url = f"{args.pyroscope}/querier.v1.QuerierService/SelectMergeStacktraces"
            async with session.post(url, json=body) as resp:
                found += int((await resp.json(content_type=None)).get("flamegraph", {}).get("total", 0))
        if not found:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the peers hold data of an earlier run in this run's window: try again in two minutes")
        await asyncio.sleep(5)


def _cpu_values(raw: bytes) -> list[int]:
    from bridge._proto import profile_pb2

    return [s.value[1] for s in profile_pb2.Profile.FromString(raw).sample]


async def run(args: argparse.Namespace) -> int:
    report = Report(args.show)
    procs: list[subprocess.Popen[bytes] | None] = []
    with tempfile.TemporaryDirectory(prefix="differential-") as tmp:
        port = free_port()
        procs.append(bridge_process("standalone", f"{tmp}/data", port, free_port(), {}))
        bridge = f"http://127.0.0.1:{port}"
        proxy = ""
        if args.proxy:
            pport = free_port()
            env = {"PROFILE_BRIDGE_TEMPO_URL": args.tempo, "PROFILE_BRIDGE_PYROSCOPE_URL": args.pyroscope}
            procs.append(bridge_process("proxy", f"{tmp}/proxy", pport, free_port(), env))
            proxy = f"http://127.0.0.1:{pport}"
        try:
            async with aiohttp.ClientSession(timeout=peerdata.TIMEOUT) as session:
                await wait_up(session, f"{bridge}/healthz", procs[0])  # type: ignore[arg-type]
                if proxy:
                    await wait_up(session, f"{proxy}/healthz", procs[1])  # type: ignore[arg-type]
                await quiet(session, args)
                now_ns = time.time_ns()
                data = peerdata.build(now_ns, requests=args.requests, seed=args.seed)
                await ingest(session, data, args, bridge)
                await settle(session, data, args)
                sides = peerchecks.Sides(args.tempo, args.pyroscope, bridge, proxy)
                recorded = await run_all(session, sides, data, args, report)
                if args.record:
                    meta = {"now_ns": now_ns, "seed": args.seed, "requests": args.requests, "peers": args.revisions}
                    doc = json.dumps({**meta, "answers": recorded}, sort_keys=True, separators=(",", ":"))
                    Path(args.record).write_bytes(gzip.compress(doc.encode(), mtime=0))
        finally:
            stop_children(procs)
            if args.keep_logs:
                for name in ("bridge-standalone.log", "bridge-proxy.log"):
                    if (Path(tmp) / name).exists():
                        print(f"--- {name}\n" + (Path(tmp) / name).read_text()[-4000:])
    total_diff = 0
    for group, (same, known, total) in sorted(report.counts().items()):
        print(f"{group}: {same}/{total} same, {known} known, {total - same - known} differ")
        total_diff += total - same - known
    if args.json:
        Path(args.json).write_text(json.dumps(report.lines, default=str, indent=1))
    return 1 if total_diff else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tempo", default="http://127.0.0.1:3200", help="Tempo's HTTP API")
    parser.add_argument("--tempo-otlp", default="http://127.0.0.1:4318", help="Tempo's OTLP/HTTP receiver")
    parser.add_argument("--pyroscope", default="http://127.0.0.1:4040", help="Pyroscope's HTTP API")
    parser.add_argument("--pyroscope-ingest", help="where Pyroscope takes /ingest (default: --pyroscope)")
    parser.add_argument("--corpus", default=str(peerchecks.CORPUS), help="Tempo's pkg/traceql/test_examples.yaml")
    parser.add_argument("--jfr", action="append", default=[], help="a JFR recording to ingest on both sides")
    parser.add_argument("--proxy", action="store_true", help="also check a bridge in proxy mode before the peers")
    parser.add_argument("--only", choices=("tempo", "pyroscope"), help="check one peer")
    parser.add_argument("--requests", type=int, default=60, help="requests in the data set")
    parser.add_argument(
        "--seed",
        type=int,
        default=time.time_ns() % 10**6,
        help="data seed (default: fresh each run, so a rerun's traces never merge with an earlier run's in the peers)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=180,
        help="seconds to wait for the peers (to hold the data, to drop an old run's)",
    )
    parser.add_argument("--show", type=int, default=15, help="differences printed per group")
    parser.add_argument("--json", help="write every line of the report here")
    parser.add_argument(
        "--record", help="write the peers' answers here (gzipped JSON) with the data's seed and time, for tests"
    )
    parser.add_argument("--revisions", default="", help="the peers' revisions, written into the recording")
    parser.add_argument("--keep-logs", action="store_true", help="print the bridges' logs at the end")
    args = parser.parse_args(argv)
    args.pyroscope_ingest = args.pyroscope_ingest or args.pyroscope
    for url in (args.tempo, args.tempo_otlp, args.pyroscope):
        if not url.startswith("http://127.") and not url.startswith("http://localhost"):
            parser.error(f"{url}: the checker talks to loopback peers only")
    try:
        return asyncio.run(run(args))
    except aiohttp.ClientConnectionError as exc:
        print(f"error: a peer did not answer: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
