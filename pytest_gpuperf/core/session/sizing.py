"""pytest plugin of machine-aware sizing: the ``--gpuperf-sizing-budget`` option and the ``gpuperf_sizing``
fixture that CPU-tier suites size their heavy tests with. The probe and the plans are pure functions in
``machine/capability.py`` (machine/ imports nothing of core/); this module turns them into skips, warnings and
metric context. No torch at import.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest

from pytest_gpuperf.core.config.settings import OptionSpec, add_options, parse_positive_seconds, resolve
from pytest_gpuperf.machine.capability import (
    DEFAULT_BUDGET_S,
    Capability,
    MeasurePlan,
    plan_measure,
    plan_run,
    session_capability,
    slow_path,
)


class GpuperfSizingWarning(UserWarning):
    """A test measured with fewer repeats than asked, because this machine would take too long otherwise."""


OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="sizing-budget",
        help="estimated seconds a CPU-tier perf test may take on this machine (from a GEMM probe per dtype) "
        f"before its repeats are cut or it is skipped with the figures (default {DEFAULT_BUDGET_S:.0f})",
        parse=parse_positive_seconds,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
    ),
)

_budget_key = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    sizing_budget(config)  # a bad value stops the run at once


def sizing_budget(config: pytest.Config) -> float:
    found = config.stash.get(_budget_key, None)
    if found is None:
        value = resolve(config, OPTIONS[0])[0]
        found = DEFAULT_BUDGET_S if value is None else float(value)
        config.stash[_budget_key] = found
    return found


def machine_capability() -> Capability:
    """This process's probe (once), told the hardware key's ISA and any ISA caps set in the environment."""
    from pytest_gpuperf.machine.fingerprint import read_cpu

    caps = {name: os.environ[name] for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if os.environ.get(name)}
    return session_capability(isa=str(read_cpu()[0].get("isa", "unknown")), caps=caps)


class Sizing:
    """Sizes one test on this machine; on a GPU run it plans nothing (the GPU tier is sized by its own figures)."""

    def __init__(self, perf: Any, test: str, budget_s: float) -> None:
        self.perf = perf
        self.test = test
        self.budget_s = budget_s
        self.note: str | None = None

    @property
    def active(self) -> bool:
        return self.perf.device == "cpu"

    def measure(
        self, dtype: str, *, flops_per_call: float, extra_calls: int = 1, observed_s: float | None = None
    ) -> MeasurePlan:
        """The warm-up and repeats for ``perf.measure``; skips the test when even the fewest repeats do not fit.

        Call it before the first call (the probe's estimate), and again with ``observed_s``, the time of a call
        already made, and ``extra_calls=0``: the probe is optimistic for a fallback kernel on a large shape."""
        settings = self.perf.settings
        if not self.active:
            return MeasurePlan(warmup=settings.warmup, repeats=settings.repeats, estimate_s=None)
        capability = machine_capability()
        plan = plan_measure(
            capability,
            test=self.test,
            dtype=dtype,
            flops_per_call=flops_per_call,
            warmup=settings.warmup,
            repeats=settings.repeats,
            budget_s=self.budget_s,
            extra_calls=extra_calls,
            observed_s=observed_s,
        )
        if plan.skip:
            pytest.skip(plan.skip)
        self.note = plan.note  # the latest plan is the one measured with
        return plan

    def slow_path(self, dtype: str) -> str | None:
        """Why ``dtype``'s GEMM is on a slow path on this CPU (machine/capability.py), or None (and always on a GPU)."""
        return slow_path(machine_capability(), dtype) if self.active else None

    def run(self, dtype: str, *, flops: float) -> None:
        """Skip a workload of fixed size (training to a target) whose estimate exceeds the budget."""
        if not self.active:
            return
        reason = plan_run(machine_capability(), test=self.test, dtype=dtype, flops=flops, budget_s=self.budget_s)
        if reason:
            pytest.skip(reason)

    def for_information(self, metric: Any, dtype: str) -> None:
        """Record a metric measured on this CPU's slow path for information only: a fallback kernel's speed moves
        with whatever the machine does (an fp16 GEMM without avx512_fp16 read 0.731x, 1.043x and 0.874x of its
        baseline within minutes), so it is kept in the results and never judged (verdict NOISY, said why)."""
        reason = self.slow_path(dtype)
        if reason:
            metric.unjudgeable = f"{reason}: recorded for information, not judged"
            metric.context["unjudgeable"] = metric.unjudgeable
            metric.context["information_only"] = True

    def annotate(self, metric: Any) -> None:
        """Say that a metric was measured shrunk: in its context (with the probed rates) and as a pytest warning."""
        if self.note:
            metric.context["sizing"] = {"note": self.note, **machine_capability().to_dict()}
            warnings.warn(GpuperfSizingWarning(self.note), stacklevel=2)


@pytest.fixture
def gpuperf_sizing(perf: Any, request: pytest.FixtureRequest) -> Sizing:
    """How this test is sized on this machine (``--gpuperf-sizing-budget``; machine/capability.py)."""
    return Sizing(perf, request.node.name, sizing_budget(request.config))
