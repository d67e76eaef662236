"""Pure: the statistics of counts of samples — the 95 % score interval of a Poisson mean, the exact Poisson upper
tail the "more than the span lasted" flag is decided by, exact binomial tails, and the exact conditional test of two
Poisson rates (Przyborowski & Wilenski, 1940) that compare calls a function unusual by (``bridge.function_diff``): given
``x + y`` samples in all, ``x`` is ``Binomial(x + y, e₁ / (e₁ + e₂))`` under equal rates per unit of exposure
(here: one request against ``n`` usual requests), and the two-sided p-value doubles the smaller exact tail. Tails
are summed term by term from the observed count away from the mean (each term from the last by the pmf's ratio), so
a million samples cost a few thousand steps, not a million."""

from __future__ import annotations

import math
from typing import Final

Z95: Final = 1.959963984540054  # the 97.5 % point of the standard normal: a two-sided 95 % interval
ALPHA: Final = 0.01  # compare calls a difference unusual below this p-value
FLAG_P: Final = 0.5 * math.erfc(3 / math.sqrt(2))  # 0.00135: a normal's one-sided tail beyond 3σ


def score_interval(n: float, z: float = Z95) -> tuple[float, float]:
    """The score (Wilson) interval of a Poisson mean from one count ``n``: every ``λ`` with ``|n − λ| ≤ z·√λ``,
    i.e. ``n + z²/2 ± z·√(n + z²/4)``. For large counts it is ``n ± z·√n``; for small ones it keeps its coverage
    where ``n ± z·√n`` does not (that one is ``[0, 0]`` for ``n = 0``, which covers no positive truth)."""
    centre = n + z * z / 2
    half = z * math.sqrt(n + z * z / 4)
    return max(0.0, centre - half), centre + half


def poisson_tail(k: int, lam: float) -> float:
    """``P(N ≥ k)`` for ``N ~ Poisson(lam)``, exact to double precision: summed from ``k`` away from the mean, each
    term from the last by the pmf's ratio (the other side's sum subtracted from 1 when ``k`` is below the mean)."""
    if k <= 0:
        return 1.0
    if lam <= 0.0:
        return 0.0
    upward = k > lam
    j = k if upward else k - 1
    term = math.exp(-lam + j * math.log(lam) - math.lgamma(j + 1))
    total = term
    while upward or j > 0:  # every ratio is below 1: j only moves away from the mean
        ratio = lam / (j + 1) if upward else j / lam
        j += 1 if upward else -1
        term *= ratio
        total += term
        if term == 0.0 or term * ratio / (1.0 - ratio) < 1e-17 * total:
            break
    return min(1.0, total) if upward else max(0.0, 1.0 - total)


def _log_pmf(k: int, n: int, p: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def _tail(k: int, n: int, p: float, upward: bool) -> float:
    """``P(X ≥ k)`` (upward) or ``P(X ≤ k)`` for ``X ~ Binomial(n, p)``, summed from ``k`` away from the mean, each
    term from the last by the pmf's ratio; stops when the rest is below 1e-17 of the sum."""
    term = math.exp(_log_pmf(k, n, p))
    total = term
    odds = p / (1.0 - p)
    j = k
    while term > 0.0:
        if upward:
            if j >= n:
                break
            ratio = (n - j) / (j + 1) * odds
            j += 1
        else:
            if j <= 0:
                break
            ratio = j / (n - j + 1) / odds
            j -= 1
        term *= ratio
        total += term
        if ratio < 1.0 and term * ratio / (1.0 - ratio) < 1e-17 * total:
            break
    return min(1.0, total)


def binomial_tails(k: int, n: int, p: float) -> tuple[float, float]:
    """``(P(X ≤ k), P(X ≥ k))`` for ``X ~ Binomial(n, p)``, exact to double precision, in O(√n) steps: each tail is
    summed on its own side of the mean and the other taken as its complement."""
    if n <= 0:
        return 1.0, 1.0
    if p <= 0.0:
        return 1.0, 1.0 if k <= 0 else 0.0
    if p >= 1.0:
        return (1.0 if k >= n else 0.0), 1.0
    mean = n * p
    if k <= mean:
        low = _tail(k, n, p, upward=False)
        high = 1.0 if k <= 0 else max(0.0, 1.0 - _tail(k - 1, n, p, upward=False))
    else:
        high = _tail(k, n, p, upward=True)
        low = 1.0 if k >= n else max(0.0, 1.0 - _tail(k + 1, n, p, upward=True))
    return low, high


def rate_test(here: int, usual: int, requests: int) -> float:
    """Two-sided p-value that a count of ``here`` samples in one request and ``usual`` in ``requests`` others come
    from the same Poisson rate per request: the exact conditional test (Przyborowski & Wilenski, 1940) — given the
    sum, ``here ~ Binomial(here + usual, 1 / (1 + requests))`` — two-sided by doubling the smaller tail."""
    if requests <= 0 or here + usual == 0:
        return 1.0
    low, high = binomial_tails(here, here + usual, 1.0 / (1 + requests))
    return min(1.0, 2.0 * min(low, high))


def p_text(p: float) -> str:
    """``p = 0.0034``; ``p < 0.0001`` below that."""
    return "p < 0.0001" if p < 0.0001 else f"p = {p:.4f}" if p < 0.01 else f"p = {p:.2f}"
