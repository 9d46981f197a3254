"""Paired statistics of an interleaved A/B comparison, with sequential stopping (no pytest, no subprocesses).

Each pair of sessions (one of stack A, one of stack B, run back to back in a balanced random order) gives, per
metric, one log-ratio ``x = log(perf_B / perf_A)`` of the two sessions' figures (each session's best sample or its
median: ab/engine.py), oriented so that ``x < 0`` is worse (B slower, or lower throughput). The machine's drift
hits both sessions of a pair, so the pairs' spread is what is left of the noise.

The test is Wilcoxon's signed-rank test with its Hodges-Lehmann estimate and the distribution-free interval
from the Walsh averages (Hollander, Wolfe and Chicken, *Nonparametric Statistical Methods*, 3rd ed., 3.1-3.3):

- valid for any symmetric distribution of the pairs' noise, which the randomised order guarantees under an A/A
  comparison, and for pairs of unequal noise (a burst of load widens some pairs, not the test's level);
- robust: one pair that a load burst hit on one side only moves a rank, not a mean and a standard deviation,
  where a t interval on a shared 2-core machine would be widened by every burst;
- its whole sequence of statistics over the looks depends only on the pairs' signs and the order of their sizes,
  so critical values calibrated once by simulation hold for every such distribution.

**Repeated looks.** The metrics are judged after every pair, and a decision stops sampling: testing each look at
the nominal level would inflate the error. The nominal level per look follows Wang and Tsiatis's power family
(Biometrics 43, 1987): at ``n`` of ``max_pairs`` pairs, ``P(Z > C (n / max_pairs) ** (shape - 1/2))``; shape 1/2
is Pocock's boundary (one level at every look), 0 O'Brien and Fleming's (strict early, nearly the fixed-n level at
the last look). ``C`` is calibrated by Monte Carlo simulation of the signed-rank statistic's sequence under the
null (exact up to the simulation's error, for the look schedule min_pairs..max_pairs), so that the chance that the
interval misses the true shift at *any* look is at most the target. The default shape, 1/4, keeps the first
decisions where Pocock's allow them (a flag at 10 pairs all one way) and spends more of the level at the last
looks, where the comparisons that a heavy-tailed pair or two hold back end (docs/ab.md has the simulated
operating characteristics of both). Two such sequences of intervals:

- flag interval, one-sided level ``alpha / 2`` per side: REGRESSED when it lies below 1 and the estimate is at
  or beyond ``1 - threshold`` (IMPROVED mirrored). An A/A comparison is flagged in at most ``alpha`` of runs.
- equivalence interval, one-sided level ``equivalence_alpha`` per side (Schuirmann's two one-sided tests):
  SAME (printed PASS) when it lies inside ``(1 - threshold, 1 + threshold)``. A change beyond the threshold is
  called SAME in at most ``equivalence_alpha`` of runs.

scipy.stats has no public null distribution of the signed-rank statistic nor a Walsh-average interval, so both
are computed here (a small convolution and a sort); tests/unit/test_paired_stats.py checks the p-values against
``scipy.stats.wilcoxon``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from pytest_gpuperf.core.stats.unpaired import Verdict

AB_VERDICTS = (Verdict.PASS, Verdict.REGRESSED, Verdict.IMPROVED, Verdict.AMBIGUOUS)
"""What a metric of `gpuperf ab` can end as; PASS is the SAME decision."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedRules:
    """How an A/B comparison decides and when it stops. Fractions, not percentages."""

    threshold: float
    """Smallest relative change that matters."""
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
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be a fraction in (0, 1), got {self.threshold!r}")
        if not 0 < self.alpha < 0.5 or not 0 < self.equivalence_alpha < 0.5:
            raise ValueError(f"alpha and equivalence_alpha must be in (0, 0.5), got {self.alpha}, "
                             f"{self.equivalence_alpha}")  # fmt: skip
        if not 1 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"need 1 <= min_pairs <= max_pairs, got {self.min_pairs} and {self.max_pairs}")
        if not 0 <= self.boundary_shape <= 0.5:
            raise ValueError(f"boundary_shape must be in [0, 0.5] (0.5 Pocock, 0 O'Brien-Fleming), got "
                             f"{self.boundary_shape!r}")  # fmt: skip

    @property
    def band(self) -> tuple[float, float]:
        """The threshold on the log-ratio scale: (log(1 - threshold), log(1 + threshold))."""
        return math.log1p(-self.threshold), math.log1p(self.threshold)

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
class PairedJudgement:
    """One metric after n pairs."""

    verdict: Verdict
    pairs: int
    estimate: float | None
    """Hodges-Lehmann estimate of the log-ratio (< 0 is worse); None without pairs."""
    flag_interval: tuple[float, float]
    """Log-ratio interval at the flag level (infinite where too few pairs for any)."""
    equivalence_interval: tuple[float, float]
    needed_pairs: int | None
    """For AMBIGUOUS: the pairs a decision would take if the estimate and the spread held (None: no estimate)."""
    reason: str

    @property
    def ratio(self) -> float | None:
        return None if self.estimate is None else math.exp(self.estimate)

    def interval_ratio(self) -> tuple[float, float]:
        """The interval that decided (flag for REGRESSED/IMPROVED, equivalence otherwise), as ratios."""
        low, high = self.flag_interval if self.verdict in (Verdict.REGRESSED, Verdict.IMPROVED) else (
            self.equivalence_interval)  # fmt: skip
        return _exp(low), _exp(high)


def log_ratio(a: float, b: float, *, higher_is_better: bool) -> float:
    """One pair's log-ratio of B's performance to A's: < 0 when B is worse."""
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"a pair needs two positive finite values, got {a!r} and {b!r}")
    return math.log(b / a) if higher_is_better else math.log(a / b)


def judge(x: list[float] | np.ndarray, rules: PairedRules, boundary: Boundary | None = None) -> PairedJudgement:
    """The verdict on one metric's log-ratios so far; AMBIGUOUS until the boundary allows a decision."""
    values = np.asarray(x, dtype=float)
    n = len(values)
    boundary = boundary or rules.boundary()
    infinite = (-math.inf, math.inf)
    if n == 0:
        return PairedJudgement(verdict=Verdict.AMBIGUOUS, pairs=0, estimate=None, flag_interval=infinite,
                               equivalence_interval=infinite, needed_pairs=None, reason="no pairs yet")  # fmt: skip
    walsh = walsh_averages(values)
    estimate = float(np.median(walsh))
    flag = walsh_interval(walsh, boundary.flag.get(n, -1))
    equivalence = walsh_interval(walsh, boundary.equivalence.get(n, -1))
    low_band, high_band = rules.band
    looked = n >= rules.min_pairs
    verdict, reason = Verdict.AMBIGUOUS, ""
    if looked and flag[1] < 0 and estimate <= low_band:
        verdict = Verdict.REGRESSED
        reason = f"worse at the flag level and {-math.expm1(estimate):.2%} beyond the {rules.threshold:.1%} threshold"
    elif looked and flag[0] > 0 and estimate >= high_band:
        verdict = Verdict.IMPROVED
        reason = f"better at the flag level and {math.expm1(estimate):.2%} beyond the {rules.threshold:.1%} threshold"
    elif looked and low_band < equivalence[0] and equivalence[1] < high_band:
        verdict = Verdict.PASS
        reason = f"equivalence interval inside +-{rules.threshold:.1%}"
    needed = None if verdict is not Verdict.AMBIGUOUS else needed_pairs(values, estimate, flag, equivalence, rules)
    if needed is not None:  # never fewer than the first look at which the boundary can decide at all
        within = low_band < estimate < high_band
        first = _first_decidable(boundary.equivalence if within else boundary.flag)
        needed = max(needed, first) if first is not None else needed
    if verdict is Verdict.AMBIGUOUS:
        reason = _ambiguous_reason(n, rules, flag, equivalence, estimate)
    return PairedJudgement(
        verdict=verdict,
        pairs=n,
        estimate=estimate,
        flag_interval=flag,
        equivalence_interval=equivalence,
        needed_pairs=needed,
        reason=reason,
    )


def _first_decidable(critical: dict[int, int]) -> int | None:
    return min((n for n, c in critical.items() if c >= 0), default=None)


def _ambiguous_reason(
    n: int, rules: PairedRules, flag: tuple[float, float], equivalence: tuple[float, float], estimate: float
) -> str:
    if n < rules.min_pairs or not math.isfinite(equivalence[0]):
        return f"{n} pair(s): too few for a decision at these error rates"
    low_band, high_band = rules.band
    if low_band < estimate < high_band:
        return "the change is within the threshold, but the interval is still wider than +-threshold"
    return "the change is at or beyond the threshold, but not yet significant at the flag level"


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


def first_decision(x: list[float] | np.ndarray, rules: PairedRules) -> tuple[Verdict, int]:
    """The sequential rule run look by look over a known sequence of log-ratios, as the engine runs it pair by
    pair: the first verdict other than AMBIGUOUS and the pairs it took (AMBIGUOUS and all of them if none)."""
    boundary = rules.boundary()
    for n in range(1, len(x) + 1):
        verdict = judge(x[:n], rules, boundary).verdict
        if verdict is not Verdict.AMBIGUOUS:
            return verdict, n
    return Verdict.AMBIGUOUS, len(x)


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


def _exp(value: float) -> float:
    return math.exp(value) if math.isfinite(value) else (math.inf if value > 0 else 0.0)
