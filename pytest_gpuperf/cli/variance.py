"""`gpuperf variance`: is each submission equivalent to the reference within a tolerance, workload by workload?

An equivalence test, two one-sided tests (TOST, Schuirmann 1987) in interval form: at level 5% per side, both
one-sided nulls ("worse by the tolerance or more", "better by the tolerance or more") are rejected exactly when
the 90% interval of the ratio lies inside [1 - tolerance, 1 + tolerance]. The interval is the plugin's own
bootstrap (``stats.ratio_interval``: samples resampled within runs, reference runs resampled, the submission's
unseen between-run deviation added), so equivalence here and verdicts in pytest rest on one model of noise.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_gpuperf.cli.loading import InputError, MetricData, Side, load_side, quote
from pytest_gpuperf.cli.tables import render, write_output
from pytest_gpuperf.core.stats import Rules, pooled_run_noise, ratio_interval, with_siblings

CONFIDENCE = 0.90
Z = 1.6448536269514722  # standard normal 95% quantile: the 90% two-sided interval's half-width in sds
DEFAULT_RUN_NOISE = 0.005

COLUMNS = (
    ("submission", "submission"),
    ("test", "test"),
    ("metric", "metric"),
    ("ratio", "ratio"),
    ("interval", "90% interval"),
    ("verdict", "verdict"),
    ("clock_normalised", "clock-normalised"),
    ("detail", "detail"),
)


def equivalence(
    reference: list[MetricData],
    submission: list[MetricData],
    *,
    tolerance: float,
    run_noise: float,
    siblings: Sequence[Sequence[Sequence[float]]] = (),
) -> dict[str, Any]:
    """PASS / FAIL / INCONCLUSIVE for one workload, with the ratio (< 1 worse), interval and what would decide.
    ``siblings``: the reference's other parameters of the same test, whose between-run spread raises the noise
    prior as it does in a session (``stats.with_siblings``)."""
    higher = reference[0].higher_is_better
    rules = with_siblings(Rules(delta=tolerance, confidence=CONFIDENCE, run_noise=run_noise), siblings)
    ref_runs = [np.asarray(run.samples, dtype=float) for run in reference]
    current = np.asarray([v for run in submission for v in run.samples], dtype=float)
    medians = np.array([np.median(run) for run in ref_runs])
    if np.any(medians <= 0) or np.median(current) <= 0:
        return {"verdict": "INCONCLUSIVE", "detail": "a median <= 0: ratios need positive times or rates"}
    run_sd, _ = pooled_run_noise(np.log(medians), rules)
    log_ratio = math.log(float(np.median(current))) - math.log(float(np.median(medians)))
    ratio = math.exp(log_ratio if higher else -log_ratio)  # OverflowError past e**709: see evaluate
    low, high = ratio_interval(current, ref_runs, run_sd, higher_is_better=higher, rules=rules)
    if not all(math.isfinite(value) and value > 0 for value in (ratio, low, high)):
        raise OverflowError("the ratio or its interval is beyond float range")
    row: dict[str, Any] = {
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "interval": f"[{low:.4f}, {high:.4f}]",
        "run_noise": run_sd,
    }
    if 1 - tolerance <= low and high <= 1 + tolerance:
        row.update(verdict="PASS", detail=f"interval inside 1 ± {tolerance:.2%}")
    elif high < 1 - tolerance or low > 1 + tolerance:
        row.update(
            verdict="FAIL",
            detail=f"interval entirely outside 1 ± {tolerance:.2%} "
            f"({'worse' if high < 1 else 'better'} by {abs(ratio - 1):.2%})",
        )
    else:
        row.update(
            verdict="INCONCLUSIVE",
            detail=repeats_to_decide(
                ratio=ratio, low=low, high=high, tolerance=tolerance, run_sd=run_sd, repeats=len(current)
            ),
        )
    return row


def repeats_to_decide(*, ratio: float, low: float, high: float, tolerance: float, run_sd: float, repeats: int) -> str:
    """How many repeats per run would shrink the interval enough to decide, if the ratio stayed where it is.

    On the log scale the half-width is z * sqrt(w / n + run_sd^2): w / n the within-run part (it shrinks with
    more repeats n), run_sd the between-run part (it does not). w comes from the observed half-width.
    """
    centre = math.log(ratio)
    band_low, band_high = math.log(1 - tolerance), math.log(1 + tolerance)
    inside = band_low <= centre <= band_high
    target = (
        min(centre - band_low, band_high - centre) if inside else min(abs(centre - band_low), abs(centre - band_high))
    )
    goal = "PASS" if inside else "FAIL"
    half = (math.log(high) - math.log(low)) / 2
    within = max((half / Z) ** 2 - run_sd**2, 0.0) * repeats
    room = (target / Z) ** 2 - run_sd**2
    if target <= 0 or room <= 0 or within == 0:
        return (
            f"between-run noise ({run_sd:.2%}) alone is too wide to decide at this ratio; more runs of the "
            "reference and the submission would"
        )
    needed = math.ceil(within / room)
    return f"~{needed} repeats per run (now {repeats}) would decide it ({goal} if the ratio holds)"


def clock_note(reference: list[MetricData], submission: list[MetricData], ratio: float | None) -> tuple[str, Any]:
    """The ratio divided by the clock ratio: throughput per MHz, so cooling and software are told apart."""
    ref_clocks = [run.clock_mhz for run in reference if run.clock_mhz]
    sub_clocks = [run.clock_mhz for run in submission if run.clock_mhz]
    if not ref_clocks or not sub_clocks or ratio is None:
        return "clocks not recorded", None
    ref_clock, sub_clock = float(np.median(ref_clocks)), float(np.median(sub_clocks))
    normalised = ratio / (sub_clock / ref_clock)
    return f"{normalised:.4f} (SM clock {sub_clock:.0f} vs {ref_clock:.0f} MHz)", normalised


def evaluate(reference: Side, submissions: list[Side], *, tolerance: float, run_noise: float) -> list[dict[str, Any]]:
    rows = []
    for submission in submissions:
        for key in reference.keys():
            ref_runs, sub_runs = reference.metric_runs(key), submission.metric_runs(key)
            row: dict[str, Any] = {
                "submission": str(submission.source),
                "test": ref_runs[0].test,
                "metric": ref_runs[0].metric,
                "hardware": submission.hardware_slug,
            }
            if not sub_runs:
                row.update(verdict="MISSING", detail="the submission has no such workload")
            else:
                try:
                    with np.errstate(over="raise", invalid="raise"):
                        row.update(
                            equivalence(
                                ref_runs,
                                sub_runs,
                                tolerance=tolerance,
                                run_noise=run_noise,
                                siblings=reference.sibling_samples(key),
                            )
                        )
                except (OverflowError, ValueError, FloatingPointError) as error:  # math range or domain errors
                    raise InputError(
                        f"{submission.source}: test {quote(row['test'])} metric {quote(row['metric'])}: its samples "
                        f"and the reference's are too far apart to form a ratio within float range ({error}); "
                        "check the units of both files"
                    ) from None
            row["clock_normalised"], row["clock_normalised_ratio"] = clock_note(ref_runs, sub_runs, row.get("ratio"))
            rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    reference = load_side(Path(args.reference))
    submissions = [load_side(Path(path)) for path in args.submissions]
    stored = next((r.settings.get("run_noise") for r in reference.runs if r.settings.get("run_noise")), None)
    run_noise = (
        args.run_noise
        if args.run_noise is not None
        else (float(stored) if isinstance(stored, (int, float)) and 0 < stored < 1 else DEFAULT_RUN_NOISE)
    )
    rows = evaluate(reference, submissions, tolerance=args.tolerance, run_noise=run_noise)
    within = [
        sub
        for sub in submissions
        if all(row["verdict"] == "PASS" for row in rows if row["submission"] == str(sub.source))
    ]
    failing = {row["submission"] for row in rows if row["verdict"] == "FAIL"}
    summary = f"{len(within)} of {len(submissions)} submissions within {_pct(args.tolerance)} on all workloads"
    notes = [
        f"reference {reference.source}: {len(reference.runs)} run(s) on {reference.hardware_slug}; "
        f"{len(reference.keys())} workload(s); between-run noise prior {run_noise:.2%}; ratio < 1 is worse",
        *[
            f"note: {sub.source} is on {sub.hardware_slug}, the reference on {reference.hardware_slug}"
            for sub in submissions
            if sub.hardware_slug != reference.hardware_slug
        ],
        summary,
    ]
    text = render(
        title=f"gpuperf variance against {reference.source} (tolerance {_pct(args.tolerance)})",
        columns=COLUMNS,
        rows=rows,
        notes=notes,
        fmt=args.format,
        extra={"summary": summary, "within": [str(sub.source) for sub in within], "tolerance": args.tolerance},
    )
    write_output(text, Path(args.output) if args.output else None)
    return 1 if failing else 0


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"
