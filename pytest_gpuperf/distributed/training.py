"""Distributed training workload: one strategy trains a model in every rank on its share of a global batch.

``train_rank(job)`` runs in each rank (through ``launch``); ``train_single(job)`` is the single-rank reference on
the same global batch and seed. Both use the shared loop (training/loop.py); ``combine`` turns the ranks' reports
into the global loss curve and step times. Invariant: a rank trains on the rows of its ``dp`` coordinate of step
i's global batch, and every strategy averages gradients over ``dp``, so the update equals the single-rank update on
the global batch and the global loss is the mean of the shards'. No torch at import (collection imports this).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

LOSS_TOLERANCE = {"cpu": 1e-4, "cuda": 1e-3}
"""Largest |loss - single-rank loss| (nats) allowed at any step, same global batch and seed.

CPU: all strategies differ from the single-rank curve only by fp32 reduction order (gradient sums split over
ranks, sharded reductions in FSDP/ZeRO, TP's partial matmul sums). Over 16 AdamW steps at losses of 2.6-5.9
nats the largest difference measured was 4.8e-7, one fp32 ulp at those values (2^-21), for DDP, FSDP2, TP,
FSDP x TP and ZeRO 1-3 on 2 and 4 ranks. 1e-4 (200 ulp) leaves room for other CPUs' kernels and still sits
10x below what a 1% skew of one rank's gradient does (1.2e-3) and 4000x below a dropped gradient all-reduce
(0.43); tests/workloads/test_distributed_training.py proves both fail this check (``loss_mismatch``).
CUDA: cuBLAS picks kernels by shape (a shard's batch is not the global batch's), so differences per step are
larger; 1e-3 is a first guess to be calibrated on a GPU run, not a measured figure.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainJob:
    """What to train, identically in the reference and in the ranks."""

    strategy: str
    """A name of ``strategies.STRATEGIES``."""
    model: str = "tiny-llama"
    """A name of ``models.registry``."""
    global_batch: int = 8
    """Sequences per optimizer step over all data-parallel ranks."""
    steps: int = 16
    """Optimizer steps."""
    warmup_steps: int = 3
    """Leading steps left out of the throughput figures (allocation, first collectives)."""
    lr: float = 3e-3
    """AdamW learning rate."""
    seed: int = 0
    """Model initialisation seed."""
    data_seed: int = 0
    """Markov-chain corpus seed."""
    slowdown: float = 0.0
    """--gpuperf-inject-slowdown distributed=PCT: after each timed step a rank spends that fraction of its fastest
    warmup step again (CPU work on CPU, a sleep on an accelerator; numerics untouched), so a gate can be shown to
    catch a slower step."""
    after_prepare: Callable[[Any, Any], None] | None = None
    """Called in each rank as ``after_prepare(prepared, mesh)`` before training: fault injection for the
    tests that prove a broken collective is caught. Must be a module-level function."""

    def __post_init__(self) -> None:
        if self.steps <= self.warmup_steps + 2:
            raise ValueError(
                f"TrainJob: steps={self.steps} leaves fewer than 3 timed steps after warmup_steps={self.warmup_steps}"
            )


@dataclass(slots=True, kw_only=True)
class RankReport:
    """What one rank (or the reference) measured."""

    rank: int
    dp_index: int
    """Which share of the global batch this rank trained on."""
    dp_size: int
    losses: list[float]
    """This rank's loss per step (on its share of the batch)."""
    step_seconds: list[float]
    tokens_per_step: int
    """Tokens this rank consumed per step."""
    threads: int
    """torch intra-op threads of the rank (the reference uses the same count, so a CPU rank is one 'device')."""


@dataclass(slots=True, kw_only=True)
class CombinedRun:
    """The ranks' reports put together: the global view of one training run."""

    losses: list[float]
    """Global loss per step: mean over the data-parallel shards."""
    step_seconds: list[float]
    """Per step, the slowest rank's time (a step is done when every rank is)."""
    global_tokens_per_step: int
    world_size: int
    threads: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def combine(reports: Sequence[RankReport]) -> CombinedRun:
    """Global losses, step times and tokens of one run from every rank's report."""
    if not reports:
        raise ValueError("combine() needs at least one rank report")
    by_shard: dict[int, RankReport] = {}
    for report in reports:
        by_shard.setdefault(report.dp_index, report)
    dp_size = reports[0].dp_size
    if sorted(by_shard) != list(range(dp_size)):
        raise ValueError(f"rank reports cover data shards {sorted(by_shard)}, expected 0..{dp_size - 1}")
    steps = len(reports[0].losses)
    if any(len(r.losses) != steps or len(r.step_seconds) != steps for r in reports):
        raise ValueError("rank reports disagree on the number of steps")
    losses = [statistics.fmean(by_shard[d].losses[i] for d in range(dp_size)) for i in range(steps)]
    seconds = [max(r.step_seconds[i] for r in reports) for i in range(steps)]
    tokens = sum(by_shard[d].tokens_per_step for d in range(dp_size))
    return CombinedRun(
        losses=losses,
        step_seconds=seconds,
        global_tokens_per_step=tokens,
        world_size=len(reports),
        threads=reports[0].threads,
    )


def tokens_per_s_per_device(run: CombinedRun, *, warmup_steps: int) -> list[float]:
    """Per timed step: global tokens / step time / ranks (torchtitan's per-device throughput)."""
    return [run.global_tokens_per_step / s / run.world_size for s in run.step_seconds[warmup_steps:]]


def scaling_efficiency(run: CombinedRun, single: CombinedRun, *, warmup_steps: int) -> list[float]:
    """Per timed step of ``run``: its tokens/s over N x the single rank's median tokens/s (1.0 = linear)."""
    reference = statistics.median(tokens_per_s_per_device(single, warmup_steps=warmup_steps))
    return [value / reference for value in tokens_per_s_per_device(run, warmup_steps=warmup_steps)]


def max_loss_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, int]:
    """(largest |a[i] - b[i]|, its step)."""
    if len(a) != len(b):
        raise ValueError(f"loss curves of {len(a)} and {len(b)} steps cannot be compared")
    worst = max(range(len(a)), key=lambda i: abs(a[i] - b[i]))
    return abs(a[worst] - b[worst]), worst


def loss_mismatch(
    losses: Sequence[float], reference: Sequence[float], *, tolerance: float, what: str = "the distributed run"
) -> str | None:
    """Why ``losses`` does not match the single-rank ``reference`` within ``tolerance`` (nats), or None."""
    difference, step = max_loss_difference(losses, reference)
    if difference <= tolerance:
        return None
    return (
        f"{what} left the single-rank loss curve: at step {step} its loss is {losses[step]:.6f} against "
        f"{reference[step]:.6f} single-rank (|difference| {difference:.3g} > tolerance {tolerance:g}); "
        "the same global batch and seed must give the same curve up to fp32 reduction order, so a collective "
        "(gradient all-reduce, reduce-scatter, all-gather) or the batch split is wrong"
    )


# --- torch side -------------------------------------------------------------------------------------------------


def _batches(
    job: TrainJob, *, seq_len: int, vocab_size: int, dp_index: int, dp_size: int, device: Any
) -> Callable[[int], tuple[Any, Any]]:
    from pytest_gpuperf.training.corpus import MarkovChain

    if job.global_batch % dp_size:
        raise ValueError(f"global batch {job.global_batch} does not split over {dp_size} data-parallel ranks")
    rows = job.global_batch // dp_size
    chain = MarkovChain.random(vocab_size=vocab_size, seed=job.data_seed)

    def batch(step: int) -> tuple[Any, Any]:
        inputs, targets = chain.batch(step, batch_size=job.global_batch, seq_len=seq_len)
        part = slice(dp_index * rows, (dp_index + 1) * rows)
        return inputs[part].to(device), targets[part].to(device)

    return batch


def train_rank(job: TrainJob) -> RankReport:
    """Run in every rank of ``launch(..., mesh_shape=..., mesh_dim_names=strategy.dims)``."""
    import torch
    import torch.distributed as dist

    from pytest_gpuperf.distributed.rank import current_mesh
    from pytest_gpuperf.distributed.strategies import data_parallel_rank, get_strategy
    from pytest_gpuperf.models.registry import get_spec
    from pytest_gpuperf.training.loop import default_step, train

    mesh = current_mesh()
    strategy = get_strategy(job.strategy)
    if tuple(mesh.mesh_dim_names or ()) != strategy.dims:
        raise ValueError(f"strategy {strategy.name} needs mesh dimensions {strategy.dims}, got {mesh.mesh_dim_names}")
    if mesh.device_type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        sync: Callable[[], None] | None = torch.cuda.synchronize
    else:
        device, sync = torch.device("cpu"), None
    spec = get_spec(job.model)
    dp_index, dp_size = data_parallel_rank(mesh)
    model = spec.build(seed=job.seed, device="cpu")
    prepared = strategy.prepare(model, mesh=mesh, device=device, lr=job.lr, batch_per_rank=job.global_batch // dp_size)
    if job.after_prepare is not None:
        job.after_prepare(prepared, mesh)
    result = train(
        prepared.model,
        loss_fn=spec.loss,
        optimizer=prepared.optimizer,
        steps=job.steps,
        step=_slowed(prepared.step or default_step, job.slowdown, job.warmup_steps, sync),
        batches=_batches(
            job, seq_len=spec.seq_len, vocab_size=spec.vocab_size, dp_index=dp_index, dp_size=dp_size, device=device
        ),
        sync=sync,
    )
    return RankReport(
        rank=dist.get_rank(),
        dp_index=dp_index,
        dp_size=dp_size,
        losses=result.losses,
        step_seconds=result.step_seconds,
        tokens_per_step=result.tokens_per_step,
        threads=torch.get_num_threads(),
    )


def _slowed(step: Callable[[Any, Any], None], slowdown: float, warmup: int, sync: Callable[[], None] | None) -> Any:
    """``step`` followed by ``slowdown`` x the fastest warmup step's wall time: on CPU (no ``sync``) spent as CPU
    work (process time), which stretches under a loaded machine as the step's work does, where a sleep would not;
    on an accelerator as a sleep, the device's work being what the step waits for. The step's wall time, not its
    CPU time: its collectives wait without CPU. A fixed amount, not a fraction of each step's own: a step's time
    includes waiting for peers, which would feed their extra time back into ours. The fastest warmup step, not
    their median: the first steps allocate and build DDP's buckets. (What each choice delivered: benchmarks/README.md,
    "The distributed suite under srun + torchrun".)"""
    if not slowdown:
        return step
    warm: list[float] = []
    previous_end = time.perf_counter()

    def slowed_step(loss: Any, optimizer: Any) -> None:
        nonlocal previous_end
        step(loss, optimizer)
        if sync is not None:
            sync()
        if len(warm) < max(1, warmup):
            warm.append(time.perf_counter() - previous_end)
        elif sync is None:
            _spend_cpu(slowdown * min(warm))
        else:
            time.sleep(slowdown * min(warm))
        previous_end = time.perf_counter()

    return slowed_step


def _spend_cpu(seconds: float) -> None:
    """Busy this process for ``seconds`` of its CPU time (``time.process_time``), however long that takes."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        sum(range(2000))


def train_single(job: TrainJob, *, threads: int, device: str = "cpu") -> CombinedRun:
    """The single-rank reference of ``job`` in this process: no wrapper, the whole global batch, ``threads``
    intra-op threads (the ranks' count, so that on CPU a rank and the reference use the same 'device')."""
    import torch

    from pytest_gpuperf.models.registry import get_spec
    from pytest_gpuperf.training.loop import train

    spec = get_spec(job.model)
    target = torch.device(device)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = spec.build(seed=job.seed, device="cpu").to(target)
        result = train(
            model,
            loss_fn=spec.loss,
            optimizer=torch.optim.AdamW(model.parameters(), lr=job.lr),
            steps=job.steps,
            batches=_batches(
                job, seq_len=spec.seq_len, vocab_size=spec.vocab_size, dp_index=0, dp_size=1, device=target
            ),
            sync=torch.cuda.synchronize if target.type == "cuda" else None,
        )
    finally:
        torch.set_num_threads(previous)
    return CombinedRun(
        losses=result.losses,
        step_seconds=result.step_seconds,
        global_tokens_per_step=result.tokens_per_step,
        world_size=1,
        threads=threads,
    )
