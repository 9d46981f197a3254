"""Serving metrics of one benchmark run, from per-request timestamps. Pure: no torch, no pytest.

TTFT, TPOT, ITL and E2E latency, throughputs, interactivity (1000 / p50 TPOT in ms) and goodput (DistServe's),
defined in docs/inference.md. Invariant: a request's ``start`` is its send time in a closed loop and its
*scheduled* send time in an open loop, so time spent waiting inside the client counts (no coordinated omission).
A percentile from fewer samples than ``min_samples(q)`` (6 for p50, 29 for p90, 299 for p99: the smallest count
with a distribution-free 95% interval) is reported but judged NOISY, as MLPerf LoadGen refuses such runs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytest_gpuperf.inference.requests import Completion

PERCENTILES = (50, 90, 99)
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True, kw_only=True)
class SLO:
    """Service-level objectives of goodput, in seconds."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and self.tpot_s > 0):
            raise ValueError(f"SLO limits must be positive seconds, got ttft={self.ttft_s}, tpot={self.tpot_s}")

    def met_by(self, completion: Completion) -> bool:
        tpot = tpot_of(completion)
        return completion.error is None and ttft_of(completion) <= self.ttft_s and (tpot is None or tpot <= self.tpot_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Percentile:
    """One latency percentile and whether its sample count can carry it."""

    value: float
    count: int
    needed: int

    @property
    def enough(self) -> bool:
        return self.count >= self.needed


@dataclass(frozen=True, slots=True, kw_only=True)
class RunMetrics:
    """Every serving metric of one run (one concurrency, one input/output length pair)."""

    requests: int
    devices: int
    wall_s: float
    output_tokens: int
    prompt_tokens: int
    latency: dict[str, dict[int, Percentile]] = field(default_factory=dict)
    """{"ttft" | "tpot" | "itl" | "e2e": {50: ..., 90: ..., 99: ...}}, seconds."""
    good_requests: int | None = None
    """Requests that met the SLO, when one was given."""

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def total_tok_s(self) -> float:
        return (self.output_tokens + self.prompt_tokens) / self.wall_s

    @property
    def requests_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def tok_s_per_device(self) -> float:
        return self.output_tok_s / self.devices

    @property
    def interactivity(self) -> float:
        """tok/s/user = 1000 / p50(TPOT in ms) = 1 / p50(TPOT in s)."""
        return 1.0 / self.latency["tpot"][50].value

    @property
    def goodput(self) -> float | None:
        """Requests per second meeting the SLO."""
        return None if self.good_requests is None else self.good_requests / self.wall_s


def ttft_of(completion: Completion) -> float:
    return completion.token_times[0] - completion.start


def e2e_of(completion: Completion) -> float:
    return completion.token_times[-1] - completion.start


def tpot_of(completion: Completion) -> float | None:
    """None where no token came after the first one's stream event: there is no decode time to divide."""
    n = completion.output_tokens
    decode = e2e_of(completion) - ttft_of(completion)
    return None if n < 2 or decode <= 0 else decode / (n - 1)


def itls_of(completion: Completion) -> list[float]:
    """One inter-token latency per token after the first stream event: each event's gap since the one before,
    spread evenly over the tokens it carried (tokens stamped at one instant came in one event).

    A server that streams two tokens in one event did not make the second 0 s after the first: a 0 gap is no
    latency, and no ratio can judge it. Tokens that came with the first belong to the TTFT, so the gaps sum to
    E2E - TTFT, the TPOT's numerator."""
    events = [(time, len(list(tokens))) for time, tokens in itertools.groupby(completion.token_times)]
    return [(time - before) / count for (before, _), (time, count) in zip(events, events[1:]) for _ in range(count)]


def min_samples(q: float, confidence: float = CONFIDENCE) -> int:
    """Smallest n for which [min, max] of n samples covers the q-quantile with the given confidence."""
    if not 0 < q < 1:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    n = 1
    while 1 - q**n - (1 - q) ** n < confidence:
        n += 1
    return n


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolation percentile (numpy's default method), without numpy."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class RunFailed(AssertionError):
    """A run whose requests failed or produced a different number of tokens than asked."""


def check_completions(completions: Iterable[Completion], *, where: str = "") -> list[Completion]:
    """Every request completed without error and produced exactly the requested number of tokens.

    A failed request is never dropped from the percentiles: the latencies of the requests that succeeded
    describe a server that did not serve everyone, so the run fails, counting the failures by kind."""
    done = list(completions)
    failed = [c for c in done if c.error is not None]
    short = [c for c in done if c.error is None and c.output_tokens != c.requested_tokens]
    problems = [
        f"request {c.id} failed: {c.error}"
        if c.error is not None
        else f"request {c.id} produced {c.output_tokens} tokens, {c.requested_tokens} requested"
        for c in done
        if c.error is not None or c.output_tokens != c.requested_tokens
    ]
    if not done:
        raise RunFailed(f"no request completed{where}")
    if problems:
        counts = ", ".join(
            part
            for part in (f"{len(failed)} failed" if failed else "", f"{len(short)} wrong token count" if short else "")
            if part
        )
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise RunFailed(
            f"{len(problems)} of {len(done)} request(s) wrong{where} ({counts}): {shown}. A failed request is not "
            "left out of the latency percentiles, so the run is not judged"
        )
    return done


def client_lags(completions: Iterable[Completion]) -> list[float]:
    """Each open-loop request's client lateness (sent - ready), seconds."""
    return [c.client_lag for c in completions if c.scheduled is not None]


def run_metrics(
    completions: Iterable[Completion], *, devices: int = 1, slo: SLO | None = None, where: str = ""
) -> RunMetrics:
    """The metrics of one run. Raises ``RunFailed`` unless every request produced its tokens.

    ``where`` names the run in that message (" at concurrency 4"). In an open loop pass the measured requests
    only (warm-up and cool-down left out, after checking them all): the wall time then runs from the first
    measured request's scheduled time to the last measured token."""
    done = check_completions(completions, where=where)
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    start = min(c.start for c in done)
    end = max(c.token_times[-1] for c in done)
    if not end > start:
        raise ValueError(f"run wall time must be positive, got first send {start} and last token {end}")
    tpots = [t for t in (tpot_of(c) for c in done) if t is not None]
    series = {
        "ttft": [ttft_of(c) for c in done],
        "tpot": tpots,
        "itl": [gap for c in done for gap in itls_of(c)],
        "e2e": [e2e_of(c) for c in done],
    }
    latency = {
        name: {
            p: Percentile(value=percentile(values, p), count=len(values), needed=min_samples(p / 100))
            for p in PERCENTILES
        }
        for name, values in series.items()
        if values
    }
    return RunMetrics(
        requests=len(done),
        devices=devices,
        wall_s=end - start,
        output_tokens=sum(c.output_tokens for c in done),
        prompt_tokens=sum(c.prompt_tokens for c in done),
        latency=latency,
        good_requests=None if slo is None else sum(slo.met_by(c) for c in done),
    )
