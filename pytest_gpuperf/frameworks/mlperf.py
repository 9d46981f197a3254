"""MLPerf Training logs as gpuperf metrics: ``adapter="mlperf"`` for a command that logs ``:::MLLOG`` lines (a
reference implementation, a submitter's code, training/mlperf_proxy.py), ``record_results`` for a folder of a
system's result_*.txt. Every log read goes through the MLCommons compliance checker (mlperf_checks.py, ruleset
explicit) first: a non-compliant log fails with the checker's own message, an aborted run is never converged.
Metrics: ``time_to_train`` (s, run_start to run_stop), ``throughput`` (samples/s, where the log tracks it), the
eval curve against samples (curve ``loss``); benchmark, division, system and hyperparameters go into the context.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.core.record.readings import Figure, OutputError, Reading, RunOutput, Series
from pytest_gpuperf.frameworks import mlperf_log
from pytest_gpuperf.frameworks.mlperf_checks import (
    RULESET,
    Compliance,
    MissingChecker,
    check_compliance,
    olympic_score,
    rcp_word,
)

if TYPE_CHECKING:
    from pytest_gpuperf.core.record.perf import Perf

RESULTS = "result_*.txt"
EVAL_CURVE = "loss"
"""The eval curve is stored as run_command's ``loss`` curve: MLPerf's LLM benchmarks' eval_accuracy is a loss."""


def comply(text: str, where: str, *, ruleset: str, path: Path | None = None) -> tuple[mlperf_log.RunLog, Compliance]:
    """One run's log, read with bounds and passed by the compliance checker; else ``OutputError`` with our reading's
    word (file and line) and the checker's own message."""
    problem: str | None = None
    run: mlperf_log.RunLog | None = None
    try:
        run = mlperf_log.read_run(text, where)
    except OutputError as error:
        problem = str(error)
    try:
        if path is not None:
            compliance = check_compliance(path, ruleset=ruleset)
        else:  # the checker reads files: the command's output, its MLLOG lines kept, goes through one
            with tempfile.TemporaryDirectory(prefix="gpuperf-mllog-") as folder:
                copy = Path(folder) / "output.txt"
                lines = [line for line in text.splitlines() if mlperf_log.TOKEN in line]
                copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
                compliance = check_compliance(copy, ruleset=ruleset)
    except MissingChecker as error:
        raise OutputError(f"{where}: {error}") from None
    if problem is not None or not compliance.passed:
        said = f"{compliance.describe()}:\n{compliance.message}" if not compliance.passed else ""
        raise OutputError("\n".join(part for part in (problem, said) if part) if problem else f"{where}: {said}")
    assert run is not None
    return run, compliance


def reading_of(run: mlperf_log.RunLog, compliance: Compliance) -> Reading:
    """One compliant run's figures; an aborted run raises: it never converged, whatever the checker says."""
    seconds = run.time_to_train_s
    if seconds is None:
        raise OutputError(
            f"{run.where}: run_stop has status {run.status!r}: the run did not converge, so it has no time-to-train "
            f"(the compliance checker {'passes' if compliance.passed else 'fails'} it: it checks what the log says)"
        )
    reading = Reading(
        figures={"time_to_train": Figure(value=seconds, unit="s", higher_is_better=False)},
        context=context_of(run, compliance),
    )
    if run.throughput:
        reading.series["throughput"] = Series(unit="samples/s", higher_is_better=True, points=list(run.throughput))
    reading.loss = list(run.evals)
    return reading


def context_of(run: mlperf_log.RunLog, compliance: Compliance) -> dict[str, Any]:
    return {
        "mlperf": {
            **run.submission,
            "status": run.status,
            "samples_to_converge": run.evals[-1][0] if run.evals else None,
            "compliance": compliance.describe(),
        },
        "hyperparameters": dict(run.hyperparameters),
    }


@dataclass(kw_only=True)
class MlperfAdapter:
    """``:::MLLOG`` lines on the command's output (``source="output"``, the default: mllog prints to standard output)
    or in the file it writes at ``{output}`` (``source="file"``); one run per log."""

    source: str = "output"
    ruleset: str = RULESET
    """The MLPerf Training rules the compliance checker applies; given, never the package's moving default."""
    name: str = "mlperf"
    framework: str = "mlperf-logging"
    """The checker that judged the logs is what the stack names (the submitter's code names itself in the log)."""
    module: str | None = "mlperf_logging"
    min_runs: int = 3
    """time_to_train is one figure per run (MLPerf itself scores 10 runs of llama2_70b_lora)."""
    expects: str = field(init=False, default="")
    reads_file: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.source not in ("output", "file"):
            raise ValueError(f"MlperfAdapter: source={self.source!r}, expected 'output' or 'file'")
        self.reads_file = self.source == "file"
        where = "the file the command writes" if self.reads_file else "its output"
        self.expects = f"MLPerf Training log lines (`{mlperf_log.TOKEN.strip()} {{...}}`, mllog's) in {where}"

    def read(self, output: RunOutput) -> Reading:
        if self.reads_file:
            if output.file is None:
                raise OutputError("the mlperf adapter with source='file' needs {output} in the command")
            text, path, where = mlperf_log.read_bounded(output.file), output.file, str(output.file)
        else:
            text, path, where = output.log, None, "the command's output"
        run, compliance = comply(text, where, ruleset=self.ruleset, path=path)
        return reading_of(run, compliance)


ADAPTER = MlperfAdapter()


@dataclass(frozen=True, slots=True, kw_only=True)
class Score:
    """A folder of one system's runs, scored as MLPerf does."""

    score_s: float
    """The olympic mean time-to-train of the converged runs (the fastest and slowest left out)."""
    times_s: list[float]
    """Every converged run's time-to-train, in file order."""
    not_converged: list[str]
    rcp: str


def record_results(perf: Perf, folder: str | Path, *, ruleset: str = RULESET, metric: str = "time_to_train") -> Score:
    """Score ``folder``'s result_*.txt and record ``metric``: the runs MLPerf's score averages (converged runs
    without the fastest and slowest), so its judged mean is the MLPerf score; a log that fails the compliance
    checker fails the test with the checker's message."""
    base = Path(folder)
    files = sorted(base.glob(RESULTS), key=lambda p: (len(p.name), p.name))
    if not files:
        pytest.fail(f"gpuperf: no {RESULTS} in {base}: expected one MLPerf log per run of the system", pytrace=False)
    runs: list[mlperf_log.RunLog] = []
    compliance: Compliance | None = None
    for path in files:
        try:
            run, compliance = comply(mlperf_log.read_bounded(path), str(path), ruleset=ruleset, path=path)
        except OutputError as error:
            pytest.fail(f"gpuperf: {error}", pytrace=False)
        runs.append(run)
    benchmarks = sorted({run.benchmark for run in runs})
    if len(benchmarks) > 1:
        pytest.fail(f"gpuperf: {base} holds runs of {', '.join(benchmarks)}: one benchmark per folder", pytrace=False)
    converged = [run for run in runs if run.converged]
    times = [t for t in (run.time_to_train_s for run in converged) if t is not None]
    not_converged = [f"{Path(run.where).name} ({run.status})" for run in runs if not run.converged]
    if len(times) < 3:
        pytest.fail(
            f"gpuperf: {len(times)} of {len(runs)} run(s) in {base} converged; MLPerf's score leaves out the fastest "
            f"and the slowest, so it needs 3 at least (not converged: {not_converged})",
            pytrace=False,
        )
    score = olympic_score(times)
    assert score is not None and compliance is not None
    kept = sorted(times)[1:-1]
    result = Score(score_s=score, times_s=times, not_converged=not_converged, rcp=rcp_word(base, ruleset=ruleset))
    record = perf.record(
        metric,
        kept,
        unit="s",
        higher_is_better=False,
        context={
            **context_of(converged[0], compliance),
            "folder": str(base),
            "mlperf_score_s": round(score, 6),
            "score": "olympic mean of the converged runs' time-to-train (mlperf-logging's own average); the "
            "samples judged are the runs it averages",
            "runs": len(runs),
            "not_converged": not_converged,
            "rcp_checker": result.rcp,
        },
    )
    platforms = sorted({run.submission["platform"] for run in runs if run.submission.get("platform")})
    # the system as its logs name it joins the stack: a new platform string then reads as the change it is
    record.stack = {
        "mlperf-logging": compliance.version,
        **({"mlperf-platform": " | ".join(platforms)} if platforms else {}),
    }
    for run in converged:
        if len(run.evals) >= 2:
            curve = perf.record_curve(EVAL_CURVE, [s for s, _ in run.evals], [v for _, v in run.evals])
            curve.stack = dict(record.stack)
    return result
