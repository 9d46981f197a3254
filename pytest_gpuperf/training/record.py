"""From seed runs to ``perf`` metrics and the evidence of convergence rules.

Metrics: ``tokens_per_s`` and ``step_time`` (every step after each seed's warm-up), ``mfu`` (against the
datasheet dense peak, machine/peaks.py; left out, saying why, on a CPU, for emulated precisions and mixed
recipes), ``peak_memory`` (judged on a GPU only), the ``loss`` curve of every seed, and ``final_loss``,
``steps_to_target`` and ``time_to_target``, one sample per seed. The convergence metrics carry the evidence their
rules need (``record_convergence``); core/verdict/ decides their verdicts, as it does every other metric's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.core.stats import convergence
from pytest_gpuperf.models.registry import ModelSpec
from pytest_gpuperf.training.tiers import Budget
from pytest_gpuperf.training.workload import SeedRun

MIB = 2**20


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A convergence target derived from the corpus: its exact loss floor plus a margin."""

    floor: float
    """Lowest achievable mean loss of the workload's batches (nats), from the corpus."""
    margin: float
    """Nats above the floor that count as converged."""
    source: str
    """Which corpus and how the margin was chosen."""

    @property
    def loss(self) -> float:
        return self.floor + self.margin

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.loss, "floor": self.floor, "margin": self.margin, "source": self.source}


NATURAL_TIER = {"cpu": "cpu", "cuda": "gpu"}
"""The tier ``--gpuperf-tier auto`` picks on each device."""


def metric_name(base: str, tier: str, device: str) -> str:
    """Plain for the tier ``auto`` picks on the device (cpu and gpu baselines live under different hardware keys);
    any other tier's names carry it (``tokens_per_s@full``, ``tokens_per_s@gpu`` on a CPU): a forced tier runs
    other models and budgets under the same test ids, and would otherwise be judged against, or saved into,
    the natural tier's baselines."""
    return base if NATURAL_TIER.get(device) == tier else f"{base}@{tier}"


def record_throughput(
    perf: Any,
    runs: Sequence[SeedRun],
    *,
    spec: ModelSpec,
    precision: str,
    timing_warmup: int,
    tier: str,
    seq_len: int | None = None,
) -> None:
    """tokens_per_s, step_time and (where honest) mfu from the steps after each seed's warm-up."""
    seconds = [t for run in runs for t in run.step_seconds[timing_warmup:]]
    tokens = runs[0].tokens_per_step
    if len(seconds) < 3:
        raise ValueError(f"{len(seconds)} timed steps after warm-up {timing_warmup}: need at least 3")
    rates = [tokens / t for t in seconds]
    execution = runs[0].execution
    context: dict[str, Any] = {"precision": precision, "execution": execution, "tokens_per_step": tokens,
                               "timing_warmup_steps": timing_warmup, "notes": list(runs[0].notes)}  # fmt: skip
    mfu_samples, mfu_context, why_not = _mfu(perf, runs[0], spec=spec, rates=rates, seq_len=seq_len)
    context["mfu"] = why_not or "recorded as metric 'mfu'"
    perf.record(
        metric_name("tokens_per_s", tier, perf.device), rates, unit="tok/s", higher_is_better=True, context=context
    )
    perf.record(metric_name("step_time", tier, perf.device), seconds, unit="s", higher_is_better=False,
                context={"precision": precision, "execution": execution})  # fmt: skip
    if mfu_samples is not None:
        perf.record(
            metric_name("mfu", tier, perf.device), mfu_samples, unit="%", higher_is_better=True, context=mfu_context
        )


def _mfu(
    perf: Any, run: SeedRun, *, spec: ModelSpec, rates: list[float], seq_len: int | None
) -> tuple[list[float] | None, dict[str, Any], str | None]:
    if perf.device != "cuda":
        return None, {}, f"not reported: no datasheet peak for a {perf.device} run (MFU needs one; none is invented)"
    if run.mfu_peak_dtype is None:
        return None, {}, (f"not reported: the precision runs {run.execution} or mixes formats without a stated "
                          "peak, so MFU against any single peak would mislead")  # fmt: skip
    import torch

    from pytest_gpuperf.machine import peaks

    name = torch.cuda.get_device_name()
    entry = peaks.lookup(name)
    peak = entry.tflops(run.mfu_peak_dtype) if entry is not None else None
    if entry is None or peak is None:
        return None, {}, f"not reported: no dense {run.mfu_peak_dtype} peak for {name!r} in peaks.py"
    flops = spec.training_flops_per_token(seq_len)
    samples = [100.0 * flops * rate / (peak.value * 1e12) for rate in rates]
    context = {
        "device": entry.name,
        "peak_tflops": peak.value,
        "peak_dtype": run.mfu_peak_dtype,
        "peak_source": peak.source,
        "flops_per_token": flops,
        "formula": f"{'4*N_frozen + 6*N_adapters' if spec.is_lora else '6N'} + 12*L*d*T per token (PaLM appendix B), "
        "N = matmul weights (active experts only)",
    }
    return samples, context, None


def record_memory(perf: Any, runs: Sequence[SeedRun], *, tier: str, skip_steps: int = 0) -> None:
    """peak_memory: one sample per seed, or per step (after ``skip_steps``) for a one-seed run.

    Judged on a GPU only (the allocator's peak belongs to the workload). On a CPU the process's RSS high-water
    mark holds everything the process did before (other suites' buffers, memory the allocator kept): judging it
    would flag test order, not the workload, so it goes into ``tokens_per_s``'s context instead.
    """
    values: list[int | None] = [run.peak_memory_bytes for run in runs]
    per = "seed"
    if len(runs) < 3 and runs and runs[0].step_peak_bytes:
        values, per = list(runs[0].step_peak_bytes[skip_steps:]), "step"
    if any(v is None for v in values) or len(values) < 3:
        return  # the probe's note is in tokens_per_s's context
    mib = [v / MIB for v in values if v is not None]
    if perf.device != "cuda":
        for metric in perf.metrics:
            if metric.name == metric_name("tokens_per_s", tier, perf.device):
                metric.context["peak_memory"] = {
                    "kind": f"process RSS high-water (getrusage ru_maxrss), reset before each {per}",
                    "max_mib": round(max(mib), 1),
                    "judged": "no: on a CPU it includes everything the process held before this test",
                }
        return
    perf.record(
        metric_name("peak_memory", tier, perf.device),
        mib,
        unit="MiB",
        higher_is_better=False,
        context={"kind": f"device allocator peak (torch.cuda.max_memory_allocated), reset before each {per}"},
    )


def record_convergence(
    perf: Any,
    runs: Sequence[SeedRun],
    *,
    target: Target,
    budget: Budget,
    tier: str,
    precision: str | None = None,
    curve: str = "loss",
) -> list[int | None]:
    """Loss curves of every seed, ``final_loss``, ``steps_to_target`` and ``time_to_target``, each with the
    evidence its verdict needs; returns each seed's steps to the target (None: missed it).

    What is measured is reported here; what it means is decided in core/verdict/judge.py: ``final_loss`` (each seed's
    smoothed loss at the last step) is judged by ``CurveMatch`` (the curves against the golden band of the stored
    reference seeds, and every seed reaching the target), ``steps_to_target`` by ``StepsToTarget`` (MLPerf's
    t-test over seeds). ``time_to_target`` is a timing and judged as one. A failed check is a REGRESSED metric
    like any other: the test's throughput metrics stay in the results beside it.
    """
    from pytest_gpuperf.core.verdict.judge import CurveMatch, StepsToTarget

    name = metric_name(curve, tier, perf.device)
    reference = [list(c.values) for c in perf.baseline_curves(name)]
    ref_steps = [convergence.steps_to_target(values, target.loss, window=budget.window) for values in reference]
    steps = []
    for run in runs:
        perf.record_curve(name, range(len(run.losses)), run.losses)
        steps.append(convergence.steps_to_target(run.losses, target.loss, window=budget.window))
    context = {**target.as_dict(), "window": budget.window, "budget_steps": budget.steps}
    if precision is not None:
        context["precision"] = precision
    words = (f"{target.loss:.4f} (floor {target.floor:.4f} + margin {target.margin:.4f}) within {budget.steps} "
             "steps")  # fmt: skip
    if len(runs) >= 3:
        perf.record(
            metric_name("final_loss", tier, perf.device),
            [final_loss(run, budget.window) for run in runs],
            unit="nats",
            higher_is_better=False,
            context=context,
            rule=CurveMatch(
                current=[run.losses for run in runs],
                reference=reference,
                current_steps=steps,
                reference_steps=ref_steps,
                target=words,
                warmup=budget.curve_warmup,
                window=budget.window,
            ),  # fmt: skip
        )
    if all(s is not None for s in steps) and len(runs) >= 3:
        reached = [s for s in steps if s is not None]
        perf.record(
            metric_name("steps_to_target", tier, perf.device),
            reached,
            unit="steps",
            higher_is_better=False,
            context=context,
            rule=StepsToTarget(current=steps, reference=ref_steps),
        )
        times = [sum(run.step_seconds[:s]) for run, s in zip(runs, reached)]
        perf.record(
            metric_name("time_to_target", tier, perf.device), times, unit="s", higher_is_better=False, context=context
        )
    return steps


def final_loss(run: SeedRun, window: int) -> float:
    return float(convergence.smooth(run.losses, window)[-1])
