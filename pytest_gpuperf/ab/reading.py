"""What a finished session gave: its results document, read and validated as every gpuperf reader reads one
(core/store/schema.py, core/store/results.py), or one line saying why it cannot be used; and, per metric, the
session's figure (its best sample or its median: docs/design/ab-session-figure.md says why) with the
machine's state while it was measured.

A malformed document or log is a failed session, never a traceback. Reads files only; runs nothing, judges
nothing. May import core/, machine/ and ab/model.py; never cli/.
"""

from __future__ import annotations

import os
import signal
import stat
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpuperf.ab.model import MAX_RESULTS_DEPTH, SessionOutcome
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.results import parse_document
from pytest_gpuperf.core.store.schema import SchemaError
from pytest_gpuperf.core.verdict.judge import machine_state, timed_on_device
from pytest_gpuperf.machine.contention import MachineState
from pytest_gpuperf.machine.telemetry import check_conditions


@dataclass(frozen=True, slots=True)
class SessionMetric:
    """One metric as one session measured it."""

    figure: float
    """The session's figure for it: its best sample or its median (AbPlan.session_figure)."""
    unit: str
    higher_is_better: bool
    state: MachineState | None
    """The host's state while it was measured (None where the session recorded none, or where the metric was
    timed on the device: ``timed_on_device``)."""
    device_slowdown: str | None = None
    """For a metric timed on the device: why its telemetry shows the device slowed down for a reason of its own
    (thermal, a hardware slowdown, a power brake: not the power cap a heavy kernel reaches by itself), or None."""


def session_figure(samples: Sequence[float], *, higher_is_better: bool, figure: str) -> float:
    """One session's figure for a metric: "best" (the lowest time, the highest rate) or "median"."""
    if figure == "median":
        return statistics.median(samples)
    return max(samples) if higher_is_better else min(samples)


def session_metrics(document: dict[str, Any], figure: str) -> dict[tuple[str, str], SessionMetric]:
    """Per metric: the session's figure for it, its unit, direction and the machine's state while it was measured."""
    found = {}
    for entry in document.get("results", []):
        try:
            samples = [float(v) for v in entry["samples"]]
            key = (str(entry["test"]), str(entry["metric"]))
            context = entry.get("context")
            context = context if isinstance(context, dict) else {}
            higher_is_better = bool(entry["higher_is_better"])
            on_device = timed_on_device(context)
            found[key] = SessionMetric(
                figure=session_figure(samples, higher_is_better=higher_is_better, figure=figure),
                unit=str(entry.get("unit", "")),
                higher_is_better=higher_is_better,
                state=None if on_device else machine_state(context),
                device_slowdown=device_slowdown(context) if on_device else None,
            )
        except (KeyError, TypeError, ValueError, statistics.StatisticsError):  # min/max of no samples: ValueError
            continue  # a malformed entry of another version: that metric is not compared in this pair
    return found


def device_slowdown(context: dict[str, Any]) -> str | None:
    """Why a measurement's device telemetry shows the device slowed down by itself, or None (none recorded, or
    none seen). The power cap a heavy kernel reaches is not such a reason: a stack whose kernels draw more power
    is slowed by it, and that is the stack's doing, which the comparison must see."""
    telemetry = context.get("telemetry")
    return check_conditions(telemetry, None).problem if isinstance(telemetry, dict) else None


def finished_session(
    side: str,
    index: int,
    argv: list[str],
    returncode: int | None,
    seconds: float,
    results_file: Path,
    log_file: Path,
) -> SessionOutcome:
    """What one finished session gave: its results document, or why it gave none."""
    outcome = SessionOutcome(
        side=side,
        pair=index,
        argv=argv,
        returncode=returncode,
        seconds=seconds,
        results_file=results_file,
        log_file=log_file,
    )
    if returncode is None:
        return outcome
    if returncode != 0:
        outcome.error = _failure(returncode, log_file)
        return outcome
    document, outcome.error = read_session_results(results_file)
    outcome.document = document
    return outcome


def read_session_results(results_file: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A session's results document, read as every gpuperf reader reads one (bounded, regular files only,
    strict JSON, validated by core/store/results.py), or why it cannot be used: a malformed document is a failed
    session, never a traceback in the engine."""
    if not os.path.lexists(results_file):
        return None, "exit status 0 but no results file was written"
    try:
        data = schema.read_file(results_file)
    except schema.UnreadableFile as error:
        return None, f"unusable results file: {error}"
    try:
        document = parse_document(data, where=str(results_file))
    except SchemaError as error:
        return None, f"malformed results file: {error}"
    depth = nesting_depth(document, MAX_RESULTS_DEPTH)
    if depth > MAX_RESULTS_DEPTH:
        return None, f"malformed results file: {results_file}: nested more than {MAX_RESULTS_DEPTH} levels deep"
    return document, None


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and objects nest in ``value``, counted up to ``limit + 1`` (iterative: any depth)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            depth += 1
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _failure(returncode: int, log_file: Path) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    names = {1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
    return f"exit status {returncode} ({names.get(returncode, 'crashed')}): {_last_line(log_file)}"


LOG_TAIL_BYTES = 64 * 1024
"""How much of a session's log is read for its last line: a log can be gigabytes, or a FIFO a side left."""


def _last_line(log_file: Path) -> str:
    """The log's last telling line (an error if any), from its last LOG_TAIL_BYTES; raw text: printing it is
    the caller's business (cli/ab.py escapes control characters)."""
    try:
        descriptor = os.open(log_file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC)
    except OSError:
        return "no log"
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        try:
            status = os.fstat(handle.fileno())
            if not stat.S_ISREG(status.st_mode):
                return "no log (not a regular file)"
            handle.seek(max(0, status.st_size - LOG_TAIL_BYTES))
            tail = handle.read(LOG_TAIL_BYTES) or b""
        except OSError:
            return "no log"
    lines = [line.strip() for line in tail.decode("utf-8", errors="replace").splitlines()]
    useful = [line for line in lines if line and not set(line) <= set("=-_ ")]
    errors = [line for line in useful if line.startswith(("ERROR", "E ", "FAILED")) or "Error" in line]
    text = (errors or useful or ["no output"])[-1]
    return text[:200]
