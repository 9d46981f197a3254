"""Running a training workload over seeds: build, prepare the precision, train, measure memory. Measures only;
``training/record.py`` turns the runs into metrics and convergence verdicts.

Imports torch at top: load it from a test, never from the plugin module.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from pytest_gpuperf.models.registry import ModelSpec
from pytest_gpuperf.training.loop import Batch, train
from pytest_gpuperf.training.precision import PreparedModel, prepare

ModelHook = Callable[[nn.Module], None]
"""Called on each built model before its precision is prepared (instrumentation; the must-catch tests inject
numerical noise or extra work through it)."""


@dataclass(slots=True, kw_only=True)
class SeedRun:
    """One seed's training run."""

    seed: int
    losses: list[float]
    step_seconds: list[float]
    tokens_per_step: int
    peak_memory_bytes: int | None
    """Device allocator peak on a GPU; process RSS high-water (reset before the run) on CPU; None if unknown."""
    step_peak_bytes: list[int] = field(default_factory=list)
    """With ``memory_per_step``: the peak of every step (reset before it), for one-seed throughput runs."""
    execution: str
    """``native`` or ``emulated`` (precision.execution_mode)."""
    mfu_peak_dtype: str | None
    """Peak-table column MFU may be computed against, None where MFU would mislead."""
    notes: tuple[str, ...] = field(default_factory=tuple)


class MemoryProbe:
    """Peak memory since :meth:`reset`: ``torch.cuda.max_memory_allocated`` on a GPU; on Linux CPUs the process's
    resident high-water mark (``getrusage`` ru_maxrss) after resetting it through ``/proc/self/clear_refs``.
    Where the mark cannot be reset it would be the whole process's history: :meth:`read` answers None and
    :attr:`note` says why."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.note: str | None = None
        self._reset_ok = False

    def reset(self) -> None:
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            self._reset_ok = True
            return
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")  # Linux >= 4.0: reset the resident-set high-water mark
            self._reset_ok = True
        except OSError as error:
            self.note = f"process RSS high-water could not be reset ({error}); peak memory not reported"
            self._reset_ok = False

    def read(self) -> int | None:
        """Bytes at the high-water mark since the last reset (the allocator's counter needs no device sync)."""
        if self.device == "cuda":
            return int(torch.cuda.max_memory_allocated())
        if not self._reset_ok:
            return None
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(maxrss if sys.platform == "darwin" else maxrss * 1024)


def sync_for(device: str) -> Callable[[], None] | None:
    """What brackets a timed step: ``torch.cuda.synchronize`` on a GPU (kernels are asynchronous), none on CPU."""
    return torch.cuda.synchronize if device == "cuda" else None


def build_prepared(
    spec: ModelSpec,
    *,
    seed: int,
    precision: str,
    device: str,
    hook: ModelHook | None = None,
    state: dict[str, torch.Tensor] | None = None,
) -> PreparedModel:
    """Build ``spec`` with ``seed`` (for LoRA: the base from ``state``, adapters seeded by ``seed``), apply the
    hook, convert for the precision."""
    if state is not None:
        base = spec.base_spec().build(seed=seed, device=device)
        base.load_state_dict(state)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            spec.apply_adapters(base)
        model = base
    else:
        model = spec.build(seed=seed, device=device)
    if hook is not None:
        hook(model)
    return prepare(model, precision, device)


def run_seed(
    spec: ModelSpec,
    *,
    seed: int,
    precision: str,
    device: str,
    batches: Callable[[int], Batch],
    steps: int,
    lr: float,
    hook: ModelHook | None = None,
    state: dict[str, torch.Tensor] | None = None,
    memory_per_step: bool = False,
) -> SeedRun:
    """Train one seed for ``steps`` AdamW steps; NaN/Inf raises ``NonFiniteLoss`` naming step and precision."""
    prepared = build_prepared(spec, seed=seed, precision=precision, device=device, hook=hook, state=state)
    params = [p for p in prepared.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    probe = MemoryProbe(device)
    step_peaks: list[int] = []

    def batch_at(index: int) -> Batch:  # called by the loop before each step's timer starts
        if memory_per_step:
            probe.reset()
        return batches(index)

    def step(loss: torch.Tensor, opt: torch.optim.Optimizer) -> None:
        prepared.backward_and_step(loss, opt)
        if memory_per_step and (peak := probe.read()) is not None:
            step_peaks.append(peak)

    probe.reset()
    result = train(prepared.model, loss_fn=spec.loss, optimizer=optimizer, batches=batch_at, steps=steps,
                   step=step, autocast=prepared.autocast, sync=sync_for(device), precision=precision)  # fmt: skip
    peak = probe.read()
    notes = prepared.notes + ((probe.note,) if probe.note else ())
    return SeedRun(seed=seed, losses=result.losses, step_seconds=result.step_seconds,
                   tokens_per_step=result.tokens_per_step, peak_memory_bytes=peak, step_peak_bytes=step_peaks,
                   execution=prepared.execution, mfu_peak_dtype=prepared.mfu_peak_dtype, notes=notes)  # fmt: skip


def pretrain_state(
    spec: ModelSpec, *, seed: int, device: str, batches: Callable[[int], Batch], steps: int, lr: float
) -> dict[str, torch.Tensor]:
    """Weights of ``spec`` (a base model) after a short fp32 pretraining: where a LoRA fine-tune starts."""
    model = spec.build(seed=seed, device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    train(model, loss_fn=spec.loss, optimizer=optimizer, batches=batches, steps=steps, sync=sync_for(device))
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
