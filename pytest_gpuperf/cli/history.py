"""`gpuperf history`: each test's metric as a series of run medians, its change points and their attribution.

One file is one run. Runs are ordered by their timestamp (results 'created', JUnit 'timestamp'), ties by file
name; runs of different hardware keys form separate series. A change point (changepoints.py) is reported when
the new regime holds at least ``--min-after`` runs and its magnitude exceeds the threshold, with the stack
fields that differ between the run before it and the run at it. An accepted change restarts its series.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from pytest_gpuperf.cli.changepoints import MAX_PVALUE, change_points
from pytest_gpuperf.cli.loading import InputError, Run, decode_json, load_path, quote, read_bytes
from pytest_gpuperf.cli.tables import render, write_output
from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.core.verdict.policy import first_recorded, setting
from pytest_gpuperf.machine.fingerprint import stack_changes

COLUMNS = (
    ("hardware", "hardware"),
    ("test", "test"),
    ("metric", "metric"),
    ("run", "first run after"),
    ("before", "before"),
    ("after", "after"),
    ("change", "change"),
    ("pvalue", "p"),
    ("runs_after", "runs after"),
    ("attribution", "stack changes at that run (coincide; not shown to cause it)"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    run: str
    test: str | None = None
    metric: str | None = None

    def matches(self, run: Run, test: str, key: str, metric: str) -> bool:
        return (
            self.run in (run.label, str(run.source))
            and self.test in (None, test, key)
            and self.metric in (None, metric)
        )


def load_accepted(path: Path) -> list[Accepted]:
    document = decode_json(read_bytes(path), path)
    if not isinstance(document, list):
        raise InputError(
            f"{path}: expected a list of accepted changes like "
            '[{"run": "run-07.json", "test": "...", "metric": "..."}]'
        )
    accepted = []
    for index, entry in enumerate(document):
        if not isinstance(entry, dict) or not isinstance(entry.get("run"), str):
            raise InputError(
                f"{path}: entry {index} needs a 'run' (the file name of the first run of the accepted regime)"
            )
        extra = set(entry) - {"run", "test", "metric", "note"}
        if extra or not all(isinstance(entry.get(k), (str, type(None))) for k in ("test", "metric", "note")):
            raise InputError(f"{path}: entry {index} may hold only text fields run, test, metric, note")
        accepted.append(Accepted(run=entry["run"], test=entry.get("test"), metric=entry.get("metric")))
    return accepted


def order_runs(runs: list[Run]) -> list[Run]:
    def when(run: Run) -> tuple[float, str]:
        try:
            stamp = dt.datetime.fromisoformat(run.created)
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=dt.timezone.utc)
            return stamp.timestamp(), run.label
        except ValueError:
            return float("inf"), run.label  # undated runs last, by name

    return sorted(runs, key=when)


def analyse(
    runs: list[Run], *, threshold: float, max_pvalue: float, min_after: int, accepted: list[Accepted]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(change-point rows, series) over runs of one hardware key."""
    rows, series_out = [], []
    ordered = order_runs(runs)
    keys: dict[tuple[str, str], None] = {}
    for run in ordered:
        keys.update(dict.fromkeys(run.metrics))
    for key in keys:
        points = [(run, run.metrics[key]) for run in ordered if key in run.metrics]
        test, metric = points[-1][1].test, points[-1][1].metric
        start = 0
        for index, (run, _) in enumerate(points):
            if any(a.matches(run, test, key[0], metric) for a in accepted):
                start = index
        points = points[start:]
        try:
            with np.errstate(over="raise", invalid="raise"):  # an error, not a warning beside a result from inf
                medians = [summarize(data.samples).median for _, data in points]
                found = change_points(medians, max_pvalue=max_pvalue)
        except (OverflowError, FloatingPointError, ValueError) as error:
            sources = ", ".join(sorted({run.label for run, _ in points}))[:200]
            raise InputError(
                f"test {quote(test)} metric {quote(metric)}: run medians beyond float range ({error}) in {sources}; "
                "check the units of these runs"
            ) from None
        series_out.append(
            {
                "hardware": ordered[0].hardware_slug,
                "test": test,
                "metric": metric,
                "unit": points[-1][1].unit,
                "runs": [run.label for run, _ in points],
                "medians": medians,
                "reset_at": points[0][0].label if start else None,
            }
        )
        found = change_points(medians, max_pvalue=max_pvalue)
        for switch in stack_switch_changes(points, medians, {change.index for change in found}, threshold):
            rows.append({**switch, "test": test, "metric": metric})
        for number, change in enumerate(found):
            end = found[number + 1].index if number + 1 < len(found) else len(points)
            runs_after = end - change.index
            if runs_after < min_after or abs(change.magnitude) <= threshold:
                continue
            before_run, at_run = points[change.index - 1][0], points[change.index][0]
            changes = stack_changes(before_run.stack, at_run.stack)
            rows.append(
                {
                    "hardware": at_run.hardware_slug,
                    "test": test,
                    "metric": metric,
                    "run": at_run.label,
                    "index": change.index,
                    "before": change.mean_before,
                    "after": change.mean_after,
                    "change": f"{change.magnitude:+.1%}",
                    "magnitude": change.magnitude,
                    "pvalue": change.pvalue,
                    "runs_after": runs_after,
                    "attribution": changes or ["no stack component changed (the code, data or machine did)"],
                    "stack_changes": changes,
                    "found_by": "change-point search",
                }
            )
    return rows, series_out


STACK_SWITCH_PVALUE = 0.01
"""Significance of the split at a stack switch. The switch is a point given in advance, not one searched for
among all splits, so it needs no search correction: the change-point search's 0.001 (set against the many
splits it tries) left a real upgrade step unreported when only a run or two of the new stack existed."""


def stack_switch_changes(
    points: list[tuple[Run, Any]], medians: list[float], found: set[int], threshold: float
) -> list[dict[str, Any]]:
    """A change at each point where the stack switches and the search found none: the runs since the previous
    switch against the runs up to the next, Student's t-test (p < STACK_SWITCH_PVALUE, |change| > threshold).
    One run after the switch is enough, judged against the spread of the runs before it."""
    switches = [i for i in range(1, len(points)) if points[i][0].stack != points[i - 1][0].stack]
    rows = []
    for number, index in enumerate(switches):
        if index in found:
            continue
        start = switches[number - 1] if number else 0
        end = switches[number + 1] if number + 1 < len(switches) else len(points)
        before, after = np.array(medians[start:index]), np.array(medians[index:end])
        if len(before) < 2 or np.std(before) == 0 and np.std(after) == 0:
            continue
        pvalue = float(scipy_stats.ttest_ind(before, after, equal_var=True).pvalue)
        magnitude = float(after.mean() / before.mean() - 1)
        if not pvalue < STACK_SWITCH_PVALUE or abs(magnitude) <= threshold:
            continue
        at_run = points[index][0]
        changes = stack_changes(points[index - 1][0].stack, at_run.stack)
        rows.append(
            {
                "hardware": at_run.hardware_slug,
                "run": at_run.label,
                "index": index,
                "before": float(before.mean()),
                "after": float(after.mean()),
                "change": f"{magnitude:+.1%}",
                "magnitude": magnitude,
                "pvalue": pvalue,
                "runs_after": len(after),
                "attribution": changes,
                "stack_changes": changes,
                "found_by": "stack switch",
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    runs = [run for path in args.paths for run in load_path(Path(path))]
    accepted = load_accepted(Path(args.accepted)) if args.accepted else []
    max_pvalue = MAX_PVALUE if args.max_pvalue is None else args.max_pvalue
    if not 0 < max_pvalue < 1 or args.min_after < 1:
        raise InputError("--max-pvalue must be in (0, 1) and --min-after >= 1")
    threshold = setting("threshold", given=args.threshold, recorded=first_recorded(r.settings for r in runs))
    by_hardware: dict[str, list[Run]] = {}
    for run_ in runs:
        by_hardware.setdefault(run_.hardware_slug, []).append(run_)
    rows, series = [], []
    for group in by_hardware.values():
        found, group_series = analyse(
            group, threshold=threshold, max_pvalue=max_pvalue, min_after=args.min_after, accepted=accepted
        )
        rows += found
        series += group_series
    notes = [
        f"{len(runs)} run(s), {len(series)} series; change points by e-divisive split + Student t-test "
        f"(p < {max_pvalue:g}) and merge, shown when |change| > {threshold:.1%} with >= {args.min_after} "
        "runs after",
        *[
            f"series {s['test']} {s['metric']} restarts at accepted run {s['reset_at']}"
            for s in series
            if s["reset_at"]
        ],
        f"{len(rows)} change point(s)",
    ]
    text = render(
        title="gpuperf history", columns=COLUMNS, rows=rows, notes=notes, fmt=args.format, extra={"series": series}
    )
    write_output(text, Path(args.output) if args.output else None)
    return 0
