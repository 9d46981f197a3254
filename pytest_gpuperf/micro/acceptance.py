"""The acceptance tier's devices and floors: which local devices a node has, as test-id components, and the
datasheet floor each metric must clear.

Every local GPU is measured on its own and named in the test id's first component (``test_gemm[gpu3-bf16]``) and
in ``context["device"]``; ``gpuperf fleet`` groups by it. A floor is a fraction of the datasheet peak
(machine/peaks.py) below which a device is broken, not merely slow; it applies only to a part a healthy device of
which was measured above it (``HEALTHY``). Slow-but-working devices are the fleet's business (docs/acceptance.md).
Pure data and pure functions; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "FLOORS",
    "HEALTHY",
    "NODE",
    "Floor",
    "FloorDecision",
    "Healthy",
    "LocalDevice",
    "judge_floor",
    "local_devices",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalDevice:
    """One device of this node, as the acceptance tier names it."""

    id: str
    """The test-id component and ``context["device"]``: "cpu", "gpu0", "gpu1", ... (or "node")."""
    torch_device: str
    """What torch calls it: "cpu", "cuda:3"."""
    index: int | None = None
    """The CUDA/ROCm ordinal as this process sees it; None on CPU."""


NODE = LocalDevice(id="node", torch_device="node")
"""The node as a whole: the all-reduce across its GPUs (or its CPU ranks)."""


def local_devices(device: str, gpu_count: int) -> tuple[LocalDevice, ...]:
    """The devices a run on ``device`` ("cpu" or "cuda") measures: the CPU as one device, or every GPU this
    process sees (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES applied)."""
    if device == "cpu":
        return (LocalDevice(id="cpu", torch_device="cpu"),)
    if gpu_count < 1:
        raise ValueError(f"a {device} run with {gpu_count} GPUs: nothing to accept")
    return tuple(LocalDevice(id=f"gpu{i}", torch_device=f"cuda:{i}", index=i) for i in range(gpu_count))


@dataclass(frozen=True, slots=True, kw_only=True)
class Floor:
    """The least fraction of the datasheet peak a working device reaches on one metric."""

    label: str
    """How a message names the metric: "bf16 GEMM"."""
    fraction: float
    peak_dtype: str | None
    """The peaks.py dtype the floor is a fraction of; None: HBM bandwidth."""


FLOORS: dict[str, Floor] = {
    # each floor sits below the healthy figure HEALTHY holds for a part (docs/acceptance.md gives the margins)
    "gemm_bf16": Floor(label="bf16 GEMM", fraction=0.70, peak_dtype="bf16"),
    "gemm_fp8": Floor(label="fp8 GEMM", fraction=0.60, peak_dtype="fp8"),
    "memory_copy": Floor(label="memory copy bandwidth", fraction=0.70, peak_dtype=None),
    "memory_read": Floor(label="memory read bandwidth", fraction=0.70, peak_dtype=None),
}
"""Metrics with a floor. SDPA, host<->device copies, the all-reduce and the training step have none: the datasheet
prints no attention, PCIe-as-measured, NVLink-collective or training rate a measured figure could be a fraction
of, so the fleet's spread alone judges them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Healthy:
    """A healthy device's measured fraction of its datasheet peak: the evidence a floor is safe on that part."""

    fraction: float
    source: str


_H200_RUN = "one H200 SXM, 8192^2 GEMMs and 1 GiB buffers, 2026-12-04 (benchmarks/README.md, 'On a lent H200')"
HEALTHY: dict[tuple[str, str], Healthy] = {
    ("NVIDIA H200 SXM", "gemm_bf16"): Healthy(fraction=800.3 / 989.5, source=_H200_RUN),
    ("NVIDIA H200 SXM", "gemm_fp8"): Healthy(fraction=1482.0 / 1979.0, source=_H200_RUN),
    ("NVIDIA H200 SXM", "memory_copy"): Healthy(fraction=4228.0 / 4800.0, source=_H200_RUN),
    ("NVIDIA H200 SXM", "memory_read"): Healthy(fraction=4193.0 / 4800.0, source=_H200_RUN),
}
"""(peaks.py part name, metric) -> a healthy device's measurement. A part without an entry gets no floor: its
figure and "% of peak" are reported, and the first run on a healthy one is what adds it here."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FloorDecision:
    """Whether a floor applies to a measured figure, and whether the figure cleared it."""

    applies: bool
    passed: bool | None
    """None where no floor applies."""
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"applies": self.applies, "passed": self.passed, "message": self.message}


def judge_floor(
    metric: str,
    measured: float,
    unit: str,
    *,
    part: str | None,
    peak: float | None,
    peak_source: str | None = None,
    no_peak: str = "no datasheet peak is known for this device",
) -> FloorDecision:
    """Judge ``measured`` (``unit``) of ``metric`` (a key of FLOORS, or any other name: no floor) on ``part``
    (peaks.py name) against the floor of its datasheet ``peak`` (same unit). ``no_peak`` says why there is no
    peak, where there is none."""
    floor = FLOORS.get(metric)
    if floor is None:
        return FloorDecision(
            applies=False,
            passed=None,
            message=f"no floor for {metric}: the datasheet gives no figure it could be a fraction of; the fleet's "
            "spread judges it",
        )
    if part is None or peak is None:
        return FloorDecision(
            applies=False, passed=None, message=f"no floor applied to the {floor.label}: {no_peak} (none is made up)"
        )
    percent = 100 * measured / peak
    figure = f"{floor.label} {measured:,.1f} {unit} = {percent:.1f}% of the {part} datasheet peak {peak:,.1f} {unit}"
    healthy = HEALTHY.get((part, metric))
    if healthy is None:
        return FloorDecision(
            applies=False,
            passed=None,
            message=f"{figure}; no floor applied: no healthy {part} has been measured against the "
            f"{floor.fraction:.0%} floor yet (micro/acceptance.py HEALTHY)",
        )
    least = floor.fraction * peak
    source = f" ({peak_source})" if peak_source else ""
    if measured >= least:
        return FloorDecision(
            applies=True, passed=True, message=f"{figure}: above the {floor.fraction:.0%} floor ({least:,.1f} {unit})"
        )
    return FloorDecision(
        applies=True,
        passed=False,
        message=f"{figure}{source}: below the {floor.fraction:.0%} floor ({least:,.1f} {unit}), where a healthy "
        f"{part} measured {healthy.fraction:.1%} ({healthy.source}); this device is broken, not slow: check its "
        "clocks, power and cooling (nvidia-smi -q -d PERFORMANCE,CLOCK) and reseat or replace it",
    )
