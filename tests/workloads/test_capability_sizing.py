"""Sizing by what the machine can do (issue 16, item 14): a GEMM probe per dtype, and the plans made from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.machine import capability
from pytest_gpuperf.machine.capability import Capability, GemmRate, plan_measure, plan_run

SUITES = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites"


def _machine(isa: str, **gflops: float) -> Capability:
    return Capability(
        rates={dtype: GemmRate(dtype=dtype, gflops=rate, shape=(64, 256, 256)) for dtype, rate in gflops.items()},
        isa=isa,
    )


AVX2 = _machine("avx2", fp32=20.0, bf16=0.3)
"""A CPU without avx512_bf16: bf16 GEMM through a reference kernel, as on the machine of the issue."""
ZEN4 = _machine("avx512-bf16", fp32=20.0, bf16=150.0)
DOWN = 2 * 64 * 14336 * 4096  # test_gemm[bf16-llama3_8b_down], 7.5 GFLOP a call


def test_a_gemm_that_fits_is_measured_as_asked() -> None:
    plan = plan_measure(ZEN4, test="t", dtype="bf16", flops_per_call=DOWN, warmup=3, repeats=20, budget_s=120)
    assert (plan.warmup, plan.repeats, plan.skip, plan.note) == (3, 20, None, None)
    assert plan.estimate_s == pytest.approx(24 * DOWN / 150e9)


def test_a_gemm_that_cannot_fit_is_skipped_with_the_figures() -> None:
    plan = plan_measure(
        AVX2, test="test_gemm[bf16-llama3_8b_down]", dtype="bf16", flops_per_call=DOWN, warmup=3, repeats=20,
        budget_s=120,
    )  # fmt: skip
    assert plan.skip is not None and plan.skip.startswith(
        "bf16 GEMM runs at 0.3 GFLOP/s here (no avx512_bf16/AMX): test_gemm[bf16-llama3_8b_down] would take "
        "~601 s (~175 s even at 5 repeats) > its budget 120 s"
    )


def test_a_gemm_a_little_over_budget_takes_fewer_repeats_and_says_so() -> None:
    square = 2 * 512**3  # 0.27 GFLOP: 0.89 s a call at 0.3 GFLOP/s
    plan = plan_measure(AVX2, test="sq", dtype="bf16", flops_per_call=square, warmup=3, repeats=20, budget_s=10)
    assert (plan.warmup, plan.repeats, plan.skip) == (1, 9, None)
    assert plan.note is not None and "sq would take ~21 s > its budget 10 s; measured with 9 repeats (not 20)" in (
        plan.note
    )


def test_a_first_call_slower_than_the_probe_said_decides() -> None:
    # A fallback kernel slows down with size: the probe's small GEMM is optimistic for a large one.
    optimistic = plan_measure(AVX2, test="t", dtype="bf16", flops_per_call=1e9, warmup=3, repeats=20, budget_s=120)
    assert optimistic.skip is None and optimistic.repeats == 20  # 3.3 s a call by the probe: ~80 s in all
    observed = plan_measure(
        AVX2, test="t", dtype="bf16", flops_per_call=1e9, warmup=3, repeats=20, budget_s=120, extra_calls=0,
        observed_s=30.0,
    )  # fmt: skip
    assert observed.skip is not None and "a call of this shape took 30 s" in observed.skip


def test_without_a_rate_nothing_is_planned() -> None:
    plan = plan_measure(ZEN4, test="t", dtype="fp8", flops_per_call=1e12, warmup=3, repeats=20, budget_s=1)
    assert (plan.repeats, plan.skip, plan.estimate_s) == (20, None, None)


def test_a_training_run_is_skipped_whole_never_cut() -> None:
    assert plan_run(ZEN4, test="ladder[bf16]", dtype="bf16", flops=480e9, budget_s=120) is None
    reason = plan_run(AVX2, test="ladder[bf16]", dtype="bf16", flops=480e9, budget_s=120)
    assert reason == (
        "bf16 GEMM runs at 0.3 GFLOP/s here (no avx512_bf16/AMX): ladder[bf16] would take ~1600 s > its budget "
        "120 s (--gpuperf-sizing-budget)"
    )


def test_the_reason_names_an_isa_cap_set_in_the_environment() -> None:
    capped = Capability(rates=ZEN4.rates, isa="avx512-bf16", caps={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert capped.why("bf16") == "(ONEDNN_MAX_CPU_ISA=AVX2)"
    assert ZEN4.why("bf16") == "" and AVX2.why("bf16") == "(no avx512_bf16/AMX)"
    assert _machine("amx-bf16").why("bf16") == "" and ZEN4.why("fp16") == "(no avx512_fp16/AMX-FP16)"


def test_the_probe_grows_a_fast_gemm_and_stops_a_slow_one(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    now = [0.0]

    def clock_of(call_s: float):  # every timed call takes call_s, whatever the machine
        def clock() -> float:
            now[0] += call_s  # so end - start is call_s
            return now[0]

        return clock

    fast = capability.probe(("fp32",), clock=clock_of(0.001))
    assert fast.rates["fp32"].shape == (64, capability.MAX_K, capability.MAX_K)
    assert fast.rates["fp32"].gflops == pytest.approx(2 * 64 * capability.MAX_K**2 / 0.001 / 1e9)
    slow = capability.probe(("fp32",), clock=clock_of(0.5))
    assert slow.rates["fp32"].shape == (64, 128, 128)  # the first size already took long enough


def test_a_dtype_this_build_cannot_multiply_is_named_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    found = capability.probe(("fp32", "int3"))
    assert "fp32" in found.rates and "int3" not in found.rates and "no GEMM probe" in found.errors["int3"]


FAKE_MACHINE = """
from pytest_gpuperf.machine import capability
from pytest_gpuperf.machine.capability import Capability, GemmRate

# This machine, as the sizing sees it, is the CPU of issue 16: bf16 GEMM at 0.3 GFLOP/s (no avx512_bf16).
capability._CACHE[(capability.PROBE_DTYPES, 1)] = Capability(
    rates={"fp32": GemmRate(dtype="fp32", gflops=20.0, shape=(64, 256, 256)),
           "bf16": GemmRate(dtype="bf16", gflops=0.3, shape=(64, 256, 256))},
    isa="avx2",
)
"""


def test_the_micro_suite_skips_and_shrinks_by_the_machine_never_silently(pytester: pytest.Pytester) -> None:
    (pytester.path / "test_micro.py").write_text((SUITES / "test_micro.py").read_text())
    pytester.makeconftest((SUITES / "conftest.py").read_text() + FAKE_MACHINE)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    result = pytester.runpytest_inprocess(
        "--gpuperf-device", "cpu", "--gpuperf-sizing-budget", "10", "-rs", "--gpuperf-results", "run.json",
        "test_micro.py::test_gemm[bf16-llama3_8b_down]", "test_micro.py::test_gemm[bf16-square]",
    )  # fmt: skip
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*GpuperfSizingWarning: bf16 GEMM runs at 0.3 GFLOP/s here (no avx512_bf16/AMX): "
            "test_gemm[[]bf16-square[]] would take ~21 s > its budget 10 s; measured with 10 repeats (not 20)*",
            # A reference kernel is measured on the square shape only (the budget would skip it too: ~601 s).
            "SKIPPED*bf16 GEMM runs at 0.3 GFLOP/s here (no avx512_bf16/AMX), 1/67 of fp32's 20 GFLOP/s (a "
            "reference kernel): the CPU tier measures it on the square shape only",
        ]
    )
    [square] = json.loads((pytester.path / "run.json").read_text())["results"]
    # Planned again after the check call (extra_calls=0): one repeat more than before it.
    assert len(square["samples"]) == 10 and "measured with 10 repeats" in square["context"]["sizing"]["note"]
    assert square["context"]["sizing"]["gflops"] == {"bf16": 0.3, "fp32": 20.0}


def test_a_bad_sizing_budget_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--gpuperf-sizing-budget", "-5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Invalid value '-5' from --gpuperf-sizing-budget: expected a positive*"])


def test_the_training_suite_skips_a_run_this_machine_cannot_finish_in_budget(pytester: pytest.Pytester) -> None:
    (pytester.path / "test_training.py").write_text((SUITES / "test_training.py").read_text())
    pytester.makeconftest((SUITES / "conftest.py").read_text() + FAKE_MACHINE)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    result = pytester.runpytest_inprocess(
        "--gpuperf-device", "cpu", "-rs", "-p", "no:randomly", "-k", "test_precision_ladder and bf16"
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED*bf16 GEMM runs at 0.3 GFLOP/s here (no avx512_bf16/AMX): test_precision_ladder[[]bf16[]] would "
         "take ~* s > its budget 120 s (--gpuperf-sizing-budget)"]
    )  # fmt: skip


def test_every_training_precision_has_a_gemm_dtype_the_probe_measures() -> None:
    from pytest_gpuperf.training.precision import PRECISIONS
    from pytest_gpuperf.training.tiers import GEMM_DTYPE

    assert set(PRECISIONS) <= set(GEMM_DTYPE) and set(GEMM_DTYPE.values()) <= set(capability.PROBE_DTYPES)


SAPPHIRE = _machine("amx-bf16", fp32=139.0, bf16=531.0, fp16=149.0, fp8=0.065)
"""The rates probed on cpu-intel-f6m167-amx-bf16: native bf16 (AMX) and fp16 (avx512_fp16), a reference fp8."""


def test_a_dtype_far_below_fp32_is_on_a_slow_path_with_the_figures() -> None:
    reason = capability.slow_path(SAPPHIRE, "fp8")
    assert reason == (
        "fp8 GEMM runs at 0.065 GFLOP/s here (no native fp8 GEMM), 1/2138 of fp32's 139 GFLOP/s (a reference kernel)"
    )
    assert capability.slow_path(AVX2, "bf16") is not None and "1/67 of fp32's 20 GFLOP/s" in str(
        capability.slow_path(AVX2, "bf16")
    )


def test_a_native_low_precision_kernel_is_not_a_slow_path() -> None:
    assert capability.slow_path(SAPPHIRE, "fp16") is None  # 149 GFLOP/s against fp32's 139
    assert capability.slow_path(SAPPHIRE, "bf16") is None
    assert capability.slow_path(ZEN4, "bf16") is None
    share = capability.SLOW_PATH_SHARE
    just_above = _machine("avx512", fp32=100.0, fp16=100.0 * share)
    assert capability.slow_path(just_above, "fp16") is None
    assert capability.slow_path(_machine("avx512", fp32=100.0, fp16=100.0 * share * 0.99), "fp16") is not None


def test_without_both_rates_nothing_is_called_slow() -> None:
    assert capability.slow_path(ZEN4, "fp8") is None  # no fp8 rate: the test's own call says what fails
    assert capability.slow_path(_machine("avx512", bf16=1.0), "bf16") is None  # no fp32 rate to compare with
    assert capability.slow_path(SAPPHIRE, "fp32") is None
