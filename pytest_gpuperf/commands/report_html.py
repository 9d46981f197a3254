"""`gpuperf report`: one self-contained HTML file of runs: summary table, throughput per stack version, loss
curves against their goldens and inference Pareto fronts. Plots are matplotlib PNGs embedded as base64, so the
file opens anywhere without the network or the files it came from.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_gpuperf.commands.history import order_runs
from pytest_gpuperf.commands.loading import CurveData, InputError, MetricData, Run, load_path
from pytest_gpuperf.commands.tables import cell_text, html_page, html_table, write_output
from pytest_gpuperf.stats import summarize

MAX_PLOTS = 60
"""Per section; a report of hundreds of plots is not read, the table still lists every metric."""


def stack_labels(runs: list[Run]) -> dict[Path, str]:
    """Each run named by the stack fields that vary between the runs ('driver 590.2, torch 2.12')."""
    names = sorted({name for run in runs for name in run.stack})
    varying = [name for name in names if len({run.stack.get(name) for run in runs}) > 1]
    return {run.source: ", ".join(f"{name} {run.stack.get(name, 'absent')}" for name in varying) or "one stack"
            for run in runs}


def png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def image(encoded: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


def summary_section(runs: list[Run], labels: dict[Path, str]) -> str:
    header = ["run", "created", "hardware", "stack"]
    cells = [[run.label, run.created or "-", run.hardware_slug, labels[run.source]] for run in runs]
    latest: dict[tuple[str, str], tuple[Run, MetricData, int]] = {}
    for run in runs:
        for key, data in run.metrics.items():
            count = latest[key][2] + 1 if key in latest else 1
            latest[key] = (run, data, count)
    rows = []
    for run, data, count in latest.values():
        stats = summarize(data.samples)
        rows.append([data.test, data.metric, f"{stats.median:.4g} {data.unit}", f"{stats.spread:.1%}",
                     data.verdict or "-", str(count), run.label])
    return ("<h2>Runs</h2>" + html_table(header, cells) + "<h2>Summary (latest run of each metric)</h2>"
            + html_table(["test", "metric", "median", "IQR/median", "verdict", "runs", "latest run"], rows))


def throughput_section(runs: list[Run], labels: dict[Path, str]) -> str:
    import matplotlib.pyplot as plt

    keys: dict[tuple[str, str], MetricData] = {}
    for run in runs:
        keys.update({key: data for key, data in run.metrics.items() if data.higher_is_better})
    parts = []
    for key, data in list(keys.items())[:MAX_PLOTS]:
        by_stack: dict[str, list[float]] = {}
        for run in runs:
            if key in run.metrics:
                by_stack.setdefault(labels[run.source], []).extend(run.metrics[key].samples)
        names = list(by_stack)
        summaries = [summarize(by_stack[name]) for name in names]
        figure, axes = plt.subplots(figsize=(5.5, 2.8))
        medians = [s.median for s in summaries]
        errors = [[s.median - s.minimum for s in summaries], [s.maximum - s.median for s in summaries]]
        axes.bar(range(len(names)), medians, yerr=errors, capsize=4, color="#4c78a8")
        axes.set_xticks(range(len(names)), [name[:40] for name in names], rotation=15, ha="right", fontsize=7)
        axes.set_ylabel(data.unit)
        axes.set_title(f"{data.test} {data.metric}", fontsize=8)
        parts.append(image(png(figure), f"{data.metric} per stack version"))
    if not parts:
        return "<h2>Throughput per stack version</h2><p>No higher-is-better metrics in these runs.</p>"
    return ("<h2>Throughput per stack version</h2><p>Median per stack version; bars span min to max.</p>"
            + "".join(parts))


def golden_curves(baselines: Path | None, run: Run, curve: CurveData) -> list[tuple[list[float], list[float]]]:
    if baselines is None or run.hardware_slug == "unknown-hardware":
        return []
    from pytest_gpuperf.store import StoreError, entry_key, module_file_name, read_document

    path = baselines / run.hardware_slug / module_file_name(curve.test)
    if not path.exists():
        return []
    try:
        document = read_document(path)
    except StoreError as error:
        raise InputError(str(error)) from None
    stored = document["tests"].get(entry_key(curve.test), {}).get("curves", {}).get(curve.name, {})
    return [(list(entry["steps"]), list(entry["values"])) for entry in stored.get("runs", [])]


def curves_section(runs: list[Run], labels: dict[Path, str], baselines: Path | None) -> str:
    import matplotlib.pyplot as plt

    grouped: dict[tuple[str, str], list[tuple[Run, CurveData]]] = {}
    for run in runs:
        for curve in run.curves:
            grouped.setdefault((curve.key, curve.name), []).append((run, curve))
    parts = []
    for (_, name), entries in list(grouped.items())[:MAX_PLOTS]:
        figure, axes = plt.subplots(figsize=(5.5, 2.8))
        for run, curve in entries:
            axes.plot(curve.steps, curve.values, linewidth=1.2, label=f"{run.label} ({labels[run.source]})"[:60])
        goldens = golden_curves(baselines, entries[-1][0], entries[-1][1])
        for number, (steps, values) in enumerate(goldens):
            axes.plot(steps, values, "k--", linewidth=1, label="golden" if number == 0 else None)
        axes.set_xlabel("step")
        axes.set_ylabel(name)
        axes.set_title(f"{entries[-1][1].test} {name}" + ("" if goldens else " (no golden found)"), fontsize=8)
        axes.legend(fontsize=6)
        parts.append(image(png(figure), f"{name} curve against golden"))
    if not parts:
        return "<h2>Loss curves</h2><p>No curves in these runs.</p>"
    note = "" if baselines else "<p>No --baselines folder given: curves are shown without goldens.</p>"
    return "<h2>Loss curves against goldens</h2>" + note + "".join(parts)


def pareto_front(points: Iterable[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points (latency, throughput, label) no other point beats on both: lower latency and higher throughput."""
    front = []
    best = float("-inf")
    for latency, rate, label in sorted(points, key=lambda p: (p[0], -p[1])):
        if rate > best:
            front.append((latency, rate, label))
            best = rate
    return front


def pareto_section(runs: list[Run]) -> str:
    """For tests parametrised alike (same name before '['), latency (lower-better, seconds) against throughput
    (higher-better), each test's latest run; the front joins configurations nothing else dominates."""
    import matplotlib.pyplot as plt

    latest: dict[str, dict[str, MetricData]] = {}
    for run in runs:
        for (key, _), data in run.metrics.items():
            latest.setdefault(key, {})[data.metric] = data
    groups: dict[tuple[str, str, str], list[tuple[float, float, str]]] = {}
    for key, metrics in latest.items():
        latency = [m for m in metrics.values() if not m.higher_is_better and m.unit in ("s", "ms")]
        rates = [m for m in metrics.values() if m.higher_is_better]
        if not latency or not rates:
            continue
        base, _, params = key.partition("[")
        groups.setdefault((base, latency[0].metric, rates[0].metric), []).append(
            (summarize(latency[0].samples).median, summarize(rates[0].samples).median, params.rstrip("]") or key))
    parts = []
    for (base, latency_name, rate_name), points in list(groups.items())[:MAX_PLOTS]:
        if len(points) < 2:
            continue
        front = pareto_front(points)
        figure, axes = plt.subplots(figsize=(5.5, 3.2))
        axes.scatter([p[0] for p in points], [p[1] for p in points], color="#999999", label="configurations")
        axes.plot([p[0] for p in front], [p[1] for p in front], "o-", color="#e45756", label="Pareto front")
        for latency, rate, label in points:
            axes.annotate(label[:20], (latency, rate), fontsize=6)
        axes.set_xlabel(f"{latency_name} (lower is better)")
        axes.set_ylabel(f"{rate_name} (higher is better)")
        axes.set_title(base, fontsize=8)
        axes.legend(fontsize=6)
        parts.append(image(png(figure), f"Pareto front of {base}"))
    if not parts:
        return ("<h2>Inference Pareto fronts</h2><p>No parametrised tests with both a latency and a throughput "
                "metric.</p>")
    return "<h2>Inference Pareto fronts</h2>" + "".join(parts)


def build_report(runs: list[Run], *, baselines: Path | None) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display: render to PNG only
    runs = order_runs(runs)
    labels = stack_labels(runs)
    body = "".join([
        f"<p>{len(runs)} run(s): {', '.join(html.escape(cell_text(run.label)) for run in runs)}</p>",
        summary_section(runs, labels),
        throughput_section(runs, labels),
        curves_section(runs, labels, baselines),
        pareto_section(runs),
    ])
    return html_page("gpuperf report", body)


def run(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("matplotlib is not installed; install the report extra: pip install "
                         "'pytest-gpuperf[report]'") from None
    runs = [run for path in args.paths for run in load_path(Path(path))]
    baselines = Path(args.baselines) if args.baselines else None
    if baselines is not None and not baselines.is_dir():
        raise InputError(f"{baselines}: baselines folder not found")
    write_output(build_report(runs, baselines=baselines), Path(args.output))
    print(f"report written: {args.output}")
    return 0
