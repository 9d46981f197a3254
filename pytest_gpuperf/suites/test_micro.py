"""Kernel microbenchmarks: where a driver, CUDA/ROCm or math-library regression shows first.

GEMM per precision on a square shape and Llama 3 8B's projection shapes (TFLOP/s); device memory copy and read
(GB/s); scaled-dot-product attention forward+backward per backend, each forced alone so a silent fallback fails.
On a GPU each call is timed with CUDA events, L2 flushed between repetitions, and "% of peak" is against the
datasheet figure of machine/peaks.py, its source in the context. On CPU each GEMM is sized by this machine
(``gpuperf_sizing``, machine/capability.py) and has no peak. docs/gpu-check.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from pytest_gpuperf.micro.kernels import (
    BANDWIDTH_BYTES,
    SDPA_SHAPE,
    SQUARE,
    attach_peak,
    measure_gemm,
    measure_memory,
    note_slowdown,
    sdpa_step,
)
from pytest_gpuperf.micro.kernels import check_fp8_shape as check_fp8_shape  # re-exported: the suite's rules
from pytest_gpuperf.micro.kernels import fp8_operands as fp8_operands
from pytest_gpuperf.micro.kernels import gemm_errors_skip as gemm_errors_skip

pytestmark = [pytest.mark.perf, pytest.mark.micro, pytest.mark.gpu_tier]

# Llama 3 8B projections as (K, N) of activations[M, K] @ weight[K, N]; M is the number of tokens.
LLAMA3_8B = {
    "llama3_8b_qkv": (4096, 4096 + 2 * 8 * 128),  # fused q, k, v: 32 query heads, 8 KV heads of 128
    "llama3_8b_o": (4096, 4096),
    "llama3_8b_gate_up": (4096, 2 * 14336),  # fused gate and up projections of the SwiGLU FFN
    "llama3_8b_down": (14336, 4096),
}
GEMM_TOKENS = {"cpu": 64, "cuda": 8192}  # CPU: enough tokens to be compute-bound; GPU: 4 sequences of 2048
# The 4096 x 28672 weight is 470 MB in fp32: a GPU-tier shape only.
CPU_SHAPES = frozenset({"square", "llama3_8b_qkv", "llama3_8b_o", "llama3_8b_down"})

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
SHAPES = ("square", *LLAMA3_8B)


SDPA_BACKENDS = {
    # name: (SDPBackend member, aten op of its forward; CPU flash runs "..._flash_attention_for_cpu")
    "flash": ("FLASH_ATTENTION", "_scaled_dot_product_flash_attention"),
    "efficient": ("EFFICIENT_ATTENTION", "_scaled_dot_product_efficient_attention"),
    "math": ("MATH", "_scaled_dot_product_attention_math"),
    "cudnn": ("CUDNN_ATTENTION", "_scaled_dot_product_cudnn_attention"),
}
SDPA_CPU_BACKENDS = frozenset({"flash", "math"})  # PyTorch has CPU kernels for these two only


def _skip_or_shape(perf: Any, sizing: Any, precision: str, shape: str) -> tuple[int, int, int]:
    device = perf.device
    if precision == "tf32" and device != "cuda":
        pytest.skip(f"tf32 is a CUDA tensor-core mode; fp32 matmuls on {device} have no TF32 path")
    if device == "cpu" and shape not in CPU_SHAPES:
        pytest.skip(f"{shape} ({LLAMA3_8B[shape][0]}x{LLAMA3_8B[shape][1]} weight) is GPU tier only")
    if device == "cpu" and shape != "square" and (slow := sizing.slow_path(precision)):
        # A CPU without a native kernel for the dtype (fp16 without avx512_fp16: 16x4096x6144 took ~4 s a call
        # against 46 ms in fp32; fp8 _scaled_mm everywhere so far) measures it on the square shape only; one that
        # has one (fp16 with avx512_fp16, bf16 with avx512_bf16/AMX) measures every CPU shape.
        pytest.skip(f"{slow}: the CPU tier measures it on the square shape only")
    if shape == "square":
        return SQUARE[device], SQUARE[device], SQUARE[device]
    k, n = LLAMA3_8B[shape]
    return GEMM_TOKENS[device], k, n


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gemm(perf: Any, device_timer: Any, cpu_threads: None, gpuperf_sizing: Any, precision: str, shape: str) -> None:
    m, k, n = _skip_or_shape(perf, gpuperf_sizing, precision, shape)
    slowdown = perf.settings.slowdown("micro")
    measure_gemm(perf, gpuperf_sizing, device_timer, precision=precision, shape=(m, k, n), device=perf.device,
                 slowdown=slowdown)  # fmt: skip


@pytest.mark.parametrize("kind", ["copy", "read"])
def test_memory_bandwidth(perf: Any, device_timer: Any, cpu_threads: None, kind: str) -> None:
    """copy: dst.copy_(src) moves every byte twice (read + write); read: src.sum() reads every byte once."""
    slowdown = perf.settings.slowdown("micro")
    measure_memory(perf, device_timer, kind=kind, size=BANDWIDTH_BYTES[perf.device], device=perf.device,
                   slowdown=slowdown)  # fmt: skip


def sdpa_backends_ran(op_names: Iterable[str]) -> list[str]:
    """The SDPA backends whose forward op is among ``op_names`` (profiler keys such as
    "aten::_scaled_dot_product_flash_attention"), in SDPA_BACKENDS order. The aten op, not the CUDA kernel name,
    is matched: kernel names change with every flash-attention, CUTLASS and cuDNN release, the op names do not."""
    ops = [name.removeprefix("aten::") for name in op_names]
    return [backend for backend, (_, op) in SDPA_BACKENDS.items() if any(name.startswith(op) for name in ops)]


def _forward_ops(run: Any) -> set[str]:
    """The aten ops a call dispatched to, as the profiler saw them on the host (only CPU activity is asked for)."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    return {event.key for event in profile.key_averages()}


@pytest.mark.parametrize("backend", list(SDPA_BACKENDS))
def test_sdpa(perf: Any, device_timer: Any, cpu_threads: None, backend: str) -> None:
    """Forward and backward of causal attention with one backend forced: a backend that cannot take these
    inputs raises here, where an unforced call would silently fall back to another one."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = perf.device
    batch, heads, seq, dim, dtype_name = SDPA_SHAPE[device]
    member, _ = SDPA_BACKENDS[backend]
    if device == "cpu" and backend not in SDPA_CPU_BACKENDS:
        pytest.skip(f"PyTorch has no CPU kernel for the {backend} SDPA backend (cpu has flash and math)")
    if backend == "cudnn" and not (
        torch.backends.cudnn.is_available() and (torch.backends.cudnn.version() or 0) >= 90000
    ):
        pytest.skip(f"cuDNN attention needs cuDNN >= 9; this torch has {torch.backends.cudnn.version()}")
    slowdown = perf.settings.slowdown("micro")
    forward, step, flops = sdpa_step(SDPA_SHAPE[device], device, slowdown)

    with sdpa_kernel([getattr(SDPBackend, member)]):
        try:
            ran = _forward_ops(forward)
            step()
        except RuntimeError as error:
            pytest.fail(
                f"SDPA backend {backend} did not run on {device} ({dtype_name}, batch {batch}, {heads} heads, "
                f"seq {seq}, head dim {dim}, causal): {error}\nUnforced, SDPA would have fallen back to another "
                "backend without a word; check the torch build and the inputs' dtype and shape",
                pytrace=False,
            )
        used = sdpa_backends_ran(ran)
        assert backend in used, f"forced {backend}, but the profiler saw the forward op of {used or 'no backend'}"
        perf.measure("tflops", step, unit="TFLOP/s", work=flops / 1e12, timer=device_timer)
    attach_peak(perf, "tflops", dtype=dtype_name)
    perf.metric("tflops").context["backends_ran"] = used
    note_slowdown(perf, "tflops", slowdown)
