"""Rendering judged results: the failure message of one test and the session's summary table."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_gpuperf.core.results import MetricResult, junit_properties
from pytest_gpuperf.core.stats import summarize

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
        f"  now:      median {format_value(now.median, result.unit)}, IQR {now.spread:.1%} of median, n={now.n}"
    )
    if result.baseline_runs:
        pooled = summarize([value for run in result.baseline_runs for value in run])
        lines.append(
            f"  baseline: median {format_value(pooled.median, result.unit)}, IQR {pooled.spread:.1%} of median, "
            f"n={pooled.n} in {len(result.baseline_runs)} run(s)"
        )
    if comparison.ratio is not None:
        direction = "higher is better" if result.higher_is_better else "lower is better"
        lines.append(
            f"  ratio {comparison.ratio:.4f} ({direction}; < 1 is worse), 95% CI "
            f"[{comparison.ci_low:.4f}, {comparison.ci_high:.4f}], p(worse)={comparison.p_worse:.3g}, "
            f"between-run noise {comparison.run_noise:.2%}"
        )
    if result.stack_changes:
        lines.append("  stack changed since the baseline: " + "; ".join(result.stack_changes))
    elif result.baseline_runs:
        lines.append("  stack unchanged since the baseline")
    return "\n".join(lines)


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


def summary_table(results: list[MetricResult]) -> list[str]:
    """Rows for the terminal summary: test, metric, now, baseline, ratio, verdict, what changed."""
    header = ("test", "metric", "now", "baseline", "ratio", "verdict", "stack changes")
    rows = [header]
    for result in sorted(results, key=lambda r: (r.test, r.metric)):
        now = summarize(result.samples)
        baseline = "-"
        if result.baseline_runs:
            baseline = format_value(summarize([v for run in result.baseline_runs for v in run]).median, result.unit)
        ratio = f"{result.comparison.ratio:.3f}" if result.comparison.ratio is not None else "-"
        changes = "; ".join(result.stack_changes) if result.stack_changes else "-"
        rows.append(
            (
                result.test,
                result.metric,
                format_value(now.median, result.unit),
                baseline,
                ratio,
                result.verdict.value,
                changes,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    counts: dict[str, int] = {}
    for result in results:
        counts[result.verdict.value] = counts.get(result.verdict.value, 0) + 1
    lines.append(", ".join(f"{count} {verdict}" for verdict, count in sorted(counts.items())))
    return lines
