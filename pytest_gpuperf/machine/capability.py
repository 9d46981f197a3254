"""What this machine's CPU can do, measured once: GEMM throughput per dtype, so CPU-tier workloads are sized by it.

Before a heavy CPU test runs, its time is estimated from its FLOPs at this machine's measured rate for its dtype;
a test over the per-test bound (``--gpuperf-sizing-budget``) takes fewer repeats, or is skipped with the figures
that decided it, never silently. The probe is a few small one-thread GEMMs per dtype, each grown until a call takes
``MIN_CALL_S`` or reaches ``MAX_K``, fastest of five kept, cached per process. A test with large GEMMs plans again
from its first call (``observed_s``). Why (a fallback bf16 kernel hundreds of times slower) and why own code:
docs/design/cpu-sizing-by-probe.md. machine/: facts only, no core/; torch is imported inside ``probe`` only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BUDGET_S = 120.0
"""Estimated seconds one CPU-tier perf test may take (one measurement round) before it is shrunk or skipped. On
the 2-core AVX-512 machine the tier was sized on, the largest estimate is ~55 s (the fp8 precision ladder, probed
while other jobs loaded the machine): 120 s keeps every test there with room for load, while a fallback kernel
100x slower (bf16 without avx512_bf16) cannot hold a CI job for half an hour."""
MIN_REPEATS = 5
"""Fewest timed repeats a shrunk measurement keeps: a one-sided Mann-Whitney test of n vs n needs n >= 5 to
reach p < 0.01."""
PROBE_DTYPES = ("fp32", "bf16", "fp16", "fp8")
PROBE_M = 64
"""Rows of the probe GEMM: the token count of the micro suite's CPU shapes."""
MIN_CALL_S = 0.01
MAX_K = 2048
PROBE_CALLS = 5
"""Timed calls per probe size, the fastest kept: on a shared machine some call gets the core to itself."""

_SLOW_PATH = {
    "bf16": ("bf16", "amx", "avx512_bf16/AMX"),
    "fp16": ("fp16", "amx-fp16", "avx512_fp16/AMX-FP16"),
    "fp8": (None, None, "native fp8 GEMM"),
}
"""dtype -> (ISA substring that gives a fast path, a second one, what a fast path needs, for the reason)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmRate:
    dtype: str
    gflops: float
    """Fastest of ``PROBE_CALLS`` calls at ``shape``, in GFLOP/s."""
    shape: tuple[int, int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Capability:
    """This machine's measured GEMM rates, and what explains a slow one."""

    rates: dict[str, GemmRate]
    """By dtype; a dtype whose GEMM does not run on this build is absent (``errors`` says why)."""
    isa: str = "unknown"
    """The hardware key's vector ISA ("avx512-bf16", "avx2")."""
    caps: dict[str, str] = field(default_factory=dict)
    """ISA caps set in the environment (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY)."""
    errors: dict[str, str] = field(default_factory=dict)
    threads: int = 1

    def seconds(self, flops: float, dtype: str) -> float | None:
        """Estimated seconds for ``flops`` of GEMM work in ``dtype``; None without a rate for it."""
        rate = self.rates.get(dtype)
        return None if rate is None else flops / (rate.gflops * 1e9)

    def why(self, dtype: str) -> str:
        """A short reason for the dtype's rate: '(no avx512_bf16/AMX)', '(ONEDNN_MAX_CPU_ISA=AVX2)', or ''."""
        if self.caps:
            return "(" + ", ".join(f"{name}={value}" for name, value in sorted(self.caps.items())) + ")"
        fast, other, needs = _SLOW_PATH.get(dtype, (None, None, ""))
        if not needs:
            return ""
        if fast is not None and (fast in self.isa or (other is not None and other in self.isa)):
            return ""
        return f"(no {needs})"

    def describe(self, dtype: str) -> str:
        rate = self.rates[dtype]
        why = self.why(dtype)
        return f"{dtype} GEMM runs at {_figure(rate.gflops)} GFLOP/s here" + (f" {why}" if why else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "gflops": {dtype: round(rate.gflops, 3) for dtype, rate in sorted(self.rates.items())},
            "probe_shapes": {dtype: list(rate.shape) for dtype, rate in sorted(self.rates.items())},
            "isa": self.isa,
            "caps": dict(self.caps),
            "threads": self.threads,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasurePlan:
    """How a ``perf.measure`` call is sized here: as asked, shrunk, or skipped (``skip`` says why)."""

    warmup: int
    repeats: int
    estimate_s: float | None
    """Estimated seconds of the test as planned (one measurement round), None without a rate."""
    skip: str | None = None
    note: str | None = None
    """Set when the repeats were shrunk: what, why, by how much (for the metric's context and a warning)."""


def plan_measure(
    capability: Capability,
    *,
    test: str,
    dtype: str,
    flops_per_call: float,
    warmup: int,
    repeats: int,
    budget_s: float,
    extra_calls: int = 1,
    observed_s: float | None = None,
    min_repeats: int = MIN_REPEATS,
) -> MeasurePlan:
    """Size one measurement: ``extra_calls`` untimed calls (a correctness check), ``warmup``, then ``repeats``.

    A call takes the FLOP estimate at the probed rate, or ``observed_s`` (a call already timed) where that is
    longer. Within ``budget_s``: as asked. Over it: the warm-up cut to one call and the repeats to what fits, if
    that is still ``min_repeats``; otherwise a skip whose reason holds the rate, the estimate and the budget.
    """
    estimates = [t for t in (capability.seconds(flops_per_call, dtype), observed_s) if t is not None]
    if not estimates:
        return MeasurePlan(warmup=warmup, repeats=repeats, estimate_s=None)
    per_call = max(estimates)
    slower = observed_s is not None and observed_s >= per_call and dtype in capability.rates
    rate_text = (
        f"{capability.describe(dtype)}, and a call of this shape took {_figure(observed_s)} s"
        if slower and observed_s is not None
        else capability.describe(dtype)
        if dtype in capability.rates
        else f"a call took {_figure(per_call)} s here"
    )
    estimate = per_call * (extra_calls + warmup + repeats)
    if estimate <= budget_s:
        return MeasurePlan(warmup=warmup, repeats=repeats, estimate_s=estimate)
    short_warmup = min(warmup, 1)
    fits = math.floor(budget_s / per_call) - extra_calls - short_warmup
    if fits >= min_repeats:
        planned = per_call * (extra_calls + short_warmup + fits)
        note = (
            f"{rate_text}: {test} would take ~{_figure(estimate)} s > its budget "
            f"{_figure(budget_s)} s; measured with {fits} repeats (not {repeats}) and {short_warmup} warm-up "
            f"(~{_figure(planned)} s)"
        )
        return MeasurePlan(warmup=short_warmup, repeats=fits, estimate_s=planned, note=note)
    fewest = per_call * (extra_calls + short_warmup + min_repeats)
    return MeasurePlan(
        warmup=warmup,
        repeats=repeats,
        estimate_s=estimate,
        skip=(
            f"{rate_text}: {test} would take ~{_figure(estimate)} s (~{_figure(fewest)} s even "
            f"at {min_repeats} repeats) > its budget {_figure(budget_s)} s (--gpuperf-sizing-budget)"
        ),
    )


def plan_run(capability: Capability, *, test: str, dtype: str, flops: float, budget_s: float) -> str | None:
    """Why a workload of fixed size (a training run to a target) is skipped here, or None when it fits.

    A convergence budget cannot shrink without changing what the test asserts, so such a workload runs whole or
    not at all."""
    estimate = capability.seconds(flops, dtype)
    if estimate is None or estimate <= budget_s:
        return None
    return (
        f"{capability.describe(dtype)}: {test} would take ~{_figure(estimate)} s > its budget "
        f"{_figure(budget_s)} s (--gpuperf-sizing-budget)"
    )


SLOW_PATH_SHARE = 0.25
"""A dtype's GEMM runs a slow path here when the probe measures it below this share of fp32's rate. A native
low-precision kernel runs at or above fp32's rate (bf16 on AMX 3.8x, fp16 with avx512_fp16 1.1x, on this project's
CPUs); a reference kernel far below it (bf16 without avx512_bf16 ~1/400, fp16 without avx512_fp16 ~1/90, fp8
_scaled_mm 1/8 to 1/2000)."""


def slow_path(capability: Capability, dtype: str) -> str | None:
    """Why ``dtype``'s GEMM is on a slow path here (its measured rate against fp32's), or None where it is not, or
    where either rate is missing (the test's own call then says what fails)."""
    rate, reference = capability.rates.get(dtype), capability.rates.get("fp32")
    if rate is None or reference is None or rate.gflops >= SLOW_PATH_SHARE * reference.gflops:
        return None
    return (
        f"{capability.describe(dtype)}, 1/{reference.gflops / rate.gflops:.0f} of fp32's "
        f"{_figure(reference.gflops)} GFLOP/s (a reference kernel)"
    )


def _figure(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


# -- the probe ---------------------------------------------------------------------------------------------------

_CACHE: dict[tuple[tuple[str, ...], int], Capability] = {}


def session_capability(*, isa: str = "unknown", caps: dict[str, str] | None = None, threads: int = 1) -> Capability:
    """:func:`probe`, once per process and thread count."""
    key = (PROBE_DTYPES, threads)
    if key not in _CACHE:
        _CACHE[key] = probe(PROBE_DTYPES, isa=isa, caps=caps or {}, threads=threads)
    return _CACHE[key]


def probe(
    dtypes: Iterable[str] = PROBE_DTYPES,
    *,
    isa: str = "unknown",
    caps: dict[str, str] | None = None,
    threads: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> Capability:
    """Measure the GEMM rate of each dtype on ``threads`` threads (restored afterwards); typically < 1 s."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    rates: dict[str, GemmRate] = {}
    errors: dict[str, str] = {}
    try:
        for dtype in dtypes:
            try:
                rates[dtype] = _probe_one(torch, dtype, clock)
            except (RuntimeError, NotImplementedError, ValueError, TypeError) as error:
                errors[dtype] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    finally:
        torch.set_num_threads(previous)
    return Capability(rates=rates, isa=isa, caps=dict(caps or {}), errors=errors, threads=threads)


def _probe_one(torch: Any, dtype: str, clock: Callable[[], float]) -> GemmRate:
    k = 128
    while True:
        call = _gemm(torch, dtype, PROBE_M, k, k)
        call()  # first touch, kernel selection
        best = math.inf
        for _ in range(PROBE_CALLS):
            start = clock()
            call()
            best = min(best, clock() - start)
        best = max(best, 1e-9)
        if best >= MIN_CALL_S or k >= MAX_K:
            return GemmRate(dtype=dtype, gflops=2 * PROBE_M * k * k / best / 1e9, shape=(PROBE_M, k, k))
        k *= 2


def _gemm(torch: Any, dtype: str, m: int, k: int, n: int) -> Callable[[], object]:
    generator = torch.Generator().manual_seed(0)
    if dtype == "fp8":
        a = torch.randn(m, k, generator=generator).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, generator=generator).to(torch.float8_e4m3fn).t()
        scale = torch.ones((), dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    types = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype not in types:
        raise ValueError(f"no GEMM probe for dtype {dtype!r}; known: {', '.join(PROBE_DTYPES)}")
    a = torch.randn(m, k, generator=generator, dtype=types[dtype])
    b = torch.randn(k, n, generator=generator, dtype=types[dtype])
    return lambda: torch.mm(a, b)
