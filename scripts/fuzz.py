#!/usr/bin/env python3
"""The long fuzzing pass (``tests/fuzzing.py``; the suite runs a short one, ``tests/service/test_fuzz.py``): every
hostile value of every field of every route, in both modes and on the OTLP gRPC receiver, then ``--rounds`` requests
per RPC with several fields hostile at once. Prints the counts by route and by status, and every failure; exit 1
when there is one.

    .venv/bin/python scripts/fuzz.py [--rounds 2000] [--seed 19]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests/ holds the fuzzer and doubles

from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from bridge.app import create_app  # noqa: E402
from bridge.config import Settings  # noqa: E402
from bridge.state import RUNTIME  # noqa: E402
from bridge.wire.pyroscope import SPAN_RPCS  # noqa: E402
from tests import fuzzing  # noqa: E402
from tests.doubles.shop import capture_now  # noqa: E402
from tests.service.test_fuzz import SLOW_MACHINE, cases_for  # noqa: E402
from tests.span_stack import start_stack, start_standalone  # noqa: E402


async def _server(app: web.Application, **kwargs: Any) -> TestServer:
    server = TestServer(app, host="127.0.0.1", **kwargs)
    await server.start_server()
    return server


async def _client(app: web.Application, **kwargs: Any) -> TestClient[Any, Any]:
    client = TestClient(TestServer(app, host="127.0.0.1", **kwargs))
    await client.start_server()
    return client


async def fuzz(rounds: int, seed: int) -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        client, _ = await start_standalone(_client, str(Path(tmp) / "data"))
        try:
            table = client.app[RUNTIME].backends.pyroscope.table
            rpcs = {method: cls for method, (cls, _) in table.items()}
            cases = cases_for(client.app, rpcs, seed=seed, per=None, proxy=False)
            rng = random.Random(seed)
            for path, (ctype, cls) in sorted(fuzzing.rpc_routes(rpcs).items()):
                cases.extend(fuzzing.combined_cases(path, ctype, cls, rounds=rounds, rng=rng))
            failures += _report("standalone", await fuzzing.run(client, cases))
        finally:
            await client.close()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.for_tests(
            mode="standalone",
            data_dir=str(Path(tmp) / "data"),
            otlp_grpc_enabled=True,
            otlp_grpc_listen=("127.0.0.1", 0),
        )
        client = await _client(create_app(settings, wall_clock=capture_now))
        try:
            grpc = client.app[RUNTIME].backends.grpc
            rng = random.Random(seed + 2)
            cases = [
                case
                for method, cls in sorted(fuzzing.GRPC_METHODS.items())
                for case in fuzzing.grpc_cases(method, cls, per_field=None, rng=rng)
            ]
            failures += _report("OTLP gRPC (standalone)", await fuzzing.run_grpc(f"127.0.0.1:{grpc.port}", cases))
        finally:
            await client.close()
    servers: list[TestServer] = []

    async def server(app: web.Application, **kwargs: Any) -> TestServer:
        servers.append(await _server(app, **kwargs))
        return servers[-1]

    stack = await start_stack(server, _client, **SLOW_MACHINE)
    try:
        rpcs = {method: request for method, (request, _) in SPAN_RPCS.items()}
        cases = cases_for(stack.http.app, rpcs, seed=seed, per=None, proxy=True)
        rng = random.Random(seed + 1)
        for method, cls in sorted(rpcs.items()):
            path = f"{fuzzing.QUERIER}{method}"
            cases.extend(fuzzing.combined_cases(path, "application/proto", cls, rounds=rounds, rng=rng))
        failures += _report("proxy", await fuzzing.run(stack.http, cases, timeout=120.0))
    finally:
        await stack.http.close()
        for s in servers:
            await s.close()
    return 1 if failures else 0


def _report(mode: str, tally: fuzzing.Tally) -> int:
    print(f"{mode}:")
    for line in tally.lines():
        print(f"  {line}")
    for failure in tally.failures:
        print(f"  FAILED {failure}")
    return len(tally.failures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000, help="requests per RPC with several hostile fields")
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    return asyncio.run(fuzz(args.rounds, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
