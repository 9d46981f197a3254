"""Confirmation: a test whose metrics look REGRESSED is measured again in a fresh interpreter before it fails.

``settle`` runs up to ``--gpuperf-confirm`` confirmation attempts, each a new pytest session that runs only this
test with this session's options, measuring only (``fresh_session_argv``); its samples are judged here, against
the same baselines under the same rules, and ``confirm`` keeps REGRESSED only where every attempt
regressed. Invariant: a change a transient could explain never fails a test unconfirmed; where no confirmation
can run, one beyond that fails, saying so (core/verdict/checks.py ``Unconfirmed``). Why a fresh process:
docs/design/confirmation-in-a-fresh-process.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.core.verdict.checks import UNCONFIRMED
from pytest_gpuperf.core.verdict.vocabulary import Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.core.session.session import GpuperfSession, MetricResult

_XDIST_ENVIRONMENT = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
_TORCHRUN_ENVIRONMENT = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
CONFIRM_SLACK_S = 120.0
"""Time a confirmation session may take beyond the test's own budget: a new interpreter, torch and the module's
fixtures start again."""


def settle(item: pytest.Item, session: GpuperfSession, results: list[MetricResult]) -> list[MetricResult]:
    """The final results of a test: as measured, or, where a metric looks REGRESSED, after each confirmation
    attempt (``--gpuperf-confirm N`` fresh processes) had its say."""
    attempt = 1
    while attempt <= session.settings.confirm and session.suspects_regression(results):
        suspects = [r for r in results if r.verdict.value == "REGRESSED"]
        _progress(item, f"{_names(suspects)} REGRESSED in attempt {attempt}; confirming in a fresh process")
        started = time.monotonic()
        latest = fresh_attempt(item, session, results)
        attempt += 1
        if isinstance(latest, str):
            results = unconfirmable(results, latest, attempt, session.rules().threshold)
            _progress(item, f"not confirmed: {latest}")
            break
        results = confirm(results, latest, attempt, session.rules().threshold)
        still = [r for r in results if r.verdict.value == "REGRESSED"]
        _progress(
            item,
            f"attempt {attempt} ({time.monotonic() - started:.0f} s): "
            + (f"{_names(still)} REGRESSED again" if still else "did not regress"),
        )
    return results


def fresh_attempt(item: pytest.Item, session: GpuperfSession, previous: list[MetricResult]) -> list[MetricResult] | str:
    """This test measured once more by a new pytest session, judged here; or why that could not be done."""
    from pytest_gpuperf.core.store.results import parse_document
    from pytest_gpuperf.core.store.schema import SchemaError

    world, local = _torchrun_world()
    if world > 1 and local != world:
        return (
            f"a rank of a torchrun job over several nodes ({world} ranks, {local} here) cannot re-launch the job "
            "from one node"
        )
    folder = Path(tempfile.mkdtemp(prefix="gpuperf-confirm-"))
    try:
        results_path = folder / "results.json"
        argv = fresh_session_argv(item, folder, ranks=world)
        log = folder / "output.txt"
        timeout = _timeout_s(item)
        try:
            with open(log, "wb") as output:
                subprocess.run(
                    argv,
                    cwd=item.config.invocation_params.dir,
                    env={k: v for k, v in os.environ.items() if not _launcher_variable(k)},
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            return f"the confirmation session ran past {timeout:.0f} s{_tail(log)}"
        except OSError as error:
            return f"the confirmation session could not start: {error}"
        if not results_path.is_file():
            return f"the confirmation session wrote no results{_tail(log)}"
        try:
            document = parse_document(results_path.read_bytes(), where=str(results_path))
        except SchemaError as error:
            return f"the confirmation session's results could not be read: {error}"
        return _judge_again(session, previous, document, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _torchrun_world() -> tuple[int, int]:
    """(WORLD_SIZE, LOCAL_WORLD_SIZE) of the torchrun job this process is a rank of; (1, 1) outside one."""
    sizes = []
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        text = os.environ.get(name, "").strip()
        sizes.append(int(text) if text.isdigit() and int(text) > 0 else None)
    world = sizes[0] or 1
    return world, sizes[1] or world


def _launcher_variable(name: str) -> bool:
    """Whether ``name`` is one of xdist's or torchrun's: a confirmation session is launched afresh, not into
    this worker's or this rank's place."""
    return name in _XDIST_ENVIRONMENT or name in _TORCHRUN_ENVIRONMENT or name.startswith("TORCHELASTIC_")


def fresh_session_argv(item: pytest.Item, folder: Path, *, ranks: int = 1) -> list[str]:
    """The command of a pytest session that runs only ``item``, with this session's options, measuring only.

    Under torchrun (``ranks`` > 1) it is the whole job again, ``ranks`` ranks on this node (``torchrun
    --standalone``): a regression of a multi-rank test is confirmed by all its ranks together, each in a fresh
    process, while this job's other ranks wait at their next collective.

    The invocation's options are kept (markers, ini overrides, gpuperf settings, plugins); its positional arguments
    (paths and node ids) are replaced by this test's. Later options override earlier ones, so what the fresh session
    must not share with this one (the results file, JUnit XML, the temporary folder pytest wipes, the cache, the
    operator summaries of --gpuperf-profile) is pointed into ``folder``; xdist is asked for no workers."""
    config = item.config
    positional = {str(arg) for arg in config.args}
    kept = [arg for arg in config.invocation_params.args if str(arg) not in positional]
    test = f"{item.path}::{item.nodeid.split('::', 1)[1]}" if "::" in item.nodeid else str(item.path)
    launcher = [sys.executable, "-m", "pytest"]
    if ranks > 1:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            *launcher[1:],
        ]
    argv = [*launcher, *kept, test]
    argv += [
        "--gpuperf-measure-only",
        "--gpuperf-extend",
        "0",
        "--gpuperf-results",
        str(folder / "results.json"),
        f"--basetemp={folder / 'tmp'}",
        f"--junitxml={folder / 'junit.xml'}",
        "-o",
        f"cache_dir={folder / 'cache'}",
        "-p",
        "no:randomly",
    ]
    if config.pluginmanager.hasplugin("gpuperf-profiler"):  # its summary comes back in its results' context
        argv += ["--gpuperf-profile", str(folder / "profile.json")]
    if config.pluginmanager.hasplugin("xdist"):
        argv += ["-n", "0"]
    return argv


def _judge_again(
    session: GpuperfSession, previous: list[MetricResult], document: dict[str, Any], log: Path
) -> list[MetricResult] | str:
    """The fresh session's metrics of this test, judged by this session: same baselines, same rules, same family.
    A metric judged by a rule of its own (convergence) keeps the fresh session's verdict: its rule ran there."""
    from pytest_gpuperf.core.record.perf import MetricRecord
    from pytest_gpuperf.core.store.results import MetricResult

    test = previous[0].test
    measured = {entry["metric"]: entry for entry in document.get("results", []) if entry.get("test") == test}
    missing = [result.metric for result in previous if result.metric not in measured]
    if missing:
        return f"the confirmation session measured no {', '.join(missing)}{_tail(log)}"
    latest = []
    for result in previous:
        entry = measured[result.metric]
        if "judged_by" in result.context:
            latest.append(MetricResult.from_dict(entry))
            continue
        context = dict(entry.get("context") or {})
        unjudgeable = context.get("unjudgeable")
        record = MetricRecord(
            name=result.metric,
            unit=entry["unit"],
            higher_is_better=entry["higher_is_better"],
            samples=[float(value) for value in entry["samples"]],
            rounds=int(entry.get("rounds") or 1),
            context=context,
            unjudgeable=unjudgeable if isinstance(unjudgeable, str) else None,
            # the framework a `perf.run_command` ran joins this metric's stack (core/record/command.py keeps it here)
            stack={str(k): str(v) for k, v in context["framework"].items()}
            if isinstance(context.get("framework"), dict)
            else {},
        )
        latest.append(session.evaluate_metric(test, record))
    return latest


def confirm(
    previous: list[MetricResult], latest: list[MetricResult], attempt: int, threshold: float
) -> list[MetricResult]:
    """The verdicts of a repeated attempt, where REGRESSED stands only if the attempt before regressed too: the
    facts recorded in each context, the rule and its words core/verdict/checks.py ``UNCONFIRMED``'s, as in
    `gpuperf compare` reading the results."""
    regressed_before = {result.metric for result in previous if result.verdict is Verdict.REGRESSED}
    for result in latest:
        was, now = result.metric in regressed_before, result.verdict is Verdict.REGRESSED
        fact = {"regressed_before": attempt - 1} if was else {"unconfirmed_regression": attempt} if now else {}
        result.context = {**result.context, "attempts": attempt, **fact}
        result.comparison = UNCONFIRMED.apply(result.comparison, result.context, threshold)
    return latest


def unconfirmable(results: list[MetricResult], why: str, attempt: int, threshold: float) -> list[MetricResult]:
    """The results when no confirmation could be made: the confirmation rule (core/verdict/checks.py
    ``UNCONFIRMED``) keeps a REGRESSED beyond what a transient explains and makes the others AMBIGUOUS, saying why."""
    for result in results:
        if result.verdict is Verdict.REGRESSED:
            facts = {"unconfirmed_regression": attempt - 1, "attempts": attempt, "unconfirmable": why}
            result.context = {**result.context, **facts}
            result.comparison = UNCONFIRMED.apply(result.comparison, result.context, threshold)
    return results


def _timeout_s(item: pytest.Item) -> float | None:
    from pytest_gpuperf.core.session.budget import budget_of

    budget = budget_of(item)
    return None if budget is None else budget.seconds + CONFIRM_SLACK_S


def _tail(log: Path, lines: int = 8) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("; its last lines:\n" + "\n".join(text)) if text else ""


def _names(results: list[MetricResult]) -> str:
    return ", ".join(result.metric for result in results)


def _progress(item: pytest.Item, text: str) -> None:
    """A line on the terminal while the test runs (captured output stays captured)."""
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    capture = item.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    line = f"gpuperf: {item.nodeid}: {text}"
    if capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    else:
        reporter.write_line(line)
