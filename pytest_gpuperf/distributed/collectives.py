"""Collectives microbenchmark: time all_reduce, all_gather, reduce_scatter and all_to_all per message size and
turn the times into algorithm and bus bandwidth the way nccl-tests does.

Definitions (nccl-tests, doc/PERFORMANCE.md): ``size`` is the bytes of the full buffer each rank holds (the
input of all_reduce and all_to_all, the gathered output of all_gather, the input of reduce_scatter);
``algbw = size / time``; ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for all_reduce and ``(n-1)/n``
for all_gather, reduce_scatter and all_to_all, so that bus bandwidth is comparable across collectives and
rank counts and approaches the slowest link's bandwidth. ``time`` is the slowest rank's time for one call.

The formulas and sizes are pure functions (no torch); ``time_collective`` runs in every rank of ``launch``.
"""

from __future__ import annotations

import math
import time
from typing import Any

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
ELEMENT_BYTES = 4  # float32 buffers
MIN_SAMPLE_S = 1e-3
"""A sample times back-to-back calls lasting at least this long (small messages take microseconds)."""
MAX_INNER = 1000


def bus_factor(op: str, world_size: int) -> float:
    """busbw / algbw for ``op`` over ``world_size`` ranks (nccl-tests)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if world_size < 2:
        raise ValueError(f"a collective over {world_size} rank moves no data; bandwidth needs >= 2 ranks")
    n = world_size
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second, as nccl-tests prints)."""
    return size_bytes / seconds / 1e9


def busbw_gbps(op: str, world_size: int, size_bytes: int, seconds: float) -> float:
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, world_size)


def message_sizes(max_bytes: int, *, min_bytes: int = 1024, factor: int = 4) -> list[int]:
    """Sizes from ``min_bytes`` up to ``max_bytes`` (included when reached), multiplying by ``factor``."""
    if min_bytes < ELEMENT_BYTES or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"message sizes from {min_bytes} to {max_bytes} bytes by x{factor}: nothing to measure")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def size_label(size_bytes: int) -> str:
    """1024 -> '1KiB', 4194304 -> '4MiB' (the metric name's suffix)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale}{unit}"
    return f"{size_bytes}B"


def largest_fitting(free_bytes: int, world_size: int, *, cap_bytes: int = 8 << 30, headroom: float = 0.5) -> int:
    """The largest size (a power of two) whose buffers fit in ``headroom`` of ``free_bytes``: each call holds
    an input and an output buffer of up to ``size`` bytes (all_gather's input is size / n)."""
    budget = min(cap_bytes, int(free_bytes * headroom) // 2)
    if budget < 1024:
        raise ValueError(f"{free_bytes} free bytes leave no room for a 1 KiB collective over {world_size} ranks")
    return 1 << int(math.log2(budget))


# --- rank side --------------------------------------------------------------------------------------------------


def _buffers(op: str, size_bytes: int, world_size: int, device: Any) -> tuple[Any, Any, int]:
    import torch

    count = size_bytes // ELEMENT_BYTES
    count -= count % world_size  # every rank's share must be whole elements
    if count == 0:
        raise ValueError(f"{size_bytes} bytes cannot be split over {world_size} ranks")
    full = torch.ones(count, dtype=torch.float32, device=device)
    if op == "all_gather":
        return full[: count // world_size].clone(), full, count * ELEMENT_BYTES
    if op == "reduce_scatter":
        return full, torch.empty(count // world_size, dtype=torch.float32, device=device), count * ELEMENT_BYTES
    return full, torch.empty_like(full), count * ELEMENT_BYTES


def _call(op: str, source: Any, target: Any) -> None:
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(source)
    elif op == "all_gather":
        # torch 2.13 renamed the tensor forms (*_single) and deprecates the old names with a warning per call.
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(target, source)
    elif op == "reduce_scatter":
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(target, source)
    else:
        dist.all_to_all_single(target, source)


def time_collective(
    op: str, max_bytes: int | None, repeats: int, warmup: int, slowdown: float = 0.0
) -> dict[int, list[float]]:
    """Run in every rank: seconds per call of ``op`` for each message size from 1 KiB to ``max_bytes`` (None:
    the largest that fits in every rank's free device memory), ``repeats`` samples per size, each the slowest
    rank's mean over back-to-back calls. Every rank returns the same table, keyed by the bytes moved.
    ``slowdown`` (--gpuperf-inject-slowdown distributed=PCT) makes that fraction more calls per sample while the
    mean counts the nominal ones, to prove a gate catches it."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    bus_factor(op, world)  # refuse unknown ops and single ranks before allocating
    cuda = torch.cuda.is_available() and dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if max_bytes is None:
        if not cuda:
            raise ValueError("time_collective(max_bytes=None) sizes by free device memory: give max_bytes on CPU")
        largest = torch.tensor([largest_fitting(torch.cuda.mem_get_info()[0], world)], device=device)
        dist.all_reduce(largest, op=dist.ReduceOp.MIN)
        max_bytes = int(largest.item())
    table: dict[int, list[float]] = {}
    for size in message_sizes(max_bytes):
        source, target, moved = _buffers(op, size, world, device)
        for _ in range(max(1, warmup)):
            _call(op, source, target)
        sync()
        # Calls per sample: enough for MIN_SAMPLE_S, agreed on by all ranks (the max) so they stay in step.
        start = time.perf_counter()
        _call(op, source, target)
        sync()
        once = max(time.perf_counter() - start, 1e-7)
        inner = torch.tensor(
            [min(MAX_INNER, max(1, math.ceil(MIN_SAMPLE_S / once)))], dtype=torch.float64, device=device
        )
        dist.all_reduce(inner, op=dist.ReduceOp.MAX)
        calls = int(inner.item())
        samples = torch.zeros(repeats, dtype=torch.float64)
        for i in range(repeats):
            dist.barrier()
            sync()
            start = time.perf_counter()
            for _ in range(calls + round(calls * slowdown)):
                _call(op, source, target)
            sync()
            samples[i] = (time.perf_counter() - start) / calls
        samples = samples.to(device)
        dist.all_reduce(samples, op=dist.ReduceOp.MAX)
        table[moved] = samples.cpu().tolist()
        del source, target
    return table
