"""`gpuperf variance`: is each submission equivalent to the reference within a tolerance, workload by workload?

Two one-sided tests (TOST, Schuirmann 1987) in interval form: equivalent at 5% per side exactly when the 90%
interval of the ratio lies inside [1 - tolerance, 1 + tolerance]. The interval is the plugin's own bootstrap
(core/stats/), so equivalence here and verdicts in pytest rest on one model of noise; an undecided workload says
how many runs would decide it (cli/runs_needed.py). With ``--trust``, every bundle is verified first
(cli/signing.py ``trusted_bundle``) and judged from the very bytes verified; one that does not verify stops the
command before any verdict. docs/cli.md shows it in use.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_gpuperf.cli.loading import InputError, MetricData, Side, check_one_hardware, load_side, quote
from pytest_gpuperf.cli.runs_needed import (
    POWER,
    Noise,
    for_power,
    measure_noise,
    reference_runs_to_decide,
    repeats_to_decide,
    runs_of_both_to_decide,
    runs_to_decide,
    shrink_to_decide,
)
from pytest_gpuperf.cli.signing import PublicKey, trusted_bundle, trusted_keys
from pytest_gpuperf.cli.tables import render, write_output
from pytest_gpuperf.core.stats.unpaired import pooled_run_noise, ratio_interval, with_siblings
from pytest_gpuperf.core.verdict.policy import first_recorded, policy_for, recorded_value
from pytest_gpuperf.core.verdict.vocabulary import Verdict

MISSING = Verdict.MISSING.value
"""A workload the reference holds and the submission lacks."""
CONFIDENCE = 0.90
TOLERANCE = 0.01
"""How far from the reference a submission may be and still be equivalent (`--tolerance`)."""
RUN_NOISE = 0.005
"""The between-run sd of a run's median where neither ``--run-noise`` nor the reference's settings give one."""

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
    prior as it does in a session (``stats.with_siblings``).

    The between-run sd of a run's median is pooled from both sides' runs (each about its own mean) and the
    prior; the submission's median carries it divided by sqrt(runs), so a partner's runs, unlike its repeats,
    narrow the interval. With one submission run this is the session's model unchanged."""
    higher = reference[0].higher_is_better
    given = {"threshold": tolerance, "run_noise": run_noise}  # a tolerance, not a threshold; siblings: the CPU limit
    rules = with_siblings(replace(policy_for(given=given, device="cpu"), confidence=CONFIDENCE), siblings)
    ref_runs = [np.asarray(run.samples, dtype=float) for run in reference]
    sub_runs = [np.asarray(run.samples, dtype=float) for run in submission]
    current = np.concatenate(sub_runs)
    medians = np.array([np.median(run) for run in ref_runs])
    sub_medians = np.array([np.median(run) for run in sub_runs])
    if np.any(medians <= 0) or np.any(sub_medians <= 0) or np.median(current) <= 0:
        return {"verdict": "INCONCLUSIVE", "detail": "a median <= 0: ratios need positive times or rates"}
    groups = [tuple(range(len(medians))), tuple(range(len(medians), len(medians) + len(sub_medians)))]
    run_sd, _ = pooled_run_noise(np.log(np.concatenate([medians, sub_medians])), rules, groups=groups)
    log_ratio = math.log(float(np.median(current))) - math.log(float(np.median(medians)))
    ratio = math.exp(log_ratio if higher else -log_ratio)  # OverflowError past e**709: see evaluate
    low, high = ratio_interval(
        current, ref_runs, run_sd / math.sqrt(len(sub_runs)), higher_is_better=higher, rules=rules
    )
    if not all(math.isfinite(value) and value > 0 for value in (ratio, low, high)):
        raise OverflowError("the ratio or its interval is beyond float range")
    noise = measure_noise(sub_runs, run_sd, low, high, confidence=CONFIDENCE, reference_runs=len(ref_runs))
    row: dict[str, Any] = {
        "ratio": ratio,
        "ci_low": low,
        "ci_high": high,
        "interval": f"[{low:.4f}, {high:.4f}]",
        "run_noise": run_sd,
        "runs": noise.runs,
        "repeats": noise.repeats,
        "reference_runs": noise.reference_runs,
        "noise": {"within_run": noise.within, "between_run": noise.between, "reference": noise.reference},
    }
    if 1 - tolerance <= low and high <= 1 + tolerance:
        row.update(verdict="PASS", detail=f"interval inside 1 ± {tolerance:.2%}")
    elif high < 1 - tolerance or low > 1 + tolerance:
        row.update(
            verdict="FAIL",
            detail=f"interval entirely outside 1 ± {tolerance:.2%} "
            f"({'worse' if high < 1 else 'better'} by {abs(ratio - 1):.2%}); no number of runs would show "
            "equivalence if the ratio holds",
        )
    else:
        goal, fit = shrink_to_decide(ratio, low, high, tolerance)
        factor = for_power(fit, confidence=CONFIDENCE)
        runs, repeats = runs_to_decide(noise, factor), repeats_to_decide(noise, factor)
        row.update(verdict="INCONCLUSIVE", goal=goal)
        if goal == "FAIL":
            row["detail"] = (
                f"ratio {ratio:.4f} is outside 1 ± {tolerance:.2%}: no number of runs would show equivalence if it "
                "holds" + (f"; ~{runs} runs would show it FAIL" if runs is not None else "")
            )
        elif runs is None:
            row.update(_reference_runs(noise, factor, ratio=ratio))
        else:
            row.update(runs_needed=runs, repeats_needed=repeats, detail=_runs_would_decide(runs, repeats, noise))
    return row


def _reference_runs(noise: Noise, factor: float, *, ratio: float) -> dict[str, Any]:
    """Where the reference's own part is wider than the band leaves room for: more reference runs with the
    submission as it is, or more runs of both, whichever asks fewer runs in all."""
    alone = reference_runs_to_decide(noise, factor)
    both = runs_of_both_to_decide(noise, factor)
    if both is not None:  # never fewer than either side has: those runs exist already
        both = (max(both[0], noise.runs), max(both[1], noise.reference_runs))
    if alone is not None and (both is None or noise.runs + alone <= sum(both)):
        both = (noise.runs, alone)  # the partner as it is, when that costs no more runs in all
    held = f"the reference's own runs leave the interval too wide at ratio {ratio:.4f}, whatever the submission's runs"
    if both is None:
        return {"runs_needed": None, "detail": f"{held}; the ratio sits on an edge of the band"}
    runs, reference_runs = both
    with_runs = "" if runs == noise.runs else f" with ~{runs} runs of the submission (now {noise.runs})"
    return {
        "runs_needed": None,
        "reference_runs_needed": reference_runs,
        "runs_needed_with_reference": runs,
        "detail": f"{held}: ~{reference_runs} reference runs (now {noise.reference_runs}){with_runs} would decide it "
        f"({POWER:.0%} of the time, if the ratio holds)",
    }


def _runs_would_decide(runs: int, repeats: int | None, noise: Noise) -> str:
    text = f"~{runs} runs (now {noise.runs}) would show it PASS ({POWER:.0%} of the time, if the ratio holds)"
    if repeats is not None:
        return text + f", or ~{repeats} repeats per run (now {noise.repeats})"
    between = math.sqrt(noise.between)
    return text + f"; more repeats per run would not: between-run noise ({between:.2%}) does not shrink with them"


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
                row.update(verdict=MISSING, detail="the submission has no such workload")
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
    keys = _trusted(args)
    checked = None if keys is None or args.reference_unsigned else keys
    given, repeated = distinct_submissions([Path(path) for path in args.submissions])
    (reference, reference_signer), *loaded = load_bundles(
        [(Path(args.reference), checked), *[(path, keys) for path in given]]
    )
    submissions = [side for side, _ in loaded]
    signers = {str(side.source): signer for side, signer in loaded}
    run_noise = args.run_noise
    if run_noise is None:
        run_noise = recorded_value(first_recorded(r.settings for r in reference.runs), "run_noise") or RUN_NOISE
    tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    rows = evaluate(reference, submissions, tolerance=tolerance, run_noise=run_noise)
    for row in rows:
        signer = signers[row["submission"]]
        if signer is not None:
            row.update(signer=signer.label, signer_key=signer.path.name, signer_fingerprint=signer.fingerprint)
    partners = [partner_summary(side, rows, signers[str(side.source)], tolerance=tolerance) for side in submissions]
    within = [partner["submission"] for partner in partners if partner["verdict"] == "PASS"]
    failing = any(partner["verdict"] == "FAIL" for partner in partners)
    summary = f"{len(within)} of {len(submissions)} submissions within {_pct(tolerance)} on all workloads"
    notes = [
        f"reference {reference.source}: {len(reference.runs)} run(s) on {reference.hardware_slug}; "
        f"{len(reference.keys())} workload(s); between-run noise prior {run_noise:.2%}; ratio < 1 is worse",
        _signature_note(keys, reference_signer, checked_reference=checked is not None),
        *repeated,
        *[
            f"note: {sub.source} is on {sub.hardware_slug}, the reference on {reference.hardware_slug}"
            for sub in submissions
            if sub.hardware_slug != reference.hardware_slug
        ],
        *[f"{partner['submission']}: {partner['verdict']}: {partner['detail']}" for partner in partners],
        summary,
    ]
    text = render(
        title=f"gpuperf variance against {reference.source} (tolerance {_pct(tolerance)})",
        columns=COLUMNS if keys is None else (*COLUMNS[:1], ("signer", "signed by"), *COLUMNS[1:]),
        rows=rows,
        notes=notes,
        fmt=args.format,
        extra={
            "summary": summary,
            "within": within,
            "tolerance": tolerance,
            "partners": partners,
            "signatures": "not checked" if keys is None else "verified",
            "trusted_keys": [{"key": key.path.name, "fingerprint": key.fingerprint} for key in keys or ()],
            "reference_signer": reference_signer.label if reference_signer else None,
        },
    )
    write_output(text, Path(args.output) if args.output else None)
    return 1 if failing else 0


def _trusted(args: argparse.Namespace) -> list[PublicKey] | None:
    if not args.trust:
        if args.reference_unsigned:
            raise InputError(
                "--reference-unsigned is for use with --trust (without --trust no signature is checked); "
                "add --trust KEYS or leave it out"
            )
        return None
    return trusted_keys([Path(path) for path in args.trust])


def distinct_submissions(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The submissions with each one counted once, as fleet reads each file once: a path given again (itself,
    through a link, or by another spelling) is left out, with a note saying so."""
    kept: dict[str, Path] = {}
    notes = []
    for path in paths:
        real = os.path.realpath(path)
        if real in kept:
            notes.append(f"note: {path} is {kept[real]} given again: counted once")
            continue
        kept[real] = path
    return list(kept.values()), notes


def load_bundles(bundles: Sequence[tuple[Path, list[PublicKey] | None]]) -> list[tuple[Side, PublicKey | None]]:
    """Each path's side, and where keys are given with it the key it verified under. A bundle that does not
    verify refuses the whole command (InputError) before anything is judged; the message names the first and
    counts the others, so one run of the command lists what to fix."""
    loaded: list[tuple[Side, PublicKey | None]] = []
    refused: list[str] = []
    for path, keys in bundles:
        if keys is None:
            loaded.append((load_side(path), None))
            continue
        try:
            runs, signer = trusted_bundle(path, keys)
            check_one_hardware(runs, path)
        except InputError as error:
            refused.append(str(error))
            continue
        loaded.append((Side(source=path, runs=tuple(runs)), signer))
    if refused:
        more = f" (and {len(refused) - 1} more bundle(s) refused)" if len(refused) > 1 else ""
        raise InputError(f"{refused[0]}{more}; nothing was judged")
    return loaded


def partner_summary(
    side: Side, rows: list[dict[str, Any]], signer: PublicKey | None, *, tolerance: float
) -> dict[str, Any]:
    """One submission's answer over its workloads: PASS only if every workload is; the runs that would show
    equivalence where that is still open; the workload that rules it out where one does."""
    own = [row for row in rows if row["submission"] == str(side.source)]
    band = f"1 ± {tolerance:.2%}"
    summary: dict[str, Any] = {
        "submission": str(side.source),
        "runs": len(side.runs),
        "runs_needed": None,
        "reference_runs_needed": None,
        "runs_needed_with_reference": None,
        "signer": signer.label if signer else None,
    }
    failed = sorted(
        (row for row in own if row["verdict"] == "FAIL" or row.get("goal") == "FAIL"),
        key=lambda row: row["verdict"] != "FAIL",
    )
    missing = [row for row in own if row["verdict"] == MISSING]
    open_ = [row for row in own if row["verdict"] == "INCONCLUSIVE" and row not in failed]
    if failed:
        row = failed[0]
        detail = (
            f"{_workload(row)} at {row['ratio']:.4f} {row['interval']} is outside {band}: no number of runs would "
            "show equivalence if the ratio holds"
        )
        return {**summary, "verdict": row["verdict"], "detail": detail}
    if missing:
        return {**summary, "verdict": MISSING, "detail": f"{_workload(missing[0])} is missing: rerun it"}
    if not open_:
        return {**summary, "verdict": "PASS", "detail": f"already within {band} on all {len(own)} workload(s)"}
    stuck = [row for row in open_ if row.get("runs_needed") is None]
    if stuck:  # the reference holds it back: what it, and the partner with it, would need for every workload
        worst = max(stuck, key=lambda row: row.get("reference_runs_needed") or math.inf)
        if any(row.get("reference_runs_needed") is None for row in stuck):
            return {**summary, "verdict": "INCONCLUSIVE", "detail": f"{_workload(worst)}: {worst['detail']}"}
        reference_runs = max(row["reference_runs_needed"] for row in stuck)
        runs = max(
            [row["runs_needed_with_reference"] for row in stuck]
            + [row["runs_needed"] for row in open_ if row not in stuck]
        )
        with_runs = f" with ~{runs} runs of this partner (now {len(side.runs)})" if runs > len(side.runs) else ""
        detail = (
            f"~{reference_runs} reference runs (now {worst['reference_runs']}){with_runs} would show all {len(own)} "
            f"workload(s) within {band} ({POWER:.0%} of the time each, if the ratios hold; the reference holds back "
            f"{len(stuck)} workload(s), most {_workload(worst)} at {worst['ratio']:.4f} {worst['interval']})"
        )
        return {
            **summary,
            "verdict": "INCONCLUSIVE",
            "reference_runs_needed": reference_runs,
            "runs_needed_with_reference": runs,
            "detail": detail,
        }
    needed = max(row["runs_needed"] for row in open_)
    worst = max(open_, key=lambda row: row["runs_needed"])
    detail = (
        f"~{needed} runs (now {len(side.runs)}) would show all {len(own)} workload(s) within {band} "
        f"({POWER:.0%} of the time each, if the ratios hold; most needed by {_workload(worst)} at "
        f"{worst['ratio']:.4f} {worst['interval']})"
    )
    return {**summary, "verdict": "INCONCLUSIVE", "runs_needed": needed, "detail": detail}


def _workload(row: dict[str, Any]) -> str:
    return f"{row['test']} {row['metric']}"


def _signature_note(
    keys: list[PublicKey] | None, reference_signer: PublicKey | None, *, checked_reference: bool
) -> str:
    if keys is None:
        return "signatures not checked (no --trust): every file is judged as it says"
    reference = (
        f"the reference signed by {reference_signer.label}"
        if reference_signer
        else "the reference not checked (--reference-unsigned)"
    )
    return (
        f"signatures verified: every submission under one of {len(keys)} trusted key(s), {reference}; what is "
        "judged is the bytes that were verified"
    )


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"
