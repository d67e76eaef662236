"""What the flame-graph encoder costs on a big merged profile, against building the call tree of the same stacks.

    .venv/bin/python bench/flamegraph_encode.py [--stacks 20000] [--max-nodes 8192] [--rounds 30]

Input: ``--stacks`` distinct stacks 2–24 frames deep drawn with a realistic skew (a few hot paths, a long tail), the
shape the store's ``GROUP BY stack`` hands the encoder. Timed, interleaved in one run (each round times every variant
once, in rotating order):

- tree: ``build_tree(stacks)`` — the baseline, a pass over the same stacks that builds nodes and encodes nothing;
- encode-tree: ``encode(tree, max_nodes)`` on the built tree — what the request scope does with a merged tree;
- encode-stacks: ``encode_stacks(stacks, max_nodes)`` — what the store does with its merged rows;
- tree+encode: ``encode(build_tree(stacks), max_nodes)`` — the same answer through a tree.

Every variant's flame graph is checked equal. Timed as ``timeit`` times, with the garbage collector off (collected
between calls): otherwise a full collection lands in whichever call allocates when it is due, and its cost depends on
how many objects the process holds (what else was imported), not on the code measured. Prints medians and p99 in ms
and the ratio lines; absolute times on shared machines are noise, the ratios are the result.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge import flamegraph  # noqa: E402


def skewed_stacks(count: int, seed: int = 7) -> list[tuple[tuple[str, ...], int]]:
    """``count`` distinct stacks, root first, each with a value; hot paths share long prefixes."""
    rng = random.Random(seed)
    names = [f"pkg{i % 40}.fn_{i}" for i in range(count)]
    seen: dict[tuple[str, ...], int] = {}
    while len(seen) < count:
        depth = rng.randint(2, 24)
        frames = tuple(names[min(int(rng.paretovariate(0.6)) * (d + 1) + d, count - 1)] for d in range(depth))
        seen[frames] = seen.get(frames, 0) + rng.randint(1, 1000)
    return list(seen.items())


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", type=int, default=20_000)
    parser.add_argument("--max-nodes", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    stacks = skewed_stacks(args.stacks)
    tree = flamegraph.build_tree(stacks)
    max_nodes = args.max_nodes

    variants: dict[str, Callable[[], object]] = {
        "tree": lambda: flamegraph.build_tree(stacks),
        "encode-tree": lambda: flamegraph.encode(tree, max_nodes),
        "encode-stacks": lambda: flamegraph.encode_stacks(stacks, max_nodes),
        "tree+encode": lambda: flamegraph.encode(flamegraph.build_tree(stacks), max_nodes),
    }
    answers = [fn() for name, fn in variants.items() if name != "tree"]  # warm-up, and the answers
    assert all(a == answers[0] for a in answers), "the encoders disagree"
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter()
                variants[name]()
                times[name].append((time.perf_counter() - started) * 1000)
            finally:
                gc.enable()

    print(f"{len(stacks)} stacks, {tree.count()} nodes, max_nodes {max_nodes}; {args.rounds} interleaved rounds")
    for name in names:
        print(f"  {name:14s} median {statistics.median(times[name]):8.2f} ms  p99 {p99(times[name]):8.2f} ms")
    base, base99 = statistics.median(times["tree"]), p99(times["tree"])
    for name in names[1:]:
        print(
            f"RATIO {name} / tree: median {statistics.median(times[name]) / base:.2f}x, "
            f"p99 {p99(times[name]) / base99:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
