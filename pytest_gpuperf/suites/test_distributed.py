"""Distributed suite: every parallel strategy trains the tiny Llama and must follow the single-rank loss curve;
throughput per device, scaling efficiency and collective bandwidths are judged against their baselines.

CPU tier (default): gloo, 2 ranks mostly, 4 where scaling or a 2-D mesh needs them (``--gpuperf-cpu-ranks``).
GPU tier (``-m "perf and gpu_tier"``): nccl over the meshes of ``--gpuperf-mesh`` (e.g. ``8`` or
``dp=4,tp=2``); written for GPUs, not yet run on one.
"""

from __future__ import annotations

import functools
import statistics

import pytest

from pytest_gpuperf.core.config.settings import SettingError, environment_setting
from pytest_gpuperf.distributed.collectives import OPS, algbw_gbps, bus_factor, size_label, time_collective
from pytest_gpuperf.distributed.mesh import MeshError
from pytest_gpuperf.distributed.strategies import get_strategy
from pytest_gpuperf.distributed.training import (
    LOSS_TOLERANCE,
    CombinedRun,
    TrainJob,
    combine,
    loss_mismatch,
    scaling_efficiency,
    tokens_per_s_per_device,
    train_rank,
    train_single,
)
from pytest_gpuperf.micro.kernels import note_slowdown

pytestmark = [pytest.mark.perf, pytest.mark.distributed]

CPU_MAX_MESSAGE = 4 << 20
"""Largest CPU-tier message: gloo over loopback peaks around 1 MiB; 4 MiB keeps the suite quick."""

CASES = [
    ("ddp", "dp=2"),
    ("fsdp", "dp=2"),
    ("tp", "tp=2"),
    ("zero1", "dp=2"),
    ("zero2", "dp=2"),
    ("zero3", "dp=2"),
    # 4 ranks: the 2-D mesh needs them, and DDP/FSDP at 4 show the scaling trend (oversubscribed on 2 cores).
    ("fsdp_tp", "dp=2,tp=2"),
    ("ddp", "dp=4"),
    ("fsdp", "dp=4"),
    pytest.param("zero2_offload", "dp=2", marks=pytest.mark.gpu_tier),
]


@functools.cache
def _single_rank(job: TrainJob, threads: int, device: str) -> CombinedRun:
    # One reference per (job, threads) for the session: every strategy of a job compares with the same run.
    return train_single(job, threads=threads, device=device)


def _allow_compile() -> bool:
    try:
        return bool(environment_setting("allow-compile"))
    except SettingError as error:
        pytest.fail(str(error))


def _run_strategy(strategy_name: str, device_mesh, perf, job: TrainJob) -> None:
    strategy = get_strategy(strategy_name)
    missing = strategy.missing()
    if missing:
        pytest.skip(missing)
    if strategy.compiles and perf.device == "cpu" and not _allow_compile():
        pytest.skip(
            f"{strategy.name} compiles DeepSpeed's cpu_adam extension (~40 s on 2 cores); runs in the "
            "GPU tier, or on CPU with GPUPERF_ALLOW_COMPILE=1"
        )
    try:
        reports = device_mesh.launch(train_rank, job, names=strategy.dims, timeout=600)
    except MeshError as error:
        pytest.skip(f"{strategy.name}: {error}")
    run = combine(reports)
    single = _single_rank(job, run.threads, perf.device)
    warmup = job.warmup_steps
    context = {
        "strategy": strategy.name,
        "mesh": device_mesh.spec.label,
        "world_size": run.world_size,
        "global_tokens_per_step": run.global_tokens_per_step,
        "threads_per_rank": run.threads,
        "single_rank_tokens_per_s": statistics.median(tokens_per_s_per_device(single, warmup_steps=warmup)),
    }
    perf.record_curve("loss", range(job.steps), run.losses)
    perf.record(
        "tokens_per_s_per_device",
        tokens_per_s_per_device(run, warmup_steps=warmup),
        unit="tok/s",
        higher_is_better=True,
        context=context,
    )
    note_slowdown(perf, "tokens_per_s_per_device", job.slowdown)
    perf.record(
        "scaling_efficiency",
        scaling_efficiency(run, single, warmup_steps=warmup),
        unit="ratio",
        higher_is_better=True,
        context=context,
    )
    mismatch = loss_mismatch(
        run.losses,
        single.losses,
        tolerance=LOSS_TOLERANCE[perf.device],
        what=f"{strategy.name} on mesh {device_mesh.spec.label}",
    )
    assert mismatch is None, mismatch


@pytest.mark.parametrize("strategy,device_mesh", CASES, indirect=["device_mesh"])
def test_strategy_follows_the_single_rank_curve(strategy, device_mesh, perf):
    slowdown = perf.settings.slowdown("distributed")
    _run_strategy(strategy, device_mesh, perf, TrainJob(strategy=strategy, slowdown=slowdown))


@pytest.mark.gpu_tier
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "tp", "fsdp_tp", "zero1", "zero2", "zero3"])
def test_strategy_on_a_proxy_of_llama3_8b(strategy, device_mesh, perf):
    """On the meshes of --gpuperf-mesh (e.g. 8 for 1-D strategies, dp=4,tp=2 for fsdp_tp): two real-width
    Llama 3 8B layers, a global batch of 4 per data-parallel rank."""
    if perf.device != "cuda":
        pytest.skip("GPU tier: a real-width Llama 3 8B proxy takes minutes per step on CPU")
    dp = device_mesh.spec.size("dp") if device_mesh.names else device_mesh.world_size
    job = TrainJob(strategy=strategy, model="llama3-8b@2", global_batch=4 * dp, steps=12, lr=3e-4)
    _run_strategy(strategy, device_mesh, perf, job)


@pytest.mark.parametrize("op", OPS)
def test_collective_bandwidth(op, device_mesh, perf):
    """Bus bandwidth per message size (nccl-tests formulas), on the meshes of --gpuperf-mesh: CPU up to
    4 MiB, GPU up to the largest message that fits (at most 8 GiB)."""
    world = device_mesh.world_size
    if world < 2:
        pytest.skip(f"mesh {device_mesh.spec.label} has one rank: a collective moves no data")
    max_bytes = None if perf.device == "cuda" else CPU_MAX_MESSAGE
    slowdown = perf.settings.slowdown("distributed")
    table = device_mesh.launch(
        time_collective, op, max_bytes, perf.settings.repeats, perf.settings.warmup, slowdown, timeout=600
    )[0]
    factor = bus_factor(op, world)
    for size, seconds in table.items():
        perf.record(
            f"busbw_{size_label(size)}",
            [algbw_gbps(size, s) * factor for s in seconds],
            unit="GB/s",
            higher_is_better=True,
            context={
                "op": op,
                "bytes": size,
                "world_size": world,
                "bus_factor": factor,
                "algbw_GBps": statistics.median(algbw_gbps(size, s) for s in seconds),
                "seconds_median": statistics.median(seconds),
                **({"injected_slowdown": slowdown} if slowdown else {}),
            },
        )
