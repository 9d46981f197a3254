"""Operating characteristics of `gpuperf ab`'s sequential rule on simulated pairs, per boundary shape.

The rule (core/stats/paired.py: signed-rank test, Hodges-Lehmann estimate, Walsh-average intervals, a Wang-Tsiatis
boundary calibrated by simulation) is run look by look on seeded sequences of pair log-ratios: a true change plus
noise of a given kind and spread, with the engine's defaults (threshold 2%, alpha 1%, 4..16 pairs). Per shape,
noise and change it prints the share flagged (REGRESSED or IMPROVED), SAME (PASS) and REGRESSED, and the median
pairs a comparison used. It measures the statistics alone; benchmarks/ab_power.py measures the whole command on
this machine.

    python benchmarks/ab_boundary.py [--trials 300] [--shapes 0.5,0.25,0] [--noise t5,contaminated]
                                     [--sds 1,1.5,2,3] [--changes 0,1,3,5]

Noise kinds: ``t5``, Student's t with 5 degrees of freedom scaled to the given sd (heavy tails); ``contaminated``,
normal noise of the given sd plus, in 10% of the pairs, a pair 5% off either way (a process in another state: the
quiet pairs at +5% that held the live benchmark's comparisons back).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.core.stats.paired import PairedRules  # noqa: E402
from pytest_gpuperf.core.verdict.paired import first_decision  # noqa: E402
from pytest_gpuperf.core.verdict.vocabulary import Verdict  # noqa: E402


def noise(kind: str, sd: float, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "t5":
        return rng.standard_t(5, n) * sd / math.sqrt(5 / 3)
    if kind == "contaminated":
        outliers = rng.random(n) < 0.10
        return rng.normal(0, sd, n) + np.where(outliers, rng.choice([-1.0, 1.0], n) * 0.05, 0.0)
    raise ValueError(f"no noise kind {kind!r} (t5, contaminated)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=300, help="simulated comparisons per cell")
    parser.add_argument("--shapes", default="0.5,0.25", help="boundary shapes (0.5 Pocock, 0 O'Brien-Fleming)")
    parser.add_argument("--noise", default="t5,contaminated", help="noise kinds: t5, contaminated")
    parser.add_argument("--sds", default="1,1.5,2,3", help="sd of a pair's log-ratio, in percent")
    parser.add_argument("--changes", default="0,1,3,5", help="true slowdowns of B, in percent")
    args = parser.parse_args()
    engine = PairedRules(threshold=0.02)
    print("| shape | noise | pair sd | change | flagged | SAME | REGRESSED | median pairs (max) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape in (float(text) for text in args.shapes.split(",")):
        rules = dataclasses.replace(engine, boundary_shape=shape)
        for kind in args.noise.split(","):
            for sd in (float(text) / 100 for text in args.sds.split(",")):
                for change in (float(text) / 100 for text in args.changes.split(",")):
                    rng = np.random.default_rng(12345)  # the same sequences for every shape
                    outcomes = [
                        first_decision(math.log1p(-change) + noise(kind, sd, rules.max_pairs, rng), rules)
                        for _ in range(args.trials)
                    ]
                    verdicts = [verdict for verdict, _ in outcomes]
                    pairs = [n for _, n in outcomes]
                    flagged = verdicts.count(Verdict.REGRESSED) + verdicts.count(Verdict.IMPROVED)
                    print(
                        f"| {shape:g} | {kind} | {sd:.1%} | {change:.0%} | {flagged / args.trials:.1%} | "
                        f"{verdicts.count(Verdict.PASS) / args.trials:.0%} | "
                        f"{verdicts.count(Verdict.REGRESSED) / args.trials:.0%} | "
                        f"{statistics.median(pairs):.0f} ({max(pairs)}) |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
