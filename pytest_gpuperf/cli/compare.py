"""`gpuperf compare BASE NEW`: every test and metric of two stacks, judged with the plugin's own rules.

BASE's runs play the baseline (each file one run, so a folder of several runs gives the between-run noise
estimate its data); NEW's samples are pooled into the current run. The verdict is ``rejudge``'s
(core/verdict/judge.py), so a row here means what the same row means in a pytest session.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_gpuperf.cli.loading import InputError, Side, load_side, quote
from pytest_gpuperf.cli.tables import render, write_output
from pytest_gpuperf.core.record.profiling import (
    PROFILE,
    PROFILE_DIFF,
    PROFILE_NOTE,
    mixed_note,
    stored_diff,
    stored_lines,
)
from pytest_gpuperf.core.stats.sittings import group_sittings
from pytest_gpuperf.core.stats.unpaired import Rules, summarize, with_siblings
from pytest_gpuperf.core.verdict import rollup
from pytest_gpuperf.core.verdict.judge import ANOTHER_MACHINE, ANOTHER_SITTING, THIS_SITTING, rejudge
from pytest_gpuperf.core.verdict.policy import first_recorded, machine_checked, policy_for
from pytest_gpuperf.core.verdict.vocabulary import MEASURED, Verdict
from pytest_gpuperf.machine.fingerprint import stack_changes

MISSING = Verdict.MISSING.value
"""A metric BASE has and NEW lacks (the test was removed, skipped or failed before measuring)."""

COLUMNS = (
    ("test", "test"),
    ("metric", "metric"),
    ("base_median", "base median"),
    ("new_median", "new median"),
    ("ratio", "ratio"),
    ("ci", "95% CI"),
    ("p_worse", "p(worse)"),
    ("verdict", "verdict"),
    ("evidence", "evidence"),
)


def compare_sides(base: Side, new: Side, rules: Rules) -> list[dict[str, Any]]:
    """One row per test and metric. The verdict is the session's: ``rejudge`` (core/verdict/judge.py) with the same
    rules and the facts the session recorded, and a verdict another rule gave (``judged_by``: the convergence test
    of steps to target) is kept, never re-judged as a timing. The medians shown are the ones the ratio is formed
    from (NEW's pooled samples, the median of BASE's run medians)."""
    rows = []
    both = [key for key in base.keys() if new.metric_runs(key)]
    rules = replace(rules, family_size=max(1, len(both)))  # the invocation's metrics share its false-failure level
    for key in base.keys() + [key for key in new.keys() if key not in set(base.keys())]:
        base_runs, new_runs = base.metric_runs(key), new.metric_runs(key)
        base_dates = base.metric_dates(key)
        new_machine = new.metric_machines(key)[-1] if new_runs else None
        mine = [i for i, machine in enumerate(base.metric_machines(key)) if new_machine and machine == new_machine]
        across = bool(base_runs) and not mine
        if mine:  # BASE's runs on NEW's machine are the comparison, as a session's own runs are
            base_runs, base_dates = [base_runs[i] for i in mine], [base_dates[i] for i in mine]
        sample = (new_runs or base_runs)[0]
        row: dict[str, Any] = {
            "test": sample.test,
            "metric": sample.metric,
            "suite": rollup.suite_of(sample.test),
            "unit": sample.unit,
            "higher_is_better": sample.higher_is_better,
            "base_runs": len(base_runs),
            "new_runs": len(new_runs),
        }
        if base_runs:
            row["base_median"] = rollup.baseline_median([run.samples for run in base_runs])
        if not new_runs:
            rows.append({**row, "verdict": MISSING, "reason": f"in {base.source} but not in {new.source}"})
            continue
        current = [v for run in new_runs for v in run.samples]
        row["new_median"] = summarize(current).median
        flips = {run.higher_is_better for run in base_runs} - {sample.higher_is_better}
        if flips:
            raise InputError(
                f"{quote(sample.test)} {quote(sample.metric)}: higher_is_better differs between "
                f"{base.source} and {new.source}; the metric's meaning changed"
            )
        latest = new_runs[-1]
        try:
            # numpy's overflow is an error here, not a warning on stderr beside a verdict computed from inf
            with np.errstate(over="raise", invalid="raise"):
                result = rejudge(  # the session's rule, checks and confirmation included (core/verdict/judge.py)
                    current,
                    [run.samples for run in base_runs],
                    [run.context for run in base_runs],
                    context=latest.context,
                    unit=sample.unit,
                    higher_is_better=sample.higher_is_better,
                    rules=with_siblings(rules, base.sibling_samples(key)),  # the session's prior
                    machine_check=machine_checked(run.settings for run in new.runs),
                    sittings=(sittings := group_sittings(base_dates, new.metric_dates(key)[-1])),
                    across_machines=across,
                    recorded_verdict=latest.verdict,
                    recorded_reason=latest.comparison.get("reason"),
                )
        except (ValueError, OverflowError, FloatingPointError) as error:  # medians <= 0; beyond float range
            raise InputError(
                f"{new.source}: test {quote(sample.test)} metric {quote(sample.metric)}: cannot form a ratio within "
                f"float range ({error}); check the units of both sides"
            ) from None
        judged_by = latest.context.get("judged_by")
        if isinstance(judged_by, str) and latest.verdict in MEASURED:
            row["judged_by"] = judged_by
        row.update(result.as_dict())
        row["comparison"] = ANOTHER_MACHINE if across else THIS_SITTING if sittings.joined else ANOTHER_SITTING
        row["verdict"] = result.verdict.value
        judged_context = {**latest.context, "comparison": row["comparison"]}
        row["because"] = rollup.undecided_because(result.verdict.value, result.reason, judged_context)
        if result.ci_low is not None:
            row["ci"] = f"[{result.ci_low:.4f}, {result.ci_high:.4f}]"
        note = rollup.machine_note(latest.context, [run.context for run in base_runs])
        row["machine_note"] = note
        row["evidence"] = rollup.evidence(result.verdict.value, note, source="BASE")
        if PROFILE in latest.context:  # both profiled (--gpuperf-profile): the operators that moved, BASE -> NEW
            row[PROFILE_DIFF] = stored_diff([run.context for run in base_runs], latest.context, row["verdict"])
        mixed = mixed_note([run.context for run in base_runs], latest.context, names=("BASE", "NEW"))
        if mixed:  # one side measured under the profiler: its cost is in the ratio
            row[PROFILE_NOTE] = mixed
        rows.append(row)
    return rows


def headline_notes(base: Side, new: Side, rows: list[dict[str, Any]]) -> list[str]:
    """The roll-up and the stack difference, once, before any row."""
    roll = rollup.build(
        rollup.Row(
            test=row["test"],
            metric=row["metric"],
            verdict=row["verdict"],
            ratio=row.get("ratio"),
            ci_low=row.get("ci_low"),
            ci_high=row.get("ci_high"),
            because=row.get("because"),
        )
        for row in rows
    )
    stack = rollup.stack_line(base.stack, new.stack, against="BASE")
    return rollup.render(roll) + textwrap.wrap(stack, 120, subsequent_indent="  ")


def run(args: argparse.Namespace) -> int:
    base, new = load_side(Path(args.base)), load_side(Path(args.new))
    given = {name: getattr(args, name) for name in ("threshold", "noise_limit", "run_noise", "sitting_noise")}
    recorded = first_recorded(run.settings for run in base.runs)
    rules = policy_for(given=given, recorded=recorded)  # a flag given, else BASE's settings, else the defaults
    rows = compare_sides(base, new, rules)
    notes = [
        f"BASE {base.source}: {len(base.runs)} run(s) on {base.hardware_slug}; NEW {new.source}: {len(new.runs)} "
        f"run(s) on {new.hardware_slug}",
        f"threshold {rules.threshold:.1%}, alpha {rules.alpha}, noise limit {rules.noise_limit:.0%}, between-run "
        f"noise prior {rules.run_noise:.2%}, shift between sittings {rules.sitting_noise:.2%} (where NEW was "
        "measured an hour or more from BASE's runs); ratio < 1 is worse",
    ]
    if base.hardware_slug != new.hardware_slug:
        notes.append(
            f"note: hardware differs ({base.hardware_slug} vs {new.hardware_slug}): the stack is not "
            "the only difference"
        )
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    notes.append(", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items())) or "no metrics found")
    moved = dict.fromkeys(line for row in rows for line in stored_lines(row["test"], row.get(PROFILE_DIFF),
                                                                          row["verdict"]))  # fmt: skip
    if moved:
        notes += ["moved (BASE -> NEW, both profiled; the whole diff: --format json, profile_diff):", *moved]
    mixed = [row for row in rows if row.get(PROFILE_NOTE)]
    if mixed:
        notes.append(f"{len(mixed)} metric(s): {mixed[0][PROFILE_NOTE]}")
    text = render(
        title=f"gpuperf compare {base.source} -> {new.source}",
        columns=COLUMNS,
        rows=rows,
        notes=notes,
        fmt=args.format,
        head=headline_notes(base, new, rows),
        extra={
            "base": {"source": str(base.source), "stack": base.stack, "hardware": base.hardware_slug},
            "new": {"source": str(new.source), "stack": new.stack, "hardware": new.hardware_slug},
            "stack_changes": stack_changes(base.stack, new.stack),
        },
    )
    write_output(text, Path(args.output) if args.output else None)
    return 1 if counts.get(Verdict.REGRESSED.value) else 0
