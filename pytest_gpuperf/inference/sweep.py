"""A sweep of one input/output length pair over concurrencies, and its recording through ``perf``.

Measure -> verdict: ``run_sweep`` drives an engine and keeps every run's metrics (metrics.py);
``record_sweep`` turns them into ``perf`` metrics and curves that the foundation judges against baselines.
Runs are interleaved (run 1 of every concurrency, then run 2, ...) so a slow drift of the machine's load
spreads over all points instead of biasing one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.core.stats import summarize
from pytest_gpuperf.inference.metrics import PERCENTILES, SLO, RunMetrics, run_metrics
from pytest_gpuperf.inference.pareto import (
    INTERACTIVITY_CURVE,
    TARGETS_CURVE,
    THROUGHPUT_CURVE,
    OperatingPoint,
    interactivity_targets,
    pareto_front,
    throughput_at,
)
from pytest_gpuperf.inference.requests import InferenceEngine, Request

LATENCY_SAMPLES = {"ttft": "requests", "tpot": "requests", "e2e": "requests", "itl": "token gaps"}


@dataclass(slots=True, kw_only=True)
class SweepResult:
    isl: int
    osl: int
    runs: dict[int, list[RunMetrics]] = field(default_factory=dict)
    """Per concurrency, one RunMetrics per repeated run."""
    energy_j_per_token: dict[int, list[float]] = field(default_factory=dict)
    """Per concurrency, joules per output token of each run, where the device has an energy counter."""
    energy_note: str = ""
    peak_memory_bytes: dict[int, list[float]] = field(default_factory=dict)
    contexts: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Per concurrency, the telemetry context of its last run."""


def requests_for(
    *, isl: int, osl: int, concurrency: int, vocab_size: int, seed: int, per_client: int = 3, minimum: int = 6
) -> list[Request]:
    """The requests of one run: ``per_client`` per concurrent client, at least ``minimum`` (a p50 needs 6)."""
    from pytest_gpuperf.inference.engine import make_prompts

    count = max(minimum, per_client * concurrency)
    prompts = make_prompts(count=count, length=isl, vocab_size=vocab_size, seed=seed * 7919 + isl)
    return [Request(id=i, prompt=p, max_new_tokens=osl) for i, p in enumerate(prompts)]


def run_sweep(
    engine: InferenceEngine,
    *,
    isl: int,
    osl: int,
    concurrencies: Sequence[int],
    runs: int,
    vocab_size: int,
    seed: int = 0,
    slo: SLO | None = None,
    watch: Callable[[], Any] | None = None,
    peak_memory: Callable[[], Callable[[], float] | None] | None = None,
    per_client: int = 3,
    minimum: int = 6,
) -> SweepResult:
    """``runs`` runs of every concurrency, after one untimed warm-up run of the largest.

    ``watch()`` returns a telemetry window (``perf.watch``); ``peak_memory()`` starts a peak-memory window and
    returns a function that reads it (bytes), or None where the device cannot tell.
    """
    result = SweepResult(isl=isl, osl=osl)
    engine.generate(
        requests_for(
            isl=isl,
            osl=min(osl, 8),
            concurrency=max(concurrencies),
            vocab_size=vocab_size,
            seed=seed + 1,
            per_client=1,
            minimum=1,
        ),
        concurrency=max(concurrencies),
    )
    energy_missing = ""
    for _ in range(runs):
        for concurrency in concurrencies:
            requests = requests_for(
                isl=isl,
                osl=osl,
                concurrency=concurrency,
                vocab_size=vocab_size,
                seed=seed,
                per_client=per_client,
                minimum=minimum,
            )
            read_peak = peak_memory() if peak_memory is not None else None
            if watch is not None:
                with watch() as window:
                    completions = engine.generate(requests, concurrency=concurrency)
                summary, context = window.summary, window.context
            else:
                completions = engine.generate(requests, concurrency=concurrency)
                summary, context = None, {}
            metrics = run_metrics(completions, devices=engine.devices, slo=slo)
            result.runs.setdefault(concurrency, []).append(metrics)
            result.contexts[concurrency] = context
            if read_peak is not None:
                result.peak_memory_bytes.setdefault(concurrency, []).append(read_peak())
            if summary is not None and summary.energy_j is not None and summary.energy_j > 0:
                result.energy_j_per_token.setdefault(concurrency, []).append(summary.energy_j / metrics.output_tokens)
            else:
                energy_missing = (
                    "no hardware energy counter was read (no NVML/amdsmi reader on this device, "
                    "or it reported none): energy per token is left out, not estimated"
                )
    if energy_missing:
        result.energy_j_per_token = {}
        result.energy_note = energy_missing
    return result


def _percentile_reason(name: str, p: int, runs: list[RunMetrics]) -> str | None:
    counts = [run.latency[name][p].count for run in runs]
    needed = runs[0].latency[name][p].needed
    if min(counts) >= needed:
        return None
    return (
        f"p{p} from {min(counts)} {LATENCY_SAMPLES[name]} per run; a p{p} needs >= {needed} for a "
        f"distribution-free 95% interval (MLPerf LoadGen's minimum-count rule)"
    )


class LeftOut(UserWarning):
    """A metric of a sweep could not be recorded (goodput 0, an interactivity point the front no longer
    reaches); the per-concurrency latency and rate metrics, judged as usual, carry the regression."""


def record_sweep(
    perf: Any, sweep: SweepResult, *, slo: SLO | None = None, fractions: Sequence[float] = (0.2, 0.4, 0.6)
) -> list[str]:
    """Record every metric of the sweep through ``perf``; returns (and warns about) the metrics left out.

    A metric that cannot be computed is left out rather than failing the test here: a test that raises is not
    judged, and the judged TTFT/TPOT/throughput metrics are what show how far the run moved."""
    problems: list[str] = []
    for concurrency, runs in sorted(sweep.runs.items()):
        prefix = f"c{concurrency}."
        context = {
            **sweep.contexts.get(concurrency, {}),
            "concurrency": concurrency,
            "isl": sweep.isl,
            "osl": sweep.osl,
            "requests_per_run": runs[0].requests,
        }
        if sweep.energy_note:
            context["energy"] = sweep.energy_note
        if concurrency not in sweep.peak_memory_bytes:
            context["peak_memory"] = "not measured: the device has no allocator peak counter (CPU)"
        for name in ("ttft", "tpot", "itl", "e2e"):
            if name not in runs[0].latency:
                continue
            for p in PERCENTILES:
                perf.record(
                    f"{prefix}{name}_p{p}",
                    [run.latency[name][p].value for run in runs],
                    unit="s",
                    higher_is_better=False,
                    context=context,
                    unjudgeable=_percentile_reason(name, p, runs),
                )
        rates = {
            "output_tok_s": ([r.output_tok_s for r in runs], "tok/s"),
            "total_tok_s": ([r.total_tok_s for r in runs], "tok/s"),
            "requests_s": ([r.requests_s for r in runs], "req/s"),
            "tok_s_per_device": ([r.tok_s_per_device for r in runs], "tok/s/device"),
        }
        if "tpot" in runs[0].latency:
            rates["interactivity"] = ([r.interactivity for r in runs], "tok/s/user")
        for name, (values, unit) in rates.items():
            perf.record(prefix + name, values, unit=unit, higher_is_better=True, context=context)
        if slo is not None:
            goodput = [r.goodput or 0.0 for r in runs]
            slo_context = {**context, "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s}}
            if min(goodput) > 0:
                perf.record(prefix + "goodput_req_s", goodput, unit="req/s", higher_is_better=True, context=slo_context)
            else:
                problems.append(
                    f"c{concurrency}.goodput_req_s left out: no request met the SLO (TTFT <= "
                    f"{slo.ttft_s}s, TPOT <= {slo.tpot_s}s) in at least one run (goodput 0)"
                )
        if concurrency in sweep.energy_j_per_token:
            perf.record(
                prefix + "energy_j_per_output_token",
                sweep.energy_j_per_token[concurrency],
                unit="J/tok",
                higher_is_better=False,
                context=context,
            )
        if concurrency in sweep.peak_memory_bytes:
            perf.record(
                prefix + "peak_memory_bytes",
                sweep.peak_memory_bytes[concurrency],
                unit="B",
                higher_is_better=False,
                context=context,
            )
    problems.extend(_record_pareto(perf, sweep, fractions))
    for problem in problems:
        warnings.warn(LeftOut(problem), stacklevel=2)
    return problems


def fresh_targets(fronts: Sequence[Sequence[OperatingPoint]], fractions: Sequence[float]) -> list[float]:
    """The interactivity points of a sweep without a baseline: inside the range every run's front reaches, so
    the first save records each point for each run (points from the median front alone can lie beyond a slower
    run's front, and a fresh folder then reported a point "of the baseline" that did not exist)."""
    reach = min(front[-1].interactivity for front in fronts)
    start = min(max(front[0].interactivity for front in fronts), reach)
    span = [
        OperatingPoint(concurrency=0, interactivity=start, throughput=1.0),
        OperatingPoint(concurrency=1, interactivity=reach, throughput=1.0),
    ]
    targets = []
    for target in interactivity_targets(span, fractions):
        if target > reach:  # 3-digit rounding went up past the slowest front: round down instead
            step = 10 ** (math.floor(math.log10(reach)) - 2)
            target = float(f"{math.floor(reach / step) * step:.3g}")
        targets.append(target)
    return list(dict.fromkeys(targets))  # a narrow range rounds several fractions to one point: name it once


def _record_pareto(perf: Any, sweep: SweepResult, fractions: Sequence[float]) -> list[str]:
    concurrencies = sorted(c for c, runs in sweep.runs.items() if "tpot" in runs[0].latency)
    if len(concurrencies) < 2:
        return []
    n_runs = min(len(sweep.runs[c]) for c in concurrencies)
    fronts = [
        pareto_front(
            OperatingPoint(
                concurrency=c,
                interactivity=sweep.runs[c][r].interactivity,
                throughput=sweep.runs[c][r].tok_s_per_device,
            )
            for c in concurrencies
        )
        for r in range(n_runs)
    ]
    medians = [
        OperatingPoint(
            concurrency=c,
            interactivity=summarize([r.interactivity for r in sweep.runs[c]]).median,
            throughput=summarize([r.tok_s_per_device for r in sweep.runs[c]]).median,
        )
        for c in concurrencies
    ]
    perf.record_curve(INTERACTIVITY_CURVE, concurrencies, [p.interactivity for p in medians])
    perf.record_curve(THROUGHPUT_CURVE, concurrencies, [p.throughput for p in medians])
    stored = perf.baseline_curves(TARGETS_CURVE)
    # The points are fixed by the first saved baseline and carried forward by every later save, so metric
    # names (which hold the point) stay the same from run to run.
    targets = list(stored[0].values) if stored else fresh_targets(fronts, fractions)
    perf.record_curve(TARGETS_CURVE, list(range(len(targets))), targets)
    problems = []
    for target in targets:
        values = [throughput_at(front, [target])[0] for front in fronts]
        name = f"pareto.tok_s_per_device@{target:g}_tok_s_user"
        if any(value is None for value in values):
            reached = max(front[-1].interactivity for front in fronts)
            message = (
                f"{name} left out: the front reaches {reached:.4g} tok/s/user at most, below the fixed "
                f"interactivity point {target:g} of the baseline: every concurrency serves its users more "
                "slowly than the baseline's"
                if stored
                else f"{name} left out: a run's front reaches {reached:.4g} tok/s/user at most, below {target:g}"
            )
            problems.append(message)
            continue
        perf.record(
            name,
            values,
            unit="tok/s/device",
            higher_is_better=True,
            context={
                "interactivity_target": target,
                "isl": sweep.isl,
                "osl": sweep.osl,
                "front": [[p.concurrency, p.interactivity, p.throughput] for p in medians],
            },
        )
    return problems
