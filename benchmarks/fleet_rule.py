"""How often `gpuperf fleet`'s rule lists a healthy unit, and how often it finds a slow one (docs/fleet.md).

Simulated fleets: each unit's true median drawn log-normal with the fleet's spread between units, each unit's
samples with 1% noise around it (20 samples; 3% for the noisy case), one unit of some fleets set slower. Each
fleet is placed with core/stats/fleet.py ``place`` at its default rules, the level split over the fleet's units (one
metric). Prints, per case, the share of fleets that listed a healthy unit (false listings) or the slow one.

    .venv/bin/python benchmarks/fleet_rule.py [--fleets 300]
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np

from pytest_gpuperf.core.stats import fleet

CASES = (
    # (name, healthy units, spread between them, the odd unit's median or None, within-unit noise)
    ("16 healthy units, 2% spread", 16, 0.02, None, 0.01),
    ("64 healthy units, 2% spread", 64, 0.02, None, 0.01),
    ("16 healthy units, 1% spread", 16, 0.01, None, 0.01),
    ("6 healthy units, 5% spread", 6, 0.05, None, 0.01),
    ("6 units, 5% spread, one at 0.67", 5, 0.05, 0.67, 0.01),
    ("64 units, 2% spread, one at 0.9", 63, 0.02, 0.9, 0.01),
    ("16 units, 2% spread, one at 0.9", 15, 0.02, 0.9, 0.01),
    ("8 units, 1% spread, one at 0.9", 7, 0.01, 0.9, 0.01),
    ("4 units, 0.5% spread, one at 0.9", 3, 0.005, 0.9, 0.01),
    ("4 units, 1% spread, one at 0.9, 3% noise", 3, 0.01, 0.9, 0.03),
    ("3 units, 1% spread, one at 0.5", 2, 0.01, 0.5, 0.01),
)


def rates(healthy: int, spread: float, odd: float | None, noise: float, fleets: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    false_listings = found = 0
    for _ in range(fleets):
        medians = list(np.exp(rng.normal(0.0, spread, healthy))) + ([odd] if odd is not None else [])
        units = [m * np.exp(rng.normal(0.0, noise, 20)) for m in medians]
        placed = fleet.place(units, higher_is_better=True, rules=fleet.FleetRules(), level=0.01 / len(units))
        listed = [p.standing is fleet.Standing.LISTED for p in placed.placements]
        false_listings += any(listed[:healthy])
        found += bool(odd is not None and listed[-1])
    return false_listings / fleets, found / fleets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=300)
    args = parser.parse_args()
    print(f"{'case':44} {'bound':>6} {'healthy listed':>15} {'slow one listed':>16}")
    for bounded in (True, False):
        # the plain MAD (no upper bound on the others' spread) shows what the bound is for
        with mock.patch.object(fleet, "spread_bound", (lambda count: 1.0) if not bounded else fleet.spread_bound):
            for name, healthy, spread, odd, noise in CASES:
                wrong, right = rates(healthy, spread, odd, noise, args.fleets)
                shown = f"{right:.0%}" if odd is not None else "-"
                print(f"{name:44} {'yes' if bounded else 'no':>6} {wrong:>15.1%} {shown:>16}")


if __name__ == "__main__":
    main()
