"""MLPerf LoadGen as the load generator of an inference test: each run in its own process (inference/loadgen_sut.py,
supervised as ``perf.run_command``'s runs are), its ``mlperf_log_detail.txt`` read back with the MLLOG reader.

LoadGen's word is part of the verdict: a run it calls INVALID, or one where it logged errors (a SUT that never
reported a first token is still "VALID" in 6.0.17, with ``error_runtime`` lines), fails the test with its reason.
Its TTFT and TPOT percentiles and samples/s, one figure per run, are judged against baselines as the project's own
load generator's are (inference/sweep.py). No mlperf_loadgen import here: the child process loads it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.core.record.command import run_once
from pytest_gpuperf.core.record.readings import OutputError
from pytest_gpuperf.frameworks import mlperf_log
from pytest_gpuperf.inference.metrics import min_samples

if TYPE_CHECKING:
    from pytest_gpuperf.core.record.perf import Perf

PERCENTILES = (50, 90, 99)
DETAIL = "mlperf_log_detail.txt"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadgenSettings:
    """One LoadGen run's settings (the few a test sets; LoadGen's defaults for the rest)."""

    scenario: str
    """"Server" (Poisson arrivals at ``qps``) or "Offline" (every query at once; ``qps`` is the expected rate)."""
    qps: float
    duration_s: float = 2.0
    min_queries: int = 60
    percentile: float = 0.9
    """Server's latency percentile. At LoadGen's 0.99 its early-stopping rule needs ~460 queries before a run can
    be VALID (minutes on a CPU server); at 0.9 a 2-second run of 60 queries can be."""
    ttft_limit_s: float = 2.0
    tpot_limit_s: float = 0.5
    samples: int = 32
    prompt_len: int = 16
    max_new_tokens: int = 8
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.scenario not in ("Server", "Offline"):
            raise ValueError(f"LoadgenSettings: scenario={self.scenario!r}, expected 'Server' or 'Offline'")
        if not self.qps > 0 or not self.duration_s > 0 or self.min_queries < 1:
            raise ValueError(f"LoadgenSettings: qps, duration_s and min_queries must be > 0, got {self!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadgenResult:
    """What one run's detail log says."""

    valid: bool
    problems: list[str]
    """LoadGen's reasons for INVALID, its errors, and the requests that failed."""
    queries: int
    samples_per_s: float
    ttft_s: dict[int, float] = field(default_factory=dict)
    tpot_s: dict[int, float] = field(default_factory=dict)
    version: str = ""


def read_result(outdir: Path, errors: Sequence[str] = ()) -> LoadgenResult:
    """The run's result from LoadGen's detail log (JSON lines, read with the MLPerf log reader's bounds)."""
    path = outdir / DETAIL
    events = mlperf_log.parse_events(mlperf_log.read_bounded(path), str(path))
    values = {event.key: event.value for event in events}
    problems = [f"LoadGen error: {event.value}" for event in events if event.key == "error_runtime"]
    problems = list(dict.fromkeys(problems))
    for key, word in (("result_perf_constraints_met", "latency constraints"), ("result_min_duration_met",
                      "minimum duration"), ("result_min_queries_met", "minimum query count")):  # fmt: skip
        if values.get(key) is False:
            problems.append(f"LoadGen: {word} not met")
    if values.get("early_stopping_met") is False or values.get("result_early_stopping_met") is False:
        problems.append("LoadGen: early stopping not met (too few queries for the percentile)")
    if errors:
        problems.append(f"{len(errors)} request(s) failed, the first: {errors[0]}")
    validity = values.get("result_validity")

    def number(key: str) -> float:
        value = values.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")

    return LoadgenResult(
        valid=validity == "VALID" and not problems,
        problems=problems if problems or validity == "VALID" else [f"LoadGen: result {validity!r}"],
        queries=int(number("result_query_count")) if "result_query_count" in values else 0,
        samples_per_s=number(
            "result_completed_samples_per_sec"
            if "result_completed_samples_per_sec" in values
            else "result_samples_per_second"
        ),  # fmt: skip
        ttft_s={p: number(f"result_first_token_{p:.2f}_percentile_latency_ns") / 1e9 for p in PERCENTILES},
        tpot_s={p: number(f"result_time_per_output_token_{p:.2f}_percentile_ns") / 1e9 for p in PERCENTILES},
        version=str(values.get("loadgen_version", "")).split(" ")[0],
    )


def run_loadgen(url: str, settings: LoadgenSettings, outdir: Path, *, served_model: str | None = None,
                extra: Sequence[str] = ()) -> LoadgenResult:  # fmt: skip
    """One LoadGen run against the OpenAI-compatible server at ``url``, in a process of its own."""
    outdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pytest_gpuperf.inference.loadgen_sut", "--url", url, "--scenario",
            settings.scenario, "--qps", str(settings.qps), "--duration-ms", str(int(settings.duration_s * 1000)),
            "--min-queries", str(settings.min_queries), "--percentile", str(settings.percentile), "--ttft-limit-ms",
            str(settings.ttft_limit_s * 1000), "--tpot-limit-ms", str(settings.tpot_limit_s * 1000), "--samples",
            str(settings.samples), "--prompt-len", str(settings.prompt_len), "--max-new-tokens",
            str(settings.max_new_tokens), "--outdir", str(outdir), *(["--served-model", served_model] if
            served_model else []), *extra]  # fmt: skip
    run = run_once(argv, log_path=outdir / "loadgen.log", cwd=None, env=dict(os.environ), timeout=settings.timeout_s)
    command = shlex.join(argv[2:5])
    if run.returncode is None:
        pytest.fail(f"gpuperf: `{command} ...` did not finish within {settings.timeout_s:g} s; its process group "
                    f"was stopped\n{run.tail()}", pytrace=False)  # fmt: skip
    if run.returncode != 0:
        pytest.fail(f"gpuperf: `{command} ...` exited with status {run.returncode}\n{run.tail()}", pytrace=False)
    errors_file = outdir / "errors.json"
    errors = json.loads(errors_file.read_text()) if errors_file.exists() else []
    try:
        return read_result(outdir, errors)
    except OutputError as error:
        pytest.fail(f"gpuperf: LoadGen's log: {error}", pytrace=False)


def record(perf: Perf, results: Sequence[LoadgenResult], *, settings: LoadgenSettings,
           context: Mapping[str, Any] | None = None) -> None:  # fmt: skip
    """LoadGen's runs as metrics ``loadgen.<scenario>.ttft_p50`` ... ``samples_s`` (``context``: more of each
    metric's context, e.g. the served engine); an INVALID run fails the test."""
    for index, result in enumerate(results, start=1):
        if not result.valid:
            pytest.fail(f"gpuperf: LoadGen run {index} of {len(results)} ({settings.scenario}, {settings.qps:g} QPS) "
                        "is INVALID: " + "; ".join(result.problems), pytrace=False)  # fmt: skip
    prefix = f"loadgen.{settings.scenario.lower()}."
    context = {**(context or {}), "loadgen": {
        "version": results[0].version, "scenario": settings.scenario, "qps": settings.qps,
        "duration_s": settings.duration_s, "percentile": settings.percentile, "queries": [r.queries for r in results],
    }}  # fmt: skip
    fewest = min(result.queries for result in results)
    latencies = (("ttft", "ttft_s"), ("tpot", "tpot_s")) if settings.scenario == "Server" else ()
    for name, table in latencies:  # Offline logs no token latencies: one query holds every sample
        for p in PERCENTILES:
            needed = min_samples(p / 100)
            perf.record(f"{prefix}{name}_p{p}", [getattr(r, table)[p] for r in results], unit="s",
                        higher_is_better=False, context=context,
                        unjudgeable=None if fewest >= needed else
                        f"p{p} over {fewest} queries; it needs {needed}")  # fmt: skip
    perf.record(f"{prefix}samples_s", [r.samples_per_s for r in results], unit="samples/s", higher_is_better=True,
                context=context)  # fmt: skip
