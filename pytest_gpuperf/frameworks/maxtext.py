"""MaxText's per-step metrics (``python -m MaxText.train ... metrics_file=PATH``), or its log where no file is named.

Read from the code that writes them, AI-Hypercomputer/maxtext MaxText/metric_logger.py at commit ee553898
(``write_metrics_locally``: one JSON line per step; ``log_metrics``: the ``completed step: ...`` line, read when
the command names no file). Metrics: ``step_time`` (s), ``tflops`` and ``tokens_per_s`` (per device) and the
``loss`` curve; eval lines are not steps, and MaxText logs no MFU. The formats as read:
docs/design/adapters-read-the-writers-code.md. No torch.
"""

from __future__ import annotations

import json
import math
import re

from pytest_gpuperf.core.record.readings import OutputError, Reading, RunOutput, Series

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
            if not output.file.exists():
                raise OutputError(f"MaxText wrote no metrics file at {output.file} (metrics_file={{output}})")
            for line in output.file.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    document = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(document, dict) or not isinstance(document.get("step"), (int, float)):
                    continue
                step = int(document["step"])
                for name, (key, _, _) in KEYS.items():
                    value = document.get(key)
                    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                        series[name].points.append((step, float(value)))
                loss = document.get(LOSS)
                if isinstance(loss, (int, float)):
                    reading.loss.append((step, float(loss)))
            reading.context["source"] = "metrics_file"
        else:
            for line in output.log.splitlines():
                match = LOG_LINE.search(line)
                if match is None:
                    continue
                step = int(match.group("step"))
                for name in KEYS:
                    value = float(match.group(name))
                    if value > 0:
                        series[name].points.append((step, value))
                reading.loss.append((step, float(match.group("loss"))))
            reading.context["source"] = "log (completed step lines, 3 decimals)"
        reading.series = {name: s for name, s in series.items() if s.points}
        return reading


ADAPTER = MaxTextAdapter()
