"""The statistics of a per-span number (``bridge.sampling``), on spans built with known sample counts: the count,
its 95 % score interval in the value's unit, the "more than the span lasted" flag (the wall time's Poisson tail
beyond 3σ), the measure each SDK's samples are, and the exact tests behind them (``bridge.poisson``). How well
these methods do on simulated samplers is ``test_sampling_methods.py``."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from bridge import flamegraph
from bridge.poisson import binomial_tails, rate_test
from bridge.sampling import (
    GO_CPU,
    NODE_CPU,
    PYTHON_CPU,
    Sampling,
    add_tallies,
    interval_text,
    node_values,
    sampler_of,
    sampling_json,
    sampling_of,
    sampling_text,
    sdks_of,
    tally,
    tally_of,
)

CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
MS = 1_000_000
PERIOD = 10 * MS


def span_tree(counts: dict[tuple[str, ...], int], period: int = PERIOD) -> flamegraph.Node:
    """A span's samples: each stack with a known number of samples, ``period`` each."""
    return flamegraph.build_tree((stack, n * period) for stack, n in counts.items())


def test_a_span_of_83_samples_at_10_ms() -> None:
    tree = span_tree({("main", "handler", "count_primes"): 80, ("main", "handler"): 3})
    s = sampling_of(flamegraph.encode(tree), CPU, {"python"})
    assert s.sampler is PYTHON_CPU and s.measure == "sampled on-GIL time"
    t = s.tally
    assert t is not None
    assert (t.total, t.samples, t.period) == (830 * MS, 83, PERIOD)
    # n + z²/2 ± z·√(n + z²/4) samples of 10 ms: 66.96 – 102.88, close to 83 ± 1.96·√83 = 65.1 – 100.9
    z = 1.959963984540054
    low, high = 83 + z * z / 2 - z * math.sqrt(83 + z * z / 4), 83 + z * z / 2 + z * math.sqrt(83 + z * z / 4)
    assert (t.low, t.high) == (pytest.approx(low * PERIOD), pytest.approx(high * PERIOD))
    assert (round(t.low / MS), round(t.high / MS)) == (670, 1029)
    assert t.sigma == pytest.approx(math.sqrt(83) * PERIOD)
    assert interval_text(t, "nanoseconds") == "83 samples: 830 ms (95 %: 670 ms – 1.03 s)"
    assert t.source == "10.0 ms per sample, pyroscope-io (Python)'s default"


def test_few_samples_get_an_interval_that_can_hold_the_truth() -> None:
    # one sample: 0.18 – 5.66 samples (±1.96·√1 would say 0 – 2.96)
    t = tally(PERIOD, 1, PERIOD, "test")
    assert (round(t.low / MS, 2), round(t.high / MS, 1)) == (1.77, 56.6)
    assert interval_text(t, "nanoseconds") == "1 sample: 10.0 ms (95 %: 1.77 ms – 56.6 ms)"
    # none: up to z² = 3.84 samples (±1.96·√0 would say exactly 0)
    none = tally(0, 0, PERIOD, "test")
    assert (none.low, round(none.high / MS, 1), none.exceeds(0)) == (0.0, 38.4, False)
    nothing = tally(0, 0, 0, "no samples")
    assert (nothing.low, nothing.high, nothing.exceeds(0)) == (0.0, 0.0, False)


def poisson_at_least(k: int, lam: float) -> float:
    """P(N ≥ k), N ~ Poisson(lam), summed here from the pmf."""
    return 1.0 - sum(math.exp(-lam) * lam**j / math.factorial(j) for j in range(k))


@pytest.mark.parametrize(
    ("samples", "wall_ms", "flagged"),
    [
        # 83 samples in 830 ms: nothing to say; in 600 ms (60 expected) P(N ≥ 83) = 0.0028: noise
        (83, 830, False),
        (83, 600, False),
        (83, 575, True),  # 57.5 expected: P(N ≥ 83) = 0.00092 < 0.00135
        # 18 samples = 180 ms in a 62.9 ms request (the worst demo span): P(N ≥ 18 | 6.29) = 1.0e-4
        (18, 62.9, True),
        (12, 62.9, False),  # P(N ≥ 12 | 6.29) = 2.7 %: noise
        (30, 62.9, True),
        (1, 1, False),  # one sample in a 1 ms span: P(N ≥ 1 | 0.1) = 9.5 %, a sample at its edge is common
        (2, 0.1, True),  # two in 0.1 ms: P = 5e-5
        (1, 0, True),  # a zero-length span cannot have drawn any
        (0, 0, False),
    ],
)
def test_more_than_the_span_lasted_only_beyond_3_sigma_of_noise(samples: int, wall_ms: float, flagged: bool) -> None:
    s = Sampling(PYTHON_CPU, tally(samples * PERIOD, samples, PERIOD, "test"), "nanoseconds")
    assert s.exceeds(int(wall_ms * MS)) is flagged
    expected = samples * PERIOD > wall_ms * MS and poisson_at_least(samples, wall_ms * MS / PERIOD) < 0.0013499
    assert flagged is expected  # the table agrees with the tail summed here
    doc = sampling_json(s, int(wall_ms * MS))
    assert doc is not None and doc["exceedsWall"] is flagged
    if flagged:
        assert "cannot exceed the span's wall time" in str(doc["exceedsWallWhy"])
    # nothing is capped: the total stays what the samples add up to
    assert doc["samples"] == samples and s.tally is not None and s.tally.total == samples * PERIOD


def test_a_multi_threaded_measure_says_why_it_may_exceed_wall_time() -> None:
    s = Sampling(GO_CPU, tally(400 * PERIOD, 400, PERIOD, "test"), "nanoseconds")
    assert s.exceeds(1000 * MS)
    assert "ran in parallel" in s.why_exceeds()


def test_the_stored_period_wins_and_a_default_that_does_not_divide_is_not_used() -> None:
    # 200 Hz (5 ms) as stored: the SDK's 10 ms default would halve the count
    tree = span_tree({("a",): 3, ("a", "b"): 4}, period=5 * MS)
    values = node_values(flamegraph.encode(tree))
    t = tally_of(values, tree.total, "nanoseconds", PYTHON_CPU, {5 * MS: 2})
    assert t is not None and (t.samples, t.period, t.source) == (7, 5 * MS, "5.00 ms per sample, as stored")
    # without the store: 5 ms does not divide by the 10 ms default; the values' common divisor is 5 ms
    t = tally_of(values, tree.total, "nanoseconds", PYTHON_CPU, {})
    assert t is not None and (t.samples, t.period) == (7, 5 * MS)
    assert t.source.startswith("at least this many")


def test_one_stack_of_six_samples_without_a_known_period_is_counted_low_never_high() -> None:
    unknown = sampler_of(CPU, set())
    assert unknown.sdk == "" and unknown.measure == "CPU"
    tree = span_tree({("a", "b"): 6})
    t = tally_of(node_values(flamegraph.encode(tree)), tree.total, "nanoseconds", unknown)
    # the common divisor is 60 ms: one "sample" — a wider interval than six samples of 10 ms, never a narrower one
    assert t is not None and t.samples == 1
    six = tally(60 * MS, 6, PERIOD, "the truth")
    assert t.low < six.low and t.high > six.high


def test_mixed_stored_periods_count_at_the_longest() -> None:
    values = [30 * MS, 20 * MS]
    t = tally_of(values, 50 * MS, "nanoseconds", PYTHON_CPU, {10 * MS: 1, 5 * MS: 1})
    assert t is not None and (t.samples, t.period) == (5, 10 * MS) and "mixed periods" in t.source


def test_measured_values_get_no_interval() -> None:
    # @pyroscope/nodejs: CPU time measured between wall-clock samples (tests/fixtures/node-capture values)
    values = [853_945, 7_019_583, 801_552_622]
    node = sampler_of("process_cpu:cpu:nanoseconds:wall:nanoseconds", {"nodejs"})  # as Pyroscope relabels it
    assert node is NODE_CPU and sampler_of("wall:cpu:nanoseconds:wall:nanoseconds", {"nodejs"}) is NODE_CPU
    assert tally_of(values, sum(values), "nanoseconds", node, {10_278_000: 3}) is None
    # the same values from an unknown SDK: a common divisor of 1 ns is no sampling period
    unknown = sampler_of(CPU, set())
    assert tally_of(values, sum(values), "nanoseconds", unknown) is None
    s = Sampling(node, None, "nanoseconds")
    assert sampling_text(s) == "measured, not counted: no sampling interval"
    doc = sampling_json(s)
    assert doc is not None and doc["samples"] is None and doc["countedBy"] == "measured, not counted"


def test_sample_counts_are_their_own_period() -> None:
    s = sampling_of(
        flamegraph.encode(span_tree({("a",): 9}, period=1)), "process_cpu:samples:count:cpu:nanoseconds", {"go"}
    )
    assert s.tally is not None and (s.tally.samples, s.tally.period) == (9, 1)
    assert s.measure == "sampled on-CPU time"


def test_the_sdk_is_read_from_its_labels() -> None:
    assert sdks_of(["com.grafana.pyroscope/python", "", "x"]) == {"python"}
    assert sdks_of(["gospy", "com.grafana.pyroscope/go"]) == {"go"}
    assert sampler_of(CPU, {"python"}) is PYTHON_CPU
    assert sampler_of(CPU, {"go"}) is GO_CPU
    # two SDKs in one selection: no one name fits
    mixed = sampler_of(CPU, {"go", "python"})
    assert mixed.sdk == "" and mixed.measure == "CPU"
    assert sampler_of("memory:alloc_space:bytes:space:bytes", {"go"}).measure == "allocated memory"
    assert not sampler_of("memory:alloc_space:bytes:space:bytes", {"go"}).counted


def test_tallies_of_parts_add_their_variances() -> None:
    a = tally(50 * PERIOD, 50, PERIOD, "x")
    b = tally(8 * 5 * MS, 8, 5 * MS, "y")
    both = add_tallies([a, b])
    assert both is not None
    assert (both.total, both.samples) == (50 * PERIOD + 40 * MS, 58)
    assert both.variance == pytest.approx(50 * PERIOD**2 + 8 * (5 * MS) ** 2)
    assert add_tallies([]) is None


# --------------------------------------------------------------------------------------------- the Poisson test


def exact_tails(k: int, n: int, p: Fraction) -> tuple[float, float]:
    pmf = [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]
    return float(sum(pmf[: k + 1])), float(sum(pmf[k:]))


@pytest.mark.parametrize(
    ("k", "n", "p"),
    [
        (0, 0, Fraction(1, 2)),
        (0, 5, Fraction(1, 2)),
        (3, 10, Fraction(1, 11)),
        (10, 10, Fraction(1, 3)),
        (7, 40, Fraction(1, 101)),
        (25, 60, Fraction(1, 2)),
        (1, 200, Fraction(1, 51)),
        (60, 200, Fraction(1, 4)),
    ],
)
def test_binomial_tails_are_exact(k: int, n: int, p: Fraction) -> None:
    low, high = binomial_tails(k, n, float(p))
    want = exact_tails(k, n, p) if n else (1.0, 1.0)
    assert low == pytest.approx(want[0], rel=1e-9, abs=1e-300)
    assert high == pytest.approx(want[1], rel=1e-9, abs=1e-300)


def test_binomial_tails_stay_exact_and_quick_for_large_counts() -> None:
    # a million samples: a normal check, 3 σ below the mean
    n, p = 1_000_000, 0.01
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    low, high = binomial_tails(int(mean - 3 * sd), n, p)
    assert low == pytest.approx(0.00135, rel=0.08) and high == pytest.approx(1.0, abs=0.002)


@pytest.mark.parametrize(
    ("here", "usual", "requests", "unusual"),
    [
        # one 10 ms sample here vs none in 100 usual requests: indistinguishable from noise
        (1, 0, 100, False),
        (1, 100, 100, False),  # one sample here, one per request usually
        (3, 100, 100, False),
        (12, 1000, 100, False),  # 120 ms here vs 100 ms per request
        (25, 1000, 100, True),  # 250 ms here vs 100 ms per request
        (0, 2000, 100, True),  # none here, 20 samples (200 ms) per request usually
        (0, 300, 100, False),  # none here, 3 per request usually: p = 2·(100/101)^300 ≈ 0.10
        (40, 0, 1, True),
        (0, 0, 5, False),
    ],
)
def test_the_conditional_poisson_test(here: int, usual: int, requests: int, unusual: bool) -> None:
    p = rate_test(here, usual, requests)
    assert 0.0 <= p <= 1.0
    assert (p < 0.01) is unusual


def test_the_p_value_is_twice_the_smaller_exact_tail() -> None:
    # none here against 300 in 100 requests: P(X ≤ 0) = (100/101)^300
    assert rate_test(0, 300, 100) == pytest.approx(2 * (100 / 101) ** 300, rel=1e-9)
    # 5 here against 5 in 1 other request: symmetric, p = 1
    assert rate_test(5, 5, 1) == 1.0
