"""From seed runs to metric names and MFU, on the devices the training suite runs on (no GPU needed: a CUDA
run's device name is faked, the arithmetic is the real one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_gpuperf.core.record.baseline_view import NoBaseline
from pytest_gpuperf.models.registry import get_spec
from pytest_gpuperf.training.record import metric_name, record_memory, record_throughput
from pytest_gpuperf.training.workload import SeedRun


@dataclass
class _Metric:
    name: str
    values: list[float]
    context: dict[str, Any]


@dataclass
class _Perf:
    """What record.py uses of the ``perf`` fixture."""

    device: str
    metrics: list[_Metric] = field(default_factory=list)

    def record(
        self,
        name: str,
        values: list[float],
        *,
        unit: str,
        higher_is_better: bool,
        context: dict[str, Any] | None = None,
    ) -> None:
        self.metrics.append(_Metric(name, list(values), dict(context or {})))

    def named(self) -> dict[str, _Metric]:
        return {m.name: m for m in self.metrics}


def _run(*, peak_dtype: str | None, seconds: float = 0.08, tokens: int = 4096) -> SeedRun:
    return SeedRun(
        seed=0,
        losses=[1.0] * 13,
        step_seconds=[seconds] * 13,
        tokens_per_step=tokens,
        peak_memory_bytes=30 * 2**30,
        step_peak_bytes=[30 * 2**30] * 13,
        execution="native",
        mfu_peak_dtype=peak_dtype,
    )


@pytest.mark.parametrize(
    ("tier", "device", "name"),
    [
        ("cpu", "cpu", "mfu"),
        ("gpu", "cuda", "mfu"),
        ("full", "cpu", "mfu@full"),
        ("full", "cuda", "mfu@full"),
        ("gpu", "cpu", "mfu@gpu"),
        ("cpu", "cuda", "mfu@cpu"),
    ],
)
def test_only_the_tier_a_device_picks_itself_has_plain_metric_names(tier: str, device: str, name: str) -> None:
    # A tier forced onto the other device runs other models under the same test ids: plain names would judge
    # it against (and --gpuperf-save it into) that device's own baselines.
    assert metric_name("mfu", tier, device) == name


def test_mfu_on_an_h200_is_against_its_dense_bf16_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    spec = get_spec("llama3-8b@2")
    perf = _Perf(device="cuda")
    record_throughput(
        perf, [_run(peak_dtype="bf16")], spec=spec, precision="bf16", timing_warmup=3, tier="gpu", seq_len=4096
    )
    metrics = perf.named()
    assert {"tokens_per_s", "step_time", "mfu"} <= set(metrics)
    flops = spec.training_flops_per_token(4096)
    expected = 100 * flops * (4096 / 0.08) / 989.5e12
    assert metrics["mfu"].values == pytest.approx([expected] * 10)
    assert 25 < expected < 40  # the proxy at 80 ms a step would be a realistic ~32% MFU
    assert metrics["mfu"].context["device"] == "NVIDIA H200 SXM" and metrics["mfu"].context["peak_dtype"] == "bf16"
    assert metrics["mfu"].context["formula"].startswith("6N + 12*L*d*T per token")
    lora = _Perf(device="cuda")  # the context states what the FLOPs count: 4 per frozen weight, 6 per adapter
    record_throughput(lora, [_run(peak_dtype="bf16")], spec=get_spec("llama2-70b-lora"), precision="bf16",
                      timing_warmup=3, tier="gpu", seq_len=4096)  # fmt: skip
    assert lora.named()["mfu"].context["formula"].startswith("4*N_frozen + 6*N_adapters + 12*L*d*T per token")


def test_no_mfu_for_mixed_fp8_or_an_unlisted_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = get_spec("llama3-8b@2")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    fp8 = _Perf(device="cuda")
    record_throughput(
        fp8, [_run(peak_dtype=None)], spec=spec, precision="fp8", timing_warmup=3, tier="gpu", seq_len=4096
    )
    assert "mfu" not in fp8.named() and "would mislead" in fp8.named()["tokens_per_s"].context["mfu"]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200 NVL")
    nvl = _Perf(device="cuda")
    record_throughput(
        nvl, [_run(peak_dtype="bf16")], spec=spec, precision="bf16", timing_warmup=3, tier="gpu", seq_len=4096
    )
    assert (
        "mfu" not in nvl.named()
        and "no dense bf16 peak for 'NVIDIA H200 NVL'" in nvl.named()["tokens_per_s"].context["mfu"]
    )


def test_gpu_peak_memory_is_judged_per_step_after_warm_up() -> None:
    perf = _Perf(device="cuda")
    record_memory(perf, [_run(peak_dtype="bf16")], tier="gpu", skip_steps=3)
    memory = perf.named()["peak_memory"]
    assert memory.values == [30 * 1024.0] * 10 and "max_memory_allocated" in memory.context["kind"]


class StoredCurves(NoBaseline):
    """A baseline view holding the given reference curves (under any name), as a session with goldens stored."""

    def __init__(self, curves: list[Any]) -> None:
        self._curves = curves

    def curves(self, name: str) -> list[Any]:
        return self._curves


def _curve(step_reached: int, steps: int = 60) -> list[float]:
    """A loss that falls linearly to 1.0 at ``step_reached`` and stays there."""
    return [max(1.0, 3.0 - 2.0 * i / step_reached) for i in range(steps)]


def _seed_runs(reached: list[int]) -> list[SeedRun]:
    return [
        SeedRun(
            seed=i,
            losses=_curve(r),
            step_seconds=[0.01] * 60,
            tokens_per_step=64,
            peak_memory_bytes=1,
            step_peak_bytes=[1] * 60,
            execution="native",
            mfu_peak_dtype=None,
        )
        for i, r in enumerate(reached)
    ]


@pytest.mark.parametrize(
    ("reference", "current", "steps_verdict", "curve_verdict"),
    [
        ([20, 21, 22], [20, 21, 22], "PASS", "PASS"),
        ([20, 21, 22], [30, 31, 32], "REGRESSED", "REGRESSED"),
        ([], [20, 21, 22], "NO_BASELINE", "NO_BASELINE"),
    ],
)
def test_convergence_metrics_carry_their_rules_evidence(
    reference: list[int], current: list[int], steps_verdict: str, curve_verdict: str
) -> None:
    from session_settings import cpu_settings

    from pytest_gpuperf.core.record.perf import Perf
    from pytest_gpuperf.core.store.baselines import Curve
    from pytest_gpuperf.core.verdict.judge import CurveMatch, StepsToTarget
    from pytest_gpuperf.training.record import Target, record_convergence
    from pytest_gpuperf.training.tiers import Budget

    curves = [Curve(steps=list(range(60)), values=_curve(r), stack={}, date="2026-11-30") for r in reference]
    perf = Perf(
        nodeid="m.py::t",
        device="cpu",
        noise_limit=0.5,
        baselines=StoredCurves(curves),
        settings=cpu_settings(Path("."), warmup=0, repeats=5, remeasure=0),
    )
    budget = Budget(seeds=3, steps=60, batch_size=1, lr=1e-3, timing_warmup=0, curve_warmup=5, window=1)
    target = Target(floor=1.0, margin=0.05, source="test")
    record_convergence(perf, _seed_runs(current), target=target, budget=budget, tier="cpu", precision="fp32")
    steps_rule, curve_rule = perf.metric("steps_to_target").rule, perf.metric("final_loss").rule
    assert isinstance(steps_rule, StepsToTarget) and steps_rule.decide().verdict.value == steps_verdict
    assert isinstance(curve_rule, CurveMatch) and curve_rule.decide().verdict.value == curve_verdict
    assert perf.metric("time_to_target").rule is None  # a timing: judged as one
    assert perf.metric("final_loss").context["precision"] == "fp32"


def test_a_seed_missing_the_target_is_a_regressed_final_loss_with_or_without_goldens() -> None:
    from session_settings import cpu_settings

    from pytest_gpuperf.core.record.perf import Perf
    from pytest_gpuperf.core.store.baselines import Curve
    from pytest_gpuperf.training.record import Target, record_convergence
    from pytest_gpuperf.training.tiers import Budget

    budget = Budget(seeds=3, steps=60, batch_size=1, lr=1e-3, timing_warmup=0, curve_warmup=5, window=1)
    target = Target(floor=1.0, margin=0.05, source="test")
    for reference in ([], [20, 21, 22]):
        curves = [Curve(steps=list(range(60)), values=_curve(r), stack={}, date="2026-11-30") for r in reference]
        perf = Perf(nodeid="m.py::t", device="cpu", noise_limit=0.5, baselines=StoredCurves(curves),
                    settings=cpu_settings(Path("."), warmup=0, repeats=5, remeasure=0))  # fmt: skip
        runs = _seed_runs([20, 21, 22])
        runs[1].losses[:] = [2.0] * 60  # this seed never gets near the target
        record_convergence(perf, runs, target=target, budget=budget, tier="cpu")
        assert [m.name for m in perf.metrics] == ["final_loss"]  # no steps to target without every seed's
        decision = perf.metric("final_loss").rule.decide()
        assert decision.verdict.value == "REGRESSED" and "[1]" in decision.reason, decision
