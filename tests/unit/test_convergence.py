"""Unit tests of the convergence statistics on synthetic loss curves (no torch, no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuperf.core.stats.convergence import (
    StepsOutcome,
    check_curve,
    compare_steps,
    olympic_mean,
    smooth,
    steps_to_target,
)


def synthetic(seed: int, *, steps: int = 200, floor: float = 1.0, rate: float = 0.03, seed_sd: float = 0.01,
              shared_noise: float = 0.05) -> list[float]:  # fmt: skip
    """floor + exponential decay; the batch noise is shared by every seed (same data per step, as the corpus
    gives), the seed effect is a small per-seed offset and jitter."""
    t = np.arange(steps)
    batch_noise = np.random.default_rng(1234).normal(0, shared_noise, steps)
    own = np.random.default_rng(seed)
    return list(floor + 4.0 * np.exp(-rate * t) + batch_noise + own.normal(0, seed_sd) + own.normal(0, seed_sd, steps))


def test_smooth_is_a_trailing_mean() -> None:
    np.testing.assert_allclose(smooth([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(smooth([5.0], 3), [5.0])
    with pytest.raises(ValueError, match="window"):
        smooth([1.0], 0)


def test_steps_to_target_counts_steps_and_waits_for_a_full_window() -> None:
    curve = [5.0, 0.1, 5.0, 1.0, 1.0, 1.0, 0.5, 0.5]
    # the single 0.1 at step 1 is not a hit: the window of 3 is not full yet and the mean there is 2.55
    assert steps_to_target(curve, 1.0, window=3) == 6
    assert steps_to_target(curve, 0.1, window=3) is None
    assert steps_to_target([], 1.0, window=3) is None


def test_olympic_mean_drops_best_and_worst() -> None:
    assert olympic_mean([10, 1, 100, 12, 11]) == pytest.approx(11.0)
    assert olympic_mean([3, 5]) == 4.0
    with pytest.raises(ValueError):
        olympic_mean([])


def test_other_seeds_of_an_unchanged_workload_rarely_leave_the_band() -> None:
    # 60 independent (reference, current) draws of 3 seeds each: the band's false-alarm rate. Each draw tests
    # 180 correlated steps with a t quantile at alpha 0.01 over an sd from 2 degrees of freedom.
    alarms = 0
    for trial in range(60):
        reference = [synthetic(1000 + 6 * trial + s) for s in range(3)]
        current = [synthetic(1003 + 6 * trial + s) for s in range(3)]
        alarms += not check_curve(current, reference, warmup=20).passed
    assert alarms <= 4, f"{alarms} of 60 unchanged draws flagged"


def test_a_slower_decay_leaves_the_band_and_names_the_step() -> None:
    reference = [synthetic(s) for s in range(3)]
    current = [synthetic(10 + s, rate=0.027) for s in range(3)]  # 10% slower convergence
    result = check_curve(current, reference, warmup=20)
    assert not result.passed
    assert result.deviation > 0 and "above the reference" in result.message
    assert f"step {result.worst_step}" in result.message


def test_a_higher_floor_leaves_the_band() -> None:
    reference = [synthetic(s) for s in range(3)]
    current = [synthetic(10 + s, floor=1.03) for s in range(3)]
    assert not check_curve(current, reference, warmup=20).passed


def test_identical_reference_seeds_get_the_floor_not_a_zero_band() -> None:
    reference = [synthetic(0, seed_sd=0.0)] * 3
    almost = [[v * 1.001 for v in synthetic(0, seed_sd=0.0)]] * 3  # 0.1% off: inside the 0.5% floor
    assert check_curve(almost, reference, warmup=20).passed
    off = [[v * 1.02 for v in synthetic(0, seed_sd=0.0)]] * 3
    assert not check_curve(off, reference, warmup=20).passed


def test_check_curve_refuses_what_it_cannot_judge() -> None:
    with pytest.raises(ValueError, match="at least 2 reference"):
        check_curve([[1.0] * 30], [[1.0] * 30], warmup=5)
    with pytest.raises(ValueError, match="nothing after warm-up"):
        check_curve([[1.0] * 10], [[1.0] * 10] * 2, warmup=10)


def test_steps_consistent_with_the_reference_pass() -> None:
    check = compare_steps([101, 98, 104, 99, 100], [100, 97, 103, 102, 99])
    assert check.outcome is StepsOutcome.PASS and check.passed


def test_slower_convergence_is_flagged_with_its_statistics() -> None:
    check = compare_steps([125, 128, 130, 122, 160], [100, 97, 103, 102, 99])
    assert check.outcome is StepsOutcome.SLOWER and not check.passed
    assert check.current_mean == pytest.approx(olympic_mean([125, 128, 130, 122, 160]))
    assert check.p_slower is not None and check.p_slower < 0.05 and "t-test" in check.message


def test_much_faster_convergence_is_flagged_too() -> None:
    check = compare_steps([70, 72, 69], [100, 97, 103])
    assert check.outcome is StepsOutcome.FASTER and not check.passed
    assert "faster than the reference" in check.message


def test_olympic_mean_ignores_one_outlier_seed() -> None:
    assert compare_steps([99, 101, 300], [100, 98, 102, 101, 99]).outcome is StepsOutcome.PASS


def test_identical_reference_steps_use_the_sd_floor() -> None:
    # deterministic reference (all 50): one step either way is not significant, ten steps are
    assert compare_steps([51, 51, 51], [50, 50, 50]).outcome is StepsOutcome.PASS
    assert compare_steps([60, 60, 60], [50, 50, 50]).outcome is StepsOutcome.SLOWER


def test_a_seed_that_never_converges_fails_at_once() -> None:
    check = compare_steps([99, None, 101], [100, 98, 102])
    assert check.outcome is StepsOutcome.NOT_CONVERGED and "[1]" in check.message


def test_no_reference_convergence_point_is_not_a_failure() -> None:
    check = compare_steps([99, 100, 101], [100, None, 102])
    assert check.outcome is StepsOutcome.NO_REFERENCE and check.passed
