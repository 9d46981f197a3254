"""`gpuperf report`: one self-contained HTML file of runs: summary table, throughput per stack version, loss
curves against their goldens and inference Pareto fronts. Plots are matplotlib PNGs embedded as base64, so the
file opens anywhere without the network or the files it came from.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_gpuperf.ab.model import AB_SCHEMA
from pytest_gpuperf.cli.history import order_runs
from pytest_gpuperf.cli.loading import CurveData, InputError, MetricData, Run, check_regular_file, load_path, quote
from pytest_gpuperf.cli.output import emit, printable
from pytest_gpuperf.cli.tables import cell_text, html_page, html_table, write_output
from pytest_gpuperf.core.record.profiling import PROFILE_DIFF, mover_lines, stored_lines, us_text
from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.schema import SchemaError
from pytest_gpuperf.core.verdict import rollup
from pytest_gpuperf.core.verdict.policy import setting

MAX_PLOTS = 60
"""Per section; a report of hundreds of plots is not read, the table still lists every metric."""


STORED_SIDES = {"A": "baseline", "B": "this run"}
"""A stored diff's sides: the baseline's profiled run (A) and this run (B)."""


def profile_section(runs: list[Run]) -> str:
    """Per metric whose latest run is a judged change against a baseline profiled as it was (--gpuperf-profile),
    the operators that moved and the whole diff (core/record/profiling.py ``stored_diff``); nothing otherwise."""
    parts = []
    for _, data, _ in latest_metrics(runs).values():
        diff = data.context.get(PROFILE_DIFF)
        lines = stored_lines(data.test, diff, data.verdict or "")
        if lines and isinstance(diff, dict):
            title = f"{data.test} {data.metric}: {data.verdict}"
            parts.append(diff_table(title, lines, diff, STORED_SIDES))
    if not parts:
        return ""
    return "<h2>Operators that moved (baseline -> this run, both profiled)</h2>" + "".join(parts)


def ab_profile(document: dict[str, Any]) -> str:
    """A `gpuperf ab --profile` result's profiled sessions: per test whose metric changed, its movers and the
    whole diff of side A's operators against side B's; why there is none, where its sessions failed."""
    profile = document.get("profile")
    if not isinstance(profile, dict):
        return ""
    error = f"<p>profiled sessions: {html.escape(str(profile['error']))}</p>" if profile.get("error") else ""
    raw = profile.get("diff")
    diff: dict[str, Any] = raw if isinstance(raw, dict) else {}
    tests: dict[str, Any] = diff["tests"] if isinstance(diff.get("tests"), dict) else {}
    parts = []
    for test, entry in tests.items():
        if not isinstance(entry, dict) or not entry.get("movers"):
            continue  # a test whose metric did not change: ab.json keeps its diff, the page names nothing
        try:
            lines = mover_lines({"tests": {test: entry}})
        except (KeyError, TypeError, ValueError):  # an ab.json edited by hand
            continue
        parts.append(diff_table(f"{test}: profiled sides", lines, entry, {"A": "A", "B": "B"}))
    return error + "".join(parts)


def diff_table(title: str, lines: list[str], diff: dict[str, Any], sides: dict[str, str]) -> str:
    """One test's operator diff: its mover lines, then every operator's times on each side, calls, time per call,
    change and share of the test's change."""
    header = ["operator", sides["A"], sides["B"], "calls", f"per call ({sides['A']})", f"per call ({sides['B']})",
              "change", f"share of the {cell_text(diff.get('direction'))}", "only in / setup"]  # fmt: skip
    rows = [_diff_row(op, sides) for op in diff.get("ops") or [] if isinstance(op, dict)]
    return (
        f"<h3>{html.escape(title)}</h3>"
        + "".join(f"<p>{html.escape(line)}</p>" for line in lines)
        + f"<p>{html.escape(cell_text(diff.get('clock')))} self time of each operator over the profiled call</p>"
        + html_table(header, rows)
    )


def _diff_row(op: dict[str, Any], sides: dict[str, str]) -> list[str]:
    times = [us_text(_number(op.get(key))) for key in ("a_us", "b_us")]
    per_call = [us_text(_number(op.get(key))) for key in ("a_us_per_call", "b_us_per_call", "change_us")]
    share = _number(op.get("share"))
    where = "setup" if op.get("setup") else sides.get(str(op.get("only_in")), "")
    calls = f"{cell_text(op.get('a_count'))} -> {cell_text(op.get('b_count'))}"
    return [cell_text(op.get("name")), *times, calls, *per_call, "-" if share is None else f"{share:.0%}", where]


def stack_labels(runs: list[Run]) -> dict[Path, str]:
    """Each run named by the stack fields that vary between the runs ('driver 590.2, torch 2.12')."""
    names = sorted({name for run in runs for name in run.stack})
    varying = [name for name in names if len({run.stack.get(name) for run in runs}) > 1]
    return {
        run.source: ", ".join(f"{name} {run.stack.get(name, 'absent')}" for name in varying) or "one stack"
        for run in runs
    }


def png(figure: Any) -> str | None:
    """The figure as base64 PNG, or None when matplotlib cannot lay it out (values near the float limit make
    its tick arithmetic overflow); the figure is closed either way."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    except (OverflowError, ValueError, FloatingPointError):
        return None
    finally:
        plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def image(encoded: str | None, alt: str) -> str:
    if encoded is None:
        return f"<p>Plot of {html.escape(alt)} not drawn: its values are too close to the float limit to lay out.</p>"
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


FAMILIES = ("GEMM", "SDPA", "bandwidth", "training", "distributed", "inference")


def family_of(data: MetricData) -> str:
    """The throughput family a metric belongs to, by its suite, test and unit; 'other' where none fits."""
    text, suite = f"{data.test} {data.metric}".lower(), rollup.suite_of(data.test).lower()
    if "gemm" in text or "matmul" in text or data.unit.startswith("TFLOP"):
        return "GEMM"
    if "sdpa" in text or "attention" in text:
        return "SDPA"
    if "bandwidth" in text or "copy" in text or data.unit in ("GB/s", "GiB/s"):
        return "bandwidth"
    for family in ("distributed", "inference", "training"):
        if family in suite:
            return family
    return "other"


def latest_metrics(runs: list[Run]) -> dict[tuple[str, str], tuple[Run, MetricData, int]]:
    latest: dict[tuple[str, str], tuple[Run, MetricData, int]] = {}
    for run in runs:
        for key, data in run.metrics.items():
            count = latest[key][2] + 1 if key in latest else 1
            latest[key] = (run, data, count)
    return latest


def rollup_section(runs: list[Run]) -> str:
    """The headline first: the latest run of each metric, its recorded verdict, and the stack difference once."""
    rows = []
    for _, data, _ in latest_metrics(runs).values():
        comparison = data.comparison
        rows.append(
            rollup.Row(
                test=data.test,
                metric=data.metric,
                verdict=data.verdict or "NO_BASELINE",
                ratio=_number(comparison.get("ratio")),
                ci_low=_number(comparison.get("ci_low")),
                ci_high=_number(comparison.get("ci_high")),
            )
        )
    lines = rollup.render(rollup.build(rows))
    if len(runs) > 1:
        lines.append(rollup.stack_line(runs[0].stack, runs[-1].stack, against=f"first run ({runs[0].label})"))
    return '<h2>Verdict</h2><pre class="rollup">' + html.escape("\n".join(lines)) + "</pre>"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def summary_section(runs: list[Run], labels: dict[Path, str]) -> str:
    header = ["run", "created", "hardware", "stack"]
    cells = [[run.label, run.created or "-", run.hardware_slug, labels[run.source]] for run in runs]
    by_suite: dict[str, list[list[str]]] = {}
    for run, data, count in latest_metrics(runs).values():
        stats = summarize(data.samples)
        ratio = _number(data.comparison.get("ratio"))
        by_suite.setdefault(rollup.suite_of(data.test), []).append(
            [
                data.test,
                data.metric,
                f"{stats.median:.4g} {data.unit}",
                f"{stats.spread:.1%}",
                f"{ratio:.3f}" if ratio is not None else "-",
                data.verdict or "-",
                str(count),
                run.label,
            ]
        )
    columns = ["test", "metric", "median", "spread (log Q3/Q1)", "ratio", "verdict", "runs", "latest run"]
    tables = "".join(
        f"<h3>{html.escape(suite)}</h3>" + html_table(columns, rows).replace("<table>", '<table class="sortable">', 1)
        for suite, rows in sorted(by_suite.items())
    )
    return (
        "<h2>Runs</h2>"
        + html_table(header, cells)
        + "<h2>Every metric, by suite (latest run; click a heading to sort)</h2>"
        + tables
        + SORT_SCRIPT
    )


SORT_SCRIPT = """<script>
document.querySelectorAll("table.sortable th").forEach(function (th, column) {
  th.style.cursor = "pointer";
  th.addEventListener("click", function () {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var body = th.closest("table").tBodies[0];
    var rows = Array.from(body.rows), up = th.dataset.order !== "up";
    th.dataset.order = up ? "up" : "down";
    rows.sort(function (a, b) {
      var x = a.cells[index].textContent, y = b.cells[index].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? c : -c;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
</script>"""


def small_multiples(count: int, *, width: float = 2.6, height: float = 2.0) -> tuple[Any, list[Any]]:
    import matplotlib.pyplot as plt

    columns = min(count, 4)
    rows = (count + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    flat = [axis for line in axes for axis in line]
    for axis in flat[count:]:
        axis.set_visible(False)
    return figure, flat[:count]


def ratio_section(runs: list[Run]) -> str:
    """Ratio to baseline with its interval, per suite: the first chart, what the verdicts are made of."""
    by_suite: dict[str, list[tuple[str, float, float, float, str]]] = {}
    for _, data, _ in latest_metrics(runs).values():
        c = data.comparison
        ratio, low, high = _number(c.get("ratio")), _number(c.get("ci_low")), _number(c.get("ci_high"))
        if ratio is None or low is None or high is None:
            continue
        name = f"{data.test.split('::', 1)[-1]} {data.metric}"
        by_suite.setdefault(rollup.suite_of(data.test), []).append((name, ratio, low, high, data.verdict or ""))
    if not by_suite:
        return "<h2>Ratio to baseline</h2><p>No metric in these runs was judged against a baseline.</p>"
    import matplotlib.pyplot as plt

    parts = []
    for suite, entries in sorted(by_suite.items()):
        entries = entries[:MAX_PLOTS]
        figure, axes = plt.subplots(figsize=(7.5, 0.8 + 0.28 * len(entries)))
        colours = {"REGRESSED": "#c0392b", "IMPROVED": "#2e86c1", "PASS": "#27ae60"}
        for y, (_, ratio, low, high, verdict) in enumerate(entries):
            axes.errorbar(
                ratio, y, xerr=[[ratio - low], [high - ratio]], fmt="o", color=colours.get(verdict, "#888"), capsize=3
            )
        axes.axvline(1.0, color="k", linewidth=0.8)
        axes.set_yticks(range(len(entries)), [printable(rollup.shorten_test_id(e[0], 50)) for e in entries], fontsize=6)
        axes.invert_yaxis()
        axes.set_xlabel("ratio to baseline (< 1 is worse), 95% interval", fontsize=7)
        axes.set_title(printable(suite), fontsize=8)
        parts.append(image(png(figure), f"ratio to baseline: {suite}"))
    return "<h2>Ratio to baseline</h2><p>Red REGRESSED, blue IMPROVED, green PASS, grey undecided.</p>" + "".join(parts)


def throughput_section(runs: list[Run], labels: dict[Path, str]) -> str:
    """Every higher-is-better metric per stack, one small-multiples figure per suite and family."""
    groups: dict[tuple[str, str], dict[tuple[str, str], MetricData]] = {}
    for run in runs:
        for key, data in run.metrics.items():
            if data.higher_is_better:
                groups.setdefault((rollup.suite_of(data.test), family_of(data)), {})[key] = data
    if not groups:
        return "<h2>Throughput per stack version</h2><p>No higher-is-better metrics in these runs.</p>"
    names = list(dict.fromkeys(labels[run.source] for run in runs))
    colours = {name: f"C{index % 10}" for index, name in enumerate(names)}
    parts = []
    for (suite, family), keys in sorted(groups.items(), key=lambda item: (item[0][0], _family_order(item[0][1]))):
        chosen = list(keys.items())[:MAX_PLOTS]
        figure, axes = small_multiples(len(chosen))
        for axis, (key, data) in zip(axes, chosen):
            by_stack: dict[str, list[float]] = {}
            for run in runs:
                if key in run.metrics:
                    by_stack.setdefault(labels[run.source], []).extend(run.metrics[key].samples)
            stacks = list(by_stack)
            summaries = [summarize(by_stack[name]) for name in stacks]
            axis.bar(
                range(len(stacks)),
                [s.median for s in summaries],
                yerr=[[s.median - s.minimum for s in summaries], [s.maximum - s.median for s in summaries]],
                capsize=3,
                color=[colours[name] for name in stacks],
            )
            axis.set_xticks([])
            axis.set_ylabel(printable(data.unit), fontsize=6)
            axis.tick_params(labelsize=6)
            axis.set_title(printable(rollup.shorten(f"{data.test.split('::', 1)[-1]} {data.metric}", 44)), fontsize=6)
        handles = [plt_patch(colours[name]) for name in names]
        figure.legend(
            handles,
            [printable(name[:60]) for name in names],
            loc="lower center",
            bbox_to_anchor=(0.5, -0.12),
            fontsize=6,
            ncol=min(len(names), 3),
        )
        figure.suptitle(printable(f"{family} throughput: {suite}"), fontsize=8, y=1.04)
        parts.append(
            f'<figure data-family="{html.escape(family)}" data-suite="{html.escape(suite)}">'
            + image(png(figure), f"{family} throughput per stack: {suite}")
            + "</figure>"
        )
    return (
        "<h2>Throughput per stack version</h2><p>Every higher-is-better metric, by suite and family (GEMM, SDPA, "
        "bandwidth, training, distributed, inference); median per stack, bars span min to max.</p>" + "".join(parts)
    )


SAFE_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,199}")
"""What a hardware slug may be (fingerprint.slugify's alphabet, the store's rule for its folders): it becomes a
folder name under --baselines, so it must not climb out of it ('..', '/', a drive)."""


def _family_order(family: str) -> int:
    return FAMILIES.index(family) if family in FAMILIES else len(FAMILIES)


def plt_patch(colour: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=colour)


def golden_curves(baselines: Path | None, run: Run, curve: CurveData) -> list[tuple[list[float], list[float]]]:
    """The stored runs of ``curve`` in ``baselines``; the path is built from the input file's slug and test id,
    so both are checked to name a file inside the folder before anything is opened."""
    if baselines is None or run.hardware_slug == "unknown-hardware":
        return []
    from pytest_gpuperf.core.store.baselines import StoreError, entry_key, module_file_name, read_document

    if not SAFE_SLUG.fullmatch(run.hardware_slug):
        raise InputError(
            f"{run.source}: hardware_slug {quote(run.hardware_slug)} is not a safe folder name (lowercase letters, "
            "digits and '-'), so it could name a folder outside --baselines; use the file the plugin wrote"
        )
    name = module_file_name(curve.test)
    # The store's own mapping makes one file name of the test's path; whatever alphabet it uses, the name must
    # stay one entry of the slug's folder.
    if not name or name.startswith(".") or any(part in name for part in ("/", "\\", "\0")):
        raise InputError(
            f"{run.source}: test {quote(curve.test)} maps to the baseline file name {quote(name)}, which is not a "
            "safe file name; use the file the plugin wrote"
        )
    path = baselines / run.hardware_slug / name
    if not path.exists():
        return []
    check_regular_file(path)
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
            if curve.name.startswith("pareto."):  # operating points of an inference sweep: drawn as fronts
                continue
            grouped.setdefault((curve.key, curve.name), []).append((run, curve))
    parts = []
    for (_, name), entries in list(grouped.items())[:MAX_PLOTS]:
        figure, axes = plt.subplots(figsize=(5.5, 2.8))
        colours: dict[str, str] = {}
        for run, curve in entries:  # one legend entry per stack, however many runs (seeds) it holds
            stack = labels[run.source]
            first = stack not in colours
            colours.setdefault(stack, f"C{len(colours) % 10}")
            axes.plot(
                curve.steps,
                curve.values,
                linewidth=1.2,
                color=colours[stack],
                label=printable(stack[:60]) if first else None,
            )
        goldens = golden_curves(baselines, entries[-1][0], entries[-1][1])
        for number, (steps, values) in enumerate(goldens):
            axes.plot(steps, values, "k--", linewidth=1, label="golden" if number == 0 else None)
        axes.set_xlabel("step")
        axes.set_ylabel(printable(name))
        axes.set_title(
            printable(f"{entries[-1][1].test} {name}" + ("" if goldens else " (no golden found)")), fontsize=8
        )
        axes.legend(fontsize=6)
        parts.append(image(png(figure), f"{name} curve against golden"))
    if not parts:
        return "<h2>Loss curves</h2><p>No curves in these runs.</p>"
    note = "" if baselines else "<p>No --baselines folder given: curves are shown without goldens.</p>"
    return "<h2>Loss curves against goldens</h2>" + note + "".join(parts)


def pareto_section(runs: list[Run], labels: dict[Path, str]) -> str:
    """Inference sweeps' fronts of tok/s per device against tok/s per user, one line per run (stack), from the
    operating points each sweep records as curves (see pytest_gpuperf.inference.pareto)."""
    import matplotlib.pyplot as plt

    from pytest_gpuperf.inference.pareto import INTERACTIVITY_CURVE, THROUGHPUT_CURVE, OperatingPoint, pareto_front

    sweeps: dict[str, list[tuple[Run, list[OperatingPoint]]]] = {}
    for run in runs:
        by_name = {(curve.key, curve.name): curve for curve in run.curves}
        for (key, name), users in by_name.items():
            devices = by_name.get((key, THROUGHPUT_CURVE))
            if name != INTERACTIVITY_CURVE or devices is None or devices.steps != users.steps:
                continue
            points = [
                OperatingPoint(concurrency=int(c), interactivity=x, throughput=y)
                for c, x, y in zip(users.steps, users.values, devices.values)
            ]
            sweeps.setdefault(key, []).append((run, points))
    parts = []
    for key, entries in list(sweeps.items())[:MAX_PLOTS]:
        figure, axes = plt.subplots(figsize=(5.5, 3.2))
        for run, points in entries:
            front = pareto_front(points)
            (line,) = axes.plot(
                [p.interactivity for p in front],
                [p.throughput for p in front],
                "o-",
                label=printable(f"{run.label} ({labels[run.source]})"[:60]),
            )
            others = [p for p in points if p not in front]
            axes.scatter(
                [p.interactivity for p in others], [p.throughput for p in others], color=line.get_color(), marker="x"
            )
            for point in points:
                axes.annotate(f"c={point.concurrency}", (point.interactivity, point.throughput), fontsize=6)
        axes.set_xlabel("interactivity (tok/s/user)")
        axes.set_ylabel("output tok/s per device")
        axes.set_title(printable(key), fontsize=8)
        axes.legend(fontsize=6)
        parts.append(image(png(figure), f"Pareto front of {key}"))
    if not parts:
        return "<h2>Inference Pareto fronts</h2><p>No inference sweeps in these runs.</p>"
    return "<h2>Inference Pareto fronts</h2>" + "".join(parts)


AB_SCHEMAS = ("gpuperf-ab/1", AB_SCHEMA)
"""The ab.json schemas this report draws: /2 names each session's figures a_figures/b_figures (/1: a_medians,
always medians); the report reads neither list, only the medians of them and the verdicts, which both hold."""


BISECT_SCHEMA = "gpuperf-bisect/1"


COMPARISON_FILES = ("ab.json", "bisect.json")
"""Names `gpuperf ab` and `gpuperf bisect` give their results: such a file is read as a comparison, and a
problem with it is reported as one (not as a results file of the wrong schema)."""


def ab_document(path: Path) -> dict[str, Any] | None:
    """The `gpuperf ab` or `gpuperf bisect` result a path names (its ab.json / bisect.json, or the --out folder
    holding one), checked field by field as the report reads it (cli/loading.py check_ab_document), else None.
    A malformed one is an InputError of one line: strict JSON (no NaN, no key twice, bounded nesting), every
    field the report reads of the type `gpuperf ab` writes."""
    from pytest_gpuperf.cli.loading import (
        check_ab_document,
        check_bisect_document,
        decode_json,
        is_folder,
        read_bytes,
    )

    folder = is_folder(path)
    candidate = path / "ab.json" if folder else path
    if folder and (path / "bisect.json").is_file():
        candidate = path / "bisect.json"
    if candidate.suffix.lower() != ".json" or not candidate.is_file():
        return None
    data = read_bytes(candidate)
    if candidate.name in COMPARISON_FILES:
        document = decode_json(data, candidate)
    else:
        try:
            document = schema.loads(data)
        except SchemaError:
            return None  # not ours: the results loader reports what is wrong with it
    if not isinstance(document, dict):
        if candidate.name in COMPARISON_FILES:
            raise InputError(
                f"{candidate}: the top level is {schema.kind(document)}, not a gpuperf ab or bisect result object; "
                "give the file gpuperf wrote"
            )
        return None
    if document.get("schema") == BISECT_SCHEMA:
        check_bisect_document(document, candidate)
        return document
    if document.get("schema") not in AB_SCHEMAS:
        return None
    check_ab_document(document, candidate)
    return document


def ab_section(document: dict[str, Any], source: str) -> str:
    """A comparison's verdict table and, per metric, each pair's ratio with the threshold band."""
    import matplotlib.pyplot as plt

    command = document.get("command") or {}
    rules = document.get("rules") or {}
    threshold = setting("threshold", recorded=rules)  # the rules ab.json recorded
    header = ["test", "metric", "A median", "B median", "ratio", "interval", "pairs", "verdict", "components"]
    cells: list[list[str]] = []
    plots: list[str] = []
    for metric in document["metrics"]:
        interval = metric.get("interval") or [None, None]
        cells.append([cell_text(metric.get(k)) for k in ("test", "metric", "a_median", "b_median", "ratio")]
                     + [f"[{cell_text(interval[0])}, {cell_text(interval[1])}]", cell_text(metric.get("pairs")),
                        cell_text(metric.get("verdict")), cell_text(metric.get("components"))])  # fmt: skip
        ratios = [math.exp(x) for x in metric.get("log_ratios") or [] if isinstance(x, (int, float))]
        if ratios and len(plots) < MAX_PLOTS:
            figure, axes = plt.subplots(figsize=(6, 2.4))
            axes.axhspan(1 - threshold, 1 + threshold, color="#dbf5d5", label=f"+-{threshold:.1%}")
            axes.plot(range(1, len(ratios) + 1), ratios, "o-", label="pair ratio (B / A, < 1 worse)")
            if metric.get("ratio"):
                axes.axhline(metric["ratio"], color="#444", linestyle="--", label="estimate")
            axes.set_xlabel("pair")
            axes.set_title(f"{metric.get('test')} {metric.get('metric')}: {metric.get('verdict')}", fontsize=9)
            axes.legend(fontsize=7)
            plots.append(image(png(figure), f"pairs of {metric.get('test')} {metric.get('metric')}"))
    changes = "; ".join(document.get("stack_changes") or []) or "none recorded"
    return (
        f"<h2>A/B comparison {html.escape(source)}</h2>"
        f"<p>A: <code>{html.escape(' '.join(command.get('a') or []))}</code>; B: "
        f"<code>{html.escape(' '.join(command.get('b') or []))}</code>; order "
        f"{html.escape(' '.join(document.get('order') or []))}; stopped: {html.escape(str(document.get('stopped')))}; "
        f"stack changes: {html.escape(changes)}</p>" + html_table(header, cells) + "".join(plots) + ab_profile(document)
    )


def bisect_section(document: dict[str, Any], source: str) -> str:
    """A bisection: per metric its verdict line and the search as it went, each step's set and outcome."""
    parts = [
        f"<h2>Bisection {html.escape(source)}</h2><p>good: <code>{html.escape(_pins(document.get('good')))}</code>; "
        f"bad: <code>{html.escape(_pins(document.get('bad')))}</code>; {cell_text(document.get('builds'))} "
        f"build(s), {cell_text(document.get('sessions'))} session(s)</p>"
    ]
    if not document["searches"]:
        parts.append(f"<p>Nothing bisected (good vs bad: {html.escape(cell_text(document.get('good_vs_bad')))}).</p>")
    for search in document["searches"]:
        if not isinstance(search, dict):
            continue
        rows = [
            [cell_text(step.get(k)) for k in ("index", "purpose")]
            + [", ".join(str(n) for n in step.get("swapped") or []) or "(none)"]
            + [cell_text(step.get(k)) for k in ("outcome", "change", "detail")]
            for step in search.get("steps") or []
            if isinstance(step, dict)
        ]
        parts.append(
            f"<h3>{html.escape(cell_text(search.get('test')))} {html.escape(cell_text(search.get('metric')))}</h3>"
            f"<p><b>{html.escape(cell_text(search.get('verdict')))}</b></p>"
            + html_table(["step", "purpose", "bad's components", "outcome", "change", "detail"], rows)
        )
    return "".join(parts)


def _pins(stack: Any) -> str:
    return " ".join(f"{k}=={v}" for k, v in sorted(stack.items())) if isinstance(stack, dict) else ""


def build_report(
    runs: list[Run], *, baselines: Path | None, comparisons: Sequence[tuple[str, dict[str, Any]]] = ()
) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display: render to PNG only
    runs = order_runs(runs)
    labels = stack_labels(runs)
    # Test ids are free text: '$' must stay a dollar sign, not open TeX math that mathtext then fails to parse.
    # Labels are made printable (lone surrogates escaped) where they are drawn; glyphs a font lacks are drawn as
    # boxes, and matplotlib's warning about each is not the user's problem.
    # Overflow while laying out values near the float limit is reported in the page (see png), not as numpy
    # warnings on stderr.
    with (
        matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}),
        warnings.catch_warnings(),
        np.errstate(over="ignore", invalid="ignore"),
    ):
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        parts = [
            bisect_section(document, source)
            if document.get("schema") == BISECT_SCHEMA
            else ab_section(document, source)
            for source, document in comparisons
        ]
        if runs or not comparisons:
            parts += [
                f"<p>{len(runs)} run(s): {', '.join(html.escape(cell_text(run.label)) for run in runs)}</p>",
                rollup_section(runs),
                profile_section(runs),
                ratio_section(runs),
                throughput_section(runs, labels),
                summary_section(runs, labels),
                curves_section(runs, labels, baselines),
                pareto_section(runs, labels),
            ]
    return html_page("gpuperf report", "".join(parts))


def run(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "matplotlib is not installed; install the report extra: pip install 'pytest-gpuperf[report]'"
        ) from None
    runs: list[Run] = []
    comparisons: list[tuple[str, dict[str, Any]]] = []
    for name in args.paths:
        document = ab_document(Path(name))
        if document is not None:  # a `gpuperf ab` result (its sessions are drawn as its pairs), or a bisection
            comparisons.append((name, document))
        else:
            runs.extend(load_path(Path(name)))
    baselines = Path(args.baselines) if args.baselines else None
    if baselines is not None and not baselines.is_dir():
        raise InputError(f"{baselines}: baselines folder not found")
    write_output(build_report(runs, baselines=baselines, comparisons=comparisons), Path(args.output), what="report")
    emit(f"report written: {args.output}\n")
    return 0
