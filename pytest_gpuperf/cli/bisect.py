"""`gpuperf bisect --good SPEC --bad SPEC -- PYTEST_ARGS`: which stack component moved a metric.

Parses the command line, writes bisect.json and JUnit, and prints; it decides nothing. The comparison of good and
bad (ab/engine.py), the search over the components whose pins differ (ab/bisect_search.py), the steps
(ab/bisection.py) and the builders of mixed stacks (ab/builders.py) live in ab/. Exit status: 0 no regression, 1
a regression (the components named), 2 bad input or an error, 128 + the signal when interrupted (130 Ctrl-C, 143
SIGTERM), bisect.json written with the steps so far. Stack specs, builders, placeholders and the cache:
docs/bisect.md.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path
from typing import Any

from pytest_gpuperf.ab.bisect_search import Outcome, SearchResult, verdict_line
from pytest_gpuperf.ab.bisection import Bisection, bisect, bisect_document, summary
from pytest_gpuperf.ab.builders import CachedBuilder, Stack, TemplateError, canonical, pins_text
from pytest_gpuperf.ab.model import AbError, AbResult, document_text
from pytest_gpuperf.cli.ab import EXIT_NOTHING_COMPARED, nothing_compared, plan_from_args, profile_notes, terminal_text
from pytest_gpuperf.cli.loading import InputError
from pytest_gpuperf.cli.output import write_text
from pytest_gpuperf.core.record.children import signals_interrupt

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


def parse_spec(text: str, option: str) -> Stack:
    """A requirements-style file, or ``name==version`` pairs; one line error naming the option and the value."""
    path = Path(text)
    if path.is_file():
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"{option} {text}: cannot be read ({error})") from None
        where = f"{option} {text}"
        items = [(f"{where} line {n}", line.split("#", 1)[0].strip()) for n, line in enumerate(lines, 1)]
    elif "==" in text:
        where = f"{option} {text!r}"
        items = [(where, item) for item in re.split(r"[,\s]+", text.strip())]
    else:
        raise InputError(f"{option} {text!r}: neither a file nor name==version pins (e.g. {option} 'numpy==2.1.0')")
    stack: Stack = {}
    for place, item in items:
        if not item:
            continue
        match = _PIN.match(item)
        if match is None:
            raise InputError(f"{place}: {item!r} is not an exact pin name==version (ranges cannot be bisected)")
        name = canonical(match.group(1))
        if name in stack and stack[name] != match.group(2):
            raise InputError(f"{place}: {name} pinned twice ({stack[name]} and {match.group(2)})")
        stack[name] = match.group(2)
    if not stack:
        raise InputError(f"{option} {text!r}: no pins in it")
    return stack


def run(args: argparse.Namespace) -> int:
    if args.out and ((Path(args.out) / "bisect.json").exists() or (Path(args.out) / "steps").exists()):
        raise InputError(
            f"--out {args.out}: already holds a bisection (bisect.json, steps/); a new run would replace its steps: "
            "give a new --out (the stacks it built are reused with --cache OUT/envs)"
        )
    base = plan_from_args(args, command="bisect")  # the two sides are set per step
    good, bad = parse_spec(args.good, "--good"), parse_spec(args.bad, "--bad")
    if good == bad:
        raise InputError(f"--good {args.good!r} and --bad {args.bad!r} pin the same versions: nothing to bisect")
    chosen = frozenset(_metric(text) for text in args.metric) or None
    out = base.out_dir
    say = lambda line: print(terminal_text(line), file=sys.stderr, flush=True)  # noqa: E731
    cache = Path(args.cache) if args.cache else out / "envs"
    builder = CachedBuilder(cache, args.build, log=say, timeout_s=args.budget)
    bisection = Bisection(good=good, bad=bad, out=out, base=base, builder=builder, say=say, write=_write_json)
    say(f"gpuperf bisect: {len(set(good) | set(bad))} components, results in {out}; {base.take_turns_why}")
    with signals_interrupt() as received:  # SIGTERM (scancel, a CI cancel) and SIGHUP stop it as Ctrl-C does
        try:
            whole, searches = bisect(bisection, chosen)
        except TemplateError as error:
            raise InputError(str(error)) from None
        except AbError as error:
            say(f"gpuperf bisect: error: {error}")
            _write_result(bisection, builder, None, {})
            return 2
        except KeyboardInterrupt:
            number = received[0] if received else signal.SIGINT
            name = signal.Signals(number).name
            say(f"gpuperf bisect: interrupted ({name}); the steps so far are in {out / 'bisect.json'}")
            _write_result(bisection, builder, None, {})
            return 128 + int(number)
    _write_result(bisection, builder, whole, searches)
    if args.junitxml:
        write_junit(bisection, searches, Path(args.junitxml))
    print(bisection.counts(builder.built, builder.failed))
    if not searches:
        print(terminal_text(f"nothing to bisect: the bad stack against the good one: {summary(whole)}"))
        nothing = nothing_compared(whole)
        if nothing:  # not a pass: no metric was judged, so no regression could have been seen
            say(f"gpuperf bisect: nothing compared: {nothing}")
            return EXIT_NOTHING_COMPARED
    for (test, metric), result in searches.items():
        print(terminal_text(verdict_line(f"{test} {metric}", result, good, bad)))
    for line in last_step_lines(bisection, searches):
        print(terminal_text(line))
    return 1 if whole.regressed() else 0


def last_step_lines(bisection: Bisection, searches: dict[tuple[str, str], SearchResult]) -> list[str]:
    """Under the verdict lines, what each profiled last step (``--profile``) says moved, as under `gpuperf ab
    --profile`'s table; a step that two searches share, once."""
    profiled: list[AbResult] = []
    for result in searches.values():
        last = bisection.runs.get(result.culprits)
        if isinstance(last, AbResult) and last.profile is not None and all(last is not p for p in profiled):
            profiled.append(last)
    return [line for last in profiled for line in [f"last step {last.plan.out_dir}, profiled:", *profile_notes(last)]]


def _metric(text: str) -> tuple[str, str]:
    test, sep, metric = text.rpartition("::")
    if not sep or not test or not metric:
        raise InputError(
            f"--metric {text!r}: give TEST::METRIC, e.g. --metric tests/perf/test_step.py::test_step::step_s"
        )
    return test, metric


def _write_result(
    bisection: Bisection, builder: CachedBuilder, whole: AbResult | None, searches: dict[tuple[str, str], SearchResult]
) -> None:
    document = bisect_document(
        bisection, builder.built, whole, searches, failed_builds=builder.failed, warnings=builder.warnings
    )
    _write_json(bisection.out / "bisect.json", document)


def write_junit(bisection: Bisection, searches: dict[tuple[str, str], SearchResult], path: Path) -> None:
    """One testcase per bisected metric: a failure whose message is the verdict line, the culprits as a property."""
    from junitparser import Failure, JUnitXml, Properties, Property, TestCase, TestSuite

    from pytest_gpuperf.cli.loading import junit_address

    suite = TestSuite("gpuperf-bisect")
    suite.add_property("gpuperf.bisect.good", " ".join(pins_text(bisection.good)))
    suite.add_property("gpuperf.bisect.bad", " ".join(pins_text(bisection.bad)))
    suite.add_property("gpuperf.bisect.sessions", str(bisection.sessions))
    for (test, metric), result in searches.items():
        classname, _, name = junit_address(test).partition("::")
        case = TestCase(f"{name}[{metric}]", classname=classname)
        properties = Properties()
        properties.add_property(Property("gpuperf.bisect.culprits", " ".join(sorted(result.culprits))))
        properties.add_property(Property("gpuperf.bisect.conclusion", result.conclusion))
        properties.add_property(Property("gpuperf.bisect.steps", str(len(result.steps))))
        case.append(properties)
        if result.target is Outcome.REGRESSED:
            case.result = [Failure(verdict_line(f"{test} {metric}", result, bisection.good, bisection.bad))]
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    xml.write(str(path))


def _write_json(path: Path, document: dict[str, Any]) -> None:
    """Strict JSON (ab/model.py document_text): a figure that is not finite is written as null, never NaN."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, document_text(document), what="bisection result", hint="give another --out")
