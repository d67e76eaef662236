"""Pure: one request's functions against its endpoint's usual requests (``bridge.compare``) — each function's self
and total on both sides (``FunctionDiff``), and whether the difference is beyond sampling noise: what compare calls
*unusual*.

A function's self time here is a count of samples, and so is its self time in the usual requests together: one
request that drew one more 10 ms sample in a function than usual has not changed. Each function's two self counts
are tested with the exact conditional test of two Poisson rates, exposure-adjusted for the number of requests
(``poisson.rate_test``), and called unusual at p < ``ALPHA`` (0.01). Both sides are read at one period, the one
every value of both divides (``sampling.tally_of`` over both: the stored period, else the SDK's default, else their
common divisor). Values that are not counts (``@pyroscope/nodejs``'s measured CPU) are not tested, so nothing is
called unusual then (``NOT_COUNTED`` says why). ``tests/resolve/test_sampling_methods.py`` measures the test's false
alarms on simulated requests of equal cost: at most 1 %."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from bridge import flamegraph
from bridge.flamediff import function_totals
from bridge.poisson import ALPHA, p_text, rate_test
from bridge.sampling import Sampler, Tally, tally_of, tree_values
from bridge.units import format_value

TEST_NAME: Final = "exact conditional test of two Poisson rates (binomial, exposure-adjusted per request), two-sided"
NOT_COUNTED: Final = (
    "the values are not counts of samples (measured, or of no known period): no function is tested, so none is "
    "called unusual"
)


@dataclass(frozen=True, slots=True)
class Counts:
    """One function's self samples here and in every usual request together, and the test's p-value."""

    here: int
    usual: int
    p_value: float

    @property
    def unusual(self) -> bool:
        return self.p_value < ALPHA


@dataclass(frozen=True, slots=True)
class Counting:
    """Both sides' totals as counts of samples at one period (None: not counts), and how many usual requests."""

    here: Tally | None = None
    usual: Tally | None = None
    requests: int = 0

    @property
    def period(self) -> int:
        """What one sample adds on both sides; 0 when nothing can be tested."""
        return self.here.period if self.here is not None and self.requests else 0

    def counts(self, here_self: int, usual_self: int) -> Counts | None:
        """A function's two self values as counts, tested; None when they are not counts."""
        period = self.period
        if period <= 0:
            return None
        x, y = here_self // period, usual_self // period
        return Counts(x, y, rate_test(x, y, self.requests))

    def test_json(self) -> dict[str, Any] | None:
        """How *unusual* is decided: the test, its threshold and the period the counts are read at."""
        return {"name": TEST_NAME, "alpha": ALPHA, "period": self.period} if self.period else None


def counting(
    here: flamegraph.Node,
    baseline: flamegraph.Node,
    requests: int,
    unit: str,
    sampler: Sampler,
    periods: Mapping[int, int],
) -> Counting:
    """Both sides' totals as counts of samples at the one period every value of both divides."""
    both = tally_of(tree_values(here) + tree_values(baseline), here.total + baseline.total, unit, sampler, periods)
    if both is None or both.period <= 0:
        return Counting(requests=requests)
    one = {both.period: 1}
    return Counting(
        tally_of(tree_values(here), here.total, unit, sampler, one),
        tally_of(tree_values(baseline), baseline.total, unit, sampler, one),
        requests,
    )


@dataclass(frozen=True, slots=True)
class FunctionDiff:
    name: str
    here_self: int
    here_total: int
    usual_self: float  # per request, exact
    usual_total: float
    counts: Counts | None = None  # the two self values as counts of samples, tested (None: not counts)

    @property
    def diff_self(self) -> float:
        return self.here_self - self.usual_self

    @property
    def diff_total(self) -> float:
        return self.here_total - self.usual_total

    @property
    def order(self) -> tuple[float, float, str]:
        return -abs(self.diff_self), -abs(self.diff_total), self.name


def function_diffs(
    here: flamegraph.Node, baseline: flamegraph.Node, requests: int, counted: Counting | None = None
) -> list[FunctionDiff]:
    """Pure: per function, this request's self and total against the baseline's per request (exact quotients),
    largest difference first; with ``counted``, each function's self samples on both sides, tested."""
    mine = function_totals(here)
    theirs = function_totals(baseline)
    n = max(1, requests)
    out = []
    for name in mine.keys() | theirs.keys():
        (here_self, here_total), (usual_self, usual_total) = mine.get(name, (0, 0)), theirs.get(name, (0, 0))
        counts = counted.counts(here_self, usual_self) if counted is not None else None
        out.append(FunctionDiff(name, here_self, here_total, usual_self / n, usual_total / n, counts))
    return sorted(out, key=lambda f: f.order)


def unusual_words(f: FunctionDiff, unit: str, requests: int = 0) -> str:
    """``count_primes: 120 ms here (12 samples) vs …`` (self values: time in the function itself)."""
    return f"{f.name}: {unusual_rest(f, unit, requests)}"


def unusual_rest(f: FunctionDiff, unit: str, requests: int = 0) -> str:
    """``120 ms here (12 samples) vs 8.00 ms per request usually (80 samples in 10 requests; p < 0.0001)``."""
    here = format_value(f.here_self, unit) if f.here_self else "none"
    usual = format_value(round(f.usual_self), unit) if round(f.usual_self) else "none"
    counts = f.counts
    if counts is None:
        return f"{here} here vs {usual} per request usually"
    mine = f"{counts.here:,} sample{'' if counts.here == 1 else 's'}"
    theirs = f"{counts.usual:,} sample{'' if counts.usual == 1 else 's'} in {requests} request"
    return (
        f"{here} here ({mine}) vs {usual} per request usually ({theirs}{'' if requests == 1 else 's'}; "
        f"{p_text(counts.p_value)})"
    )


def counts_json(counts: Counts | None) -> dict[str, Any]:
    """A function's self samples on each side (usual: every usual request together) and the p-value; null: not
    counted."""
    if counts is None:
        return {"samples": {"here": None, "usual": None}, "pValue": None}
    return {"samples": {"here": counts.here, "usual": counts.usual}, "pValue": float(f"{counts.p_value:.6g}")}


def tally_json(t: Tally | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"samples": t.samples, "period": t.period, "interval95": {"low": round(t.low), "high": round(t.high)}}


def table_cells(counts: Counts | None) -> tuple[str, str, str]:
    """The compare page's columns: samples here, samples usually, p."""
    if counts is None:
        return "", "", ""
    return f"{counts.here:,}", f"{counts.usual:,}", p_text(counts.p_value)
