"""Rendering judged results: the failure message of one test and the session's summary table."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.core.store.results import MetricResult, junit_properties
from pytest_gpuperf.core.verdict import coverage, rollup

__all__ = ["describe", "failure_message", "format_value", "junit_properties", "summary_table"]
"""``junit_properties`` belongs to the results format (results.py); it is named here too, beside the other
renderings a test's report is made of."""


def format_value(value: float, unit: str) -> str:
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
            if abs(value) >= scale:
                return f"{value / scale:.4g} {name}"
        return f"{value / 1e-9:.4g} ns"
    return f"{value:.4g} {unit}"


def describe(result: MetricResult) -> str:
    """One readable paragraph: now vs baseline, ratio and interval, p-value, delta, verdict, stack changes."""
    now = summarize(result.samples)
    comparison = result.comparison
    lines = [f"{result.metric}: {comparison.verdict.value} - {comparison.reason}"]
    lines.append(
        f"  now:      median {format_value(now.median, result.unit)}, spread {now.spread:.1%} (log Q3/Q1), n={now.n}"
    )
    if result.baseline_runs:
        pooled = summarize([value for run in result.baseline_runs for value in run])
        lines.append(
            f"  baseline: median {format_value(rollup.baseline_median(result.baseline_runs), result.unit)} "
            f"(of the run medians), spread {pooled.spread:.1%} (log Q3/Q1), "
            f"n={pooled.n} in {len(result.baseline_runs)} run(s)"
        )
    if comparison.ratio is not None:
        direction = "higher is better" if result.higher_is_better else "lower is better"
        lines.append(
            f"  ratio {comparison.ratio:.4f} ({direction}; < 1 is worse), 95% CI "
            f"[{comparison.ci_low:.4f}, {comparison.ci_high:.4f}], p(worse)={comparison.p_worse:.3g}, "
            f"between-run noise {comparison.run_noise:.2%}"
            + (
                f", shift between sittings {comparison.sitting_noise:.2%} (baseline in {comparison.sittings} "
                "sitting(s), this run in another)"
                if comparison.sitting_noise
                else ""
            )
        )
    if result.baseline_runs:
        note = result.context.get("machine_note")
        lines.append("  evidence: " + rollup.evidence(result.verdict.value, note if isinstance(note, str) else None))
        lines.extend("  " + line for line in stack_lines([result]))
    lines.extend("  moved: " + line for line in mover_lines(result))
    if isinstance(result.context.get("profile_note"), str):
        lines.append(f"  note: {result.context['profile_note']}")
    return "\n".join(lines)


def mover_lines(result: MetricResult) -> list[str]:
    """The operators that moved a judged change, where the baseline and this run were both profiled
    (--gpuperf-profile; core/record/profiling.py ``stored_lines``); none otherwise."""
    if "profile_diff" not in result.context:  # profiling off: its module is not imported
        return []
    from pytest_gpuperf.core.record.profiling import stored_lines

    return stored_lines(result.test, result.context["profile_diff"], result.verdict.value)


def failure_message(results: Iterable[MetricResult], *, strict: bool) -> str:
    results = list(results)
    head = "gpuperf: " + ", ".join(f"{r.metric} {r.verdict.value}" for r in results)
    hints = []
    verdicts = {r.verdict.value for r in results}
    if "REGRESSED" in verdicts:
        hints.append("a REGRESSED metric is slower/worse than its baseline beyond the threshold and the noise")
    if "IMPROVED" in verdicts:
        hints.append("too good: if the improvement is intended, refresh the baseline with --gpuperf-save")
    if "NO_BASELINE" in verdicts:
        hints.append("record a baseline on this hardware with --gpuperf-save")
    if verdicts & {"NOISY", "AMBIGUOUS"}:
        hints.append("quiet the machine, raise --gpuperf-repeats, or save more baseline runs")
    body = "\n".join(describe(r) for r in results)
    mode = " (--gpuperf-strict)" if strict else ""
    return f"{head}{mode}\n{body}\n" + "".join(f"hint: {hint}\n" for hint in hints)


def rollup_rows(results: Iterable[MetricResult]) -> list[rollup.Row]:
    return [
        rollup.Row(
            test=r.test,
            metric=r.metric,
            verdict=r.verdict.value,
            ratio=r.comparison.ratio,
            ci_low=r.comparison.ci_low,
            ci_high=r.comparison.ci_high,
            because=rollup.undecided_because(r.verdict.value, r.comparison.reason, r.context),
            detectable=r.comparison.detectable,
        )
        for r in results
    ]


def stack_lines(results: Iterable[MetricResult]) -> list[str]:
    """The stack difference, once: one line per distinct difference among the baselines judged against (entries
    recorded on several stacks give several), never one per metric."""
    groups: dict[tuple[str, ...], int] = {}
    for result in results:
        if result.baseline_runs:
            key = tuple(result.stack_changes)
            groups[key] = groups.get(key, 0) + 1
    if not groups:
        return []
    lines = []
    for changes, count in sorted(groups.items(), key=lambda item: -item[1]):
        scope = "" if len(groups) == 1 else f" ({count} metrics)"
        if not changes:
            lines.append(f"stack: same as the baseline{scope}")
        else:
            lines.append(
                f"stack differs from the baseline{scope}: "
                + "; ".join(changes)
                + " (one of the differences; a change below is not attributed to it)"
            )
    return lines


def summary_table(results: list[MetricResult], *, width: int = 120) -> list[str]:
    """The terminal summary: the roll-up first, the stack difference once, then one row per metric (test,
    metric, now, baseline, ratio, verdict, what the evidence supports), every line at most ``width`` columns;
    the full detail is in the results JSON and JUnit properties."""
    rows = rollup_rows(results)
    lines = rollup.render(rollup.build(rows), width=width)
    lines += coverage_lines(coverage.build(rows), width=width)
    lines += [part for line in stack_lines(results) for part in textwrap.wrap(line, width, subsequent_indent="  ")]
    header = ("test", "metric", "now", "baseline", "ratio", "verdict", "evidence")
    cells = []
    notes: list[str] = []
    for result in sorted(results, key=lambda r: (rollup.suite_of(r.test), r.test, r.metric)):
        now = summarize(result.samples)
        baseline = "-"
        if result.baseline_runs:
            baseline = format_value(rollup.baseline_median(result.baseline_runs), result.unit)
        ratio = f"{result.comparison.ratio:.3f}" if result.comparison.ratio is not None else "-"
        note = result.context.get("machine_note")
        if isinstance(note, str):
            notes.append(note)
        cells.append(
            [
                result.test,
                result.metric,
                format_value(now.median, result.unit),
                baseline,
                ratio,
                result.verdict.value,
                short_evidence(result.verdict.value, note if isinstance(note, str) else None),
            ]
        )
    lines += fit_table(header, cells, width=width, shrink=(1, 0, 6))
    if notes:
        lines += textwrap.wrap(machine_notes_line(notes, len(results)), width, subsequent_indent="    ")
    mixed = [result for result in results if isinstance(result.context.get("profile_note"), str)]
    if mixed:
        lines += textwrap.wrap(f"{len(mixed)} metric(s): {mixed[0].context['profile_note']}", width,
                               subsequent_indent="    ")  # fmt: skip
    moved = list(dict.fromkeys(line for result in results for line in mover_lines(result)))  # once per test
    if moved:
        lines.append("moved (baseline -> this run, both profiled; the whole diff: the results' profile_diff):")
        lines += [part for line in moved for part in textwrap.wrap(line, width, initial_indent="  ",
                                                                    subsequent_indent="    ")]  # fmt: skip
    return lines


def catch_text(change: float | None) -> str:
    """A coverage figure: 'nothing', a percentage, or a factor from 2x on (a time doubled reads 2x, not 50%)."""
    if change is None:
        return "nothing"
    if change < coverage.TWICE:
        return f"{change:.1%}"
    factor = 1 / (1 - change)
    return f"{factor:.3g}x" if factor < 1000 else ">1000x"


def coverage_lines(figures: coverage.Coverage, *, width: int = 120) -> list[str]:
    """The job's coverage: a line per suite and one for the job, each the smallest change that would have read
    REGRESSED in any of its metrics, in at least half of them, and how many catch nothing below 2x."""
    if not figures.suites:
        return []
    header = ("coverage: suite", "any metric", "half of them", "nothing below 2x")
    named = [*figures.suites.items(), ("job", figures.job)]
    cells = [
        [suite, catch_text(f.smallest), catch_text(f.half), f"{f.beyond_twice} of {f.metrics}"] for suite, f in named
    ]
    lines = textwrap.wrap(
        "coverage: the smallest change for the worse each suite could have caught in any metric, and in at least half "
        "of them, at their noise and the job's level (docs/verdicts.md#coverage)",
        width,
        subsequent_indent="  ",
    )
    return [*lines, *fit_table(header, cells, width=width, shrink=(0,))]


def shortfall_lines(short: list[coverage.Shortfall], required: float, suites: int, *, width: int = 120) -> list[str]:
    """Why a job failed --gpuperf-require-coverage: each suite that could not have caught a change of ``required``,
    why its metrics catch too little, and what would let them."""
    lines = textwrap.wrap(
        f"gpuperf: coverage below --gpuperf-require-coverage {required:.1%}: {len(short)} of {suites} suite(s) could "
        f"not have caught a {required:.1%} change in any metric",
        width,
        subsequent_indent="  ",
    )
    for item in short:
        if item.figure.metrics == 0:
            tests = item.causes.get(coverage.NOT_MEASURED, 0)
            lines += textwrap.wrap(
                f"  {item.suite}: no metric measured ({tests} perf test{'s' if tests != 1 else ''} collected); "
                f"decided by {item.cure}",
                width,
                subsequent_indent="      ",
            )
            continue
        causes = ", ".join(
            f"{n} {cause.lower().replace('_', ' ')}"  # a verdict as words: NO_BASELINE -> no baseline
            for cause, n in sorted(item.causes.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        lines += textwrap.wrap(
            f"  {item.suite}: its best metric catches {catch_text(item.figure.smallest)} ({item.figure.metrics} "
            f"metric{'s' if item.figure.metrics != 1 else ''}: {causes}); decided by {item.cure}",
            width,
            subsequent_indent="      ",
        )
    lines += textwrap.wrap(
        "  record baselines on this machine with --gpuperf-save (runs in several sittings narrow the noise), or "
        "compare two stacks paired in one session with `gpuperf ab`",
        width,
        subsequent_indent="      ",
    )
    return lines


def short_evidence(verdict: str, note: str | None) -> str:
    """``rollup.evidence`` for a table cell: that the machine's state differed is marked with '*'; how is said
    once under the table (``machine_notes_line``), not per metric."""
    return rollup.evidence(verdict, None) + (" *" if note else "")


def machine_notes_line(notes: list[str], total: int) -> str:
    """One line for every metric whose machine state differed from its baseline's: how many, and the most
    frequent ways (the results JSON keeps each metric's note under context.machine_note)."""
    kinds: dict[str, int] = {}
    for note in notes:
        for part in note.split("; "):
            kind = rollup.machine_note_kind(part)
            kinds[kind] = kinds.get(kind, 0) + 1
    common = ", ".join(f"{kind} ({n})" for kind, n in sorted(kinds.items(), key=lambda item: -item[1])[:3])
    return (
        f"* the machine's state differed from the baseline's for {len(notes)} of {total} metrics: {common} "
        "(each metric's note: context.machine_note in the results JSON)"
    )


def fit_table(header: Sequence[str], rows: list[list[str]], *, width: int, shrink: Sequence[int]) -> list[str]:
    """Aligned columns within ``width``: the columns named in ``shrink`` (in that order) give up room, their cells
    shortened with '...' (the first column holds test ids: shortened in the middle, rollup.shorten_test_id)."""
    widths = [max([len(header[i])] + [len(row[i]) for row in rows]) for i in range(len(header))]
    floor = {0: 24, 1: 16}
    for index in shrink:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess <= 0:
            break
        widths[index] = min(widths[index], max(widths[index] - excess, floor.get(index, 12), len(header[index])))
    out = []
    for number, row in enumerate([list(header), *rows]):
        cells = [
            (rollup.shorten_test_id if i == 0 and number > 0 else rollup.shorten)(cell, w).ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths))
        ]
        out.append(rollup.fit("  ".join(cells).rstrip(), width))
    return out


def unresolved_lines(unresolved: list[tuple[str, str, float]], threshold: float, *, width: int = 120) -> list[str]:
    """Said once at save time: the saved metrics whose runs vary more than the threshold can resolve, worst
    first (five named; the count says how many)."""
    worst = sorted(unresolved, key=lambda entry: -entry[2])
    head = (
        f"gpuperf: {len(worst)} saved metric(s) vary between runs on this machine more than the {threshold:.1%} "
        "threshold can resolve: a stored baseline decides only changes beyond the size shown; `gpuperf ab` "
        "compares two stacks paired, in one sitting"
    )
    lines = textwrap.wrap(head, width, subsequent_indent="  ")
    lines += [rollup.shorten(f"  {test} {metric}: beyond {_change(size)}", width) for test, metric, size in worst[:5]]
    return lines


def _change(size: float) -> str:
    """A decidable change as a percentage, or as a factor once it doubles the figure (a collective's runs two
    orders of magnitude apart read "beyond 921006.0%")."""
    if size < 1:
        return f"{size:.1%}"
    factor = 1 + size
    return f"{factor:,.3g}x" if factor < 1000 else f"{factor:,.0f}x"
