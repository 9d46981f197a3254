"""The minimum detectable effect of a comparison (unpaired.detectable_change), on known inputs: each part of the
REGRESSED rule binds in its turn, and a change just beyond the figure reads REGRESSED while one just short does not."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

from pytest_gpuperf.core.stats.unpaired import Rules, detectable_change, estimate
from pytest_gpuperf.core.verdict.stored import compare
from pytest_gpuperf.core.verdict.vocabulary import Verdict

TIGHT_NOW = 1.0 + 1e-4 * np.arange(20)
TIGHT_BASE = 1.0 + 1e-4 * np.arange(100)
"""Samples so tight that a change of a tenth of a percent separates them: the sample test never binds."""


def mde(*, log_ratio: float = 0.0, half: float = 0.0, scale: float = 0.0, dof: float = 10.0, **rules: float) -> float:
    found = detectable_change(
        TIGHT_NOW * math.exp(-log_ratio),  # times: a log ratio below 0 is a longer time
        TIGHT_BASE,
        log_ratio=log_ratio,
        ci_high=math.exp(log_ratio + half),
        scale=scale,
        dof=dof,
        higher_is_better=False,
        rules=Rules(**rules),  # type: ignore[arg-type]
    )
    assert found is not None
    return found


def test_no_noise_leaves_the_threshold() -> None:
    assert mde(threshold=0.02) == 0.02
    assert mde(threshold=0.10) == 0.10


def test_the_interval_binds_when_wider_than_the_threshold() -> None:
    assert math.isclose(mde(half=0.10, threshold=0.02), -math.expm1(-0.10))
    # the observed ratio's offset from its interval's top is what moves with the change, not the ratio itself
    assert math.isclose(mde(log_ratio=-0.3, half=0.10, threshold=0.02), -math.expm1(-0.10))


def test_the_run_level_test_binds_at_the_jobs_level() -> None:
    alone = mde(scale=0.01, dof=10, threshold=0.01)
    among = mde(scale=0.01, dof=10, threshold=0.01, family_size=100)
    assert math.isclose(alone, -math.expm1(scipy_stats.t.ppf(0.01, 10) * 0.01))
    assert math.isclose(among, -math.expm1(scipy_stats.t.ppf(0.01 / 100, 10) * 0.01))
    assert among > alone  # a job of a hundred metrics needs a larger change of each


def test_too_few_samples_can_catch_nothing() -> None:
    few = detectable_change(
        np.array([1.0, 1.1]),
        np.array([1.0, 1.05, 1.1]),
        log_ratio=0.0,
        ci_high=1.0,
        scale=0.0,
        dof=1.0,
        higher_is_better=False,
        rules=Rules(threshold=0.02),
    )
    assert few is None  # 2 against 3 samples: a Mann-Whitney p cannot go below 0.1


def test_the_sample_test_binds_for_spread_samples() -> None:
    rng = np.random.default_rng(1)
    now, base = np.exp(rng.normal(0, 0.05, 8)), np.exp(rng.normal(0, 0.05, 8))
    found = detectable_change(
        now, base, log_ratio=0.0, ci_high=1.0, scale=0.0, dof=1.0, higher_is_better=False, rules=Rules(threshold=0.02)
    )
    assert found is not None and found > 0.03  # eight samples of 5% spread each: a 2% change does not separate them


def test_a_rate_and_its_time_catch_the_same_change() -> None:
    rng = np.random.default_rng(2)
    times = np.exp(rng.normal(0, 0.03, 12))
    base = np.exp(rng.normal(0, 0.03, 30))
    kwargs = {"log_ratio": 0.0, "ci_high": 1.0, "scale": 0.0, "dof": 1.0, "rules": Rules(threshold=0.02)}
    as_times = detectable_change(times, base, higher_is_better=False, **kwargs)  # type: ignore[arg-type]
    as_rates = detectable_change(1 / times, 1 / base, higher_is_better=True, **kwargs)  # type: ignore[arg-type]
    assert as_times is not None and as_rates is not None and math.isclose(as_times, as_rates, rel_tol=1e-4)


def test_a_change_just_beyond_the_figure_regresses_and_one_just_short_does_not() -> None:
    rng = np.random.default_rng(3)
    runs = [list(np.exp(rng.normal(shift, 0.01, 20))) for shift in (0.0, 0.012, -0.008)]
    now = np.exp(rng.normal(0.004, 0.01, 20))
    rules = Rules(threshold=0.02, run_noise=0.01, family_size=10)
    figures = estimate(list(now), runs, higher_is_better=False, rules=rules)
    assert figures is not None and figures.detectable is not None
    slower = 1 / (1 - figures.detectable)  # a time this many times longer is worse by the figure
    for factor, caught in ((slower * 1.01, True), (slower * 0.99, False)):
        judged = compare(list(now * factor), runs, higher_is_better=False, rules=rules)
        assert (judged.verdict is Verdict.REGRESSED) is caught, (factor, judged.reason)
        assert judged.detectable is not None and math.isclose(judged.detectable, figures.detectable, rel_tol=0.02)
