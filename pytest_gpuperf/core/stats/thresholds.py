"""The change threshold both comparisons share: the stored-baseline rules and the paired rules extend it.

Owns ``Thresholds``, one field for the smallest relative change that matters, so that `--gpuperf-threshold`,
the ``threshold`` setting and both policies say one knob under one name. Invariant: a fraction in (0, 1).
Imports nothing of the package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """The change a comparison must see to call a metric changed. Fractions, not percentages."""

    threshold: float
    """Smallest relative change that matters: a ratio at or below ``1 - threshold`` can be a regression."""

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be a fraction in (0, 1), got {self.threshold!r}")

    @property
    def band(self) -> tuple[float, float]:
        """The threshold on the log-ratio scale: (log(1 - threshold), log(1 + threshold))."""
        return math.log1p(-self.threshold), math.log1p(self.threshold)
