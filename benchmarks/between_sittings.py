"""How far a main job's timings moved from their stored baseline, when the two ran in different sittings.

Reads one or more results files written by ``pytest -m perf --gpuperf-results FILE`` (each judged against the
committed baselines, whose runs every result carries as ``baseline.runs``; that the files were written in another
sitting than those runs is the caller's to know, from the baseline files' dates) and, per test, takes
its first timing that can be compared run to run: a median-like figure (no p90/p99 tail, no collective bandwidth,
no scaling ratio), of a spread within the noise limit, against a baseline whose run medians are not one exact
figure. Prints each test's shift (log of now / the baseline's median of run medians, > 0 is worse), then the
median, rms and sd of the shifts beside the rms between-run sd inside the baseline's own sitting, and the sd per
sitting those imply (rms^2 = 2 s^2 + within^2 (1 + 1/k), one baseline sitting against one new one). Written here:
it is arithmetic over a results file, which no library knows.

    python benchmarks/between_sittings.py main.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from pytest_gpuperf.core.verdict.judge import UNMOVED_BY_LOAD

TAILS = ("p90", "p99", "busbw", "scaling")
NOISE_LIMIT = 0.10


def shifts(document: dict) -> list[tuple[str, str, float, float, int]]:
    """(test, metric, shift, within-sitting sd of the baseline's runs, baseline runs) per test, first timing."""
    found: dict[str, tuple[str, str, float, float, int]] = {}
    for result in document["results"]:
        runs = (result.get("baseline") or {}).get("runs") or []
        if result["test"] in found or len(runs) < 2 or result["unit"] in UNMOVED_BY_LOAD:
            continue
        if any(tail in result["metric"] for tail in TAILS) or result["summary"]["spread"] > NOISE_LIMIT:
            continue
        medians = [statistics.median(run) for run in runs]
        if len(set(medians)) == 1 or min(medians) <= 0 or result["summary"]["median"] <= 0:
            continue
        shift = math.log(result["summary"]["median"] / statistics.median(medians))
        if result["higher_is_better"]:
            shift = -shift
        within = statistics.stdev(math.log(m) for m in medians)
        found[result["test"]] = (result["test"], result["metric"], shift, within, len(runs))
    return list(found.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for path in args.results:
        rows.extend(shifts(json.loads(path.read_text())))
    if len(rows) < 2:
        print("fewer than two comparable timings: nothing to summarise", file=sys.stderr)
        return 1
    for test, metric, shift, within, _ in sorted(rows, key=lambda row: row[2]):
        print(f"{shift:+.3f}  (baseline runs' sd {within:.3f})  {test} {metric}")
    values = [row[2] for row in rows]
    rms = math.sqrt(statistics.fmean(v * v for v in values))
    within = math.sqrt(statistics.fmean(row[3] ** 2 for row in rows))
    runs = statistics.fmean(row[4] for row in rows)
    per_sitting = math.sqrt(max(rms**2 - within**2 * (1 + 1 / runs), 0.0) / 2)
    print(
        f"{len(rows)} tests: shift median {statistics.median(values):+.3f}, rms {rms:.3f}, "
        f"sd {statistics.stdev(values):.3f}; within the baseline's sitting rms sd {within:.3f}; "
        f"implied sd per sitting {per_sitting:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
