"""`gpuperf ab --a CMD_A --b CMD_B -- PYTEST_ARGS`: two stacks compared interleaved on one machine.

A thin layer over ab/engine.py: parses the command line, prints a progress line per pair and the final
table (~120 columns), writes ab.json under --out and JUnit with --junitxml. Exit status 0 when nothing
REGRESSED, 1 when something did, 2 on bad input or a comparison that could not go on, 3 when it compared nothing
(every pair stopped by --budget, no metric both sides measured), 128 + the signal when interrupted (130 for
Ctrl-C, 143 for SIGTERM): a CI gate `gpuperf ab ... || fail` must not pass a comparison that never happened.

Everything printed that a side wrote (its log's last line, test ids, metric names, stack versions) goes through
``terminal_text``: a side's output must not rewrite the terminal with escape sequences.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from pytest_gpuperf.ab.cpus import cpu_text
from pytest_gpuperf.ab.engine import run_ab
from pytest_gpuperf.ab.model import (
    MAX_BUDGET_S,
    MAX_PAIR_COUNT,
    AbError,
    AbPlan,
    AbResult,
    MetricOutcome,
    document_text,
)
from pytest_gpuperf.ab.turns import PINNED, UNPINNED, pinned_by_default, turns_by_default
from pytest_gpuperf.cli.loading import InputError, junit_address
from pytest_gpuperf.cli.option_defaults import given
from pytest_gpuperf.cli.output import printable, write_text
from pytest_gpuperf.core.record.children import signals_interrupt
from pytest_gpuperf.core.verdict.vocabulary import Verdict

WIDTH = 120
EXIT_NOTHING_COMPARED = 3
"""Exit status of a comparison that judged no pair of any metric: not a pass (0), not a regression (1), not bad
input (2). An interrupted comparison exits 128 + the signal's number, as a shell reports it."""
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    """``text`` safe to print: control characters (escape sequences, carriage returns, newlines, bidirectional
    overrides) as their ``\\xNN`` / ``\\uNNNN`` escapes, lone surrogates as theirs."""
    escaped = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)
    return printable(escaped)


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
    for option in ("min_pairs", "max_pairs", "max_left_out", "max_dropped"):
        value = getattr(args, option)
        if value is not None and value > MAX_PAIR_COUNT:
            shown = str(value) if len(str(value)) <= 20 else f"of {len(str(value))} digits"
            raise InputError(
                f"--{option.replace('_', '-')} {shown}: at most {MAX_PAIR_COUNT} pairs (a comparison of "
                f"{MAX_PAIR_COUNT} pairs takes hours); give a smaller number, with --budget to bound the time"
            )
    if args.budget is not None and not args.budget <= MAX_BUDGET_S:
        raise InputError(
            f"--budget of {args.budget:.3g} s: at most {MAX_BUDGET_S:.0f} s (a year); give a duration such as 15m "
            "or 2h, or leave --budget out for no time limit"
        )
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
    cpus, widen = args.cpus or None, None
    if take_turns and args.cpus is None and (pinned := pinned_by_default()) is not None:
        cpus, widen = pinned
        turns_why = f"{turns_why}; " + PINNED.format(cpu=cpu_text(cpus), every=cpu_text(widen))
    elif take_turns and args.cpus == frozenset():
        turns_why = f"{turns_why}; {UNPINNED}"
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    repeats: dict[str, Any] = {} if args.repeats is None else {"repeats": args.repeats or None}  # 0: the suite's own
    plan = AbPlan(
        cmd_a=cmd_a,
        cmd_b=cmd_b,
        pytest_args=tuple(pytest_args),
        out_dir=Path(args.out) if args.out else Path(f"gpuperf-{command}") / stamp,
        threshold=args.threshold,
        max_left_out=args.max_left_out,
        budget_s=args.budget,
        **given(
            args,
            min_pairs="min_pairs",
            max_pairs="max_pairs",
            alpha="alpha",
            seed="seed",
            max_dropped="max_dropped",
            session_figure="session_figure",
        ),
        **repeats,
        take_turns=take_turns,
        take_turns_why=turns_why,
        profile=bool(getattr(args, "profile", False)),
        cpus=cpus,
        widen_cpus=widen,
    )
    if plan.min_pairs > plan.max_pairs:
        raise InputError(f"--min-pairs {plan.min_pairs} is more than --max-pairs {plan.max_pairs}")
    return plan


def run(args: argparse.Namespace) -> int:
    plan = plan_from_args(args, command="ab", cmd_a=split_command(args.a, "--a"), cmd_b=split_command(args.b, "--b"))
    out = plan.out_dir
    say(
        f"gpuperf ab: A = {shlex.join(plan.cmd_a)}; B = {shlex.join(plan.cmd_b)}; sessions in {out}; "
        f"{plan.take_turns_why}"
    )
    with signals_interrupt() as received:
        try:
            result = run_ab(plan, progress=say)
        except AbError as error:
            if error.result is not None:
                _write(error.result, args)
            say(f"gpuperf ab: error: {error}")
            return 2
    _write(result, args)
    print("\n".join(terminal_text(line) for line in table(result)))
    if result.stopped == "interrupted":
        number = received[0] if received else signal.SIGINT
        name = signal.Signals(number).name
        say(
            f"gpuperf ab: interrupted ({name}) after {result.complete_pairs} complete pair(s): not a pass; the "
            f"verdicts so far are above and in {out / 'ab.json'}"
        )
        return 128 + int(number)
    nothing = nothing_compared(result)
    if nothing:
        say(f"gpuperf ab: nothing compared: {nothing}")
        return EXIT_NOTHING_COMPARED
    return 1 if result.regressed() else 0


def say(line: str) -> None:
    """A line on stderr (the first line, progress, errors): what a side wrote is in it, so it is escaped."""
    print(terminal_text(line), file=sys.stderr, flush=True)


def nothing_compared(result: AbResult) -> str | None:
    """Why no metric had a single pair judged, with what to do, or None when something was compared."""
    measured = [m for m in result.judged() if not m.missing]
    if any(m.log_ratios for m in measured):
        return None
    if result.complete_pairs == 0:
        if result.stopped == "budget":
            budget = result.plan.budget_s or 0.0
            return (
                f"--budget {budget:g} s ran out before any pair completed (each session was stopped, "
                f"{len(result.pairs)} pair(s) started); give a longer --budget, or select fewer tests"
            )
        return f"no pair completed (stopped: {result.stopped}); see the sessions' logs in {result.plan.out_dir}"
    if not measured:
        return (
            f"no metric was recorded by both sides in {result.complete_pairs} pair(s); check that PYTEST_ARGS select "
            "the same perf tests on both stacks"
        )
    first = next((m for m in measured if m.contended), None)
    cause = f" ({first.contended[0]})" if first is not None else ""
    return (
        f"every pair was left out of every metric, the machine not itself{cause}; run on a quieter machine, or "
        "pass --gpuperf-machine-check off among PYTEST_ARGS to judge every pair"
    )


def _write(result: AbResult, args: argparse.Namespace) -> None:
    path = result.plan.out_dir / "ab.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, document_text(result.as_dict()), what="comparison (ab.json)", hint="give another --out")
    if args.junitxml:
        write_junit(result, Path(args.junitxml))


# -- the table -------------------------------------------------------------------------------------------------

# (heading, widest cell); the last column takes what is left of WIDTH, and the notes under the table name each
# differing component in full ("torch 2.13.0 -> 2.14.1").
COLUMNS = (("test", 28), ("metric", 14), ("A median", 9), ("B median", 9), ("ratio", 5), ("interval", 14),
           ("pairs", 5), ("verdict", 9), ("components", 0))  # fmt: skip


def level(confidence: float) -> str:
    """A confidence level as a percentage that never rounds up to 100%: 0.99 -> '99%', 1 - 0.01/6 -> '99.83%'."""
    for digits in range(7):
        shown = f"{confidence * 100:.{digits}f}"
        if float(shown) < 100 and abs(float(shown) - confidence * 100) < 0.005:
            return shown + "%"
    return "> 99.999999%"


def table(result: AbResult) -> list[str]:
    rules = result.rules
    rows = [[terminal_text(cell) for cell in _row(metric)] for metric in result.judged()]  # widths as printed
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
            f"{level(1 - rules.alpha)} sequential for REGRESSED/IMPROVED, {level(1 - 2 * rules.equivalence_alpha)} "
            "for PASS/AMBIGUOUS"
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
    return lines + [terminal_text(note) for note in notes + profile_notes(result)]


def profile_notes(result: AbResult) -> list[str]:
    """Under the verdict, what the profiled sessions (one per side, never judged) say moved."""
    profile = result.profile
    if profile is None:
        return []
    from pytest_gpuperf.core.record.profiling import mover_lines

    notes = []
    if profile.get("error"):
        notes.append(f"profiled sessions: {profile['error']}")
    diff = profile.get("diff")
    if diff is not None:
        movers = mover_lines(diff)
        where = f"whole diff in {result.plan.out_dir / 'ab.json'} (profile)"
        notes += movers or [f"profiled sessions: no operator moved in a test whose metric changed; {where}"]
        notes += [f"profiled sessions: {note}" for note in diff.get("notes", [])]
        if movers:
            notes.append(f"profiled sessions: one per side after the verdict, never judged; {where}")
    return notes


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
