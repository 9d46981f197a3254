"""Paired statistics of an interleaved A/B comparison, with sequential stopping (no pytest, no subprocesses).

Owns ``PairedRules`` (the paired policy), one pair's ``log_ratio`` (< 0 is worse), ``estimate_pairs`` (the
Hodges-Lehmann estimate and two Walsh-average intervals of Wilcoxon's signed-rank test: figures, no verdict;
core/verdict/paired.py decides), ``needed_pairs`` and the sequential boundary, calibrated by simulation so that
the chance of a wrong interval at any look stays at its target. Invariants: distribution-free for symmetric
noise; the same inputs give the same boundary (seeded, cached). Imports only core/stats/; never a Verdict.
Rationale: docs/design/paired-sequential-test.md; tests/unit/test_paired_stats.py checks the p-values against scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from pytest_gpuperf.core.stats.thresholds import Thresholds


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedRules(Thresholds):
    """How an A/B comparison decides and when it stops. Fractions, not percentages."""

    alpha: float = 0.01
    """Chance, over all looks, that a change of exactly zero is flagged REGRESSED or IMPROVED (both sides)."""
    equivalence_alpha: float = 0.05
    """Chance, over all looks, that a change beyond the threshold (on one side) is called SAME."""
    min_pairs: int = 4
    """First look: no decision before this many pairs."""
    max_pairs: int = 16
    """Last look: undecided metrics are AMBIGUOUS after this many pairs."""
    boundary_shape: float = 0.25
    """Wang-Tsiatis shape of the sequential boundary: 0.5 Pocock (one level at every look), 0 O'Brien-Fleming."""
    simulations: int = 40000
    """Monte Carlo sequences behind the calibrated boundary (standard error ~0.0004 at a level of 0.005)."""

    def __post_init__(self) -> None:
        Thresholds.__post_init__(self)  # zero-argument super() does not work in a slotted dataclass
        if not 0 < self.alpha < 0.5 or not 0 < self.equivalence_alpha < 0.5:
            raise ValueError(f"alpha and equivalence_alpha must be in (0, 0.5), got {self.alpha}, "
                             f"{self.equivalence_alpha}")  # fmt: skip
        if not 1 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"need 1 <= min_pairs <= max_pairs, got {self.min_pairs} and {self.max_pairs}")
        if not 0 <= self.boundary_shape <= 0.5:
            raise ValueError(f"boundary_shape must be in [0, 0.5] (0.5 Pocock, 0 O'Brien-Fleming), got "
                             f"{self.boundary_shape!r}")  # fmt: skip

    def boundary(self) -> Boundary:
        return calibrated_boundary(
            self.min_pairs, self.max_pairs, self.alpha / 2, self.equivalence_alpha, self.simulations,
            self.boundary_shape,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Boundary:
    """Calibrated critical values per look: ``W+ <= c`` rejects on the lower side (and ``W+ >= M - c``)."""

    flag: dict[int, int]
    """Critical value per number of pairs for the flag interval; -1 where no decision is possible yet."""
    equivalence: dict[int, int]
    flag_levels: dict[int, float]
    """The nominal one-sided level per look that the calibration found for the flag interval."""
    equivalence_levels: dict[int, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedEstimate:
    """One metric's figures after n pairs: what the paired rule (core/verdict/paired.py) decides on."""

    pairs: int
    estimate: float | None
    """Hodges-Lehmann estimate of the log-ratio (< 0 is worse); None without pairs."""
    flag_interval: tuple[float, float]
    """Log-ratio interval at the flag level (infinite where too few pairs for any)."""
    equivalence_interval: tuple[float, float]
    """Log-ratio interval at the equivalence level (infinite where too few pairs for any)."""


def estimate_pairs(x: np.ndarray, boundary: Boundary) -> PairedEstimate:
    """The Hodges-Lehmann estimate and the two Walsh-average intervals of the log-ratios ``x`` at this look."""
    n = len(x)
    if n == 0:
        infinite = (-math.inf, math.inf)
        return PairedEstimate(pairs=0, estimate=None, flag_interval=infinite, equivalence_interval=infinite)
    walsh = walsh_averages(x)
    return PairedEstimate(
        pairs=n,
        estimate=float(np.median(walsh)),
        flag_interval=walsh_interval(walsh, boundary.flag.get(n, -1)),
        equivalence_interval=walsh_interval(walsh, boundary.equivalence.get(n, -1)),
    )


def log_ratio(a: float, b: float, *, higher_is_better: bool) -> float:
    """One pair's log-ratio of B's performance to A's: < 0 when B is worse."""
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"a pair needs two positive finite values, got {a!r} and {b!r}")
    return math.log(b / a) if higher_is_better else math.log(a / b)


def first_decidable(critical: dict[int, int]) -> int | None:
    """The first look at which a boundary's critical values allow any decision."""
    return min((n for n, c in critical.items() if c >= 0), default=None)


def needed_pairs(
    x: np.ndarray,
    estimate: float,
    flag: tuple[float, float],
    equivalence: tuple[float, float],
    rules: PairedRules,
) -> int | None:
    """Pairs a decision would take if the estimate held and the interval narrowed as 1/sqrt(n); None when the
    estimate sits on the threshold (no number of pairs decides it)."""
    n = len(x)
    low_band, high_band = rules.band
    spread = _spread(x)
    candidates = []
    if low_band < estimate < high_band:
        room = min(high_band - estimate, estimate - low_band)
        width = _half_width(equivalence, spread, n, rules.equivalence_alpha)
        candidates.append(n * (width / room) ** 2)
    elif abs(estimate) > 0:
        width = _half_width(flag, spread, n, rules.alpha / 2)
        candidates.append(n * (width / abs(estimate)) ** 2)
    found = [c for c in candidates if math.isfinite(c)]
    return max(n + 1, math.ceil(min(found))) if found else None


def _half_width(interval: tuple[float, float], spread: float, n: int, level: float) -> float:
    if math.isfinite(interval[0]) and math.isfinite(interval[1]):
        return (interval[1] - interval[0]) / 2
    # Too few pairs for any interval: the normal approximation of the Hodges-Lehmann interval (variance
    # pi sigma^2 / 3n), with a Bonferroni-like allowance for the looks.
    from scipy.stats import norm

    return float(norm.isf(level / 4)) * spread * math.sqrt(math.pi / 3 / max(n, 1))


def _spread(x: np.ndarray) -> float:
    if len(x) < 2:
        return math.inf
    mad = float(np.median(np.abs(x - np.median(x)))) * 1.4826
    return mad if mad > 0 else float(np.std(x, ddof=1))


# -- the signed-rank machinery ---------------------------------------------------------------------------------


def walsh_averages(x: np.ndarray) -> np.ndarray:
    """All (x_i + x_j) / 2 for i <= j, sorted: W+ at a shift t counts the Walsh averages above t."""
    i, j = np.triu_indices(len(x))
    return np.sort((x[i] + x[j]) / 2)


def walsh_interval(walsh: np.ndarray, critical: int) -> tuple[float, float]:
    """The shifts t not rejected at critical value c: [w_(c+1), w_(M-c)] (1-based); infinite for c < 0."""
    if critical < 0:
        return -math.inf, math.inf
    return float(walsh[critical]), float(walsh[len(walsh) - 1 - critical])


@cache
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ <= w) for w = 0..n(n+1)/2 under the null (each rank's sign a fair coin)."""
    probabilities = np.ones(1)
    for rank in range(1, n + 1):
        grown = np.zeros(len(probabilities) + rank)
        grown[: len(probabilities)] += probabilities / 2
        grown[rank:] += probabilities / 2
        probabilities = grown
    return np.cumsum(probabilities)


def critical_value(n: int, level: float) -> int:
    """The largest c with P(W+ <= c) <= level, or -1 where even W+ = 0 is likelier than that."""
    cdf = signed_rank_cdf(n)
    return int(np.searchsorted(cdf, level * (1 + 1e-12), side="right")) - 1


def simulate_statistics(max_pairs: int, simulations: int, seed: int = 0) -> np.ndarray:
    """W+ after each of 1..max_pairs pairs for ``simulations`` null sequences (simulations x max_pairs).

    Under the null only the signs (fair coins) and the order of the pairs' sizes (uniformly random) matter, so
    uniform sizes give the exact law of the sequence for any continuous symmetric noise.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.random((simulations, max_pairs))
    positive = rng.random((simulations, max_pairs)) < 0.5
    statistics = np.zeros((simulations, max_pairs), dtype=np.int64)
    current = np.zeros(simulations, dtype=np.int64)
    for n in range(max_pairs):
        size = sizes[:, n : n + 1]
        if n:
            earlier, signs = sizes[:, :n], positive[:, :n]
            # The new pair pushes up the rank of every larger earlier pair; its own rank is 1 + the smaller ones.
            current = current + np.sum((earlier > size) & signs, axis=1)
            rank = 1 + np.sum(earlier < size, axis=1)
        else:
            rank = np.ones(simulations, dtype=np.int64)
        current = current + np.where(positive[:, n], rank, 0)
        statistics[:, n] = current
    return statistics


@lru_cache(maxsize=32)
def calibrated_boundary(
    min_pairs: int,
    max_pairs: int,
    flag_level: float,
    equivalence_level: float,
    simulations: int,
    shape: float,
) -> Boundary:
    """Wang-Tsiatis boundaries of the given shape: the nominal level at n pairs is P(Z > C (n / max_pairs) **
    (shape - 1/2)), with C the smallest whose simulated chance of crossing at any look min_pairs..max_pairs (on one
    side) is at most the target level (shape 0.5: Pocock's one level at every look)."""
    statistics = simulate_statistics(max_pairs, simulations)[:, min_pairs - 1 :]
    looks = range(min_pairs, max_pairs + 1)
    exponents = [(n / max_pairs) ** (shape - 0.5) for n in looks]

    def levels(c: float) -> list[float]:
        return [0.5 * math.erfc(c * e / math.sqrt(2)) for e in exponents]

    def crossing(c: float) -> tuple[float, np.ndarray]:
        critical = np.array([critical_value(n, level) for n, level in zip(looks, levels(c))])
        return float(np.mean(np.any(statistics <= critical, axis=1))), critical

    def calibrate(target: float) -> tuple[dict[int, float], dict[int, int]]:
        # The crossing chance falls as C grows, in steps (the attainable null probabilities): bisect for the
        # smallest C within the target. At C = 12 every level is below 2^-max_pairs: nothing can cross.
        low, high = 0.0, 12.0
        for _ in range(60):
            middle = (low + high) / 2
            if crossing(middle)[0] <= target:
                high = middle
            else:
                low = middle
        critical = crossing(high)[1]
        return dict(zip(looks, levels(high))), {n: int(c) for n, c in zip(looks, critical)}

    flag_levels, flag = calibrate(flag_level)
    equivalence_levels, equivalence = calibrate(equivalence_level)
    return Boundary(flag=flag, equivalence=equivalence, flag_levels=flag_levels, equivalence_levels=equivalence_levels)


def crossing_rate(boundary: dict[int, int], statistics: np.ndarray, min_pairs: int) -> float:
    """The share of simulated null sequences that cross a boundary at some look (for tests and docs)."""
    looks = sorted(boundary)
    columns = statistics[:, [n - 1 for n in looks]]
    critical = np.array([boundary[n] for n in looks])
    return float(np.mean(np.any(columns <= critical, axis=1)))
