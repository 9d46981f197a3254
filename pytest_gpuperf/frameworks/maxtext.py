"""MaxText's per-step metrics (``python -m MaxText.train ... metrics_file=PATH``), or its log where no file is named.

Read from the code that writes them, AI-Hypercomputer/maxtext MaxText/metric_logger.py at commit ee553898
(``write_metrics_locally``: one JSON line per step; ``log_metrics``: the ``completed step: ...`` line, read when
the command names no file). Metrics: ``step_time`` (s), ``tflops`` and ``tokens_per_s`` (per device) and the
``loss`` curve; eval lines are not steps, and MaxText logs no MFU. The formats as read:
docs/design/adapters-read-the-writers-code.md. No torch.
"""

from __future__ import annotations

import json
import re

from pytest_gpuperf.core.record import readings
from pytest_gpuperf.core.record.readings import Reading, RunOutput, Series

KEYS = {
    "step_time": ("perf/step_time_seconds", "s", False),
    "tflops": ("perf/per_device_tflops_per_sec", "TFLOP/s", True),
    "tokens_per_s": ("perf/per_device_tokens_per_sec", "tok/s", True),
}
LOSS = "learning/loss"
LOG_LINE = re.compile(
    r"completed step: (?P<step>\d+), seconds: (?P<step_time>[\d.]+), TFLOP/s/device: (?P<tflops>[\d.]+), "
    r"Tokens/s/device: (?P<tokens_per_s>[\d.]+), total_weights: [^,]+, loss: (?P<loss>[\d.]+)"
)


class MaxTextAdapter:
    name = "maxtext"
    framework = "maxtext"
    module = "MaxText"
    reads_file = False
    """It reads the metrics file where ``{output}`` names one (``metrics_file={output}``), else the log."""
    min_runs = 1
    expects = (
        'MaxText\'s metrics_file lines ({"perf/step_time_seconds": ..., "step": ...}, MaxText/metric_logger.py) '
        "where the command has metrics_file={output}, else its 'completed step: N, seconds: ...' log lines"
    )

    def read(self, output: RunOutput) -> Reading:
        series = {name: Series(unit=unit, higher_is_better=better) for name, (_, unit, better) in KEYS.items()}
        reading = Reading(series=series)
        if output.file is not None:
            missing = f"MaxText wrote no metrics file at {output.file} (metrics_file={{output}})"
            text = readings.output_file(output.file, missing=missing)
            for number, line in enumerate(text.splitlines(), 1):
                with readings.at_line(str(output.file), number, line):
                    try:
                        document = json.loads(line)
                    except ValueError:
                        continue
                step = readings.parse_step(document.get("step")) if isinstance(document, dict) else None
                if not isinstance(document, dict) or step is None:
                    continue
                for name, (key, _, _) in KEYS.items():
                    value = readings.finite(document.get(key))
                    if value is not None and value > 0:
                        series[name].points.append((step, value))
                loss = readings.finite(document.get(LOSS))
                if loss is not None:
                    reading.loss.append((step, loss))
            reading.context["source"] = "metrics_file"
        else:
            for number, line in enumerate(output.log.splitlines(), 1):
                match = LOG_LINE.search(line)
                if match is None:
                    continue
                with readings.at_line("the output", number, line):
                    values = {group: readings.parse_number(match.group(group)) for group in ("step", *KEYS, "loss")}
                    bad = [f"{group} {match.group(group)!r}" for group, value in values.items() if value is None]
                    step = readings.parse_step(match.group("step"))
                    if bad or step is None:
                        raise ValueError(f"not a number: {', '.join(bad) or 'step'}")
                for name in KEYS:
                    value = values[name]
                    if value is not None and value > 0:
                        series[name].points.append((step, value))
                loss = values["loss"]
                if loss is not None:
                    reading.loss.append((step, loss))
            reading.context["source"] = "log (completed step lines, 3 decimals)"
        reading.series = {name: s for name, s in series.items() if s.points}
        return reading


ADAPTER = MaxTextAdapter()
