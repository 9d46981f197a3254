"""The kernels the micro suite and the acceptance tier time: GEMM per precision, memory copy and read, causal
attention forward+backward, and how each is made heavier on purpose (``--gpuperf-inject-slowdown``) and given
its "% of datasheet peak". One piece of code serves both suites; torch is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.machine import peaks

SQUARE = {"cpu": 512, "cuda": 8192}  # 512: ~3 ms per fp32 call on one CPU thread, long enough to time
BANDWIDTH_BYTES = {"cpu": 64 * 2**20, "cuda": 2**30}  # well past the last-level cache on either
# (batch, heads, sequence, head dim, dtype): Llama 3 8B attention at 4096 tokens on a GPU; small on CPU.
SDPA_SHAPE = {"cpu": (1, 4, 128, 64, "float32"), "cuda": (2, 32, 4096, 128, "bfloat16")}


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


def datasheet_peak(device_name: str, dtype: str | None) -> tuple[peaks.DevicePeaks, float, str, str] | str:
    """(table entry, peak value, unit, source) for ``dtype`` (TFLOP/s) or HBM bandwidth when ``dtype`` is None
    (GB/s) on the GPU called ``device_name``; or why there is no figure."""
    entry = peaks.lookup(device_name)
    peak = None if entry is None else (entry.hbm if dtype is None else entry.tflops(dtype))
    if peak is None:
        what = "HBM bandwidth" if dtype is None else f"dense {dtype}"
        return f"no datasheet {what} figure for {device_name!r} in peaks.py"
    assert entry is not None  # a peak was found in it
    value, unit = (peak.value * 1000, "GB/s") if dtype is None else (peak.value, "TFLOP/s")
    return entry, value, unit, peak.source


def attach_peak(perf: Any, metric: str, *, dtype: str | None) -> None:
    """Add "% of peak" to a metric's context: against the datasheet figure for ``dtype`` (TFLOP/s), or the HBM
    bandwidth when ``dtype`` is None (GB/s), of the current GPU. Says why when there is no figure; never invents
    one."""
    record = perf.metric(metric)
    median = summarize(record.samples).median
    if perf.device != "cuda":
        record.context["peak"] = {"kind": None, "note": f"no vendor peak for a {perf.device} run"}
        return
    import torch

    found = datasheet_peak(torch.cuda.get_device_name(), dtype)
    if isinstance(found, str):
        record.context["peak"] = {"kind": None, "note": found}
        return
    entry, value, unit, source = found
    record.context["peak"] = {
        "kind": "datasheet",
        "device": entry.name,
        "value": value,
        "unit": unit,
        "source": source,
        "percent": round(100 * median / value, 2),
    }


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
    """``size`` grown by ``slowdown`` (a fraction; --gpuperf-inject-slowdown SUITE=PCT), rounded up to a multiple:
    the work a deliberately slowed workload does while its metric is computed from the nominal size."""
    if slowdown <= 0:
        return size
    grown = size * (1 + slowdown)
    return int(-(-grown // multiple) * multiple)


def make_gemm(precision: str, m: int, k: int, n: int, device: str) -> Callable[[], Any]:
    """One GEMM of ``precision`` on ``device`` (fp8 through ``torch._scaled_mm``), operands made once, seeded."""
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


def measure_gemm(
    perf: Any,
    sizing: Any,
    timer: Any,
    *,
    precision: str,
    shape: tuple[int, int, int],
    device: str,
    slowdown: float,
) -> None:
    """Measure "tflops" of one GEMM of ``shape`` (m, k, n) on ``device`` (the current GPU, or the CPU), sized by
    this machine (``gpuperf_sizing``), with its peak, shape and any injected slowdown in its context. A precision
    the device lacks skips (``gemm_errors_skip``); any other error fails. A slowed GEMM gets more rows (m): of
    the three dimensions the one whose growth moved the time most nearly in proportion on the CPUs measured
    (benchmarks/README.md, "An injected slowdown")."""
    import torch

    m, k, n = shape
    flops = 2 * m * n * k
    sizing.measure(precision, flops_per_call=flops)  # skips what the probe says would run for minutes
    capability = torch.cuda.get_device_capability() if perf.device == "cuda" else None
    skip_on_error = gemm_errors_skip(precision, perf.device, capability, bool(torch.version.hip))
    worked_m = heavier(m, slowdown)  # fp8 too: torch._scaled_mm constrains K and N only (fp8_operands)
    with matmul_precision(precision):  # a slowed GEMM does more work; its TFLOP/s counts the nominal shape's
        call = make_gemm(precision, worked_m, k, n, device)
        started = time.perf_counter()
        try:
            out = call()
        except (RuntimeError, NotImplementedError, ValueError) as error:
            if skip_on_error:
                pytest.skip(f"{skip_on_error}: {error}")
            raise
        assert tuple(out.shape) == (worked_m, n)
        # Planned again from that call: a fallback kernel is slower on a large shape than on the probe's.
        plan = sizing.measure(precision, flops_per_call=flops, extra_calls=0, observed_s=time.perf_counter() - started)
        perf.measure("tflops", call, unit="TFLOP/s", work=flops / 1e12, timer=timer,
                     warmup=plan.warmup, repeats=plan.repeats)  # fmt: skip
    attach_peak(perf, "tflops", dtype=precision)
    perf.metric("tflops").context["shape"] = {"m": m, "k": k, "n": n}
    note_slowdown(perf, "tflops", slowdown)
    if worked_m != m:
        perf.metric("tflops").context["worked_shape"] = {"m": worked_m, "k": k, "n": n}
    sizing.annotate(perf.metric("tflops"))
    sizing.for_information(perf.metric("tflops"), precision)


def measure_memory(perf: Any, timer: Any, *, kind: str, size: int, device: str, slowdown: float) -> None:
    """Measure "bandwidth" of a ``kind`` (copy or read) pass over ``size`` bytes on ``device``."""
    call, traffic = memory_call(kind, size, device, slowdown)
    perf.measure("bandwidth", call, unit="GB/s", work=traffic / 1e9, timer=timer)
    attach_peak(perf, "bandwidth", dtype=None)
    perf.metric("bandwidth").context["bytes_moved"] = traffic
    note_slowdown(perf, "bandwidth", slowdown)


def memory_call(kind: str, size: int, device: str, slowdown: float) -> tuple[Callable[[], Any], int]:
    """(call, bytes it moves at the nominal ``size``). copy: dst.copy_(src) moves every byte twice (read + write);
    read: src.sum() reads every byte once, checked once here to have read the whole buffer."""
    import torch

    src = torch.ones(heavier(size // 4, slowdown), device=device, dtype=torch.float32)
    if kind == "copy":
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2 * size
    if kind != "read":
        raise ValueError(f"memory kind {kind!r}: copy or read")
    total = src.sum().item()
    if abs(total - src.numel()) > 1e-5 * src.numel():
        raise AssertionError(f"a read of {src.numel()} ones summed to {total}: the buffer was not read whole")
    return (lambda: src.sum()), size


def sdpa_step(
    shape: tuple[int, int, int, int, str], device: str, slowdown: float
) -> tuple[Callable[[], Any], Callable[[], Any], float]:
    """(forward, forward+backward step, FLOPs of one step at the nominal shape) of causal attention over
    ``shape`` = (batch, heads, sequence, head dim, dtype name). A slowed one runs a longer sequence: attention's
    work grows with its square, so sqrt(1 + slowdown) times longer."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    batch, heads, seq, dim, dtype_name = shape
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device=device).manual_seed(0)
    worked = heavier(seq, (1 + slowdown) ** 0.5 - 1, multiple=1 if device == "cpu" else 8)
    q, k, v = (
        torch.randn(batch, heads, worked, dim, device=device, dtype=dtype, generator=generator, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(batch, heads, worked, dim, device=device, dtype=dtype, generator=generator)

    def forward() -> Any:
        return scaled_dot_product_attention(q, k, v, is_causal=True)

    def step() -> object:
        return torch.autograd.grad(forward(), (q, k, v), grad)  # returns gradients, accumulates nothing

    # Forward: two matmuls (QK^T, PV) of 2*B*H*S^2*D FLOPs, halved by the causal mask; backward 2.5x forward.
    flops = 3.5 * 4 * batch * heads * seq * seq * dim / 2
    return forward, step, flops


def note_slowdown(perf: Any, metric: str, slowdown: float) -> None:
    """Say in the metric's context that its workload was made heavier on purpose (--gpuperf-inject-slowdown)."""
    if slowdown > 0:
        perf.metric(metric).context["injected_slowdown"] = slowdown
