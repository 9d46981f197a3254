"""Timers for kernel microbenchmarks, in the shape ``perf.measure(timer=...)`` takes.

On a GPU a wall clock around a kernel measures launch overhead and whatever the L2 cache still holds from the
previous call. So, as Triton's ``do_bench`` does, each call is timed with a pair of CUDA events recorded on the
stream, and a buffer larger than any current L2 (256 MB) is overwritten before each call so every repetition
starts cold. On CPU the default wall-clock timer of ``perf.measure`` is the right one; there is none here.
"""

from __future__ import annotations

from collections.abc import Callable

L2_FLUSH_BYTES = 256 * 1024 * 1024
"""Bytes written between repetitions: H100/H200 have 50 MB of L2, B200 126 MB, MI300X 256 MB of Infinity Cache."""


class CudaEventTimer:
    """Records CUDA events around each call and flushes L2 before it; seconds per call.

    ``clock = "device"`` tells ``perf.measure`` that the figures are the accelerator's own time: the host's
    state (its canaries, steal, run-queue wait) does not gate them, the device's telemetry does (core/record/perf.py).
    """

    clock = "device"

    def __init__(self, *, flush_bytes: int = L2_FLUSH_BYTES) -> None:
        import torch

        if flush_bytes < 0:
            raise ValueError(f"flush_bytes must be >= 0, got {flush_bytes}")
        self._torch = torch
        self._flush_bytes = flush_bytes
        self._flush = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device="cuda")

    def __call__(self, fn: Callable[[], object], repeats: int) -> list[float]:
        torch = self._torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        torch.cuda.synchronize()
        for start, end in zip(starts, ends):
            if self._flush_bytes:
                self._flush.zero_()  # outside the events: the flush costs time but is not measured
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends)]  # elapsed_time is in ms
