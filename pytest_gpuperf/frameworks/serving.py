"""Serving benchmarks' result files: ``vllm bench serve --save-result`` and SGLang's ``bench_serving --output-file``.

One run of the benchmark is one sample of each figure, so these adapters need 3 runs at least. Names follow the
inference suite (inference/sweep.py): ``c{N}.`` or ``rate{R}.`` per load point, then ``ttft_p50``, ``tpot_p99``,
``e2e_p50`` ... in seconds and ``output_tok_s``, ``total_tok_s``, ``requests_s``. A percentile from fewer samples
than inference/metrics.py ``min_samples`` asks is judged NOISY, and a run with a failed request is not judged, as
the suite does for its own. Read from vllm-project/vllm vllm/benchmarks/serve.py (v0.32.0) and sgl-project/sglang
python/sglang/benchmark/serving.py ``benchmark`` (0.5.23; ``sglang.bench_serving`` is its old name and still runs
it); SGLang counts no failures, so a run is checked against ``expected_requests``. The formats as read:
docs/design/adapters-read-the-writers-code.md.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pytest_gpuperf.core.record.readings import Figure, OutputError, Reading, RunOutput, at_line, finite, output_file
from pytest_gpuperf.inference.metrics import min_samples

LATENCIES = {"ttft": "requests", "tpot": "requests", "itl": "token gaps", "e2e": "requests"}
PERCENTILE_KEY = re.compile(r"^(median|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el|e2e_latency)_ms$")


def _load(path: Path | None, *, last_line: bool) -> dict[str, Any]:
    missing = f"the benchmark wrote no result file at {path} (the {{output}} of its arguments)"
    text = output_file(path, missing=missing).strip()
    lines = text.splitlines()
    number = len(lines) if last_line else 1
    if last_line:
        while lines and not lines[-1].strip():
            lines.pop()
        text, number = (lines[-1], len(lines)) if lines else ("", 1)
    with at_line(str(path), number, text):
        try:
            document = json.loads(text)
        except ValueError as error:
            raise OutputError(f"{path} is not the JSON the benchmark writes: {error}") from None
    if not isinstance(document, dict):
        raise OutputError(f"{path} holds {type(document).__name__}, not the benchmark's result object")
    return document


_number = finite


def prefix_of(document: dict[str, Any]) -> str:
    """``c{N}.`` for a concurrency-capped run, ``rate{R}.`` for a finite request rate, "" for neither."""
    concurrency = _number(document.get("max_concurrency"))
    if concurrency is not None and concurrency >= 1:
        return f"c{int(concurrency)}."
    rate = _number(document.get("request_rate"))
    if rate is not None and rate > 0:
        return f"rate{rate:g}."
    return ""


def figures(document: dict[str, Any], *, e2e_key: str) -> dict[str, Figure]:
    """Every latency percentile and throughput of one result object, named and judged as the inference suite."""
    completed = _number(document.get("completed")) or 0.0
    output_tokens = _number(document.get("total_output_tokens")) or 0.0
    counts = {"ttft": completed, "tpot": completed, "e2e": completed, "itl": max(0.0, output_tokens - completed)}
    prefix = prefix_of(document)
    found: dict[str, Figure] = {}
    for key, raw in document.items():
        match = PERCENTILE_KEY.match(key)
        value = _number(raw)
        if match is None or value is None or value <= 0:
            continue
        metric = match.group(3)
        if metric in ("e2el", "e2e_latency"):
            if metric != e2e_key:
                continue
            metric = "e2e"
        p = 50.0 if match.group(1) == "median" else float(match.group(2))
        if not 0 < p < 100:
            continue
        needed = min_samples(p / 100)
        have = int(counts[metric])
        reason = (
            f"p{p:g} from {have} {LATENCIES[metric]} per run; a p{p:g} needs >= {needed} for a distribution-free "
            "95% interval (MLPerf LoadGen's minimum-count rule)"
            if have < needed
            else None
        )
        found[f"{prefix}{metric}_p{p:g}"] = Figure(value=value / 1000.0, unit="s", higher_is_better=False,
                                                   unjudgeable=reason)  # fmt: skip
    for name, key, unit in (
        ("output_tok_s", "output_throughput", "tok/s"),
        ("total_tok_s", "total_token_throughput", "tok/s"),  # vLLM's name
        ("total_tok_s", "total_throughput", "tok/s"),  # SGLang 0.5.23's
        ("requests_s", "request_throughput", "req/s"),
    ):
        value = _number(document.get(key))
        if value is not None and value > 0:
            found[prefix + name] = Figure(value=value, unit=unit, higher_is_better=True)
    if prefix + "total_tok_s" not in found:  # older SGLang (commit 0033168f) wrote input and output throughput only
        parts = [_number(document.get(k)) for k in ("input_throughput", "output_throughput")]
        if all(p is not None for p in parts) and sum(p for p in parts if p is not None) > 0:
            found[prefix + "total_tok_s"] = Figure(
                value=sum(p for p in parts if p is not None), unit="tok/s", higher_is_better=True
            )
    return found


def _context(document: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: document[key] for key in keys if isinstance(document.get(key), (str, int, float)) and key in document}


class VllmBenchAdapter:
    name = "vllm-bench"
    framework = "vllm"
    module = "vllm"
    reads_file = True
    min_runs = 3
    expects = (
        "the JSON `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py): pass "
        "--save-result --result-filename {output}"
    )

    def read(self, output: RunOutput) -> Reading:
        document = _load(output.file, last_line=False)
        failed = _number(document.get("failed")) or 0
        completed = _number(document.get("completed")) or 0
        if failed > 0:
            raise OutputError(
                f"{int(failed)} of {int(failed + completed)} request(s) failed: a failed request is not left out of "
                "the latency percentiles, so the run is not judged"
            )
        keys = ("model_id", "backend", "num_prompts", "request_rate", "max_concurrency", "burstiness", "completed",
                "total_input_tokens", "total_output_tokens", "duration")  # fmt: skip
        return Reading(figures=figures(document, e2e_key="e2el"), context=_context(document, keys))


class SglangBenchAdapter:
    name = "sglang-bench"
    framework = "sglang"
    module = "sglang"
    reads_file = True
    min_runs = 3
    expects = (
        "the JSON line `python -m sglang.bench_serving --output-file` appends (python/sglang/bench_serving.py): "
        "pass --output-file {output}"
    )

    def __init__(self, *, expected_requests: int | None = None) -> None:
        self.expected_requests = expected_requests
        """``--num-prompts`` of the command: SGLang counts no failures, so fewer completed requests fail the run."""

    def read(self, output: RunOutput) -> Reading:
        document = _load(output.file, last_line=True)
        completed = _number(document.get("completed")) or 0
        if self.expected_requests is not None and completed < self.expected_requests:
            raise OutputError(
                f"{int(completed)} of {self.expected_requests} request(s) completed: a failed request is not left "
                "out of the latency percentiles, so the run is not judged"
            )
        keys = ("backend", "dataset_name", "request_rate", "max_concurrency", "completed", "total_input_tokens",
                "total_output_tokens", "duration")  # fmt: skip
        context = _context(document, keys)
        if isinstance(context.get("request_rate"), float) and math.isinf(context["request_rate"]):
            context["request_rate"] = "inf"  # a results file holds no infinity
        return Reading(figures=figures(document, e2e_key="e2e_latency"), context=context)


VLLM = VllmBenchAdapter()
SGLANG = SglangBenchAdapter()
