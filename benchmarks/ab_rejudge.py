"""Re-judge kept `ab_power.py` comparisons with other per-session figures, offline, on the same sessions.

For each comparison kept by ``ab_power.py --out FILE --sessions DIR``, every pair's two sessions are read back;
the pair is left out by the engine's own rule (``why_left_out``: a contended session, or canaries that differ)
and judged by its own sequential boundary (core/paired.py), with each session's figure taken as its median, its
lower quartile, its 10th percentile or its best sample. A comparison whose kept pairs run out before a figure
decides (the live run had stopped earlier, on its own figure's decision) is counted as "ran out", not decided.

    python benchmarks/ab_rejudge.py ab-power.json DIR

Prints each comparison's verdict, judged pairs and pairs run per figure, then the counts per level.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.cli.ab_engine import AbPlan, session_figure, why_left_out  # noqa: E402
from pytest_gpuperf.core.paired import PairedRules, judge, log_ratio  # noqa: E402
from pytest_gpuperf.core.settings import DEVICE_DEFAULTS  # noqa: E402
from pytest_gpuperf.machine.contention import MachineState  # noqa: E402

ENGINE = AbPlan(cmd_a=(), cmd_b=(), pytest_args=(), out_dir=Path())
"""The engine's defaults, which ab_power.py runs with: the CPU sessions' threshold, its alpha and looks."""
RULES = PairedRules(threshold=DEVICE_DEFAULTS["cpu"]["threshold"], alpha=ENGINE.alpha, min_pairs=ENGINE.min_pairs,
                    max_pairs=ENGINE.max_pairs)  # fmt: skip
assert ENGINE.max_left_out is None  # None: as many replacement pairs as judged ones
MAX_PAIRS_RUN = 2 * ENGINE.max_pairs


def quantile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * share
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


FIGURES: dict[str, Callable[[Sequence[float]], float]] = {  # the workload's metric is a time: lower is better
    "median": lambda values: session_figure(values, higher_is_better=False, figure="median"),
    "lower quartile": lambda values: quantile(values, 0.25),
    "10th percentile": lambda values: quantile(values, 0.10),
    "best": lambda values: session_figure(values, higher_is_better=False, figure="best"),
}

Session = tuple[list[float], MachineState | None]


def read_session(path: Path) -> Session:
    [metric] = json.loads(path.read_text())["results"]
    state = metric["context"].get("machine")
    return metric["samples"], MachineState.from_dict(state) if state else None


def kept_pairs(folder: Path) -> list[tuple[Session, Session]]:
    pairs = []
    for a in sorted((folder / "sessions").glob("*-A.json")):
        b = a.with_name(a.name.replace("-A.json", "-B.json"))
        if b.exists():
            pairs.append((read_session(a), read_session(b)))
    return pairs


def rejudge(
    pairs: list[tuple[Session, Session]], figure: Callable[[Sequence[float]], float], rules: PairedRules, boundary: Any
) -> tuple[str, int, int]:
    """(verdict or "ran out", judged pairs, pairs run) of one comparison under one session figure."""
    ratios: list[float] = []
    run = 0
    for (a_samples, a_state), (b_samples, b_state) in pairs[:MAX_PAIRS_RUN]:
        run += 1
        if why_left_out(a_state, b_state):
            continue
        ratios.append(log_ratio(figure(a_samples), figure(b_samples), higher_is_better=False))
        verdict = judge(ratios, rules, boundary).verdict.value
        if verdict != "AMBIGUOUS" or len(ratios) >= rules.max_pairs:
            return verdict, len(ratios), run
    return ("AMBIGUOUS" if run >= MAX_PAIRS_RUN else "ran out"), len(ratios), run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trials", type=Path, help="the --out file of ab_power.py")
    parser.add_argument("sessions", type=Path, help="the --sessions folder of the same run")
    args = parser.parse_args()
    rules = RULES
    boundary = rules.boundary()
    trials = json.loads(args.trials.read_text())["trials"]
    folders = sorted(args.sessions.glob("trial-*"))
    if len(folders) != len(trials):
        print(f"{args.sessions}: {len(folders)} comparison folders for {len(trials)} trials", file=sys.stderr)
        return 2
    outcomes: dict[tuple[float, str], list[tuple[str, int, int]]] = {}
    for trial, folder in zip(trials, folders, strict=True):
        pairs = kept_pairs(folder)
        row = {name: rejudge(pairs, figure, rules, boundary) for name, figure in FIGURES.items()}
        for name, outcome in row.items():
            outcomes.setdefault((trial["level"], name), []).append(outcome)
        print(
            f"{folder.name} {trial['level']:.0%} hog {'on' if trial['hog'] else 'off'} live {trial['verdict']}: {row}"
        )
    for (level, name), rows in sorted(outcomes.items()):
        counts = dict(Counter(verdict for verdict, _, _ in rows))
        print(
            f"{level:.0%} {name}: {counts}; judged pairs max {max(n for _, n, _ in rows)}, "
            f"pairs run max {max(r for _, _, r in rows)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
