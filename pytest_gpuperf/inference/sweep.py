"""A sweep of one length setting over concurrencies (closed loop) or request rates (open loop), and its
recording through ``perf``.

Measure -> verdict: ``run_sweep`` (concurrencies) and ``run_rate_sweep`` (rates, arrivals.py) drive an engine
and keep every run's metrics (metrics.py); ``record_sweep`` turns either into ``perf`` metrics and curves that
the foundation judges against baselines. Runs are interleaved (run 1 of every point, then run 2, ...) so a slow
drift of the machine's load spreads over all points instead of biasing one.

An open-loop point whose client could not keep to its schedule is recorded but judged NOISY (the
``unjudgeable`` path of ``perf.record``, as a thin p99 is): see ``lag_reason``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.inference.arrivals import Arrivals, schedule
from pytest_gpuperf.inference.lengths import Lengths
from pytest_gpuperf.inference.metrics import (
    PERCENTILES,
    SLO,
    RunMetrics,
    check_completions,
    client_lags,
    percentile,
    run_metrics,
)
from pytest_gpuperf.inference.pareto import (
    INTERACTIVITY_CURVE,
    TARGETS_CURVE,
    THROUGHPUT_CURVE,
    OperatingPoint,
    interactivity_targets,
    pareto_front,
    throughput_at,
)
from pytest_gpuperf.inference.requests import Completion, InferenceEngine, Request

LATENCY_SAMPLES = {"ttft": "requests", "tpot": "requests", "e2e": "requests", "itl": "token gaps"}

CLIENT_LAG_FRACTION = 0.05
"""An open-loop run is judged only if the client's p99 lag (sent - ready) stays within this fraction of the run's
p50 TTFT. Latency is measured from the scheduled time, so a late client adds its lateness to every latency and
offers less load than scheduled; 5% of the median TTFT keeps that well below what it could be mistaken for
(a 1-2% threshold applies to run-to-run *changes*, and a steady lag largely cancels between runs). p99, not the
maximum: one late wake-up (a garbage collection, a neighbour's burst on a shared machine) among hundreds of
sends moves one latency, not the run; and not the mean, which would hide a client that is late in bursts."""


@dataclass(slots=True, kw_only=True)
class SweepResult:
    isl: int
    osl: int
    axis: str = "concurrency"
    """What the points are: "concurrency" (closed loop, ``c4.``) or "rate" (open loop, requests/s, ``rate2.``)."""
    runs: dict[float, list[RunMetrics]] = field(default_factory=dict)
    """Per point, one RunMetrics per repeated run."""
    energy_j_per_token: dict[float, list[float]] = field(default_factory=dict)
    """Per point, joules per output token of each run, where the device has an energy counter."""
    energy_note: str = ""
    peak_memory_bytes: dict[float, list[float]] = field(default_factory=dict)
    contexts: dict[float, dict[str, Any]] = field(default_factory=dict)
    """Per point, the telemetry context of its last run."""
    client_lag_p99: dict[float, list[float]] = field(default_factory=dict)
    """Open loop: per rate, the client's p99 lag (sent - ready, seconds) of each run."""
    send_lag: dict[float, list[tuple[float, float]]] = field(default_factory=dict)
    """Open loop: per rate, the (p50, p99) send lag (sent - scheduled, seconds) of each run's measured requests:
    the client's lateness plus the wait for a slot under the cap, i.e. how far the server's backlog reached back
    into the client. Recorded in the context, not judged (the latencies hold it already)."""
    offered_req_s: dict[float, float] = field(default_factory=dict)
    """Open loop: per rate, the rate its schedule actually offers over the measured window ((n - 1) / span of the
    measured send offsets). A short Poisson schedule's realisation can sit 10-40% off its nominal rate, and below
    saturation ``requests_s`` measures this, not the server."""
    setup: dict[str, Any] = field(default_factory=dict)
    """What every metric's context records of the load: arrival process, lengths, cap, seed."""

    def prefix(self, point: float) -> str:
        return f"c{int(point)}." if self.axis == "concurrency" else f"rate{point:g}."

    def step(self, point: float) -> int:
        """The point as a curve step: the concurrency, or the rate in milli-requests/s."""
        return int(point) if self.axis == "concurrency" else round(point * 1000)


def requests_for(
    *, isl: int, osl: int, concurrency: int, vocab_size: int, seed: int, per_client: int = 3, minimum: int = 6
) -> list[Request]:
    """The requests of one run: ``per_client`` per concurrent client, at least ``minimum`` (a p50 needs 6)."""
    from pytest_gpuperf.inference.engine import make_prompts

    count = max(minimum, per_client * concurrency)
    prompts = make_prompts(count=count, length=isl, vocab_size=vocab_size, seed=seed * 7919 + isl)
    return [Request(id=i, prompt=p, max_new_tokens=osl) for i, p in enumerate(prompts)]


def _measure(
    result: SweepResult,
    point: float,
    engine: InferenceEngine,
    requests: list[Request],
    *,
    concurrency: int,
    offsets: Sequence[float] | None,
    measured: Sequence[bool] | None,
    slo: SLO | None,
    watch: Callable[[], Any] | None,
    peak_memory: Callable[[], Callable[[], float] | None] | None,
) -> str:
    """One run of one point into ``result``; returns why energy is missing ("" if it was read)."""
    where = f" at {result.prefix(point)[:-1]}"
    read_peak = peak_memory() if peak_memory is not None else None

    def serve() -> list[Completion]:
        if offsets is None:
            return engine.generate(requests, concurrency=concurrency)
        return engine.generate(requests, concurrency=concurrency, schedule=offsets)

    if watch is not None:
        with watch() as window:
            completions = serve()
        summary, context = window.summary, window.context
    else:
        completions = serve()
        summary, context = None, {}
    check_completions(completions, where=where)  # warm-up and cool-down requests must succeed too
    kept = completions if measured is None else [c for c, m in zip(completions, measured) if m]
    metrics = run_metrics(kept, devices=engine.devices, slo=slo, where=where)
    result.runs.setdefault(point, []).append(metrics)
    result.contexts[point] = context
    if offsets is not None:
        lags = client_lags(kept)
        result.client_lag_p99.setdefault(point, []).append(percentile(lags, 99) if lags else 0.0)
        sends = [c.send_lag for c in kept]
        result.send_lag.setdefault(point, []).append((percentile(sends, 50), percentile(sends, 99)))
    if read_peak is not None:
        result.peak_memory_bytes.setdefault(point, []).append(read_peak())
    if summary is not None and summary.energy_j is not None and summary.energy_j > 0:
        result.energy_j_per_token.setdefault(point, []).append(summary.energy_j / metrics.output_tokens)
        return ""
    return (
        "no hardware energy counter was read (no NVML/amdsmi reader on this device, "
        "or it reported none): energy per token is left out, not estimated"
    )


def run_sweep(
    engine: InferenceEngine,
    *,
    isl: int,
    osl: int,
    concurrencies: Sequence[int],
    runs: int,
    vocab_size: int,
    seed: int = 0,
    slo: SLO | None = None,
    watch: Callable[[], Any] | None = None,
    peak_memory: Callable[[], Callable[[], float] | None] | None = None,
    per_client: int = 3,
    minimum: int = 6,
) -> SweepResult:
    """``runs`` runs of every concurrency (closed loop), after one untimed warm-up run of the largest.

    ``watch()`` returns a telemetry window (``perf.watch``); ``peak_memory()`` starts a peak-memory window and
    returns a function that reads it (bytes), or None where the device cannot tell.
    """
    result = SweepResult(isl=isl, osl=osl)
    engine.generate(
        requests_for(
            isl=isl,
            osl=min(osl, 8),
            concurrency=max(concurrencies),
            vocab_size=vocab_size,
            seed=seed + 1,
            per_client=1,
            minimum=1,
        ),
        concurrency=max(concurrencies),
    )
    energy_missing = ""
    for _ in range(runs):
        for concurrency in concurrencies:
            requests = requests_for(
                isl=isl,
                osl=osl,
                concurrency=concurrency,
                vocab_size=vocab_size,
                seed=seed,
                per_client=per_client,
                minimum=minimum,
            )
            energy_missing = (
                _measure(
                    result,
                    concurrency,
                    engine,
                    requests,
                    concurrency=concurrency,
                    offsets=None,
                    measured=None,
                    slo=slo,
                    watch=watch,
                    peak_memory=peak_memory,
                )
                or energy_missing
            )
    if energy_missing:
        result.energy_j_per_token = {}
        result.energy_note = energy_missing
    return result


def requests_of_lengths(pairs: Sequence[tuple[int, int]], *, vocab_size: int, seed: int) -> list[Request]:
    """One request per (prompt, output) length pair, with deterministic random prompts."""
    from pytest_gpuperf.inference.engine import make_prompts

    return [
        Request(
            id=i,
            prompt=make_prompts(count=1, length=isl, vocab_size=vocab_size, seed=seed * 7919 + i)[0],
            max_new_tokens=osl,
        )
        for i, (isl, osl) in enumerate(pairs)
    ]


def run_rate_sweep(
    engine: InferenceEngine,
    *,
    rates: Sequence[float],
    lengths: Lengths,
    cap: int,
    runs: int,
    vocab_size: int,
    burstiness: float = 1.0,
    count: int | None = None,
    duration_s: float | None = None,
    warmup_s: float | None = None,
    cooldown_s: float | None = None,
    edge_gaps: float = 0.0,
    seed: int = 0,
    slo: SLO | None = None,
    watch: Callable[[], Any] | None = None,
    peak_memory: Callable[[], Callable[[], float] | None] | None = None,
) -> SweepResult:
    """``runs`` open-loop runs of every rate, after one untimed closed-loop warm-up of ``cap`` requests.

    Each rate has one schedule (``Arrivals`` with ``seed``) and one set of requests (``lengths`` with its own
    seed), the same in every run: the runs then differ only by the stack's own variation, which is what the
    verdict compares. At most ``cap`` requests are in flight; a request that waits for a slot waits in its
    latency. Warm-up and cool-down requests are sent but left out of the metrics: the first ``warmup_s`` and the
    last ``cooldown_s`` seconds of each schedule, each ``edge_gaps`` mean gaps long (``edge_gaps / rate``) where
    not given, so every rate leaves out about the same number of requests."""
    if not rates:
        raise ValueError("a rate sweep needs at least one rate")
    plans = [
        Arrivals(
            rate=rate,
            burstiness=burstiness,
            count=count,
            duration_s=duration_s,
            warmup_s=edge_gaps / rate if warmup_s is None else warmup_s,
            cooldown_s=edge_gaps / rate if cooldown_s is None else cooldown_s,
            seed=seed,
        )
        for rate in rates
    ]
    schedules = [schedule(plan) for plan in plans]
    fixed = lengths.kind == "fixed"
    result = SweepResult(
        isl=lengths.isl if fixed else 0,
        osl=lengths.osl if fixed else 0,
        axis="rate",
        setup={
            "arrivals": {
                **{k: v for k, v in plans[0].describe().items() if k not in ("rate_req_s", "warmup_s", "cooldown_s")},
                "warmup": f"{warmup_s} s" if warmup_s is not None else f"{edge_gaps:g} mean gaps",
                "cooldown": f"{cooldown_s} s" if cooldown_s is not None else f"{edge_gaps:g} mean gaps",
            },
            "lengths": lengths.describe(),
            "concurrency_cap": cap,
        },
    )
    for rate, sched in zip(rates, schedules):
        window = [offset for offset, kept in zip(sched.offsets, sched.measured) if kept]
        span = window[-1] - window[0]
        result.offered_req_s[rate] = (len(window) - 1) / span if span > 0 else rate
    warm = lengths.draw(cap)
    engine.generate(
        requests_of_lengths([(i, min(o, 8)) for i, o in warm], vocab_size=vocab_size, seed=seed + 1),
        concurrency=cap,
    )
    request_sets = [
        requests_of_lengths(lengths.draw(len(sched)), vocab_size=vocab_size, seed=seed) for sched in schedules
    ]
    energy_missing = ""
    for _ in range(runs):
        for rate, sched, requests in zip(rates, schedules, request_sets):
            energy_missing = (
                _measure(
                    result,
                    rate,
                    engine,
                    requests,
                    concurrency=cap,
                    offsets=sched.offsets,
                    measured=sched.measured,
                    slo=slo,
                    watch=watch,
                    peak_memory=peak_memory,
                )
                or energy_missing
            )
    if energy_missing:
        result.energy_j_per_token = {}
        result.energy_note = energy_missing
    return result


def lag_reason(sweep: SweepResult, point: float) -> str | None:
    """Why an open-loop point cannot be judged: its client fell behind its schedule in some run."""
    lags = sweep.client_lag_p99.get(point)
    if not lags:
        return None
    worst = None
    for lag, run in zip(lags, sweep.runs[point]):
        bound = CLIENT_LAG_FRACTION * run.latency["ttft"][50].value
        if lag > bound and (worst is None or lag / bound > worst[0] / worst[1]):
            worst = (lag, bound)
    if worst is None:
        return None
    return (
        f"the load generator fell behind its schedule: p99 client lag {worst[0] * 1e3:.3g} ms > "
        f"{CLIENT_LAG_FRACTION:.0%} of the p50 TTFT ({worst[1] * 1e3:.3g} ms) in a run at {sweep.prefix(point)[:-1]}; "
        "the latencies then hold the client's delay (benchmarks/loadgen_ceiling.py measures its limit)"
    )


def _percentile_reason(name: str, p: int, runs: list[RunMetrics]) -> str | None:
    counts = [run.latency[name][p].count for run in runs]
    needed = runs[0].latency[name][p].needed
    if min(counts) >= needed:
        return None
    return (
        f"p{p} from {min(counts)} {LATENCY_SAMPLES[name]} per run; a p{p} needs >= {needed} for a "
        f"distribution-free 95% interval (MLPerf LoadGen's minimum-count rule)"
    )


def _both(*reasons: str | None) -> str | None:
    return "; ".join(r for r in reasons if r) or None


class LeftOut(UserWarning):
    """A metric of a sweep could not be recorded (goodput 0, an interactivity point the front no longer
    reaches); the per-concurrency latency and rate metrics, judged as usual, carry the regression."""


def record_sweep(
    perf: Any,
    sweep: SweepResult,
    *,
    slo: SLO | None = None,
    fractions: Sequence[float] = (0.2, 0.4, 0.6),
    targets: Sequence[float] | None = None,
) -> list[str]:
    """Record every metric of the sweep through ``perf``; returns (and warns about) the metrics left out.

    ``targets`` fixes the interactivity points (tok/s/user) of the throughput-at-interactivity metrics, e.g.
    InferenceX's 32; without them the baseline's points, or fresh ones at ``fractions`` of the front's range.

    A metric that cannot be computed is left out rather than failing the test here: a test that raises is not
    judged, and the judged TTFT/TPOT/throughput metrics are what show how far the run moved."""
    problems: list[str] = []
    for point, runs in sorted(sweep.runs.items()):
        prefix = sweep.prefix(point)
        context = {
            **sweep.contexts.get(point, {}),
            sweep.axis: point,
            "isl": sweep.isl,
            "osl": sweep.osl,
            "requests_per_run": runs[0].requests,
            **sweep.setup,
        }
        if point in sweep.client_lag_p99:
            context["client_lag_p99_s"] = max(sweep.client_lag_p99[point])
        if point in sweep.offered_req_s:
            context["offered_req_s"] = sweep.offered_req_s[point]
        if point in sweep.send_lag:
            context["send_lag_p99_s"] = max(p99 for _, p99 in sweep.send_lag[point])
        lagged = lag_reason(sweep, point)
        if sweep.energy_note:
            context["energy"] = sweep.energy_note
        if point not in sweep.peak_memory_bytes:
            context["peak_memory"] = "not measured: the device has no allocator peak counter (CPU)"
        for name in ("ttft", "tpot", "itl", "e2e"):
            lacking = sum(name not in run.latency for run in runs)
            if lacking:
                if sweep.osl > 1:  # one-token outputs have no decode to time: nothing to say
                    problems.append(
                        f"{prefix}{name} left out: {lacking} of {len(runs)} run(s) had no sample of it (every "
                        "request's tokens came in its first stream event, so there was no decode gap to time)"
                    )
                continue
            for p in PERCENTILES:
                perf.record(
                    f"{prefix}{name}_p{p}",
                    [run.latency[name][p].value for run in runs],
                    unit="s",
                    higher_is_better=False,
                    context=context,
                    unjudgeable=_both(lagged, _percentile_reason(name, p, runs)),
                )
        rates = {
            "output_tok_s": ([r.output_tok_s for r in runs], "tok/s"),
            "total_tok_s": ([r.total_tok_s for r in runs], "tok/s"),
            "requests_s": ([r.requests_s for r in runs], "req/s"),
            "tok_s_per_device": ([r.tok_s_per_device for r in runs], "tok/s/device"),
        }
        if all("tpot" in run.latency for run in runs):
            rates["interactivity"] = ([r.interactivity for r in runs], "tok/s/user")
        for name, (values, unit) in rates.items():
            perf.record(prefix + name, values, unit=unit, higher_is_better=True, context=context, unjudgeable=lagged)
        if slo is not None:
            goodput = [r.goodput or 0.0 for r in runs]
            slo_context = {**context, "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s}}
            if min(goodput) > 0:
                perf.record(
                    prefix + "goodput_req_s",
                    goodput,
                    unit="req/s",
                    higher_is_better=True,
                    context=slo_context,
                    unjudgeable=lagged,
                )
            else:
                problems.append(
                    f"{prefix}goodput_req_s left out: no request met the SLO (TTFT <= "
                    f"{slo.ttft_s}s, TPOT <= {slo.tpot_s}s) in at least one run (goodput 0)"
                )
        if point in sweep.energy_j_per_token:
            perf.record(
                prefix + "energy_j_per_output_token",
                sweep.energy_j_per_token[point],
                unit="J/tok",
                higher_is_better=False,
                context=context,
                unjudgeable=lagged,
            )
        if point in sweep.peak_memory_bytes:
            perf.record(
                prefix + "peak_memory_bytes",
                sweep.peak_memory_bytes[point],
                unit="B",
                higher_is_better=False,
                context=context,
            )
    problems.extend(_record_pareto(perf, sweep, fractions, targets))
    for problem in problems:
        warnings.warn(LeftOut(problem), stacklevel=2)
    return problems


def fresh_targets(fronts: Sequence[Sequence[OperatingPoint]], fractions: Sequence[float]) -> list[float]:
    """The interactivity points of a sweep without a baseline: inside the range every run's front reaches, so
    the first save records each point for each run (points from the median front alone can lie beyond a slower
    run's front, and a fresh folder then reported a point "of the baseline" that did not exist)."""
    reach = min(front[-1].interactivity for front in fronts)
    start = min(max(front[0].interactivity for front in fronts), reach)
    span = [
        OperatingPoint(concurrency=0, interactivity=start, throughput=1.0),
        OperatingPoint(concurrency=1, interactivity=reach, throughput=1.0),
    ]
    targets = []
    for target in interactivity_targets(span, fractions):
        if target > reach:  # 3-digit rounding went up past the slowest front: round down instead
            step = 10 ** (math.floor(math.log10(reach)) - 2)
            target = float(f"{math.floor(reach / step) * step:.3g}")
        targets.append(target)
    return list(dict.fromkeys(targets))  # a narrow range rounds several fractions to one point: name it once


def _record_pareto(
    perf: Any, sweep: SweepResult, fractions: Sequence[float], chosen: Sequence[float] | None = None
) -> list[str]:
    points = sorted(c for c, runs in sweep.runs.items() if all("tpot" in run.latency for run in runs))
    if len(points) < 2:
        return []
    n_runs = min(len(sweep.runs[c]) for c in points)
    fronts = [
        pareto_front(
            OperatingPoint(
                concurrency=sweep.step(c),
                interactivity=sweep.runs[c][r].interactivity,
                throughput=sweep.runs[c][r].tok_s_per_device,
            )
            for c in points
        )
        for r in range(n_runs)
    ]
    medians = [
        OperatingPoint(
            concurrency=sweep.step(c),
            interactivity=summarize([r.interactivity for r in sweep.runs[c]]).median,
            throughput=summarize([r.tok_s_per_device for r in sweep.runs[c]]).median,
        )
        for c in points
    ]
    steps = [sweep.step(c) for c in points]
    perf.record_curve(INTERACTIVITY_CURVE, steps, [p.interactivity for p in medians])
    perf.record_curve(THROUGHPUT_CURVE, steps, [p.throughput for p in medians])
    stored = perf.baseline_curves(TARGETS_CURVE)
    # The points are fixed by the user, or by the first saved baseline and carried forward by every later save,
    # so metric names (which hold the point) stay the same from run to run.
    if chosen:
        targets = list(chosen)
    elif stored:
        targets = list(stored[0].values)
    else:
        targets = fresh_targets(fronts, fractions)
    perf.record_curve(TARGETS_CURVE, list(range(len(targets))), targets)
    lagged = _both(*(lag_reason(sweep, c) for c in points))
    problems = []
    for target in targets:
        values = [throughput_at(front, [target])[0] for front in fronts]
        name = f"pareto.tok_s_per_device@{target:g}_tok_s_user"
        if any(value is None for value in values):
            # the fastest point of the fronts that fall short (the max over all runs can lie above the target)
            reached = max(front[-1].interactivity for front, value in zip(fronts, values) if value is None)
            message = (
                f"{name} left out: the front reaches {reached:.4g} tok/s/user at most, below the fixed "
                f"interactivity point {target:g} of the baseline: every {sweep.axis} serves its users more "
                "slowly than the baseline's"
                if stored and not chosen
                else f"{name} left out: a run's front reaches {reached:.4g} tok/s/user at most, below {target:g}"
            )
            problems.append(message)
            continue
        perf.record(
            name,
            values,
            unit="tok/s/device",
            higher_is_better=True,
            context={
                "interactivity_target": target,
                "isl": sweep.isl,
                "osl": sweep.osl,
                "axis": sweep.axis,
                "front": [[p.concurrency, p.interactivity, p.throughput] for p in medians],
                **sweep.setup,
            },
            unjudgeable=lagged,
        )
    return problems
