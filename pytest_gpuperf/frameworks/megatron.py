"""Megatron-LM's training log (``pretrain_gpt.py`` and drivers built on ``megatron.training.pretrain``).

Read from the code that prints it, NVIDIA/Megatron-LM at commit 001b00c2: megatron/training/training.py
``training_log`` (the ``iteration ... |`` line every ``--log-interval``), megatron/training/utils.py
``report_memory`` and megatron/training/arguments.py ``_print_args`` (``seq_length``, ``world_size``). Metrics:
``step_time`` (s), ``tflops`` (per GPU, with ``--log-throughput``), ``tokens_per_s`` (per GPU, where the argument
dump gives what it needs), ``memory`` (MiB, the largest "max allocated" of each report) and the ``lm loss`` curve.
Megatron prints no MFU and none is invented. The formats as read: docs/design/adapters-read-the-writers-code.md.
"""

from __future__ import annotations

import re

from pytest_gpuperf.core.record.readings import Reading, RunOutput, Series, at_line, parse_number, parse_step

ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\)(.*)$")
ARGUMENT = re.compile(r"^(?:\[\w+\]:)?\s{2}(\w+) \.{2,} (\S.*)$")
"""``  seq_length ....... 512``, also behind torchrun's ``[default0]:`` prefix (``--tee``/``--log-dir`` runs)."""
STEP_TIME = "elapsed time per iteration (ms)"
THROUGHPUT = "throughput per GPU (TFLOP/s/GPU)"
BATCH = "global batch size"
LOSS = "lm loss"
NAN_ITERATIONS = "number of nan iterations"


def fields(text: str) -> dict[str, float]:
    """The finite ``key: number`` fields of a ``|``-separated Megatron line (bounded numbers, parse_number)."""
    found: dict[str, float] = {}
    for part in text.split("|"):
        key, colon, value = part.rpartition(":")
        number = parse_number(value) if colon else None
        if number is not None:
            found[key.strip()] = number
    return found


class MegatronAdapter:
    name = "megatron"
    framework = "megatron"
    module = "megatron"
    """Megatron-Core installs the ``megatron`` package (distribution megatron-core)."""
    reads_file = False
    min_runs = 1
    expects = (
        "Megatron's training_log lines such as ' iteration 10/100 | ... | elapsed time per iteration (ms): 812.3 | "
        "...' (megatron/training/training.py); is --log-interval larger than --train-iters, or is the last "
        "rank's output missing?"
    )

    def read(self, output: RunOutput) -> Reading:
        step_time = Series(unit="s", higher_is_better=False)
        tflops = Series(unit="TFLOP/s", higher_is_better=True)
        tokens = Series(unit="tok/s", higher_is_better=True)
        memory = Series(unit="MiB", higher_is_better=False)
        reading = Reading()
        arguments: dict[str, str] = {}
        peaks: dict[int, float] = {}
        nan_iterations = 0
        lines: list[tuple[int, dict[str, float]]] = []
        for number, line in enumerate(output.log.splitlines(), 1):
            argument = ARGUMENT.match(line)
            if argument is not None:
                arguments.setdefault(argument.group(1), argument.group(2).strip())
                continue
            match = ITERATION.search(line)
            if match is not None:
                with at_line("the output", number, line):
                    lines.append((_step(match.group(1)), fields(match.group(3))))
                continue
            report = MEMORY.search(line)
            if report is not None:
                peak = fields(report.group(3)).get("max allocated")
                if peak is not None:
                    with at_line("the output", number, line):
                        step = _step(report.group(2))
                    peaks[step] = max(peak, peaks.get(step, 0.0))
        seq_length = _int(arguments.get("seq_length"))
        world_size = _int(arguments.get("world_size"))
        for iteration, values in lines:
            if STEP_TIME in values and values[STEP_TIME] > 0:
                seconds = values[STEP_TIME] / 1000.0
                step_time.points.append((iteration, seconds))
                batch = values.get(BATCH)
                if batch and seq_length and world_size:
                    tokens.points.append((iteration, batch * seq_length / seconds / world_size))
            if values.get(THROUGHPUT, 0) > 0:
                tflops.points.append((iteration, values[THROUGHPUT]))
            if LOSS in values:
                reading.loss.append((iteration, values[LOSS]))
            nan_iterations += int(values.get(NAN_ITERATIONS, 0))  # finite (fields): an "inf" count is left out
        memory.points.extend(sorted(peaks.items()))
        reading.series = {
            name: series
            for name, series in (("step_time", step_time), ("tokens_per_s", tokens), ("tflops", tflops))
            if series.points
        }
        if memory.points:
            reading.series["memory"] = memory
        reading.context = {
            "global_batch_size": lines[-1][1].get(BATCH) if lines else None,
            "seq_length": seq_length,
            "world_size": world_size,
            "nan_iterations": nan_iterations,
        }
        if lines and not tokens.points:
            reading.context["tokens_per_s"] = (
                "not recorded: the argument dump (seq_length, world_size) was not in the output"
            )
        return reading


def _int(text: str | None) -> int | None:
    return parse_step(text) if text is not None and text.strip().isdigit() else None


def _step(text: str) -> int:
    step = parse_step(text)
    if step is None:
        raise ValueError(f"iteration {text[:40]!r}{'...' if len(text) > 40 else ''} is not a step number")
    return step


ADAPTER = MegatronAdapter()
