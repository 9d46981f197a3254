"""The inference suite's GPU tier fits scripts/gpu_check.sh's bound for it (210 s, process start included).

Its cost is decode steps (eager, host-bound, one wave of requests per run); the step time measured on an H200 and
the rest of the budget are argued in pytest_gpuperf/suites/test_inference.py. This keeps a new sweep point from
quietly outgrowing them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SUITE = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_inference.py"
CHECK_BOUND_S = 210.0
"""scripts/gpu_check.py, step "inference" (test_the_bound_is_the_gpu_checks keeps the two equal)."""
OTHER_COSTS_S = 30.0
"""Process start, CUDA init, model builds, prefills, new attention shapes and parity (in the suite: ~30 s)."""


def _suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_inference_suite", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_gpu_tier_decode_steps_fit_the_check_with_room_for_a_slower_step() -> None:
    suite = _suite()
    runs = 3  # --gpuperf-inference-runs default, which gpu_check.sh does not change
    gpu = [p.values for p in suite.SWEEPS if any(m.name == "gpu_tier" for m in p.marks)]
    assert {(isl, osl) for _, isl, osl in gpu} == {(1024, 1024), (8192, 1024)}
    steps = sum(suite.decode_steps(tier, isl, osl, runs=runs) for tier, isl, osl in gpu)
    assert steps == 3 * 3 * 1023 + 7 + 3 * 2 * 1023 + 7
    # 1.5x the step time must still fit: it was measured on an H200 at 3 of the tier's 5 points, not at 64 x 8k,
    # and the tier as a whole has not run there with the fix that made those steps fast.
    assert OTHER_COSTS_S + 1.5 * steps * suite.GPU_DECODE_STEP_S < CHECK_BOUND_S


def test_the_long_output_pair_stays_out_of_the_gpu_tier() -> None:
    suite = _suite()
    (long,) = [p for p in suite.SWEEPS if p.id == "gpu-1k-8k"]
    assert not any(m.name == "gpu_tier" for m in long.marks)
    # alone it would take more than the whole check's bound
    assert suite.decode_steps("cuda", 1024, 8192, runs=3) * suite.GPU_DECODE_STEP_S > CHECK_BOUND_S


def test_a_fresh_sweep_chooses_points_every_run_reaches() -> None:
    """Issue 15.6: without a baseline, the points come from the range each run's front reaches, so a fresh
    folder never reports a point "of the baseline" that a slower run's front falls short of."""
    from pytest_gpuperf.inference.pareto import OperatingPoint, throughput_at
    from pytest_gpuperf.inference.sweep import fresh_targets

    def front(scale: float) -> list[OperatingPoint]:
        return [OperatingPoint(concurrency=c, interactivity=x * scale, throughput=t) for c, x, t in
                ((8, 100.0, 800.0), (4, 300.0, 600.0), (1, 750.4, 300.0))]  # fmt: skip

    fronts = [front(1.0), front(0.6), front(1.1)]
    targets = fresh_targets(fronts, (0.2, 0.4, 0.6, 1.0))
    assert targets[-1] <= 750.4 * 0.6 and targets == sorted(targets)
    assert all(value is not None for f in fronts for value in throughput_at(f, targets))


def test_the_bound_is_the_gpu_checks() -> None:
    spec = importlib.util.spec_from_file_location("_gpu_check", SUITE.parent.parent.parent / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    (step,) = [s for s in module.STEPS if s.name == "inference"]
    assert step.timeout_s == CHECK_BOUND_S
