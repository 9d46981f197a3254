"""Change points on synthetic series of run medians (pure numpy; no pytest plugin involved)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuperf.cli.changepoints import change_points, split_point, t_test


def noisy(rng: np.random.Generator, *levels: tuple[float, int]) -> list[float]:
    return [value for level, n in levels for value in (level * (1 + 0.01 * rng.standard_normal(n)))]


def test_one_step_is_found_where_it_happens() -> None:
    rng = np.random.default_rng(3)
    [change] = change_points(noisy(rng, (100.0, 10), (115.0, 4)))
    assert change.index == 10
    assert change.magnitude == pytest.approx(0.15, abs=0.02)
    assert change.pvalue < 0.001


def test_up_then_down_gives_two_points() -> None:
    rng = np.random.default_rng(4)
    found = change_points(noisy(rng, (100.0, 8), (110.0, 8), (100.0, 8)))
    assert [c.index for c in found] == [8, 16]
    assert found[0].magnitude > 0 > found[1].magnitude


def test_pure_noise_rarely_has_change_points() -> None:
    rng = np.random.default_rng(5)
    false_alarms = sum(bool(change_points(noisy(rng, (100.0, 30)))) for _ in range(100))
    assert false_alarms <= 5  # measured 1 in 100 at these settings; the magnitude filter removes most of the rest


def test_split_point_maximises_the_energy_statistic() -> None:
    values = np.array([1.0, 1.1, 0.9, 5.0, 5.1, 4.9])
    tau, q = split_point(values)
    assert tau == 3 and q > 0
    assert split_point(np.array([1.0, 2.0, 3.0]), min_size=2) is None


def test_t_test_edges() -> None:
    assert t_test(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 1.0
    assert t_test(np.array([1.0, 1.0]), np.array([2.0, 2.0])) == 0.0
    assert t_test(np.array([1.0]), np.array([2.0, 2.0])) == 1.0
    with pytest.raises(ValueError, match="finite"):
        change_points([1.0, float("nan")])
