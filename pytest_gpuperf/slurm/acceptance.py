"""One Slurm step per node of an allocation, each running pytest with its own results file, in bounded time.

A step that outlives the deadline is cancelled (``scancel JOB.STEP``) and its srun stopped; an interruption (Ctrl-C,
or SIGTERM/SIGHUP through ``signals_interrupt``) stops every step still running the same way, after SIGTERM to
their tasks so that each node's pytest writes what it finished. Each node's outcome says what happened (finished,
failed, timed out, interrupted, its node's state) so that a lost node is named, and the results the other nodes
wrote stay on disk for ``gpuperf fleet``. ``gpuperf accept`` (cli/accept.py) is the command.
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

from pytest_gpuperf.core.record.children import Stopping, Supervised, signal_group
from pytest_gpuperf.core.store.results import parse_document
from pytest_gpuperf.core.store.schema import SchemaError

STEP_NAME = "gpuperf-accept"
STEP_STOPPING = Stopping(first=signal.SIGTERM, grace=10.0)
"""How a step's srun is stopped once its task had its SIGTERM (``_stop_steps``): srun, signalled itself, kills its
step at once, so it is signalled only after the task's grace."""


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
    interrupted: bool = False
    """Whether the job was interrupted before this node's step ended (it was stopped)."""

    @property
    def wrote(self) -> bool:
        return self.results.is_file() and self.results.stat().st_size > 0

    @property
    def finished(self) -> bool:
        """Whether it wrote the results of a whole session: not one its pytest was stopped in (a stop signal marks
        the results it writes ``interrupted``), so that its tests are the others' and the fleet may place it."""
        if not self.wrote:
            return False
        try:
            document = parse_document(self.results.read_bytes(), where=str(self.results))
        except (OSError, SchemaError):
            return True  # not this module's to judge: the fleet step names the file and what is wrong with it
        return not (document.get("settings") or {}).get("interrupted")

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
        if self.interrupted:
            how = "stopped when the job was interrupted, before its step ended"
        elif self.status == 0:
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
    passed, cancel what is left, and say how each ended. ``out/nodes/NODE.json``, ``out/logs/NODE.log``.

    Interrupted (KeyboardInterrupt: Ctrl-C, or a stop signal under ``signals_interrupt``), it stops the steps
    still running: SIGTERM to their tasks first (``scancel --signal=TERM``; outside a job, to each srun), so that
    each node's pytest writes what it finished, then after the grace ``scancel`` for what Slurm still lists; their
    outcomes are marked ``interrupted``."""
    (out / "nodes").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env is None else env)
    started = time.monotonic()
    steps: dict[str, tuple[Supervised, Path, Path]] = {}
    ended: dict[str, float] = {}
    interrupted = False
    try:
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
                        stopping=STEP_STOPPING,
                    ),
                    results,
                    log,
                )
        while len(ended) < len(steps) and time.monotonic() - started < deadline_s:
            for node, (srun_process, _, _) in steps.items():
                if node not in ended and srun_process.poll() is not None:
                    ended[node] = time.monotonic() - started
            time.sleep(0.1)
    except KeyboardInterrupt:
        interrupted = True
    late = [node for node in steps if node not in ended]
    if interrupted:
        _stop_steps({node: steps[node][0] for node in late}, env)
        _cancel_steps([node for node in late if steps[node][0].poll() is None], env)
    elif late:
        _cancel_steps(late, env)
    outcomes: list[NodeOutcome] = []
    while len(outcomes) < len(steps):
        node = list(steps)[len(outcomes)]
        srun_process, results, log = steps[node]
        try:
            srun_process.stop()
            srun_process.close()
            stopped = interrupted and node not in ended
            outcome = NodeOutcome(
                node=node,
                results=results,
                log=log,
                status=srun_process.returncode if node in ended or stopped else None,
                seconds=ended.get(node, time.monotonic() - started if stopped else deadline_s),
                interrupted=stopped,
            )
            if not stopped and (outcome.status != 0 or not outcome.wrote):
                outcome = replace(outcome, state=node_state(node, env))
        except KeyboardInterrupt:
            # A stop signal as the outcomes are read (every step has ended): read them all the same; the caller
            # knows it was interrupted (signals_interrupt raises once, so this loop ends).
            continue
        outcomes.append(outcome)
    return outcomes


def _stop_steps(sruns: dict[str, Supervised], env: dict[str, str]) -> None:
    """SIGTERM to every step's task at once (srun itself, signalled, would kill its step at once), then their grace
    together: a job's KillWait is short, stopping them one after another could outlast it."""
    if not _cancel_steps(list(sruns), env, signal="TERM"):
        for srun_process in sruns.values():  # not inside a job (no step to name): srun's group itself
            signal_group(srun_process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STEP_STOPPING.grace
    while time.monotonic() < deadline and any(srun_process.poll() is None for srun_process in sruns.values()):
        time.sleep(STEP_STOPPING.poll_s)


def _cancel_steps(nodes: Sequence[str], env: dict[str, str], *, signal: str | None = None) -> bool:
    """``scancel`` the steps of ``nodes`` in this job (``signal``: only send it to their tasks); False where
    there is no job or none of them is listed."""
    job = env.get("SLURM_JOB_ID")
    if not job or not nodes:
        return False
    listed = _quiet(["squeue", "-h", "--steps", "--jobs", job, "-o", "%i %j"], env)
    wanted = {f"{STEP_NAME}-{node}" for node in nodes}
    found = [step for step, _, name in (line.strip().partition(" ") for line in listed.splitlines()) if name in wanted]
    if found:
        _quiet(["scancel", "--quiet", *([f"--signal={signal}"] if signal else []), *found], env)
    return bool(found)


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
