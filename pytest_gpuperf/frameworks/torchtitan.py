"""TorchTitan's training log (``torchtitan.train``).

Read from the code that prints it, pytorch/torchtitan torchtitan/components/metrics.py ``MetricsProcessor.log``
at commit 00fbaafa: a ``step: ... loss: ... memory: ... tps: ... tflops: ... mfu: ...`` line at step 1 and every
``--metrics.log_freq`` steps (ANSI colours optional, ``validate step:`` lines are evaluation). Metrics:
``tokens_per_s`` and ``tflops`` (per device), ``mfu`` (%), ``memory`` (GiB, max reserved) and the ``loss`` curve.
MFU is left out, saying why, where TorchTitan fell back to the A100's peak for a device it does not know. The
format as read: docs/design/adapters-read-the-writers-code.md.
"""

from __future__ import annotations

import re
from typing import TypeVar

from pytest_gpuperf.core.record.readings import Reading, RunOutput, Series, at_line, parse_number, parse_step

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(
    r"(?<!validate )\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>\S+)\s+(?:grad_norm:\s*\S+\s+)?"
    r"memory:\s*(?P<memory>[\d.]+)GiB\((?P<memory_pct>[\d.]+)%\)\s+tps:\s*(?P<tps>[\d,]+)\s+"
    r"tflops:\s*(?P<tflops>[\d,.]+)\s+mfu:\s*(?P<mfu>[\d.]+)%"
)
FALLBACK = "fallback to A100"
Number = TypeVar("Number", int, float)


class TorchTitanAdapter:
    name = "torchtitan"
    framework = "torchtitan"
    module = "torchtitan"
    reads_file = False
    min_runs = 1
    expects = (
        "TorchTitan's step lines such as 'step: 10  loss: 7.1234  grad_norm: 1.2  memory: 5.71GiB(6.01%)  "
        "tps: 57,729  tflops: 78.76  mfu: 7.96%' (torchtitan/components/metrics.py); is --metrics.log_freq "
        "larger than --training.steps, or was rank 0's output filtered out (LOG_RANK)?"
    )

    def read(self, output: RunOutput) -> Reading:
        text = ANSI.sub("", output.log)
        tokens = Series(unit="tok/s", higher_is_better=True)
        tflops = Series(unit="TFLOP/s", higher_is_better=True)
        mfu = Series(unit="%", higher_is_better=True)
        memory = Series(unit="GiB", higher_is_better=False)
        reading = Reading()
        for number, line in enumerate(text.splitlines(), 1):
            match = STEP.search(line)
            if match is None:
                continue
            with at_line("the output", number, line):
                step = _parsed(parse_step(match.group("step")), "step", match)
                for series, group in ((tokens, "tps"), (tflops, "tflops"), (mfu, "mfu"), (memory, "memory")):
                    series.points.append((step, _parsed(parse_number(match.group(group)), group, match)))
            loss = parse_number(match.group("loss"))  # "nan" and "inf" losses happen: no point of the curve
            if loss is not None:
                reading.loss.append((step, loss))
        reading.series = {"tokens_per_s": tokens, "tflops": tflops, "mfu": mfu, "memory": memory}
        reading.series = {name: series for name, series in reading.series.items() if series.points}
        # a zero is a device without the figure (tflops and MFU of a model whose FLOPs it does not count)
        for name in ("tflops", "mfu", "memory"):
            if name in reading.series and not any(value > 0 for _, value in reading.series[name].points):
                del reading.series[name]
        if FALLBACK in text and "mfu" in reading.series:
            del reading.series["mfu"]
            reading.context["mfu"] = (
                "not recorded: TorchTitan had no peak for this device and computed MFU against an A100's "
                "(torchtitan/tools/utils.py get_peak_flops)"
            )
        return reading


def _parsed(value: Number | None, group: str, match: re.Match[str]) -> Number:
    if value is None:
        raise ValueError(f"{group} {match.group(group)!r} is not a number")
    return value


ADAPTER = TorchTitanAdapter()
