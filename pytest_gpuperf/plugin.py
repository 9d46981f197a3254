"""pytest-gpuperf's pytest plugin: options, the `perf` fixture and hooks. Run state lives in GpuperfSession.

Kept light: it imports neither torch nor numpy/scipy; they load when a test first uses `perf`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf import hooks
from pytest_gpuperf.core.config.settings import OPTIONS, add_options, get_settings
from pytest_gpuperf.core.session.parametrize import item_uses_fixture
from pytest_gpuperf.core.session.state import (
    gpuperf_session,
    reporting,
    reporting_key,
    restore_signals,
    session_key,
    stop_on_signals,
    stop_signal,
    tests_ended,
)
from pytest_gpuperf.core.store.baselines import StoreError, check_folder
from pytest_gpuperf.core.store.testid import stable_test_id

if TYPE_CHECKING:
    from pytest_gpuperf.core.record.perf import Perf

# Feature plugins (fixtures and options of each workload area); each imports torch only when used.
pytest_plugins: tuple[str, ...] = (
    "pytest_gpuperf.core.session.budget",  # the time budget of every gpuperf test
    "pytest_gpuperf.distributed.plugin",
    "pytest_gpuperf.frameworks.plugin",
    "pytest_gpuperf.inference.plugin",
    "pytest_gpuperf.core.session.junit",
    "pytest_gpuperf.core.session.sizing",
    "pytest_gpuperf.micro.plugin",
    "pytest_gpuperf.training.plugin",
)

perf_key = pytest.StashKey["Perf"]()
MULTI_PROCESS_FIXTURES = ("device_mesh", "gpuperf_servers", "gpuperf_engine")
"""Fixtures whose tests start processes of their own (ranks, serving engines): a session pinned to one core by
`gpuperf ab` widens again for them (--gpuperf-widen-cpus)."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    # No generic markers here (perf, training, ...): a project's own markers of those names, and its
    # --strict-markers run, stay as they were. The suites register theirs in pytest_gpuperf/suites/conftest.py.
    settings = get_settings(config)  # resolve and validate every option now, so a bad value stops the run at once
    _adopt_slurm_ranks()
    config.stash[reporting_key] = _is_reporting_rank()
    world = os.environ.get("WORLD_SIZE", "1").strip()
    if settings.take_turns and (config.getoption("numprocesses", None) or (world.isdigit() and int(world) > 1)):
        raise pytest.UsageError(
            "--gpuperf-take-turns is one session's turn in a `gpuperf ab` pair: xdist workers (-n) or torchrun ranks "
            "cannot share it; use `gpuperf ab --no-take-turns`, or run without -n and let the tests launch their ranks"
        )
    if settings.save and settings.inject_slowdown:
        raise pytest.UsageError(
            "--gpuperf-inject-slowdown (or GPUPERF_INJECT_SLOWDOWN) slows the workloads on purpose: saving their "
            "figures as baselines would hide that slowdown from every later run; unset it, or drop --gpuperf-save"
        )
    if settings.take_turns:
        from pytest_gpuperf.core.session.turns import TurnError, check_channel

        try:
            check_channel(settings.take_turns)
        except TurnError as error:
            raise pytest.UsageError(str(error)) from None
    if settings.profile is not None and config.getoption("numprocesses", None):
        raise pytest.UsageError(
            f"--gpuperf-profile {settings.profile} writes one session's operator summaries: xdist workers (-n) would "
            "each replace that file; profile without -n"
        )
    if settings.profile is not None:  # imported only when asked: profiling off costs nothing
        from pytest_gpuperf.core.record.profiling import Profiler

        config.pluginmanager.register(Profiler(settings.profile), "gpuperf-profiler")
    stop_on_signals(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    restore_signals(config)


def _adopt_slurm_ranks() -> None:
    """Under ``srun`` with GPUPERF_SLURM_RANKS=1 each task is a rank: torchrun's variables are set from Slurm's
    before anything reads them (distributed/environment.py)."""
    from pytest_gpuperf.distributed.environment import adopt_slurm_ranks

    try:
        adopt_slurm_ranks()
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.hookimpl(trylast=True)
def pytest_gpuperf_machine(config: pytest.Config) -> str | None:
    """Default: inside a Slurm job, the node's Slurm name (SLURMD_NODENAME), so a fleet names nodes as Slurm
    does; elsewhere None, the identity read from the system."""
    return os.environ.get("SLURMD_NODENAME") or None


def _is_reporting_rank() -> bool:
    """Under torchrun only global rank 0 judges, saves and reports; the other ranks run the same tests (their
    collectives are needed) and stay silent. A half-set torchrun environment is left to launch() to refuse."""
    from pytest_gpuperf.distributed.environment import is_reporting_rank

    try:
        return is_reporting_rank()
    except ValueError:
        return True


@pytest.hookimpl(trylast=True)
def pytest_gpuperf_telemetry_reader(config: pytest.Config, device: str) -> Any:
    """Default: NVML, else amdsmi, for this process's GPU on cuda runs; nothing on CPU."""
    if device != "cuda":
        return None
    from pytest_gpuperf.machine.telemetry import open_reader

    try:  # a torchrun rank measures the GPU of its local rank
        index = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        index = 0
    return open_reader(device_index=index)


def pytest_sessionstart(session: pytest.Session) -> None:
    # An xdist controller collects nothing and a worker cannot stop the run cleanly: the controller checks the
    # baselines folder at start, whether or not the tests use perf (docs/installing.md).
    if session.config.pluginmanager.hasplugin("dsession"):
        _check_baselines(session.config)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Before any test runs, and only in a run that uses `perf`: a project with its own baselines/ folder (or its
    # own `perf` fixture) and no use of this plugin must not have its files judged as gpuperf's.
    if session.config.pluginmanager.hasplugin("dsession"):
        return  # an xdist controller: its workers collect, and each one counts the job's tests itself
    planned = [item for item in session.items if item_uses_fixture(item, "perf", __name__)]
    if not planned:
        return
    # The job's metrics form one family for its false-failure rate (core/session/session.py family_size).
    gpuperf_session(session.config).planned_tests = [stable_test_id(item.path, item.nodeid) for item in planned]
    widen = get_settings(session.config).widen_cpus
    uses = [set(getattr(item, "fixturenames", ())) for item in planned]
    starters = sorted({name for names in uses for name in MULTI_PROCESS_FIXTURES if name in names})
    if widen and starters and hasattr(os, "sched_setaffinity"):
        # `gpuperf ab` pinned this session to one core for a one-thread workload; tests that start their own ranks
        # or servers would share it with them, so this session (and what it starts) takes every CPU again.
        os.sched_setaffinity(0, widen)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"gpuperf: on CPUs {sorted(widen)}: the tests start their own ranks or servers "
                                f"({', '.join(starters)})")  # fmt: skip
    if not hasattr(session.config, "workerinput"):
        _check_baselines(session.config)
    _check_spread(session.config)


def _check_spread(config: pytest.Config) -> None:
    """A fleet's spread file (--gpuperf-machine-noise FILE) judges only runs of the hardware key it measured."""
    spread = get_settings(config).machine_spread
    if spread is None:
        return
    from pytest_gpuperf.core.store.spread import SpreadError, check_key

    try:
        check_key(spread, gpuperf_session(config).fingerprint.slug)
    except SpreadError as error:
        raise pytest.UsageError(f"--gpuperf-machine-noise: {error}") from None


def _check_baselines(config: pytest.Config) -> None:
    try:
        check_folder(get_settings(config).baselines_dir)
    except StoreError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture
def perf(request: pytest.FixtureRequest) -> Perf:
    """Records metrics (samples) and curves; after the test each metric is judged against its baseline."""
    recorder = gpuperf_session(request.config).new_perf(stable_test_id(request.node.path, request.node.nodeid))
    request.node.stash[perf_key] = recorder
    return recorder


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    outcome = yield  # a test that raised is not judged: the exception propagates from the yield
    recorder = item.stash.get(perf_key, None)
    if recorder is None or not (recorder.metrics or recorder.curves) or not reporting(item.config):
        return outcome
    session = gpuperf_session(item.config)
    profiler = item.config.pluginmanager.get_plugin("gpuperf-profiler")  # --gpuperf-profile: its call's summary
    if profiler is not None:
        profiler.attach(recorder.nodeid, recorder.metrics)
    from pytest_gpuperf.core.session.attempts import settle

    try:
        results = settle(item, session, session.evaluate(recorder))  # a suspected regression is run again first
        session.accept(recorder, results)
    except StoreError as error:
        pytest.fail(f"gpuperf: {error}", pytrace=False)
    from pytest_gpuperf.core.session.report import failure_message, junit_properties

    for result in results:
        item.user_properties.extend(junit_properties(result))
    item.config.hook.pytest_gpuperf_judged(item=item, results=results)
    failing = session.failing(results)
    if failing:
        pytest.fail(failure_message(failing, strict=session.settings.strict), pytrace=False)
    return outcome


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[None]:
    try:
        outcome = yield
    finally:
        tests_ended(session.config)  # from here a stop signal is noted, not raised (state.py says why)
    return outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(session_key, None)
    stopped_by = stop_signal(config)
    if stopped_by is not None:  # SIGTERM, SIGHUP: ended as Ctrl-C, with the shell's status for that signal
        session.exitstatus = 128 + stopped_by
    if state is not None and (stopped_by is not None or session.exitstatus == pytest.ExitCode.INTERRUPTED):
        state.interrupted_by = signal.Signals(stopped_by or signal.SIGINT).name
    if state is not None:
        state.close_telemetry()
        state.gate.close()  # taking turns: the partner may now run alone
    if not reporting(config):
        return
    if state is not None and state.settings.save:
        try:
            state.save_baselines()  # a file that cannot be written is kept in save_failures, the others saved
        except StoreError as error:
            _report_error(config, str(error))
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports
        if state is not None:
            workeroutput["gpuperf"] = state.worker_payload()
        return
    interrupted = state is not None and state.save_interrupted
    if state is not None and state.settings.results_path is not None:
        try:
            state.write_results()
        except KeyboardInterrupt:  # Ctrl-C while writing: results_failure says so; the exit status is 2, not 4
            interrupted = True
    if interrupted and stopped_by is None:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    elif state is not None and state.end_failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    elif state is not None and state.coverage_shortfalls() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the gate could not have caught what it was asked to


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    # popped: a worker stopped by a signal is reported down twice (finished, then "keyboard-interrupt")
    payload = getattr(node, "workeroutput", {}).pop("gpuperf", None)
    keys = ("results", "curves", "saved_files", "not_saved", "save_failures", "telemetry_note", "unresolved")
    if payload and any(payload.get(key) for key in keys):
        gpuperf_session(node.config).absorb_worker(payload)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(session_key, None)
    if not reporting(config) or state is None:
        return
    short = state.coverage_shortfalls()
    if not (state.results or state.saved_files or state.telemetry_note or state.end_failed or short):
        return
    from pytest_gpuperf.core.session.report import summary_table
    from pytest_gpuperf.core.verdict.rollup import shorten

    terminalreporter.section("gpuperf")
    if state.telemetry_note:
        terminalreporter.write_line(state.telemetry_note)
    if state.results:
        fingerprint = state.fingerprint
        cpu_name = fingerprint.labels.get("cpu")
        terminalreporter.write_line(f"hardware: {fingerprint.slug}" + (f" ({cpu_name})" if cpu_name else ""))
        for line in summary_table(state.results, width=120):
            terminalreporter.write_line(line)
    if short and state.settings.require_coverage is not None:
        from pytest_gpuperf.core.session.report import shortfall_lines

        for line in shortfall_lines(short, state.settings.require_coverage, len(state.coverage().suites), width=120):
            terminalreporter.write_line(line, red=True)
    if state.save_interrupted:
        terminalreporter.write_line("gpuperf: interrupted while saving baselines (Ctrl-C)", red=True)
    for path in sorted(set(state.saved_files)):
        terminalreporter.write_line(f"baselines saved: {path}")
    unwritten = state.unwritten_measurements() if state.settings.save else {}
    if state.settings.save:
        lost = sum(unwritten.values())
        saved = len(state.results) - len(state.not_saved) - lost
        reasons = sorted({reason for path, reason in state.save_failures if path in unwritten})
        cause = f": {reasons[0]}" if len(reasons) == 1 else ", see below"
        files = "their baseline file" if len(unwritten) == 1 else f"their {len(unwritten)} baseline files"
        terminalreporter.write_line(
            f"baselines: {saved} of {len(state.results)} measurements saved"
            + (f", {lost} not saved ({files} could not be written{cause})" if lost else "")
            + (f", {len(state.not_saved)} not saved (regressed):" if state.not_saved else ""),
            red=bool(lost),
        )
        for test, metric, why in state.not_saved:
            terminalreporter.write_line(shorten(f"  not saved: {test} {metric}: {why}", 120), yellow=True)
        if state.unresolved:
            from pytest_gpuperf.core.session.report import unresolved_lines

            for line in unresolved_lines(state.unresolved, state.rules().threshold, width=120):
                terminalreporter.write_line(line, yellow=True)
    for path, reason in state.save_failures:
        count = unwritten.get(path, 0)
        held = f" ({count} measurement{'s' if count != 1 else ''})" if count else ""
        terminalreporter.write_line(f"gpuperf: baselines not saved: {path}: {reason}{held}", red=True)
    if state.results_failure is not None:
        terminalreporter.write_line(f"gpuperf: results not written: {state.results_failure}", red=True)
    elif state.settings.results_path is not None:
        terminalreporter.write_line(f"results written: {state.settings.results_path}")


def _report_error(config: pytest.Config, message: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"ERROR: gpuperf: {message}", red=True)
