"""Throughput against interactivity: the Pareto front of a concurrency sweep and throughput at fixed
interactivity points (the InferenceX headline: "N tok/s per GPU at 32 tok/s/user"). Pure: numpy/scipy only.

Each operating point is one concurrency of a sweep: x = interactivity (tok/s/user), y = tok/s per device, both
higher-is-better. The front keeps the points no other point beats on both. Throughput at an interactivity x
is the best throughput of any configuration that serves users at least that fast: below the front's slowest
point that is the front's top throughput; between front points it is a monotone (PCHIP) interpolation, which
neither overshoots nor invents a bump between two measured points; beyond the front's fastest point no
measured configuration reaches x, and the value is None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Curves a sweep records (x = concurrency): the median operating point per concurrency, and the fixed
# interactivity targets its headline metrics are named after. `gpuperf report` draws fronts from the first two.
INTERACTIVITY_CURVE = "pareto.interactivity"
THROUGHPUT_CURVE = "pareto.tok_s_per_device"
TARGETS_CURVE = "pareto.interactivity_targets"


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatingPoint:
    concurrency: int
    interactivity: float
    """tok/s/user: 1000 / p50(TPOT in ms)."""
    throughput: float
    """Output tok/s per device."""


def pareto_front(points: Iterable[OperatingPoint]) -> list[OperatingPoint]:
    """The non-dominated points, by increasing interactivity (so by decreasing throughput)."""
    front: list[OperatingPoint] = []
    best = -math.inf
    for point in sorted(points, key=lambda p: (-p.interactivity, -p.throughput)):
        if point.throughput > best:
            front.append(point)
            best = point.throughput
    return front[::-1]


def throughput_at(front: Sequence[OperatingPoint], targets: Sequence[float]) -> list[float | None]:
    """Throughput per device at each interactivity target on ``front`` (from ``pareto_front``)."""
    if not front:
        raise ValueError("throughput_at: empty Pareto front")
    xs = [p.interactivity for p in front]
    ys = [p.throughput for p in front]
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise ValueError(f"throughput_at: front interactivities must increase strictly, got {xs}")
    interpolate = None
    if len(front) >= 2:
        from scipy.interpolate import PchipInterpolator

        interpolate = PchipInterpolator(xs, ys, extrapolate=False)
    found: list[float | None] = []
    for x in targets:
        if x <= xs[0]:
            found.append(ys[0])
        elif x > xs[-1]:
            found.append(None)
        else:
            assert interpolate is not None  # one point: x is either <= or > it
            found.append(float(interpolate(x)))
    return found


def interactivity_targets(front: Sequence[OperatingPoint], fractions: Sequence[float] = (0.2, 0.4, 0.6)) -> list[float]:
    """Fixed interactivity points inside a (baseline's) front: at ``fractions`` of its range on a log scale,
    rounded to 3 significant digits so they read well in metric names. Lower fractions sit further from the
    front's fastest point, so a moderately slower stack still reaches them and is judged on throughput."""
    if not front:
        raise ValueError("interactivity_targets: empty Pareto front")
    low, high = math.log(front[0].interactivity), math.log(front[-1].interactivity)
    return [float(f"{math.exp(low + f * (high - low)):.3g}") for f in fractions]
