"""`gpuperf ab --a CMD_A --b CMD_B -- PYTEST_ARGS`: two stacks compared interleaved on one machine.

A thin layer over cli/ab_engine.py: parses the command line, prints a progress line per pair and the final
table (~120 columns), writes ab.json under --out and JUnit with --junitxml. Exit status 0 when nothing
REGRESSED, 1 when something did, 2 on bad input or a comparison that could not go on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import shutil
import sys
from pathlib import Path

from pytest_gpuperf.cli.ab_engine import AbError, AbPlan, AbResult, MetricOutcome, run_ab
from pytest_gpuperf.cli.ab_turns import UNPINNED, turns_by_default
from pytest_gpuperf.cli.loading import InputError, junit_address
from pytest_gpuperf.core.stats import Verdict

WIDTH = 120


def split_command(text: str, option: str) -> tuple[str, ...]:
    """A command prefix split like a shell would (never run through one); its program must exist."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as error:
        raise InputError(f"{option} {text!r}: cannot be split into words ({error})") from None
    if not argv:
        raise InputError(f"{option} is empty: give a Python as a command prefix, e.g. {option} .venv/bin/python")
    if shutil.which(argv[0]) is None:
        raise InputError(f"{option} {text!r}: {argv[0]!r} is not an executable command (not found on PATH)")
    return argv


def plan_from_args(
    args: argparse.Namespace, *, command: str, cmd_a: tuple[str, ...] = (), cmd_b: tuple[str, ...] = ()
) -> AbPlan:
    """The comparison the ab options on the command line ask for (`gpuperf ab` and each `gpuperf bisect` step);
    refuses PYTEST_ARGS that name nothing and a pair range that is empty. ``command`` names the default --out."""
    if args.min_pairs > args.max_pairs:
        raise InputError(f"--min-pairs {args.min_pairs} is more than --max-pairs {args.max_pairs}")
    pytest_args = [arg for arg in args.pytest_args if arg != "--"]
    if not pytest_args:
        raise InputError(
            "no PYTEST_ARGS: name what each session runs after --, e.g. -- pytest_gpuperf/suites/test_micro.py -m perf"
        )
    if args.take_turns is None:
        take_turns, turns_why = turns_by_default(pytest_args, [cmd_a, cmd_b])
    else:
        take_turns = args.take_turns
        turns_why = "taking turns (--take-turns)" if take_turns else "one session after the other (--no-take-turns)"
    if take_turns and args.cpus is None:
        turns_why = f"{turns_why}; {UNPINNED}"
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return AbPlan(
        cmd_a=cmd_a,
        cmd_b=cmd_b,
        pytest_args=tuple(pytest_args),
        out_dir=Path(args.out) if args.out else Path(f"gpuperf-{command}") / stamp,
        threshold=args.threshold,
        min_pairs=args.min_pairs,
        max_pairs=args.max_pairs,
        max_left_out=args.max_left_out,
        alpha=args.alpha,
        budget_s=args.budget,
        seed=args.seed,
        repeats=args.repeats or None,
        max_dropped=args.max_dropped,
        session_figure=args.session_figure,
        take_turns=take_turns,
        take_turns_why=turns_why,
        cpus=args.cpus,
    )


def run(args: argparse.Namespace) -> int:
    plan = plan_from_args(args, command="ab", cmd_a=split_command(args.a, "--a"), cmd_b=split_command(args.b, "--b"))
    out = plan.out_dir
    print(
        f"gpuperf ab: A = {shlex.join(plan.cmd_a)}; B = {shlex.join(plan.cmd_b)}; sessions in {out}; "
        f"{plan.take_turns_why}",
        file=sys.stderr,
    )
    try:
        result = run_ab(plan, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except AbError as error:
        if error.result is not None:
            _write(error.result, args)
        print(f"gpuperf ab: error: {error}", file=sys.stderr)
        return 2
    _write(result, args)
    print("\n".join(table(result)))
    return 1 if result.regressed() else 0


def _write(result: AbResult, args: argparse.Namespace) -> None:
    path = result.plan.out_dir / "ab.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.as_dict(), indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    if args.junitxml:
        write_junit(result, Path(args.junitxml))


# -- the table -------------------------------------------------------------------------------------------------

# (heading, widest cell); the last column takes what is left of WIDTH, and the notes under the table name each
# differing component in full ("torch 2.13.0 -> 2.14.1").
COLUMNS = (("test", 28), ("metric", 14), ("A median", 9), ("B median", 9), ("ratio", 5), ("interval", 14),
           ("pairs", 5), ("verdict", 9), ("components", 0))  # fmt: skip


def table(result: AbResult) -> list[str]:
    rules = result.rules
    rows = [_row(metric) for metric in result.judged()]
    natural = [max([len(name)] + [len(row[i]) for row in rows]) for i, (name, _) in enumerate(COLUMNS)]
    widths = [min(w, limit) if limit else w for w, (_, limit) in zip(natural, COLUMNS)]
    separators = 2 * (len(COLUMNS) - 1)
    # The test id gets what the other columns leave of WIDTH (never less than its limit), components the rest.
    others = sum(widths[1:-1]) + separators
    widths[0] = max(widths[0], min(natural[0], WIDTH - others - min(natural[-1], 24)))
    widths[-1] = max(len(COLUMNS[-1][0]), WIDTH - others - widths[0])
    rows = [row[:-1] + [_fit(row[-1], widths[-1])] for row in rows]
    lines = ["  ".join(name.ljust(w) for (name, _), w in zip(COLUMNS, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(_fit(cell, w, left=i == 0) for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
    counts: dict[str, int] = {}
    for metric in result.judged():
        name = "MISSING" if metric.missing else metric.verdict.value
        counts[name] = counts.get(name, 0) + 1
    notes = [
        f"{result.complete_pairs} pair(s) in {result.wall_s:.0f} s, {len(result.dropped_pairs)} dropped; stopped: "
        f"{result.stopped}; order {''.join(p.order[0] for p in result.pairs) or '-'} (first side of each pair)",
    ]
    if rules is not None:
        notes.append(
            f"threshold {rules.threshold:.1%}; ratio = B's performance / A's (< 1 is worse); interval: "
            f"{1 - rules.alpha:.0%} sequential for REGRESSED/IMPROVED, {1 - 2 * rules.equivalence_alpha:.0%} for "
            "PASS/AMBIGUOUS"
        )
    notes.append(", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "no metrics compared")
    for pair in result.dropped_pairs:
        notes.append(f"dropped pair {pair.index} ({pair.order}): {pair.dropped}")
    changes = result.stack_changes
    for metric in result.judged():
        if metric.missing or metric.verdict not in (Verdict.REGRESSED, Verdict.IMPROVED):
            continue
        assert metric.judgement is not None and metric.judgement.ratio is not None
        change = metric.judgement.ratio - 1
        comes_with = "; ".join(changes) if changes else "no recorded component (the difference lies outside the "
        "fingerprint: environment variables, command line)"
        notes.append(
            f"{metric.test} {metric.metric}: {metric.verdict.value} {change:+.1%}; interleaved A/B confirms it comes "
            f"with: {comes_with}"
        )
    for metric in result.judged():
        if not metric.missing and metric.verdict is Verdict.AMBIGUOUS and metric.judgement is not None:
            needed = metric.judgement.needed_pairs
            notes.append(
                f"{metric.test} {metric.metric}: AMBIGUOUS after {metric.judgement.pairs} pairs ("
                f"{metric.reason()}); "
                + (f"~{needed} pairs would decide it if the change held" if needed else "no number of pairs would")
            )
    return lines + notes


def _row(metric: MetricOutcome) -> list[str]:
    data = metric.as_dict()
    low, high = data["interval"]
    judgement = metric.judgement
    verdict = data["verdict"]
    names = [change.split(" ", 1)[0] for change in metric.components]
    return [
        metric.test,
        metric.metric,
        _value(data["a_median"], metric.unit),
        _value(data["b_median"], metric.unit),
        f"{judgement.ratio:.3f}" if judgement and judgement.ratio is not None else "-",
        f"[{_bound(low)}, {_bound(high)}]" if judgement else "-",
        str(data["pairs"]),
        verdict,
        ", ".join(names) if verdict in ("REGRESSED", "IMPROVED") else "",
    ]


def _bound(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
            if value >= scale:
                return f"{value / scale:.3g} {suffix}"
        return f"{value:.3g} s"
    return f"{value:.4g}"


def _fit(cell: str, width: int, *, left: bool = False) -> str:
    if len(cell) <= width:
        return cell.ljust(width)
    if left:  # a test id: its end (the test's name and parameters) says more than its folder
        return ("..." + cell[-(width - 3) :]).ljust(width)
    return cell[: width - 3] + "..."


# -- JUnit -----------------------------------------------------------------------------------------------------


def write_junit(result: AbResult, path: Path) -> None:
    """One testcase per metric (REGRESSED a failure), the comparison's sides and changes as suite properties."""
    from junitparser import Failure, JUnitXml, Properties, Property, TestCase, TestSuite

    suite = TestSuite("gpuperf-ab")
    suite.add_property("gpuperf.ab.a", shlex.join(result.plan.cmd_a))
    suite.add_property("gpuperf.ab.b", shlex.join(result.plan.cmd_b))
    suite.add_property("gpuperf.ab.order", " ".join(pair.order for pair in result.pairs))
    suite.add_property("gpuperf.ab.stopped", result.stopped)
    suite.add_property("gpuperf.ab.stack_changes", "; ".join(result.stack_changes))
    for metric in result.judged():
        data = metric.as_dict()
        classname, _, name = junit_address(metric.test).partition("::")
        case = TestCase(f"{name}[{metric.metric}]", classname=classname)
        properties = Properties()
        for key in ("verdict", "ratio", "interval", "pairs", "a_median", "b_median", "needed_pairs", "reason"):
            value = data[key]
            properties.add_property(
                Property(f"gpuperf.ab.{key}", json.dumps(value) if key == "interval" else str(value))
            )
        if metric.components:
            properties.add_property(Property("gpuperf.ab.components", "; ".join(metric.components)))
        case.append(properties)
        if data["verdict"] == "REGRESSED":
            case.result = [Failure(f"REGRESSED: ratio {data['ratio']:.4f}, {data['reason']}")]
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    xml.write(str(path))
