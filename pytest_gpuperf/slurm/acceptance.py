"""One Slurm step per node of an allocation, each running pytest with its own results file, in bounded time.

A step that outlives the deadline is cancelled (``scancel JOB.STEP``) and its srun stopped; each node's outcome
says what happened (finished, failed, timed out, its node's state) so that a lost node is named, and the results
the other nodes wrote stay on disk for ``gpuperf fleet``. ``gpuperf accept`` (cli/accept.py) is the command.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_gpuperf.core.record.children import Stopping, Supervised

STEP_NAME = "gpuperf-accept"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOutcome:
    """How one node's step ended."""

    node: str
    results: Path
    log: Path
    status: int | None
    """srun's exit status; None when it was stopped at the deadline."""
    seconds: float
    state: str = ""
    """The node's Slurm state when its step did not end well (DOWN+NOT_RESPONDING, IDLE, ...)."""

    @property
    def wrote(self) -> bool:
        return self.results.is_file() and self.results.stat().st_size > 0

    @property
    def said_written(self) -> bool:
        """Whether its pytest said it wrote the results (the plugin's last line), so that a missing file means a
        folder this node does not share, not a node lost."""
        try:
            return f"results written: {self.results}" in self.log.read_text(errors="replace")
        except OSError:
            return False

    def what_happened(self, deadline_s: float) -> str:
        """One phrase: why this node has no results, or how its run ended."""
        if self.status == 0:
            how = "its step ended (status 0) before its pytest finished: the node or its step was lost"
        elif self.status is None:
            how = f"did not finish within {deadline_s:.0f} s (stopped)"
        elif self.status < 0:
            how = f"its step was killed by {signal.Signals(-self.status).name}"
        else:
            how = f"its step ended with status {self.status}"
        state = f"; Slurm says the node is {self.state}" if self.state else ""
        return f"{how}{state}; its output: {self.log}"


def pytest_argv(python: str, pytest_args: Sequence[str]) -> list[str]:
    """The command each node runs (``run_steps`` adds the node's own ``--gpuperf-results FILE``)."""
    return [python, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]


def run_steps(
    nodes: Sequence[str],
    out: Path,
    command: Sequence[str],
    *,
    deadline_s: float,
    env: dict[str, str] | None = None,
) -> list[NodeOutcome]:
    """Start one step per node at once (``command`` plus its results file), wait until all ended or the deadline
    passed, cancel what is left, and say how each ended. ``out/nodes/NODE.json``, ``out/logs/NODE.log``."""
    (out / "nodes").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env is None else env)
    started = time.monotonic()
    steps: dict[str, tuple[Supervised, Path, Path]] = {}
    for node in nodes:
        results, log = out / "nodes" / f"{node}.json", out / "logs" / f"{node}.log"
        results.unlink(missing_ok=True)  # a file of an earlier run must not stand for this one
        srun = [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={node}",
            f"--job-name={STEP_NAME}-{node}",
            "--kill-on-bad-exit=1",
            "--overlap",  # the batch script's own step holds the first node's CPUs
        ]
        with open(log, "wb") as sink:
            steps[node] = (
                Supervised(
                    [*srun, *command, "--gpuperf-results", str(results)],
                    stdout=sink,
                    env=env,
                    stopping=Stopping(first=signal.SIGTERM, grace=10.0),
                ),
                results,
                log,
            )
    ended: dict[str, float] = {}
    while len(ended) < len(steps) and time.monotonic() - started < deadline_s:
        for node, (srun_process, _, _) in steps.items():
            if node not in ended and srun_process.poll() is not None:
                ended[node] = time.monotonic() - started
        time.sleep(0.1)
    late = [node for node in steps if node not in ended]
    if late:
        _cancel_steps(late, env)
    outcomes = []
    for node, (srun_process, results, log) in steps.items():
        status = srun_process.returncode if node in ended else None
        srun_process.stop()
        srun_process.close()
        outcome = NodeOutcome(node=node, results=results, log=log, status=status, seconds=ended.get(node, deadline_s))
        if status != 0 or not outcome.wrote:
            outcome = replace(outcome, state=node_state(node, env))
        outcomes.append(outcome)
    return outcomes


def _cancel_steps(nodes: Sequence[str], env: dict[str, str]) -> None:
    job = env.get("SLURM_JOB_ID")
    if not job:
        return
    listed = _quiet(["squeue", "-h", "--steps", "--jobs", job, "-o", "%i %j"], env)
    wanted = {f"{STEP_NAME}-{node}" for node in nodes}
    for line in listed.splitlines():
        step, _, name = line.strip().partition(" ")
        if name in wanted:
            _quiet(["scancel", "--quiet", step], env)


def node_state(node: str, env: dict[str, str] | None = None) -> str:
    """``node``'s State from scontrol (empty where it does not answer)."""
    found = re.search(r"\bState=(\S+)", _quiet(["scontrol", "show", "node", node, "-o"], env))
    return found.group(1) if found else ""


def _quiet(argv: list[str], env: dict[str, str] | None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout
