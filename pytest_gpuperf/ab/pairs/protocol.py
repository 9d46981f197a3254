"""The PairRunner protocol, and what every runner shares: the sessions' command lines and their files.

A runner runs the two sessions of one pair, in the pair's order, and returns what each finished session gave
(ab/reading.py); it never judges. May import ab/'s model, reading, cpus and sessions; never cli/ or ab/engine.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from pytest_gpuperf.ab.cpus import cpu_text
from pytest_gpuperf.ab.model import AbError, AbPlan, SessionOutcome

TimeLeft = Callable[[], float | None]
"""The seconds a session may still run (the budget's rest, at least 1 s), or None for no limit; read when a
session starts."""


class PairRunner(Protocol):
    """Runs the two sessions of one pair."""

    def run_pair(
        self, plan: AbPlan, order: str, index: int, sessions_dir: Path, *, env: dict[str, str], time_left: TimeLeft
    ) -> Iterator[SessionOutcome]:
        """The outcomes of pair ``index``'s sessions, each as soon as it is known (Ctrl-C keeps those already
        given), the side ``order`` names first first. A runner may stop after a session killed at the budget or
        failed: the pair is dropped whole, its other side need not run."""
        ...


def session_argv(plan: AbPlan, side: str, results_file: Path, turns: Path | None = None) -> list[str]:
    """CMD + -m pytest PYTEST_ARGS + what makes the session only measure and write its results (and, with
    ``turns``, take turns through the pipes of that prefix)."""
    prefix = plan.cmd_a if side == "A" else plan.cmd_b
    extra = ["--gpuperf-results", str(results_file), "--gpuperf-measure-only", "--gpuperf-remeasure", "0"]
    if turns is not None:
        extra += ["--gpuperf-take-turns", str(turns)]
    if plan.widen_cpus:
        extra += ["--gpuperf-widen-cpus", cpu_text(plan.widen_cpus)]
    if plan.repeats is not None:
        extra += ["--gpuperf-repeats", str(plan.repeats)]
    return [*prefix, "-m", "pytest", *plan.pytest_args, *extra]


def session_files(sessions_dir: Path, index: int, side: str) -> tuple[Path, Path]:
    """(results file, log file) of one session, what an earlier try (or a side) left at either path removed: a
    FIFO left at the log's path would block opening it for writing."""
    results_file = sessions_dir / f"{index:03d}-{side}.json"
    log_file = sessions_dir / f"{index:03d}-{side}.log"
    for path in (results_file, log_file):
        try:
            path.unlink(missing_ok=True)
        except OSError as error:
            raise AbError(
                f"{path}: cannot be replaced for session {index:03d}-{side} ({error.strerror or error}); "
                "remove it, or give another --out"
            ) from None
    return results_file, log_file
