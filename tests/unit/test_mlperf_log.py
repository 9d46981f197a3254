"""The bounded reader of MLPerf ``:::MLLOG`` lines (frameworks/mlperf_log.py): what a run's log says, and a clear
error naming file and line for every malformed line, in bounded time. No mlperf_logging needed."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.core.record.readings import OutputError
from pytest_gpuperf.frameworks import mlperf_log


def line(
    key: str, value: object = None, *, time_ms: float = 1000.0, event: str = "POINT_IN_TIME", **meta: object
) -> str:
    metadata = {"file": "train.py", "lineno": 1, **meta}
    document = {"namespace": "", "time_ms": time_ms, "event_type": event, "key": key, "value": value}
    return ":::MLLOG " + json.dumps({**document, "metadata": metadata})


def run_lines(status: str = "success") -> list[str]:
    return [
        "starting the trainer",
        line("submission_benchmark", "llama2_70b_lora"),
        line("submission_division", "closed"),
        line("lora_rank", 16),
        line("global_batch_size", 8),
        line("run_start", time_ms=2000.0, event="INTERVAL_START"),
        line("tracked_stats", {"throughput": 120.5}, time_ms=2500.0, step=10),
        line("eval_accuracy", 1.1, time_ms=3000.0, samples_count=80),
        "[rank0]: " + line("eval_accuracy", 0.9, time_ms=4000.0, samples_count=160),  # a launcher's prefix
        line("run_stop", time_ms=4500.0, event="INTERVAL_END", status=status, samples_count=160),
    ]


def test_a_run_gives_its_time_to_train_eval_curve_throughput_and_hyperparameters() -> None:
    run = mlperf_log.read_run("\n".join(run_lines()), "result_1.txt")
    assert run.time_to_train_s == 2.5
    assert run.evals == [(80, 1.1), (160, 0.9)]
    assert run.throughput == [(10, 120.5)]
    assert run.submission == {"benchmark": "llama2_70b_lora", "division": "closed"}
    assert run.hyperparameters == {"lora_rank": 16, "global_batch_size": 8}


def test_an_aborted_run_never_counts_as_converged() -> None:
    run = mlperf_log.read_run("\n".join(run_lines("aborted")), "result_1.txt")
    assert not run.converged and run.time_to_train_s is None


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (':::MLLOG {"namespace": "", "time_ms": 17', "line is not JSON"),
        (":::MLLOG [1, 2]", "expected a JSON object"),
        (':::MLLOG {"time_ms": 1}', "lacks event_type, key, value, metadata"),
        (line("eval_accuracy", 0.9).replace('"time_ms": 1000.0', '"time_ms": "soon"'), "time_ms is 'soon'"),
        (line("eval_accuracy", "0.9", samples_count=10), "'eval_accuracy' is '0.9', expected a number"),
        (line("eval_accuracy", 0.9, samples_count=-3), "samples_count=-3, expected a whole number"),
        (line("run_stop", status=None), "run_stop has status None"),
        (line("run_stop").replace('"metadata": {', '"metadata": [').replace("}}", "]}"), "not JSON"),
        (line("global_batch_size", 8).replace(" 8,", " NaN,"), "NaN is not a number JSON allows"),
        (line("global_batch_size", 8).replace(" 8,", " 1" + "0" * 5000 + ","), "a number of 5001 characters"),
        (line("note", "x" * (mlperf_log.MAX_LINE_CHARS + 10)), "at most 65536 are read"),
        (":::MLLOG " + "[" * 60_000, "line is not JSON"),
    ],
    ids=[
        "truncated",
        "not-object",
        "missing-fields",
        "time-string",
        "value-string",
        "negative-count",
        "no-status",
        "metadata-list",
        "nan",
        "huge-number",
        "huge-line",
        "deep-nesting",
    ],  # fmt: skip
)
def test_a_malformed_line_is_an_error_naming_the_file_and_line(bad: str, says: str) -> None:
    text = "\n".join([*run_lines()[:4], bad, *run_lines()[4:]])
    started = time.monotonic()
    with pytest.raises(OutputError, match="result_3.txt:5: ") as caught:
        mlperf_log.read_run(text, "result_3.txt")
    assert says in str(caught.value)
    assert time.monotonic() - started < 2.0


def test_a_log_without_its_run_stop_has_no_time_to_train() -> None:
    with pytest.raises(OutputError, match=r"result_1.txt:9: the log ends without run_stop"):
        mlperf_log.read_run("\n".join(run_lines()[:-1]), "result_1.txt")
    with pytest.raises(OutputError, match="a second run_start: one run per log"):
        mlperf_log.read_run("\n".join(run_lines() + run_lines()), "result_1.txt")


def test_a_file_too_large_or_not_a_file_is_refused_without_reading_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mlperf_log, "MAX_LOG_BYTES", 1024)
    big = tmp_path / "result_1.txt"
    big.write_text("\n".join(run_lines()) * 10)
    with pytest.raises(OutputError, match="more than 1,024 bytes, which no MLPerf log is"):
        mlperf_log.read_bounded(big)
    with pytest.raises(OutputError, match="not a regular file"):
        mlperf_log.read_bounded(tmp_path)
    if sys.platform != "win32":
        fifo = tmp_path / "never_ends.txt"  # a log that never ends: a pipe nobody writes to
        os.mkfifo(fifo)
        with pytest.raises(OutputError, match="not a regular file"):
            mlperf_log.read_bounded(fifo)


def test_reading_the_log_imports_no_mlperf_package() -> None:
    import subprocess

    code = "import pytest_gpuperf.frameworks.mlperf_log, sys; print('mlperf_logging' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
