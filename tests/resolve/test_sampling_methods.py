"""The per-span statistics checked as methods, on seeded simulations of the samplers the SDKs run (never a clock):
how often the 95 % interval covers the true time, how often "more than the span lasted" is raised when the truth is
the span's wall time itself, and how often compare calls a function unusual when both requests cost the same.

The samplers are simulated as their sources make them: py-spy (pyroscope-io) sleeps an exponentially distributed
gap between samples at 100 Hz (benfred/py-spy ``src/timer.rs``), so a span's count is Poisson; Go's per-thread
CPU timer fires every 10 ms of CPU after a uniformly random first delay (``runtime/os_linux.go``
``setThreadCPUProfiler``), so its count is the truth's floor or ceiling. Each bound below is the method's promise
with three binomial standard errors of the simulated fraction as slack, so another seed passes too; the seeds fix
the data, so the run is the same every time."""

from __future__ import annotations

import math
import random

from bridge import flamegraph
from bridge.poisson import ALPHA, FLAG_P, rate_test
from bridge.sampling import GO_CPU, PYTHON_CPU, Sampler, Sampling, sampling_of, tally

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
MS = 1_000_000
PERIOD = 10 * MS


def slack(p: float, n: int) -> float:
    """Three binomial standard errors of a fraction ``p`` estimated from ``n`` trials."""
    return 3 * math.sqrt(p * (1 - p) / n)


def pyspy_count(rng: random.Random, held_ns: float) -> int:
    """How many of py-spy's samples land in ``held_ns`` of GIL-held time: exponential gaps averaging 10 ms."""
    n, t = 0, rng.expovariate(1 / PERIOD)
    while t < held_ns:
        n += 1
        t += rng.expovariate(1 / PERIOD)
    return n


def go_count(rng: random.Random, cpu_ns: float) -> int:
    """How many SIGPROFs ``cpu_ns`` of one thread's CPU draws: the first after a uniform delay in (0, 10 ms], then
    one every 10 ms."""
    first = rng.uniform(0, PERIOD)
    return 0 if cpu_ns < first else 1 + int((cpu_ns - first) // PERIOD)


def span_sampling(rng: random.Random, samples: int, sampler: Sampler, sdk: str) -> Sampling:
    """A span's answer as the bridge reads it: ``samples`` samples of 10 ms spread over three stacks, encoded as
    Pyroscope's flame graph and counted by ``sampling_of`` (no stored period: the SDK's default)."""
    stacks = (("main", "handler"), ("main", "handler", "work"), ("main", "handler", "work", "inner"))
    counts = dict.fromkeys(stacks, 0)
    for _ in range(samples):
        counts[rng.choice(stacks)] += 1
    tree = flamegraph.build_tree((stack, n * PERIOD) for stack, n in counts.items() if n)
    s = sampling_of(flamegraph.encode(tree), CPU, {sdk})
    assert s.sampler is sampler and s.tally is not None and s.tally.samples == samples
    return s


def covers(s: Sampling, truth_ns: float) -> bool:
    assert s.tally is not None
    return s.tally.low <= truth_ns <= s.tally.high


def test_the_interval_covers_the_true_on_gil_time_95_percent_of_the_time() -> None:
    rng = random.Random(19)
    bands: dict[str, list[bool]] = {"under 3 samples": [], "3 to 8 samples": [], "8 samples or more": []}
    for _ in range(3000):
        held = rng.uniform(2 * MS, 150 * MS)  # the spans of bench/span_truth.py
        hit = covers(span_sampling(rng, pyspy_count(rng, held), PYTHON_CPU, "python"), held)
        band = (
            "under 3 samples" if held < 3 * PERIOD else "3 to 8 samples" if held < 8 * PERIOD else "8 samples or more"
        )
        bands[band].append(hit)
    every = [hit for hits in bands.values() for hit in hits]
    coverage = sum(every) / len(every)
    assert abs(coverage - 0.95) <= slack(0.95, len(every)), coverage
    # short spans too: the score interval keeps its promise where ±1.96·√n would not (below)
    for band, hits in bands.items():
        assert sum(hits) / len(hits) >= 0.95 - 0.04 - slack(0.95, len(hits)), band


def test_plus_minus_1_96_root_n_alone_would_undercover_short_spans() -> None:
    # why the interval is the score interval: on the same kind of spans, n ± 1.96·√n covers a 2–30 ms span's time
    # far less often than 95 % (a span of 0 samples gets the interval [0, 0])
    rng = random.Random(20)
    trials, hits = 2000, 0
    for _ in range(trials):
        held = rng.uniform(2 * MS, 30 * MS)
        n = pyspy_count(rng, held)
        margin = 1.959963984540054 * math.sqrt(n) * PERIOD
        hits += n * PERIOD - margin <= held <= n * PERIOD + margin
    assert hits / trials < 0.80


def test_a_periodic_sampler_is_covered_at_least_as_often() -> None:
    rng = random.Random(21)
    trials = 2000
    hits = 0
    for _ in range(trials):
        cpu = rng.uniform(2 * MS, 150 * MS)
        hits += covers(span_sampling(rng, go_count(rng, cpu), GO_CPU, "go"), cpu)
    assert hits / trials >= 0.95 - slack(0.95, trials)


def test_more_than_the_span_lasted_is_a_false_alarm_at_most_at_the_3_sigma_rate() -> None:
    # the worst case for the flag: a span that held the GIL all its wall time, sampled by py-spy
    rng = random.Random(22)
    trials, flagged = 20_000, 0
    for _ in range(trials):
        wall = rng.uniform(1 * MS, 300 * MS)
        n = pyspy_count(rng, wall)
        flagged += Sampling(PYTHON_CPU, tally(n * PERIOD, n, PERIOD, "py-spy"), "nanoseconds").exceeds(int(wall))
    assert FLAG_P == 0.5 * math.erfc(3 / math.sqrt(2))  # 0.135 %: the one-sided tail beyond 3σ
    assert flagged / trials <= FLAG_P + slack(FLAG_P, trials)


def test_compare_calls_equal_requests_unusual_at_most_1_percent_of_the_time() -> None:
    # here and the usual requests cost the same per request: every "unusual" is a false alarm
    rng = random.Random(23)
    trials, alarms = 3000, 0
    for _ in range(trials):
        per_request = rng.uniform(0.5, 30)  # samples of one function in one request, on average
        requests = rng.choice((1, 5, 20, 60))
        here = pyspy_count(rng, per_request * PERIOD)
        usual = pyspy_count(rng, per_request * requests * PERIOD)
        alarms += rate_test(here, usual, requests) < ALPHA
    assert alarms / trials <= ALPHA + slack(ALPHA, trials)


def test_compare_finds_a_function_that_costs_three_times_as_much() -> None:
    rng = random.Random(24)
    trials, found = 1000, 0
    for _ in range(trials):
        per_request = rng.uniform(5, 30)
        here = pyspy_count(rng, 3 * per_request * PERIOD)
        usual = pyspy_count(rng, per_request * 20 * PERIOD)
        found += rate_test(here, usual, 20) < ALPHA
    assert found / trials >= 0.9
