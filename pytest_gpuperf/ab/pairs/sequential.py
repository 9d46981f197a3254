"""One session after the other: the pair's two sessions run one at a time, in the pair's order, each through a
SessionRunner (a real child process by default; tests and other front ends inject their own).

A session killed at the budget or failed ends the pair: its other side does not run. May import ab/'s model,
reading, sessions and pairs/protocol.py; never cli/ or ab/engine.py.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pytest_gpuperf.ab.model import AbPlan, SessionOutcome
from pytest_gpuperf.ab.pairs.protocol import TimeLeft, session_argv, session_files
from pytest_gpuperf.ab.reading import finished_session
from pytest_gpuperf.ab.sessions import end_strays, start_session


class SessionRunner(Protocol):
    """Runs one session: argv, where its output goes, an optional time limit; returns (returncode, seconds),
    returncode None when the limit killed it. Replaceable so tests and other front ends can drive the engine."""

    def __call__(
        self, argv: list[str], *, log_file: Path, timeout: float | None, cwd: Path | None, env: dict[str, str]
    ) -> tuple[int | None, float]: ...


def subprocess_runner(
    argv: list[str], *, log_file: Path, timeout: float | None, cwd: Path | None, env: dict[str, str]
) -> tuple[int | None, float]:
    """A real session: no shell, output to its log, in a process group of its own (core/record/children.py); at the
    time limit or on Ctrl-C the whole group is stopped (before re-raising), and what it leaves behind when it
    exits is ended, so no process of it measures beside the next session."""
    started = time.monotonic()
    with log_file.open("wb") as log:
        process = start_session(argv, log, cwd=cwd, env=env)
        try:
            returncode: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.stop()
            returncode = None
        except BaseException:  # Ctrl-C: the session must not outlive the comparison
            process.stop()
            raise
    end_strays()
    return returncode, time.monotonic() - started


@dataclass(frozen=True, slots=True, kw_only=True)
class Sequential:
    """The PairRunner of sessions one after the other."""

    sessions: SessionRunner = subprocess_runner

    def run_pair(
        self, plan: AbPlan, order: str, index: int, sessions_dir: Path, *, env: dict[str, str], time_left: TimeLeft
    ) -> Iterator[SessionOutcome]:
        for side in order:
            outcome = self._run_session(plan, side, index, sessions_dir, time_left(), env)
            yield outcome
            if outcome.returncode is None or outcome.error is not None:
                return  # killed at the budget, or failed: the pair is dropped whole, its other side need not run

    def _run_session(
        self, plan: AbPlan, side: str, index: int, sessions_dir: Path, timeout: float | None, env: dict[str, str]
    ) -> SessionOutcome:
        results_file, log_file = session_files(sessions_dir, index, side)
        argv = session_argv(plan, side, results_file)
        returncode, seconds = self.sessions(argv, log_file=log_file, timeout=timeout, cwd=plan.cwd, env=env)
        return finished_session(side, index, argv, returncode, seconds, results_file, log_file)
