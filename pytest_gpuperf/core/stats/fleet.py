"""Placing each unit of a fleet (a node, or one GPU of a node) against its siblings: pure functions on samples.

Owns ``FleetRules``, ``place`` and the ``Standing`` it returns: LISTED only when a unit is practically worse (by
the tolerance), outlying (a robust z against the others' MAD at an upper bound, pooled with the device kind's
prior, floored by sampling noise), separated (Mann-Whitney, Bonferroni over the invocation) and worse than its
machine's state explains (the caller's factor); SUSPECT, TAIL, EXPLAINED and BETTER are reported, never failing.
Invariant: each unit is judged leave-one-out. Imports only core/stats/.
Rationale: docs/design/fleet-placement.md; figures in docs/fleet.md.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

MAD_SCALE = 1.4826
"""MAD x this estimates the sd of a normal distribution (1 / Phi^-1(3/4))."""
MEDIAN_SE = 1.2533
"""The standard error of a sample median is about sqrt(pi/2) = 1.2533 times that of the mean (normal samples)."""
MAD_EFFICIENCY = 0.37
"""The MAD's asymptotic efficiency against the sd for normal values: its degrees of freedom per value."""
SPREAD_CONFIDENCE = 0.7
"""A unit's z is taken against the others' spread at this upper confidence bound, not their MAD as it came out:
the MAD of 15 units is off by 25% about one time in six, and a fleet whose MAD came out low would list a healthy
unit of its tail. Measured (benchmarks/fleet_rule.py, docs/fleet.md): fleets of 16 and 64 healthy units with a 2%
spread listed one in 5-7% of fleets at the plain MAD, 1-2% at this bound, while a unit at 0.9 among 64 is still
listed in 98% of them (100% at the plain MAD) and 2x among 3 in all."""
MIN_BOUND_DOF = 2.0
"""The fewest degrees of freedom the bound reads a MAD with: of two or three values the MAD-sd is close to their
sd (the asymptotic 0.37 per value understates it), and at one dof the bound (x2.6 for 3 others) cost a tenth of
the 10% outliers among 4 units with a 0.5% spread (89% found; 98% at two dof, with no healthy unit listed)."""
SPREAD_PRIOR_DOF = 2.0
"""Degrees of freedom of ``FleetRules.spread_prior``: half what the verdict gives its run-noise prior
(core/stats/unpaired.py ``Rules.prior_runs``), since a prior measured on one machine's sittings should give way to a
fleet's own spread once it has a few dozen units (a MAD of 64 carries ~23)."""
MIN_UNITS = 3
"""Units a metric needs to be judged: each is placed against at least two others."""
_SMALL_MAD = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}
"""Croux and Rousseeuw's (1992) factors making the MAD of a few values an unbiased sd estimate."""


class Standing(str, enum.Enum):
    LISTED = "LISTED"
    """Decidedly worse than the others: fails the fleet."""
    SUSPECT = "SUSPECT"
    """Worse by the tolerance and an outlier, but its samples do not separate at the level: more samples decide."""
    TAIL = "TAIL"
    """Worse by the tolerance and beyond the threshold against the others' MAD as it came out, but not against its
    upper bound: the tail of a wide fleet, or an outlier few units cannot tell from it. Reported, never failing:
    more units, or a fleet that agrees more closely, decide it."""
    EXPLAINED = "EXPLAINED"
    """Would be LISTED, but its deficit is no larger than its machine's state while it was measured can explain (a
    loaded or slower machine, ``place``'s ``explains``): reported, never failing; re-measuring it quiet decides."""
    BETTER = "BETTER"
    """Decidedly better than the others: reported, never failing."""
    OK = "OK"


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetRules:
    tolerance: float = 0.05
    """Smallest relative deficit against the others' median that lists a unit."""
    z: float = 3.5
    """Smallest robust z (modified z) that lists a unit."""
    alpha: float = 0.01
    """The invocation's family-wise level of the separation test, shared by all placements (Bonferroni)."""
    spread_prior: float = 0.0
    """Prior sd of the log medians of healthy units of this kind (0: none). A few units cannot measure their own
    spread: the others' MAD is pooled with this prior at ``SPREAD_PRIOR_DOF`` degrees of freedom against the MAD's
    own (``MAD_EFFICIENCY`` per unit), so it governs a fleet of four and fades in one of sixty-four. It only ever
    widens the scale a unit is placed against."""

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1:
            raise ValueError(f"tolerance must be a fraction in (0, 1), got {self.tolerance!r}")
        if not self.z > 0 or not math.isfinite(self.z):
            raise ValueError(f"z must be a positive number, got {self.z!r}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha!r}")
        if not 0 <= self.spread_prior < 1:
            raise ValueError(f"spread_prior must be a fraction in [0, 1), got {self.spread_prior!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """One unit against the others of one metric."""

    median: float
    """The unit's median."""
    others_median: float
    """The median of the other units' medians (leave-one-out)."""
    ratio: float
    """median / others_median, on the metric's own scale (above 1 is a larger number, better or worse)."""
    performance: float
    """The ratio turned so that below 1 is worse (1 / ratio for a time)."""
    z: float
    """Signed robust z of the unit's log median against the others (on the metric's own scale; +-inf where the
    others agree exactly and have no sampling noise)."""
    p_worse: float | None
    """One-sided Mann-Whitney p that the unit's samples are no worse than the others' pooled samples; None where
    the unit is not worse by the tolerance and the z threshold (the test is not run)."""
    p_better: float | None
    """The same for better; None where it is not better by both."""
    standing: Standing
    explains: float = 1.0
    """The largest factor by which the unit's machine's state could make it look worse (1: none recorded)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPlacement:
    """Every unit of one metric, and the fleet's spread of it."""

    median: float
    """The fleet median: the median of all units' medians."""
    spread: float
    """The fleet's robust sd of log unit medians (about the relative spread), floored by the sampling noise."""
    between: float
    """That sd before the floor: 1.4826 x MAD of the log unit medians."""
    noise: float
    """The floor: the typical standard error of one unit's log median."""
    placements: tuple[Placement, ...]


def mad_sd(values: np.ndarray) -> float:
    """Robust sd of ``values``: 1.4826 x MAD, corrected for few values; 0 for fewer than two."""
    n = len(values)
    if n < 2:
        return 0.0
    mad = float(np.median(np.abs(values - np.median(values))))
    return MAD_SCALE * mad * _SMALL_MAD.get(n, n / (n - 0.8))


@functools.lru_cache(maxsize=1024)
def spread_bound(count: int) -> float:
    """The factor from the MAD-sd of ``count`` values to its upper SPREAD_CONFIDENCE bound: the MAD carries about
    0.37 (count - 1) degrees of freedom (its efficiency against the sd of normal values), so sd^2 / est^2 is read
    as chi-square over dof (at least MIN_BOUND_DOF). 1.7 for 2 to 7 others, 1.3 for 15, 1.1 for 63."""
    dof = max(MIN_BOUND_DOF, MAD_EFFICIENCY * (count - 1))
    return math.sqrt(dof / float(scipy_stats.chi2.ppf(1 - SPREAD_CONFIDENCE, dof)))


def with_prior(measured: float, count: int, rules: FleetRules) -> float:
    """The MAD-sd of ``count`` units pooled with the rules' spread prior by degrees of freedom (0 without one)."""
    if rules.spread_prior <= 0:
        return 0.0
    dof = MAD_EFFICIENCY * max(0, count - 1)
    return math.sqrt((dof * measured**2 + SPREAD_PRIOR_DOF * rules.spread_prior**2) / (dof + SPREAD_PRIOR_DOF))


def median_noise(samples: np.ndarray) -> float:
    """Standard error of the log median of one unit's samples (0 where there are fewer than two)."""
    if len(samples) < 2:
        return 0.0
    return MEDIAN_SE * mad_sd(np.log(samples)) / math.sqrt(len(samples))


def place(
    units: Sequence[Sequence[float]],
    *,
    higher_is_better: bool,
    rules: FleetRules,
    level: float,
    explains: Sequence[float] | None = None,
) -> KeyPlacement:
    """Place each unit (its samples, positive) against the others; ``level``: the separation test's level for
    one placement (``rules.alpha`` over the invocation's placements); ``explains``: per unit, the largest factor
    (>= 1, inf where nothing bounds it) by which its machine's state while it was measured can make it look worse.
    A unit that would be listed is EXPLAINED where its deficit times that factor no longer reaches the tolerance:
    the others' state is not credited, since contention's effect is bounded from above only (it may be nil)."""
    if len(units) < MIN_UNITS:
        raise ValueError(f"a fleet placement needs at least {MIN_UNITS} units, got {len(units)}")
    factors = [1.0] * len(units) if explains is None else [float(f) for f in explains]
    if len(factors) != len(units) or not all(f >= 1 for f in factors):
        raise ValueError("explains: one factor >= 1 per unit")
    arrays = [np.asarray(unit, dtype=float) for unit in units]
    if any(len(a) == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0) for a in arrays):
        raise ValueError("every unit needs at least one sample, all finite and positive")
    logs = np.array([math.log(float(np.median(a))) for a in arrays])
    noises = np.array([median_noise(a) for a in arrays])
    between = mad_sd(logs)
    noise = math.sqrt(float(np.median(noises**2)))
    placements = []
    for index, samples in enumerate(arrays):
        others = np.delete(logs, index)
        centre = float(np.median(others))
        typical = math.sqrt(float(np.median(np.delete(noises, index) ** 2)))
        floor = math.hypot(float(noises[index]), typical)
        others_sd = mad_sd(others)
        scale = max(others_sd * spread_bound(len(others)), floor, with_prior(others_sd, len(others), rules))
        gap = float(logs[index]) - centre
        z = gap / scale if scale > 0 else (0.0 if gap == 0 else math.copysign(math.inf, gap))
        ratio = math.exp(gap)
        performance = ratio if higher_is_better else 1 / ratio
        worse_z = z if higher_is_better else -z
        p_worse = p_better = None
        standing = Standing.OK
        # the separation test only where the first two conditions hold: it is the costly one (pooled samples)
        if performance <= 1 - rules.tolerance and worse_z <= -rules.z:
            p_worse = _mann_whitney(samples, _rest(arrays, index), "less" if higher_is_better else "greater")
            standing = Standing.LISTED if p_worse <= level else Standing.SUSPECT
            if standing is Standing.LISTED and performance * factors[index] > 1 - rules.tolerance:
                standing = Standing.EXPLAINED
        elif performance <= 1 - rules.tolerance and abs(gap) >= rules.z * max(others_sd, floor):
            standing = Standing.TAIL  # an outlier against the spread as it came out, not against its bound
        elif performance >= 1 + rules.tolerance and worse_z >= rules.z:
            p_better = _mann_whitney(samples, _rest(arrays, index), "greater" if higher_is_better else "less")
            standing = Standing.BETTER if p_better <= level else Standing.OK
        placements.append(
            Placement(
                median=float(np.median(samples)),
                others_median=math.exp(centre),
                ratio=ratio,
                performance=performance,
                z=z,
                p_worse=p_worse,
                p_better=p_better,
                standing=standing,
                explains=factors[index],
            )
        )
    return KeyPlacement(
        median=math.exp(float(np.median(logs))),
        spread=max(between, noise),
        between=between,
        noise=noise,
        placements=tuple(placements),
    )


def _rest(arrays: list[np.ndarray], index: int) -> np.ndarray:
    return np.concatenate([a for i, a in enumerate(arrays) if i != index])


def _mann_whitney(samples: np.ndarray, rest: np.ndarray, alternative: str) -> float:
    """One-sided Mann-Whitney p of ``samples`` against ``rest`` (1.0 where every value is tied: no evidence)."""
    if np.all(samples == samples[0]) and np.all(rest == samples[0]):
        return 1.0
    return float(scipy_stats.mannwhitneyu(samples, rest, alternative=alternative).pvalue)


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided Mann-Whitney p ``n`` samples against ``m`` can reach (complete separation, no ties):
    1 / C(n + m, n). A level below it cannot be reached by any difference, however large."""
    return 1 / math.comb(n + m, n)


def pooled_spread(spreads: Sequence[tuple[float, int]]) -> float:
    """One figure for the fleet: the spreads of its metrics pooled as variances, each weighted by its units - 1
    (``spreads``: (spread, units) pairs). 0 for none."""
    weights = [(spread, units - 1) for spread, units in spreads if units > 1]
    total = sum(weight for _, weight in weights)
    if total == 0:
        return 0.0
    return math.sqrt(sum(spread**2 * weight for spread, weight in weights) / total)
