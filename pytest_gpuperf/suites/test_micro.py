"""Kernel microbenchmarks: where a driver, CUDA/ROCm or math-library regression shows first.

- GEMM per precision (fp32, tf32, bf16, fp16, fp8 through ``torch._scaled_mm``) on a square shape and the
  projection shapes of Llama 3 8B (d_model 4096, 32 query heads and 8 KV heads of 128, FFN 14336), in TFLOP/s;
- memory bandwidth: a device-to-device copy and a read-only reduction, in GB/s;
- scaled-dot-product attention forward+backward per backend, each backend forced alone, so one that cannot run
  raises instead of silently falling back to another, and the profiler confirms which kernel ran.

On a GPU each call is timed with CUDA events and L2 is flushed between repetitions (``device_timer``); "% of
peak" is taken against the vendor datasheet figure of ``pytest_gpuperf.machine.peaks`` and each metric's context says
so ("kind": "datasheet") with the figure's source. The CPU tier uses small shapes and has no peak.

On CPU each GEMM is sized by this machine (``gpuperf_sizing``, pytest_gpuperf/machine/capability.py): its time
is estimated from its FLOPs at the rate a short probe measured for its dtype, and a GEMM that would exceed
``--gpuperf-sizing-budget`` takes fewer repeats or is skipped with the figures (a CPU without avx512_bf16 runs a
bf16 GEMM ~400x slower than the one this tier was sized on).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from pytest_gpuperf.core.stats import summarize
from pytest_gpuperf.machine import peaks

pytestmark = [pytest.mark.perf, pytest.mark.micro, pytest.mark.gpu_tier]

# Llama 3 8B projections as (K, N) of activations[M, K] @ weight[K, N]; M is the number of tokens.
LLAMA3_8B = {
    "llama3_8b_qkv": (4096, 4096 + 2 * 8 * 128),  # fused q, k, v: 32 query heads, 8 KV heads of 128
    "llama3_8b_o": (4096, 4096),
    "llama3_8b_gate_up": (4096, 2 * 14336),  # fused gate and up projections of the SwiGLU FFN
    "llama3_8b_down": (14336, 4096),
}
GEMM_TOKENS = {"cpu": 64, "cuda": 8192}  # CPU: enough tokens to be compute-bound; GPU: 4 sequences of 2048
SQUARE = {"cpu": 512, "cuda": 8192}  # 512: ~3 ms per fp32 call on one CPU thread, long enough to time
# The 4096 x 28672 weight is 470 MB in fp32: a GPU-tier shape only.
CPU_SHAPES = frozenset({"square", "llama3_8b_qkv", "llama3_8b_o", "llama3_8b_down"})

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
SHAPES = ("square", *LLAMA3_8B)

BANDWIDTH_BYTES = {"cpu": 64 * 2**20, "cuda": 2**30}  # well past the last-level cache on either

# (batch, heads, sequence, head dim, dtype): Llama 3 8B attention at 4096 tokens on a GPU; small on CPU.
SDPA_SHAPE = {"cpu": (1, 4, 128, 64, "float32"), "cuda": (2, 32, 4096, 128, "bfloat16")}
SDPA_BACKENDS = {
    # name: (SDPBackend member, aten op of its forward; CPU flash runs "..._flash_attention_for_cpu")
    "flash": ("FLASH_ATTENTION", "_scaled_dot_product_flash_attention"),
    "efficient": ("EFFICIENT_ATTENTION", "_scaled_dot_product_efficient_attention"),
    "math": ("MATH", "_scaled_dot_product_attention_math"),
    "cudnn": ("CUDNN_ATTENTION", "_scaled_dot_product_cudnn_attention"),
}
SDPA_CPU_BACKENDS = frozenset({"flash", "math"})  # PyTorch has CPU kernels for these two only


@contextlib.contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """fp32 GEMMs on TF32 tensor cores for "tf32", strict fp32 otherwise; restored afterwards."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def attach_peak(perf: Any, metric: str, *, dtype: str | None) -> None:
    """Add "% of peak" to a metric's context: against the datasheet figure for ``dtype`` (TFLOP/s), or the HBM
    bandwidth when ``dtype`` is None (GB/s). Says why when there is no figure; never invents one."""
    record = perf.metric(metric)
    median = summarize(record.samples).median
    if perf.device != "cuda":
        record.context["peak"] = {"kind": None, "note": f"no vendor peak for a {perf.device} run"}
        return
    import torch

    name = torch.cuda.get_device_name()
    entry = peaks.lookup(name)
    peak = None if entry is None else (entry.hbm if dtype is None else entry.tflops(dtype))
    if peak is None:
        what = "HBM bandwidth" if dtype is None else f"dense {dtype}"
        record.context["peak"] = {"kind": None, "note": f"no datasheet {what} figure for {name!r} in peaks.py"}
        return
    assert entry is not None  # a peak was found in it
    value, unit = (peak.value * 1000, "GB/s") if dtype is None else (peak.value, "TFLOP/s")
    record.context["peak"] = {
        "kind": "datasheet",
        "device": entry.name,
        "value": value,
        "unit": unit,
        "source": peak.source,
        "percent": round(100 * median / value, 2),
    }


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


def check_fp8_shape(m: int, k: int, n: int) -> None:
    """Raise ValueError unless K and N are multiples of 16, as ``torch._scaled_mm`` requires on CUDA."""
    for name, dim in (("K", k), ("N", n)):
        if dim % 16:
            raise ValueError(
                f"fp8 GEMM {m}x{k}x{n}: {name}={dim} is not a multiple of 16, which torch._scaled_mm "
                "requires on CUDA; pick a shape whose K and N are"
            )


def fp8_operands(m: int, k: int, n: int, device: str, generator: Any) -> tuple[Any, Any, Any]:
    """``a`` (m, k), ``b`` (k, n) in float8_e4m3fn and one fp32 scale, laid out as ``torch._scaled_mm`` takes
    them on an H100/H200: cuBLASLt there multiplies only a row-major ``a`` by a column-major ``b`` (``b`` is the
    transpose of a row-major (n, k) tensor), K and N must be multiples of 16, and a per-tensor scale is a float32
    tensor of one element."""
    import torch

    check_fp8_shape(m, k, n)
    a = torch.randn(m, k, device=device, generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device, generator=generator).to(torch.float8_e4m3fn).t()
    scale = torch.ones((), device=device, dtype=torch.float32)
    return a, b, scale


def gemm_errors_skip(precision: str, device: str, capability: tuple[int, int] | None, hip: bool) -> str | None:
    """Why a GEMM error in ``precision`` on this device is a skip (the device lacks the path), or None when the
    path must exist and an error is a failure. On an H100/H200 a failing fp16 or fp8 GEMM is a broken stack, and
    a skip would hide exactly the regression this suite is for."""
    if device == "cpu":
        if precision in ("fp16", "fp8"):
            return f"{precision} GEMM does not run on this CPU build of torch"
        return None
    if hip:  # which ROCm parts take which float8 flavour is not tracked here
        return f"{precision} GEMM does not run on this ROCm device" if precision == "fp8" else None
    if precision == "fp8" and capability is not None and capability < (8, 9):
        return f"fp8 GEMM needs CUDA compute capability 8.9 or newer, this GPU is {capability[0]}.{capability[1]}"
    return None


def heavier(size: int, slowdown: float, *, multiple: int = 1) -> int:
    """``size`` grown by ``slowdown`` (a fraction; --gpuperf-inject-slowdown micro=PCT), rounded up to a multiple:
    the work a deliberately slowed workload does while its metric is computed from the nominal size."""
    if slowdown <= 0:
        return size
    grown = size * (1 + slowdown)
    return int(-(-grown // multiple) * multiple)


def _gemm(precision: str, m: int, k: int, n: int, device: str) -> Any:
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    if precision == "fp8":
        a, b, scale = fp8_operands(m, k, n, device, generator)

        def call() -> object:
            return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

        return call
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    a = torch.randn(m, k, device=device, generator=generator, dtype=dtype)
    b = torch.randn(k, n, device=device, generator=generator, dtype=dtype)
    return lambda: torch.mm(a, b)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gemm(perf: Any, device_timer: Any, cpu_threads: None, gpuperf_sizing: Any, precision: str, shape: str) -> None:
    import torch

    m, k, n = _skip_or_shape(perf, gpuperf_sizing, precision, shape)
    flops = 2 * m * n * k
    gpuperf_sizing.measure(precision, flops_per_call=flops)  # skips what the probe says would run for minutes
    capability = torch.cuda.get_device_capability() if perf.device == "cuda" else None
    skip_on_error = gemm_errors_skip(precision, perf.device, capability, bool(torch.version.hip))
    slowdown = perf.settings.slowdown("micro")
    with matmul_precision(precision):  # a slowed GEMM reduces over a longer K; its TFLOP/s counts the nominal K
        call = _gemm(precision, m, heavier(k, slowdown, multiple=16 if precision == "fp8" else 1), n, perf.device)
        started = time.perf_counter()
        try:
            out = call()
        except (RuntimeError, NotImplementedError, ValueError) as error:
            if skip_on_error:
                pytest.skip(f"{skip_on_error}: {error}")
            raise
        assert tuple(out.shape) == (m, n)
        # Planned again from that call: a fallback kernel is slower on a large shape than on the probe's.
        plan = gpuperf_sizing.measure(
            precision, flops_per_call=flops, extra_calls=0, observed_s=time.perf_counter() - started
        )
        perf.measure("tflops", call, unit="TFLOP/s", work=flops / 1e12, timer=device_timer,
                     warmup=plan.warmup, repeats=plan.repeats)  # fmt: skip
    attach_peak(perf, "tflops", dtype=precision)
    perf.metric("tflops").context["shape"] = {"m": m, "k": k, "n": n}
    note_slowdown(perf, "tflops", slowdown)
    gpuperf_sizing.annotate(perf.metric("tflops"))
    gpuperf_sizing.for_information(perf.metric("tflops"), precision)


@pytest.mark.parametrize("kind", ["copy", "read"])
def test_memory_bandwidth(perf: Any, device_timer: Any, cpu_threads: None, kind: str) -> None:
    """copy: dst.copy_(src) moves every byte twice (read + write); read: src.sum() reads every byte once."""
    import torch

    size = BANDWIDTH_BYTES[perf.device]
    slowdown = perf.settings.slowdown("micro")
    src = torch.ones(heavier(size // 4, slowdown), device=perf.device, dtype=torch.float32)
    if kind == "copy":
        dst = torch.empty_like(src)
        call, traffic = (lambda: dst.copy_(src)), 2 * size
    else:
        call, traffic = (lambda: src.sum()), size
        assert call().item() == pytest.approx(src.numel(), rel=1e-5)  # the whole buffer was read
    perf.measure("bandwidth", call, unit="GB/s", work=traffic / 1e9, timer=device_timer)
    attach_peak(perf, "bandwidth", dtype=None)
    perf.metric("bandwidth").context["bytes_moved"] = traffic
    note_slowdown(perf, "bandwidth", slowdown)


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
    from torch.nn.functional import scaled_dot_product_attention

    device = perf.device
    batch, heads, seq, dim, dtype_name = SDPA_SHAPE[device]
    member, _ = SDPA_BACKENDS[backend]
    if device == "cpu" and backend not in SDPA_CPU_BACKENDS:
        pytest.skip(f"PyTorch has no CPU kernel for the {backend} SDPA backend (cpu has flash and math)")
    if backend == "cudnn" and not (
        torch.backends.cudnn.is_available() and (torch.backends.cudnn.version() or 0) >= 90000
    ):
        pytest.skip(f"cuDNN attention needs cuDNN >= 9; this torch has {torch.backends.cudnn.version()}")
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device=device).manual_seed(0)
    slowdown = perf.settings.slowdown("micro")
    # attention's work grows with the square of the sequence: a slowed one runs sqrt(1 + slowdown) times longer
    worked = heavier(seq, (1 + slowdown) ** 0.5 - 1, multiple=8 if device == "cuda" else 1)
    q, k, v = (
        torch.randn(batch, heads, worked, dim, device=device, dtype=dtype, generator=generator, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(batch, heads, worked, dim, device=device, dtype=dtype, generator=generator)

    def forward() -> Any:
        return scaled_dot_product_attention(q, k, v, is_causal=True)

    def step() -> object:
        return torch.autograd.grad(forward(), (q, k, v), grad)  # returns gradients, accumulates nothing

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
        # Forward: two matmuls (QK^T, PV) of 2*B*H*S^2*D FLOPs, halved by the causal mask; backward 2.5x forward.
        flops = 3.5 * 4 * batch * heads * seq * seq * dim / 2
        perf.measure("tflops", step, unit="TFLOP/s", work=flops / 1e12, timer=device_timer)
    attach_peak(perf, "tflops", dtype=dtype_name)
    perf.metric("tflops").context["backends_ran"] = used
    note_slowdown(perf, "tflops", slowdown)


def note_slowdown(perf: Any, metric: str, slowdown: float) -> None:
    """Say in the metric's context that its workload was made heavier on purpose (--gpuperf-inject-slowdown)."""
    if slowdown > 0:
        perf.metric(metric).context["injected_slowdown"] = slowdown
