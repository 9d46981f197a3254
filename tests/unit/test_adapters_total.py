"""Adapters are total (issue 48, item 3): text interleaved ranks can write never raises a raw Python exception.

Each case below raised ValueError, OverflowError, RecursionError or IsADirectoryError, or blocked on a FIFO,
before; now it is either read (a figure out of range left out) or an OutputError naming the file or the output
and the line, which ``perf.run_command`` turns into its ``gpuperf:`` failure with the log's tail.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_gpuperf.core.record.readings import OutputError, Reading, RunOutput, parse_number, parse_step
from pytest_gpuperf.frameworks import JsonlAdapter, Metric
from pytest_gpuperf.frameworks.maxtext import ADAPTER as MAXTEXT
from pytest_gpuperf.frameworks.megatron import ADAPTER as MEGATRON
from pytest_gpuperf.frameworks.serving import SGLANG, VLLM

JSONL_FILE = JsonlAdapter(metrics={"tps": Metric(key="tps", unit="tok/s", higher_is_better=True)}, source="file")
JSONL_OUTPUT = JsonlAdapter(metrics={"tps": Metric(key="tps", unit="tok/s", higher_is_better=True)})
TITAN = "step: {step}  loss: 7.1  memory: {memory}GiB(6.01%)  tps: 57,729  tflops: 78.76  mfu: 7.96%"
MAXTEXT_LINE = (
    "completed step: 3, seconds: {seconds}, TFLOP/s/device: 1.000, Tokens/s/device: 800.000, total_weights: 4096, "
    "loss: 9.000"
)
MEGATRON_LINE = " iteration {iteration}/ 100 | elapsed time per iteration (ms): 812.3 | {extra}"
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "1" + "0" * 400
NAN_INF = "number of nan iterations: inf |"


def titan(**values: str) -> Reading:
    from pytest_gpuperf.frameworks.torchtitan import ADAPTER

    return ADAPTER.read(RunOutput(log=TITAN.format(**{"step": "10", "memory": "5.71", **values})))


def in_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "out.json"
    path.write_text(text)
    return path


CASES: dict[str, Callable[[Path], Reading]] = {
    "torchtitan memory 5.7.1": lambda tmp: titan(memory="5.7.1"),
    "torchtitan 5,000-digit step": lambda tmp: titan(step="9" * 5000),
    "maxtext seconds 1.2.3": lambda tmp: MAXTEXT.read(RunOutput(log=MAXTEXT_LINE.format(seconds="1.2.3"))),
    "maxtext file nested 100k deep": lambda tmp: MAXTEXT.read(RunOutput(log="", file=in_file(tmp, DEEP))),
    "megatron 5,000-digit iteration": lambda tmp: MEGATRON.read(
        RunOutput(log=MEGATRON_LINE.format(iteration="7" * 5000, extra=""))
    ),
    "jsonl output nested 100k deep": lambda tmp: JSONL_OUTPUT.read(RunOutput(log="{" + '"a":' * 1 + DEEP + "}")),
    "jsonl file nested 100k deep": lambda tmp: JSONL_FILE.read(
        RunOutput(log="", file=in_file(tmp, '{"a": ' + DEEP + "}"))
    ),
    "vllm-bench nested 100k deep": lambda tmp: VLLM.read(RunOutput(log="", file=in_file(tmp, DEEP))),
    "vllm-bench output is a folder": lambda tmp: VLLM.read(RunOutput(log="", file=tmp)),
    "sglang-bench output is a folder": lambda tmp: SGLANG.read(RunOutput(log="", file=tmp)),
    "maxtext output is a folder": lambda tmp: MAXTEXT.read(RunOutput(log="", file=tmp)),
    "jsonl output is a folder": lambda tmp: JSONL_FILE.read(RunOutput(log="", file=tmp)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_text_is_an_output_error_naming_where(tmp_path: Path, case: str) -> None:
    with pytest.raises(OutputError) as raised:
        CASES[case](tmp_path)
    message = str(raised.value)
    assert "line 1" in message or "is a folder" in message, message
    assert len(message) < 800, message  # the 5,000 digits and the 100k brackets are not quoted whole


@pytest.mark.parametrize(
    "read",
    [
        lambda tmp: JSONL_OUTPUT.read(RunOutput(log=f'{{"step": 1, "tps": {HUGE}}}\n{{"step": 2, "tps": 5}}')),
        lambda tmp: VLLM.read(RunOutput(log="", file=in_file(tmp, json.dumps({"completed": 10, "failed": 0,
                                                                         "output_throughput": int(HUGE)})))),
        lambda tmp: MEGATRON.read(RunOutput(log=MEGATRON_LINE.format(iteration="3", extra=NAN_INF))),
    ],
    ids=["jsonl 10**400", "vllm-bench 10**400", "megatron nan iterations inf"],
)  # fmt: skip
def test_a_number_beyond_float_range_is_left_out_not_raised(tmp_path: Path, read: Callable[[Path], Reading]) -> None:
    reading = read(tmp_path)
    assert all(value < 1e300 for series in reading.series.values() for _, value in series.points)
    assert all(figure.value < 1e300 for figure in reading.figures.values())


def test_a_fifo_at_the_output_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            VLLM.read(RunOutput(log="", file=fifo))
        except BaseException as error:  # noqa: BLE001 - kept for the assertion below
            errors.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "the adapter blocked on a FIFO nobody writes"
    assert isinstance(errors[0], OutputError) and "must be a regular file" in str(errors[0])


def test_numbers_are_bounded_and_finite() -> None:
    assert parse_number("1,234.5") == 1234.5 and parse_number("12.5%") == 12.5
    assert parse_number("9" * 65) is None and parse_number("inf") is None and parse_number("nan") is None
    assert parse_number("1e400") is None and parse_number("5.7.1") is None
    assert parse_step("12") == 12 and parse_step(12.0) == 12 and parse_step(-1) is None and parse_step(10**20) is None
