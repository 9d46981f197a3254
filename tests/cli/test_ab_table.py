"""What `gpuperf ab` prints under its table: the confidence levels of its intervals."""

from __future__ import annotations

import pytest

from pytest_gpuperf.cli.ab import level


@pytest.mark.parametrize(
    ("confidence", "shown"),
    [
        (0.99, "99%"),
        (0.90, "90%"),
        # the 1% flag level shared by 6 metrics (Bonferroni): printed '100%' before, a level no interval has
        (1 - 0.01 / 6, "99.83%"),
        (1 - 0.01 / 400, "99.997%"),
        (1 - 1e-7, "99.99999%"),
    ],
)
def test_a_confidence_level_is_printed_without_rounding_up_to_100_percent(confidence: float, shown: str) -> None:
    assert level(confidence) == shown
