"""`gpuperf bisect --good SPEC --bad SPEC -- PYTEST_ARGS`: which stack component moved a metric.

A stack spec is a set of pins: a requirements-style file (``name==version`` lines, ``#`` comments) or the pins
themselves (``'torch==2.13.0 numpy==2.1.0'``, comma or space separated). First the good stack and the bad one are
compared with the `gpuperf ab` engine (ab/engine.py); every metric that REGRESSED (or the --metric ones) is
then bisected by ab/bisect_search.py, each step an ab run of a mixed stack against the good one on those metrics
only. Mixed stacks come from a builder:

- default: a venv layered on the running environment (``python -m venv --system-site-packages`` plus a .pth that
  adds the running environment's site-packages after the venv's own, so pytest and this plugin come from it),
  the pins pip-installed on top (pip's configuration and PIP_* variables apply: PIP_INDEX_URL, PIP_FIND_LINKS,
  PIP_NO_INDEX, ...). Each environment is cached by its pin set under --cache (default OUT/envs).
- ``--build TEMPLATE``: a shell command with placeholders {pins} (the pins, shell-quoted, space separated),
  {requirements} (a file holding them, one a line), {dir} (an empty folder for this stack) and {python} (the
  running Python). After it exits 0, the stack's command prefix is the first line of {dir}/gpuperf-python when
  the template wrote one (e.g. ``docker run --rm img:tag python``), else {dir}/bin/python.

A build that fails (a pip conflict) is UNBUILDABLE and the search goes on around it. Exit status: 0 when the bad
stack does not regress, 1 when it does (the verdict lines say which components), 2 on bad input or an error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import re
import shlex
import site
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.ab.bisect_search import (
    Outcome,
    SearchResult,
    Step,
    Trial,
    differing_components,
    is_swappable,
    search,
    verdict_line,
)
from pytest_gpuperf.ab.engine import AbError, run_ab
from pytest_gpuperf.ab.model import AbPlan, AbResult, document_text
from pytest_gpuperf.ab.pairs.sequential import SessionRunner, subprocess_runner
from pytest_gpuperf.cli.ab import plan_from_args, terminal_text
from pytest_gpuperf.cli.loading import InputError
from pytest_gpuperf.cli.output import write_text
from pytest_gpuperf.core.stats.unpaired import Verdict

BISECT_SCHEMA = "gpuperf-bisect/1"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")

Stack = dict[str, str]


def canonical(name: str) -> str:
    """PEP 503 normalised name: 'Torch_Audio' and 'torch-audio' are one component."""
    return re.sub(r"[-_.]+", "-", name).lower()


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


def mixed_stack(good: Mapping[str, str], bad: Mapping[str, str], swapped: frozenset[str]) -> Stack:
    """The good stack with the ``swapped`` components at the bad stack's version (dropped where bad lacks one)."""
    stack = {name: version for name, version in good.items() if name not in swapped and is_swappable(name)}
    stack.update({name: bad[name] for name in swapped if name in bad})
    return dict(sorted(stack.items()))


def pins_text(stack: Mapping[str, str]) -> list[str]:
    return [f"{name}=={version}" for name, version in sorted(stack.items())]


# -- builders --------------------------------------------------------------------------------------------------


class BuildError(Exception):
    """The stack cannot be built (pip conflict, a failing template): the step is UNBUILDABLE."""


Builder = Callable[[Stack], tuple[str, ...]]
"""Materialises a stack, returns its Python as a command prefix; raises BuildError."""


@dataclass(slots=True)
class CachedBuilder:
    """Builds each pin set once into cache/<hash>; a folder holding 'gpuperf-built' is reused."""

    cache: Path
    template: str | None = None
    built: int = 0
    """Builds run by this process (cache hits not counted)."""
    log: Callable[[str], None] = field(default=lambda line: None)

    def __call__(self, stack: Stack) -> tuple[str, ...]:
        pins = pins_text(stack)
        key = hashlib.sha256("\n".join([sys.executable, self.template or "", *pins]).encode()).hexdigest()[:16]
        folder = self.cache / key
        done = folder / "gpuperf-built"
        failed = folder / "gpuperf-unbuildable"
        if failed.is_file():
            raise BuildError(failed.read_text(encoding="utf-8").strip())
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "requirements.txt").write_text("\n".join(pins) + "\n", encoding="utf-8")
            self.built += 1
            self.log(f"  build {folder}: {' '.join(pins)}")
            try:
                if self.template is None:
                    _build_venv(folder, pins)
                else:
                    _build_template(folder, pins, self.template)
            except BuildError as error:
                failed.write_text(f"{error}\n", encoding="utf-8")
                raise
            done.write_text("\n".join(pins) + "\n", encoding="utf-8")
        return _prefix(folder)


def _prefix(folder: Path) -> tuple[str, ...]:
    pointer = folder / "gpuperf-python"
    if pointer.is_file():
        line = pointer.read_text(encoding="utf-8").strip().splitlines()
        if line:
            return tuple(shlex.split(line[0]))
    python = folder / "bin" / "python"
    if not python.exists():
        raise BuildError(f"{folder}: the build left neither gpuperf-python nor bin/python")
    return (str(python),)


def _run_logged(argv: list[str], log_file: Path, *, shell: bool = False) -> None:
    with log_file.open("ab") as log:
        code = subprocess.run(
            argv if not shell else argv[0], stdout=log, stderr=subprocess.STDOUT, shell=shell
        ).returncode
    if code != 0:
        tail = [line for line in log_file.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        reason = next((line.strip() for line in reversed(tail) if "ERROR" in line), tail[-1].strip() if tail else "")
        raise BuildError(f"exit {code}: {reason[:300]} (log {log_file})")


def _build_venv(folder: Path, pins: list[str]) -> None:
    """A venv that sees the running environment's packages after its own, the pins installed into it."""
    log = folder / "build.log"
    venv = folder
    _run_logged([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], log)
    python = venv / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    layers = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    seen: list[str] = []
    for path in layers:
        if path not in seen and Path(path).is_dir() and Path(path) != Path(own):
            seen.append(path)
    # An `import` line of a .pth runs at start-up: addsitedir also reads the running env's own .pth files
    # (editable installs), and appends, so what the pins install in the venv comes first.
    (Path(own) / "zz-gpuperf-layer.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({path!r})" for path in seen) + "\n", encoding="utf-8"
    )
    _run_logged([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *pins], log)


def _build_template(folder: Path, pins: list[str], template: str) -> None:
    values = {
        "pins": " ".join(shlex.quote(pin) for pin in pins),
        "requirements": shlex.quote(str(folder / "requirements.txt")),
        "dir": shlex.quote(str(folder)),
        "python": shlex.quote(sys.executable),
    }
    try:
        command = template.format(**values)
    except (KeyError, IndexError, ValueError) as error:
        raise InputError(
            f"--build {template!r}: bad placeholder ({error}); use {{pins}} {{requirements}} {{dir}} {{python}}"
        ) from None
    _run_logged([command], folder / "build.log", shell=True)


# -- the bisection ---------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Bisection:
    good: Stack
    bad: Stack
    out: Path
    base: AbPlan
    """cmd_a/cmd_b/out_dir are replaced per step; rules, pairs, pytest args and metrics come from it."""
    builder: Builder
    runner: SessionRunner = subprocess_runner
    say: Callable[[str], None] = field(default=lambda line: None)
    runs: dict[frozenset[str], AbResult | str] = field(default_factory=dict)
    """Each mixed stack's ab result, or why it could not be built."""
    sessions: int = 0

    def ab(self, swapped: frozenset[str], metrics: frozenset[tuple[str, str]] | None) -> AbResult | str:
        if swapped in self.runs:
            return self.runs[swapped]
        name = "-".join(sorted(swapped)) or "good"
        index = len(self.runs) + 1
        try:
            cmd_a = self.builder(self.good)
            cmd_b = self.builder(mixed_stack(self.good, self.bad, swapped))
        except BuildError as error:
            self.runs[swapped] = str(error)
            return str(error)
        plan = _replace(self.base, cmd_a=cmd_a, cmd_b=cmd_b, out_dir=self.out / "steps" / f"{index:02d}-{name}"[:80])
        plan = _replace(plan, metrics=metrics)
        try:
            result = run_ab(plan, runner=self.runner)
        except AbError as error:
            # a stack whose sessions keep failing cannot be judged: the search treats it as unbuildable
            if error.result is not None:
                self.sessions += sum(len(pair.sessions) for pair in error.result.pairs)
                _write_json(plan.out_dir / "ab.json", error.result.as_dict())
            self.runs[swapped] = f"its sessions cannot run: {error}"
            return self.runs[swapped]
        self.sessions += sum(len(pair.sessions) for pair in result.pairs)
        _write_json(plan.out_dir / "ab.json", result.as_dict())
        self.runs[swapped] = result
        if result.stopped == "interrupted":
            raise KeyboardInterrupt  # Ctrl-C ends the bisection, not only this step
        return result


def _replace(plan: AbPlan, **changes: Any) -> AbPlan:
    import dataclasses

    return dataclasses.replace(plan, **changes)


def trial_of(result: AbResult | str, key: tuple[str, str]) -> Trial:
    if isinstance(result, str):
        return Trial(Outcome.UNBUILDABLE, detail=result)
    metric = result.metrics.get(key)
    folder = str(result.plan.out_dir)
    if metric is None or metric.missing or metric.judgement is None:
        return Trial(Outcome.AMBIGUOUS, detail=f"not measured ({folder})")
    verdict = metric.verdict
    outcome = {
        Verdict.PASS: Outcome.SAME,
        Verdict.REGRESSED: Outcome.REGRESSED,
        Verdict.IMPROVED: Outcome.IMPROVED,
    }.get(verdict, Outcome.AMBIGUOUS)
    ratio = metric.judgement.ratio
    return Trial(outcome, None if ratio is None else ratio - 1, folder)


def step_line(key: tuple[str, str], step: Step) -> str:
    swapped = ", ".join(sorted(step.swapped)) or "(none)"
    change = "" if step.trial.change is None else f" {step.trial.change:+.1%}"
    extra = f" [{step.trial.detail}]" if step.trial.outcome is Outcome.UNBUILDABLE else ""
    outcome = step.trial.outcome.value
    return f"step {step.index} {key[0]} {key[1]}: bad's {swapped} ({step.purpose}) -> {outcome}{change}{extra}"


def bisect(
    bisection: Bisection, chosen: frozenset[tuple[str, str]] | None
) -> tuple[AbResult, dict[tuple[str, str], SearchResult]]:
    """The good-vs-bad run, then one search per regressed (or chosen) metric, sharing every step's ab run."""
    differing = differing_components(bisection.good, bisection.bad)
    whole = bisection.ab(frozenset(name for name in differing if is_swappable(name)), chosen)
    if isinstance(whole, str):
        raise AbError(f"the good-vs-bad comparison: {whole}")
    if whole.plan.cmd_a == whole.plan.cmd_b:
        raise AbError("the good and the bad stack build the same pins (only non-swappable components differ)")
    bisection.say(f"good vs bad: {_summary(whole)} (sessions in {whole.plan.out_dir})")
    keys = sorted(chosen) if chosen else [(m.test, m.metric) for m in whole.judged() if m.verdict is Verdict.REGRESSED]
    searches: dict[tuple[str, str], SearchResult] = {}
    full_key = next(iter(bisection.runs))
    metrics = frozenset(keys)
    for key in keys:

        def judge(swapped: frozenset[str], key: tuple[str, str] = key) -> Trial:
            return trial_of(bisection.ab(swapped, metrics), key)

        def report(step: Step, key: tuple[str, str] = key) -> None:
            bisection.say(step_line(key, step))

        full = trial_of(bisection.runs[full_key], key)
        searches[key] = search(bisection.good, bisection.bad, judge, full=full, on_step=report)
    return whole, searches


def _summary(result: AbResult) -> str:
    counts: dict[str, int] = {}
    for metric in result.judged():
        name = "MISSING" if metric.missing else metric.verdict.value
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "no metrics"


def run(args: argparse.Namespace) -> int:
    base = plan_from_args(args, command="bisect")  # the two sides are set per step
    good, bad = parse_spec(args.good, "--good"), parse_spec(args.bad, "--bad")
    if good == bad:
        raise InputError(f"--good {args.good!r} and --bad {args.bad!r} pin the same versions: nothing to bisect")
    chosen = frozenset(_metric(text) for text in args.metric) or None
    out = base.out_dir
    say = lambda line: print(terminal_text(line), file=sys.stderr, flush=True)  # noqa: E731
    builder = CachedBuilder(Path(args.cache) if args.cache else out / "envs", args.build, log=say)
    bisection = Bisection(good=good, bad=bad, out=out, base=base, builder=builder, say=say)
    say(f"gpuperf bisect: {len(set(good) | set(bad))} components, results in {out}; {base.take_turns_why}")
    try:
        whole, searches = bisect(bisection, chosen)
    except AbError as error:
        say(f"gpuperf bisect: error: {error}")
        _write_result(bisection, builder, None, {})
        return 2
    except KeyboardInterrupt:
        print(f"gpuperf bisect: interrupted; the steps so far are in {out / 'bisect.json'}", file=sys.stderr)
        _write_result(bisection, builder, None, {})
        return 130
    _write_result(bisection, builder, whole, searches)
    if args.junitxml:
        write_junit(bisection, searches, Path(args.junitxml))
    print(f"{builder.built} build(s), {len(bisection.runs)} ab run(s), {bisection.sessions} session(s)")
    if not searches:
        print(terminal_text(f"nothing to bisect: the bad stack against the good one: {_summary(whole)}"))
    for (test, metric), result in searches.items():
        print(terminal_text(verdict_line(f"{test} {metric}", result, good, bad)))
    return 1 if whole.regressed() else 0


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
    runs = {
        ",".join(sorted(swapped)) or "(none)": (
            {"unbuildable": value}
            if isinstance(value, str)
            else {"out_dir": str(value.plan.out_dir), "ab": value.as_dict()}
        )
        for swapped, value in bisection.runs.items()
    }
    document = {
        "schema": BISECT_SCHEMA,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "good": bisection.good,
        "bad": bisection.bad,
        "builds": builder.built,
        "sessions": bisection.sessions,
        "good_vs_bad": None if whole is None else _summary(whole),
        "searches": [
            {
                "test": test,
                "metric": metric,
                "verdict": verdict_line(f"{test} {metric}", result, bisection.good, bisection.bad),
                **result.as_dict(),
            }
            for (test, metric), result in searches.items()
        ],
        "runs": runs,
    }
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
