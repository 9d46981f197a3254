"""The time budget of a perf test: a test that uses gpuperf ends with a clear failure when it runs past it.

Every test that uses gpuperf (the ``perf`` fixture or marker) gets a budget over its setup, call (confirmation
included) and teardown: ``@pytest.mark.gpuperf_timeout(SECONDS)``, else ``--gpuperf-timeout``, else its tier's
``DEFAULT_BUDGET_S``; 0 means none, and other tests are left alone. Three stages: SIGALRM raises
``BudgetExceeded`` in the running frame; at budget + grace a watchdog thread dumps every stack and signals again;
at budget + 2 x grace faulthandler's own watchdog ends the process. No budget under ``--pdb``/``--trace``. How it
reads to a user: docs/distributed.md; why three stages and not pytest-timeout: docs/design/time-budget.md.
"""

from __future__ import annotations

import faulthandler
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pytest

from pytest_gpuperf.core.config.settings import OPTIONS, get_settings, resolve

DEFAULT_BUDGET_S = {"cpu": 600.0, "gpu": 1200.0}
"""Per tier. CPU: on 2 quiet cores the whole training suite takes ~1-2 minutes (docs/training.md); on 2 cores
shared with ~8 other jobs its heaviest test (test_pretrain with a confirmation attempt) took 262 s. 600 s leaves
room for that and still bounds a workload sized for another CPU (issue 16 item 14: 23 calls x 31 s). GPU (tests
marked ``gpu_tier``, or ``--gpuperf-device cuda``): real-width layers compile and autotune on first use; a first
guess, not yet measured."""
MARKER = "gpuperf_timeout"


def grace_s(budget_s: float) -> float:
    """Time between the stages: a tenth of the budget, within 2-60 s (600 s -> 60 s, 5 s -> 2 s)."""
    return min(60.0, max(2.0, budget_s / 10))


class BudgetExceeded(pytest.fail.Exception):  # type: ignore[name-defined]
    """Raised in a perf test that ran past its time budget (a failure, not an error of the plugin)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """The budget of one test and where it came from (named in the failure so the user knows what to change)."""

    seconds: float
    source: str


def uses_gpuperf(item: pytest.Item) -> bool:
    """A test that uses gpuperf: the ``perf`` fixture, the ``perf`` marker, or a budget marker of its own."""
    return (
        "perf" in getattr(item, "fixturenames", ())
        or item.get_closest_marker("perf") is not None
        or item.get_closest_marker(MARKER) is not None
    )


def budget_of(item: pytest.Item) -> Budget | None:
    """The test's budget, or None when it has none (not a gpuperf test, 0 seconds, a debugger session)."""
    if not uses_gpuperf(item):
        return None
    config = item.config
    if config.getoption("usepdb", False) or config.getoption("trace", False):
        return None
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        budget = Budget(seconds=_marker_seconds(item, marker), source=f"@pytest.mark.{MARKER}")
    else:
        spec = next(s for s in OPTIONS if s.name == "timeout")
        value, where = resolve(config, spec)
        if value is not None:
            budget = Budget(seconds=value, source=where)
        else:
            tier = "gpu" if _gpu_tier(item) else "cpu"
            budget = Budget(
                seconds=DEFAULT_BUDGET_S[tier],
                source=f"the {tier} tier's default; change it with --gpuperf-timeout or @pytest.mark.{MARKER}",
            )
    return budget if budget.seconds > 0 else None


def _gpu_tier(item: pytest.Item) -> bool:
    return item.get_closest_marker("gpu_tier") is not None or get_settings(item.config).device_request == "cuda"


def _marker_seconds(item: pytest.Item, marker: pytest.Mark) -> float:
    args = marker.args if not marker.kwargs else (*marker.args, *marker.kwargs.values())
    text = repr(args[0]) if len(args) == 1 else ", ".join(map(repr, args))
    value = args[0] if len(args) == 1 else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}({text}) on {item.nodeid}: expected one finite number of seconds >= 0 "
            "(0: no budget), e.g. @pytest.mark.gpuperf_timeout(900)"
        )
    return float(value)


class _Watch:
    """The budget of the test now running: the SIGALRM handler and the watchdog thread of stages 1-3."""

    def __init__(self, item: pytest.Item, budget: Budget, terminal_fd: int) -> None:
        self.item = item
        self.budget = budget
        self.grace = grace_s(budget.seconds)
        self.started = time.monotonic()
        self.terminal_fd = terminal_fd
        self.in_phase = False
        self.raised = 0
        self.stuck = False
        self.done = threading.Event()
        self.main_thread = threading.get_ident()
        self.previous_handler: Any = None
        self.uses_signal = (
            threading.current_thread() is threading.main_thread()
            and hasattr(signal, "setitimer")
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
        )
        self.thread = threading.Thread(target=self._watchdog, name="gpuperf-budget", daemon=True)

    def start(self) -> None:
        if self.uses_signal:
            self.previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.budget.seconds)
        faulthandler.dump_traceback_later(
            self.budget.seconds + 2 * self.grace, repeat=False, file=self.terminal_fd, exit=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        faulthandler.cancel_dump_traceback_later()
        if self.uses_signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous_handler)
        self.thread.join()

    def headline(self) -> str:
        return f"{self.item.nodeid} exceeded its {self.budget.seconds:g} s budget ({self.budget.source})"

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.done.is_set():
            return
        if not self.in_phase:
            # pytest's own code between the test's phases: raise where the test's code runs again.
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        # Once at the budget; once more when the watchdog found the test stuck (it may have swallowed the first).
        if self.raised >= (2 if self.stuck else 1):
            return
        self.raised += 1
        stack = _test_stack(frame)
        note = (
            f"; it was stuck for {time.monotonic() - self.started - self.budget.seconds:.0f} s more in a call that "
            "did not return (stacks of every thread above, on stderr)"
            if self.stuck
            else ""
        )
        raise BudgetExceeded(f"{self.headline()}{note}; stack:\n{stack}", pytrace=False)

    def _watchdog(self) -> None:
        if self.done.wait(self.budget.seconds + self.grace):
            return
        self.stuck = True
        elapsed = time.monotonic() - self.started
        message = (
            f"\ngpuperf: {self.headline()} and is still running after {elapsed:.0f} s: the main thread is inside a "
            f"call that does not return to Python. Stacks of every thread follow; pytest ends in {self.grace:.0f} s "
            "unless that call returns (with pytest-xdist the worker is replaced and the session goes on).\n"
        )
        try:
            os.write(self.terminal_fd, message.encode(errors="replace"))
            faulthandler.dump_traceback(file=self.terminal_fd, all_threads=True)
        except OSError:
            pass
        if self.uses_signal and hasattr(signal, "pthread_kill"):
            signal.pthread_kill(self.main_thread, signal.SIGALRM)  # a blocking system call returns EINTR


_FRAMEWORK_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__ or ""))
    for module in (sys.modules["pluggy"], sys.modules["_pytest"])
)


def _test_stack(frame: FrameType | None) -> str:
    """Where the test was: the interrupted stack from the innermost pytest/pluggy frame on (the test's own
    frames and what they called), at most 12 frames."""
    if frame is None:
        return ""
    entries: list[traceback.FrameSummary] = list(traceback.extract_stack(frame))
    framework = [i for i, e in enumerate(entries) if os.path.abspath(e.filename).startswith(_FRAMEWORK_DIRS)]
    if framework:
        entries = entries[framework[-1] + 1 :]
    return "".join(traceback.format_list(entries[-12:]))


_watch_key = pytest.StashKey[_Watch]()
_terminal_fd_key = pytest.StashKey[int]()


def _terminal_fd(config: pytest.Config) -> int:
    """A descriptor of the terminal's stderr that output capture does not redirect (stage 2 and 3 write there,
    and a captured file would vanish with the process in stage 3). Taken on first use, in the main thread."""
    fd = config.stash.get(_terminal_fd_key, None)
    if fd is None:
        capman = config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                fd = _dup_stderr()
        else:
            fd = _dup_stderr()
        config.stash[_terminal_fd_key] = fd
    return fd


def _dup_stderr() -> int:
    # sys.stderr may be a stream without a descriptor (an outer pytest's capture, in pytester's in-process runs).
    for stream in (sys.stderr, sys.__stderr__):
        try:
            return os.dup(stream.fileno())  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            continue
    return os.dup(2)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(seconds): the time budget of this gpuperf test; it fails when it runs longer (0: no budget) "
        "(pytest-gpuperf)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A malformed budget marker stops the run before any test, naming the test and the value.
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is not None:
            _marker_seconds(item, marker)


def pytest_unconfigure(config: pytest.Config) -> None:
    fd = config.stash.get(_terminal_fd_key, None)
    if fd is not None:
        os.close(fd)
        del config.stash[_terminal_fd_key]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    budget = budget_of(item)
    if budget is None:
        return (yield)
    watch = _Watch(item, budget, _terminal_fd(item.config))
    item.stash[_watch_key] = watch
    watch.start()
    try:
        return (yield)
    finally:
        watch.stop()
        del item.stash[_watch_key]


def _phase(item: pytest.Item) -> Iterator[None]:
    watch = item.stash.get(_watch_key, None)
    if watch is None:
        return (yield)
    watch.in_phase = True
    try:
        return (yield)
    finally:
        watch.in_phase = False


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_phase)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_phase)
pytest_runtest_teardown = pytest.hookimpl(wrapper=True)(_phase)
