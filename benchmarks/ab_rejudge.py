"""Re-judge kept `ab_power.py` comparisons with other per-session figures and leave-out rules, offline.

For each comparison kept by ``ab_power.py --out FILE --sessions DIR``, every pair's two sessions are read back; the
pair is left out by a leave-out rule (``engine``, the engine's own ``why_left_out``: a contended session, or
canaries that differ; ``canaries``: only canaries that differ; ``contention``: only a contended session; ``floor``:
the engine's rule, and also a pair in which either session's canaries were beyond their noise band of the fastest
that side's canary has run so far in the comparison, so that only pairs measured at the machine's clean state are
judged; ``turns``: the engine's rule for a pair taking turns, only a pair in which one session was contended and the
other not; ``any-contention``: the engine's rule before 2026-12-03, which also left out a pair whose two sessions
shared one neighbour alike; ``none``: every pair judged) and judged by the engine's sequential boundary
(core/stats/paired.py; ``--boundary-shape 0.5`` for Pocock's, the engine's before 2026-12-03 evening), with each
session's figure taken as its median, its lower quartile, its 10th percentile or its best sample. A comparison
whose kept pairs run out before a figure decides (the live run had stopped earlier, on its own figure's decision)
is counted as "ran out", not decided.

    python benchmarks/ab_rejudge.py ab-power.json DIR [--figures best,median] [--rules engine,none]
                                    [--boundary-shape 0.5]

Prints each comparison's verdict, judged pairs and pairs run per figure and rule, then the counts per level.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.ab.leave_out import (  # noqa: E402
    canaries_differ,
    contended_in_one,
    sessions_contended,
    why_left_out,
)
from pytest_gpuperf.ab.model import AbPlan  # noqa: E402
from pytest_gpuperf.ab.reading import session_figure  # noqa: E402
from pytest_gpuperf.core.config.settings import DEVICE_DEFAULTS  # noqa: E402
from pytest_gpuperf.core.stats.paired import PairedRules, log_ratio  # noqa: E402
from pytest_gpuperf.core.verdict.paired import judge  # noqa: E402
from pytest_gpuperf.machine.contention import CANARIES, MachineState, canary_deviation  # noqa: E402

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


Figure = Callable[[Sequence[float], MachineState | None], float]


Pick = Callable[[Sequence[float]], float]


def per_canary(figure: Pick, canary: str, pick: Pick) -> Figure:
    """A session's figure divided by its own canary's (``pick`` of its samples): the canary-adjusted figure whose A/A
    error has to be shown before the engine could use it. Raises LookupError where the session has no such canary."""

    def adjusted(values: Sequence[float], state: MachineState | None) -> float:
        if state is None:
            raise LookupError("no machine state")
        samples = state.canary_s if canary == "python" else state.kernel_canary_s.get(canary)
        if not samples:
            raise LookupError(f"no {canary} canary")
        return figure(values) / pick(samples)

    return adjusted


def _best(values: Sequence[float]) -> float:
    return session_figure(values, higher_is_better=False, figure="best")


FIGURES: dict[str, Figure] = {  # the workload's metric is a time: lower is better
    "median": lambda values, state: session_figure(values, higher_is_better=False, figure="median"),
    "lower quartile": lambda values, state: quantile(values, 0.25),
    "10th percentile": lambda values, state: quantile(values, 0.10),
    "best": lambda values, state: _best(values),
    "best/sgemm median": per_canary(_best, "sgemm", statistics.median),
    "best/sgemm best": per_canary(_best, "sgemm", min),
    "best/python median": per_canary(_best, "python", statistics.median),
}
"""The default figures are the first four; the canary-adjusted ones are asked for by name (--figures)."""
DEFAULT_FIGURES = ("median", "lower quartile", "10th percentile", "best")

Session = tuple[list[float], MachineState | None]
LeaveOut = Callable[[MachineState | None, MachineState | None], str | None]


class AtTheFloor:
    """The ``floor`` rule, for one comparison (it keeps each side's fastest canary so far): the engine's rule, then
    each session's canaries against the fastest of its own side's sessions up to now (a side's own, so a stack
    that moves the canary itself is not left out for it). Reads only machine states, never the metric."""

    def __init__(self) -> None:
        self.fastest: dict[tuple[str, str], MachineState] = {}

    def __call__(self, a: MachineState | None, b: MachineState | None) -> str | None:
        why = why_left_out(a, b)
        slow = []
        for side, state in (("A", a), ("B", b)):
            if state is None:
                continue
            for canary in CANARIES:
                median = canary.median(state)
                if median is None:
                    continue
                fastest = self.fastest.get((side, canary.name))
                if fastest is None or median < (canary.median(fastest) or math.inf):
                    self.fastest[side, canary.name] = fastest = state
                deviation = canary_deviation(state, [fastest], canary)
                if deviation is not None and deviation[0] > deviation[1]:
                    slow.append(f"{side}'s {canary.short} {math.exp(deviation[0]) - 1:.0%} above its fastest")
        return why or "; ".join(slow) or None


def any_contention(a: MachineState | None, b: MachineState | None) -> str | None:
    """The engine's rule before it kept pairs whose sessions shared a neighbour alike: any contended session."""
    return sessions_contended(a, b, shared_neighbour_cancels=False) or canaries_differ(a, b)


RULES_LEFT_OUT: dict[str, Callable[[], LeaveOut]] = {
    "engine": lambda: why_left_out,
    "turns": lambda: contended_in_one,
    "any-contention": lambda: any_contention,
    "canaries": lambda: canaries_differ,
    "contention": lambda: sessions_contended,
    "floor": AtTheFloor,
    "none": lambda: lambda a, b: None,
}
"""Each makes a comparison's rule (``floor`` keeps state over the comparison's pairs)."""


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
    pairs: list[tuple[Session, Session]],
    figure: Figure,
    rules: PairedRules,
    boundary: Any,
    left_out: LeaveOut = why_left_out,
) -> tuple[str, int, int]:
    """(verdict or "ran out", judged pairs, pairs run) of one comparison under one session figure and rule."""
    ratios: list[float] = []
    run = 0
    for (a_samples, a_state), (b_samples, b_state) in pairs[:MAX_PAIRS_RUN]:
        run += 1
        if left_out(a_state, b_state):
            continue
        try:
            ratios.append(log_ratio(figure(a_samples, a_state), figure(b_samples, b_state), higher_is_better=False))
        except LookupError:
            continue  # a session without the canary this figure divides by
        verdict = judge(ratios, rules, boundary).verdict.value
        if verdict != "AMBIGUOUS" or len(ratios) >= rules.max_pairs:
            return verdict, len(ratios), run
    return ("AMBIGUOUS" if run >= MAX_PAIRS_RUN else "ran out"), len(ratios), run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trials", type=Path, help="the --out file of ab_power.py")
    parser.add_argument("sessions", type=Path, help="the --sessions folder of the same run")
    names = ", ".join(FIGURES)
    parser.add_argument("--figures", default=",".join(DEFAULT_FIGURES), help=f"session figures, of {names}")
    parser.add_argument("--rules", default="engine", help=f"leave-out rules, of {', '.join(RULES_LEFT_OUT)}")
    parser.add_argument(
        "--boundary-shape",
        type=float,
        default=RULES.boundary_shape,
        help=f"the sequential boundary's Wang-Tsiatis shape (0.5 Pocock; the engine's {RULES.boundary_shape})",
    )
    args = parser.parse_args()
    try:
        figures = {name: FIGURES[name] for name in args.figures.split(",")}
        left_out = {name: RULES_LEFT_OUT[name] for name in args.rules.split(",")}
    except KeyError as error:
        print(f"--figures/--rules: no such figure or rule {error}; see --help for the names", file=sys.stderr)
        return 2
    try:
        rules = dataclasses.replace(RULES, boundary_shape=args.boundary_shape)
    except ValueError as error:
        print(f"--boundary-shape: {error}", file=sys.stderr)
        return 2
    boundary = rules.boundary()
    trials = json.loads(args.trials.read_text())["trials"]
    folders = sorted(args.sessions.glob("trial-*"))
    if len(folders) != len(trials):
        print(f"{args.sessions}: {len(folders)} comparison folders for {len(trials)} trials", file=sys.stderr)
        return 2
    outcomes: dict[tuple[float, str, str], list[tuple[str, int, int]]] = {}
    for trial, folder in zip(trials, folders, strict=True):
        pairs = kept_pairs(folder)
        row = {
            f"{name}/{rule}": rejudge(pairs, figure, rules, boundary, make_rule())
            for name, figure in figures.items()
            for rule, make_rule in left_out.items()
        }
        for name, outcome in row.items():
            for hog in ("on" if trial["hog"] else "off", "all"):
                outcomes.setdefault((trial["level"], name, hog), []).append(outcome)
        print(
            f"{folder.name} {trial['level']:.0%} hog {'on' if trial['hog'] else 'off'} live {trial['verdict']}: {row}"
        )
    for (level, name, hog), rows in sorted(outcomes.items()):
        counts = dict(Counter(verdict for verdict, _, _ in rows))
        run = sorted(r for _, _, r in rows)
        print(
            f"{level:.0%} {name} hog {hog}: {counts}; judged pairs max {max(n for _, n, _ in rows)}, "
            f"pairs run median {run[len(run) // 2]}, max {run[-1]}, above 16 in {sum(r > 16 for r in run)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
