"""Prompt and output lengths of a run's requests: fixed (ISL/OSL, as InferenceX sweeps them) or drawn from a
shipped distribution shaped like real chat traffic. Pure: numpy only, no torch, no pytest.

``sharegpt`` (``data/sharegpt.json``) is a parametric stand-in, not the ShareGPT dataset: independent log-normal
input and output lengths around the published ShareGPT figures, filtered as vLLM filters ShareGPT samples (the
file says where each figure comes from). Draws are seeded, and ``describe`` gives what a metric's context records.
Caps (a model's context, a tier's budget) are applied by rejection, never by clipping, which would pile samples
up at the cap.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).parent / "data"
KINDS = ("fixed", "sharegpt")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogNormal:
    mean: float
    """Mean of the untruncated distribution, tokens."""
    sigma: float
    """Standard deviation of log(length)."""

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthDistribution:
    name: str
    input: LogNormal
    output: LogNormal
    min_input: int
    min_output: int
    max_input: int
    max_total: int
    sources: dict[str, str]


def load(name: str) -> LengthDistribution:
    """A shipped length distribution by name (``sharegpt``)."""
    path = DATA / f"{name}.json"
    if not path.is_file():
        shipped = sorted(p.stem for p in DATA.glob("*.json"))
        raise ValueError(f"no length distribution {name!r}; shipped: {', '.join(shipped)}")
    raw = json.loads(path.read_text())
    for side in ("input", "output"):
        if raw[side]["distribution"] != "lognormal":
            raise ValueError(f"{path}: {side} distribution {raw[side]['distribution']!r}; only lognormal is read")
    f = raw["filter"]
    return LengthDistribution(
        name=raw["name"],
        input=LogNormal(mean=raw["input"]["mean"], sigma=raw["input"]["sigma"]),
        output=LogNormal(mean=raw["output"]["mean"], sigma=raw["output"]["sigma"]),
        min_input=f["min_input"],
        min_output=f["min_output"],
        max_input=f["max_input"],
        max_total=f["max_total"],
        sources=raw["sources"],
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Lengths:
    """How a run's request lengths are chosen."""

    kind: str = "fixed"
    """``fixed`` (every request ``isl``/``osl``) or a shipped distribution's name."""
    isl: int = 0
    osl: int = 0
    seed: int = 0
    max_total: int | None = None
    """The engine's cap on prompt + output tokens (its max_len); drawn pairs above it are redrawn."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"lengths {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.kind == "fixed" and (self.isl < 1 or self.osl < 1):
            raise ValueError(f"fixed lengths need ISL and OSL >= 1, got {self.isl}/{self.osl}")

    def describe(self) -> dict[str, Any]:
        if self.kind == "fixed":
            return {"kind": "fixed", "isl": self.isl, "osl": self.osl}
        dist = load(self.kind)
        return {
            "kind": self.kind,
            "seed": self.seed,
            "input": {"lognormal_mean": dist.input.mean, "sigma": dist.input.sigma},
            "output": {"lognormal_mean": dist.output.mean, "sigma": dist.output.sigma},
            "filter": [dist.min_input, dist.min_output, dist.max_input, self._max_total(dist)],
            "file": f"pytest_gpuperf/inference/data/{self.kind}.json",
        }

    @property
    def longest(self) -> int:
        """The most prompt + output tokens one request can have: what the engine's context must hold."""
        return self.isl + self.osl if self.kind == "fixed" else self._max_total(load(self.kind))

    def _max_total(self, dist: LengthDistribution) -> int:
        return dist.max_total if self.max_total is None else min(dist.max_total, self.max_total)

    def draw(self, count: int) -> list[tuple[int, int]]:
        """``count`` (prompt, output) token counts."""
        if self.kind == "fixed":
            return [(self.isl, self.osl)] * count
        return draw(load(self.kind), count, seed=self.seed, max_total=self.max_total)


def draw(dist: LengthDistribution, count: int, *, seed: int, max_total: int | None = None) -> list[tuple[int, int]]:
    """``count`` (input, output) pairs from ``dist``, redrawing any outside its filter or ``max_total``."""
    cap = dist.max_total if max_total is None else min(dist.max_total, max_total)
    if cap < dist.min_input + dist.min_output:
        raise ValueError(
            f"a cap of {cap} tokens per request leaves no room for {dist.name}'s shortest request "
            f"({dist.min_input} + {dist.min_output} tokens)"
        )
    rng = np.random.default_rng(seed)
    kept: list[tuple[int, int]] = []
    for _ in range(1000):
        n = max(64, 2 * (count - len(kept)))
        isl = np.rint(rng.lognormal(dist.input.mu, dist.input.sigma, n)).astype(int)
        osl = np.rint(rng.lognormal(dist.output.mu, dist.output.sigma, n)).astype(int)
        keep = (isl >= dist.min_input) & (osl >= dist.min_output) & (isl <= dist.max_input) & (isl + osl <= cap)
        kept.extend(zip(isl[keep].tolist(), osl[keep].tolist()))
        if len(kept) >= count:
            return kept[:count]
    raise ValueError(f"a cap of {cap} tokens per request rejects almost every {dist.name} draw: raise it")
