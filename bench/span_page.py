"""What the span page costs to render for a big profile, against the API's JSON answer for the same span.

    .venv/bin/python bench/span_page.py [--nodes 10000] [--rounds 30]

The answer holds a flame graph of ``--nodes`` frames (skewed like a real profile: a few hot paths and a long tail)
on a real trace of the shop capture. Compared, interleaved in one run (each round times every variant once, in
rotating order):

- json: ``answer_json`` + ``json.dumps`` — what ``GET /api/v1/spans/…/profile`` serialises (the baseline);
- page: ``span_context`` + the ``span.html`` template — layout with folding, SVG frames, span tree;
- pprof: ``encode_pprof`` of the tree's stacks + gzip — ``format=pprof``;
- collapsed: ``to_collapsed`` — ``format=collapsed``.

Prints medians and p99 in ms, the page size, and the ratio lines. Absolute times on shared machines are noise; the
ratios are the result. The page's cost is bounded by the layout's rectangle budget, not by the profile's size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge import (
    flamegraph,  # noqa: E402
    views,  # noqa: E402
)
from bridge.answer import Answer, answer_json  # noqa: E402
from bridge.config import Settings  # noqa: E402
from bridge.pprof import encode_pprof  # noqa: E402
from bridge.resolution import Resolution, Step
from tests.core.test_flamegraph_render import random_tree  # noqa: E402
from tests.doubles.shop import load_shop  # noqa: E402

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    shop = load_shop()
    role = shop.pick("frontend-root")
    trace = shop.trace(role.trace_id)
    span = trace.spans[role.span_id]
    tree = random_tree(args.nodes)
    fg = flamegraph.encode(tree)
    res = Resolution(
        step=Step.LINKED,
        reason=f"samples linked to span {span.span_id}",
        flamegraph=fg,
        span=span,
        local_root=span,
        label_selector="{}",
        span_ids=(span.span_id,),
    )
    ans = Answer("span", span, trace, CPU, res, tree, fg)
    settings = Settings.for_tests(mode="proxy", grafana_url="http://grafana:3000")

    def json_answer() -> int:
        return len(json.dumps(answer_json(ans)))

    def page() -> int:
        return len(views.render_html("span.html", **views.span_context(ans, settings, {}, "")))

    def pprof() -> int:
        return len(gzip.compress(encode_pprof(flamegraph.iter_stacks(tree), CPU).SerializeToString()))

    def collapsed() -> int:
        return len(flamegraph.to_collapsed(tree))

    variants: dict[str, Callable[[], int]] = {"json": json_answer, "page": page, "pprof": pprof, "collapsed": collapsed}
    sizes = {name: fn() for name, fn in variants.items()}  # warm-up, and the sizes
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = time.perf_counter()
            variants[name]()
            times[name].append((time.perf_counter() - started) * 1000)

    print(f"flame graph: {tree.count()} nodes; {args.rounds} interleaved rounds")
    for name in names:
        print(
            f"  {name:10s} median {statistics.median(times[name]):8.2f} ms  p99 {p99(times[name]):8.2f} ms  "
            f"size {sizes[name] / 1024:8.1f} KiB"
        )
    base, base99 = statistics.median(times["json"]), p99(times["json"])
    for name in ("page", "pprof", "collapsed"):
        print(
            f"RATIO {name} / json answer: median {statistics.median(times[name]) / base:.2f}x, "
            f"p99 {p99(times[name]) / base99:.2f}x"
        )
    print(
        f"page size {sizes['page'] / 1024:.0f} KiB for {tree.count()} nodes (budget: {views.MAX_RECTS} frames, < 1 MiB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
