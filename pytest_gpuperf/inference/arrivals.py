"""When each request of an open-loop run is sent: a seeded arrival process. Pure: numpy only, no torch, no pytest.

A closed loop (``rate=None``) has no schedule: each client sends when its previous request completed. An open loop
sends at times fixed in advance, whatever the server does, as vLLM's ``bench serve`` and GuideLLM drive a server:
gamma-distributed gaps of mean ``1 / rate`` and coefficient of variation ``burstiness`` (1 is Poisson; vLLM's
``--burstiness`` is the gamma shape ``k = 1 / CV^2``), the first at offset 0, bounded by a count or a duration.
Requests in the first ``warmup_s`` or last ``cooldown_s`` are sent but left out of the metrics. Invariant: the
same ``seed`` gives the same schedule wherever numpy keeps PCG64's stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_REQUESTS = 1_000_000
"""A schedule larger than this is a typo in a rate or a duration, not a test."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrivals:
    """An open-loop arrival process and its bounds."""

    rate: float
    """Mean requests per second."""
    burstiness: float = 1.0
    """Coefficient of variation of the inter-arrival gaps (1: Poisson)."""
    count: int | None = None
    """Requests in the schedule (warm-up and cool-down included); or bound by ``duration_s``."""
    duration_s: float | None = None
    """Seconds of schedule: every request whose offset falls before it."""
    warmup_s: float = 0.0
    """Requests scheduled before this offset are sent but not measured."""
    cooldown_s: float = 0.0
    """Requests scheduled in the last ``cooldown_s`` seconds of the schedule are sent but not measured."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"arrival rate must be a positive number of requests/s, got {self.rate}")
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise ValueError(f"burstiness (CV of inter-arrival gaps) must be positive, got {self.burstiness}")
        if (self.count is None) == (self.duration_s is None):
            raise ValueError("an arrival schedule is bounded by exactly one of count and duration_s")
        if self.count is not None and not 1 <= self.count <= MAX_REQUESTS:
            raise ValueError(f"request count must be in [1, {MAX_REQUESTS}], got {self.count}")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"schedule duration must be positive seconds, got {self.duration_s}")
        if self.duration_s is not None and self.rate * self.duration_s > MAX_REQUESTS:
            raise ValueError(
                f"{self.rate} requests/s for {self.duration_s} s is over {MAX_REQUESTS} requests: lower one"
            )
        if self.warmup_s < 0 or self.cooldown_s < 0:
            raise ValueError(f"warm-up and cool-down must be >= 0 s, got {self.warmup_s} and {self.cooldown_s}")

    @property
    def shape(self) -> float:
        """Gamma shape k = 1 / CV^2."""
        return 1.0 / self.burstiness**2

    def describe(self) -> dict[str, object]:
        """What a metric's context records of the process, enough to draw the same schedule again."""
        return {
            "process": "poisson" if self.burstiness == 1.0 else "gamma",
            "rate_req_s": self.rate,
            "burstiness_cv": self.burstiness,
            "gamma_shape": self.shape,
            "count": self.count,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "cooldown_s": self.cooldown_s,
            "seed": self.seed,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """Send offsets (seconds from the start of the run, nondecreasing) and which requests are measured."""

    offsets: tuple[float, ...]
    measured: tuple[bool, ...]

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def span_s(self) -> float:
        return self.offsets[-1] if self.offsets else 0.0


def gaps(arrivals: Arrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` inter-arrival gaps: gamma with mean 1/rate and CV ``burstiness``."""
    k = arrivals.shape
    return rng.gamma(shape=k, scale=1.0 / (arrivals.rate * k), size=n)


def schedule(arrivals: Arrivals) -> Schedule:
    """The send offsets of ``arrivals``: the first at 0, then cumulative gamma gaps, up to its bound."""
    rng = np.random.default_rng(arrivals.seed)
    if arrivals.count is not None:
        offsets = np.concatenate(([0.0], np.cumsum(gaps(arrivals, arrivals.count - 1, rng))))
    else:
        assert arrivals.duration_s is not None
        # Draw in chunks of the expected count (+ 4 sd of a Poisson count) until the schedule passes its end.
        chunk = int(arrivals.rate * arrivals.duration_s + 4 * math.sqrt(arrivals.rate * arrivals.duration_s)) + 8
        drawn = [np.zeros(1)]
        last = 0.0
        while last < arrivals.duration_s:
            more = last + np.cumsum(gaps(arrivals, chunk, rng))
            drawn.append(more)
            last = float(more[-1])
        everything = np.concatenate(drawn)
        offsets = everything[everything < arrivals.duration_s]
    end = float(offsets[-1])
    measured = (offsets >= arrivals.warmup_s) & (offsets <= end - arrivals.cooldown_s)
    if not measured.any():
        raise ValueError(
            f"warm-up {arrivals.warmup_s} s and cool-down {arrivals.cooldown_s} s leave no measured request in a "
            f"schedule of {len(offsets)} requests over {end:.3g} s: shorten them or lengthen the run"
        )
    return Schedule(offsets=tuple(float(x) for x in offsets), measured=tuple(bool(m) for m in measured))


def coefficient_of_variation(values: np.ndarray | list[float]) -> float:
    """sd / mean (population sd), the burstiness of a series of gaps."""
    array = np.asarray(values, dtype=float)
    return float(array.std() / array.mean())
