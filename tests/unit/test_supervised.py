"""`Supervised` (core/record/children.py) on real processes: a wrapper's grandchild ends with the group, signals
come in the caller's order with its grace, and a child dies with the process that started it; and how
``signals_interrupt`` turns stop signals into KeyboardInterrupt."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_gpuperf.core.record.children import Stopping, Supervised, alive, group_alive, signals_interrupt

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")

PYTHON = shlex.quote(sys.executable)
RECORDER = """
import signal, sys, time
def note(sig, frame):
    with open(sys.argv[1], "a") as seen:
        seen.write(signal.Signals(sig).name + "\\n")
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
print("ready", flush=True)
time.sleep(60)
"""
"""A child that writes down each SIGINT and SIGTERM it gets and goes on: only SIGKILL ends it."""


def _wait_for_output(log: Path, *, within: float = 20.0) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        text = log.read_text()
        if text.strip():
            return text
        time.sleep(0.02)
    raise AssertionError(f"nothing written to {log} within {within:g} s")


def _gone(pid: int, *, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def _recorder(tmp_path: Path, stopping: Stopping) -> tuple[Supervised, Path]:
    seen = tmp_path / "seen.txt"
    with (tmp_path / "log").open("wb") as log:
        child = Supervised([sys.executable, "-c", RECORDER, str(seen)], stdout=log, stopping=stopping)
    _wait_for_output(tmp_path / "log")
    return child, seen


def test_the_grandchild_of_a_shell_wrapper_is_stopped_with_the_group(tmp_path: Path) -> None:
    # A background job of a non-interactive shell ignores SIGINT: it takes the SIGTERM that follows.
    script = f"{PYTHON} -c 'import time; time.sleep(60)' & echo $!; wait"
    with (tmp_path / "log").open("wb") as log:
        child = Supervised(["sh", "-c", script], stdout=log, stopping=Stopping(grace=1.0))
    grandchild = int(_wait_for_output(tmp_path / "log").split()[0])
    assert alive(grandchild) and child.running()
    assert child.stop()
    assert not alive(grandchild) and not group_alive(child.pid) and child.returncode is not None


def test_a_child_that_ignores_sigint_and_sigterm_is_killed_after_each_grace(tmp_path: Path) -> None:
    child, seen = _recorder(tmp_path, Stopping(grace=0.5))
    started = time.monotonic()
    assert child.stop()
    took = time.monotonic() - started
    assert child.returncode == -signal.SIGKILL
    assert seen.read_text().split() == ["SIGINT", "SIGTERM"]
    assert 1.0 <= took < 5.0, took  # SIGINT's and SIGTERM's grace, then SIGKILL at once


def test_each_stop_signal_reaches_the_child_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Counted where they are sent, not where they are handled: a signal sent twice is handled twice only when the
    # first was handled before the second came, which depends on the machine's load.
    child, _ = _recorder(tmp_path, Stopping(grace=0.2))
    sent: list[int] = []
    killpg, kill = os.killpg, os.kill

    def to_group(group: int, sig: int) -> None:
        if group == child.pid:
            sent.append(sig)
        killpg(group, sig)

    def to_process(pid: int, sig: int) -> None:
        if pid == child.pid and sig != 0:  # 0 asks whether it is alive
            sent.append(sig)
        kill(pid, sig)

    monkeypatch.setattr(os, "killpg", to_group)
    monkeypatch.setattr(os, "kill", to_process)
    assert child.stop()
    assert sent == [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]


def test_a_server_style_stop_starts_at_sigterm_with_its_own_kill_grace(tmp_path: Path) -> None:
    stopping = Stopping(first=signal.SIGTERM, grace=0.5, kill_grace=2.0, poll_s=0.1)
    assert stopping.steps() == ((signal.SIGTERM, 0.5), (signal.SIGKILL, 2.0))
    child, seen = _recorder(tmp_path, Stopping())  # stop() may be given another sequence than the start's
    started = time.monotonic()
    assert child.stop(stopping)
    assert child.returncode == -signal.SIGKILL and seen.read_text().split() == ["SIGTERM"]
    assert time.monotonic() - started < 2.0


def test_the_default_sequence_is_sigint_sigterm_sigkill_five_seconds_apart() -> None:
    assert Stopping().steps() == ((signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"first": signal.SIGHUP}, r"Stopping\(first=<Signals.SIGHUP: 1>\): expected one of \['SIGINT'"),
        ({"grace": 0}, r"Stopping\(grace=0\): expected seconds > 0"),
        ({"kill_grace": -1.0}, r"Stopping\(kill_grace=-1.0\): expected seconds > 0"),
    ],
)
def test_a_stopping_sequence_that_cannot_work_is_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Stopping(**arguments)  # type: ignore[arg-type]


def test_stopping_a_child_that_has_exited_with_its_group_sends_nothing(tmp_path: Path) -> None:
    child = Supervised([sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL)
    child.wait(timeout=20)
    started = time.monotonic()
    assert child.stop() and child.returncode == 0
    assert not child.end_strays()
    assert time.monotonic() - started < 1.0


def test_the_context_manager_stops_the_group_on_an_error(tmp_path: Path) -> None:
    script = f"{PYTHON} -c 'import time; time.sleep(60)' & echo $!; wait"
    with pytest.raises(RuntimeError, match="the caller failed"):
        with (tmp_path / "log").open("wb") as log, Supervised(["sh", "-c", script], stdout=log) as child:
            grandchild = int(_wait_for_output(tmp_path / "log").split()[0])
            raise RuntimeError("the caller failed")
    assert child.returncode is not None and not alive(grandchild) and not group_alive(child.pid)


def test_the_context_manager_ends_what_an_exited_leader_left_behind(tmp_path: Path) -> None:
    script = f"{PYTHON} -c 'import time; time.sleep(60)' & echo $!"
    with (tmp_path / "log").open("wb") as log, Supervised(["sh", "-c", script], stdout=log) as child:
        assert child.wait(timeout=20) == 0
        stray = int(_wait_for_output(tmp_path / "log").split()[0])
        assert alive(stray)
    assert not alive(stray) and not group_alive(child.pid)


def test_a_child_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """The caller ends by os._exit (no teardown, no stop()): the kernel's parent-death signal ends the child."""
    log = tmp_path / "child.log"
    caller = (
        "import sys\nfrom pathlib import Path\n"
        "from pytest_gpuperf.core.record.children import Supervised\n"
        f"log = open({str(log)!r}, 'wb')\n"
        "child = Supervised([sys.executable, '-c', 'import os, time; print(os.getpid(), flush=True); time.sleep(60)'],"
        " stdout=log)\n"
        "import os, time\n"
        f"deadline = time.monotonic() + 20\n"
        f"while not Path({str(log)!r}).read_text().strip() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", caller], check=True, timeout=60, env=env)
    pid = int(log.read_text().split()[0])
    assert _gone(pid), f"process {pid} outlived the process that started it"


def test_a_child_whose_parent_is_already_gone_ends_at_once() -> None:
    """The death signal is only armed for a parent that still lives: an orphan already must not run on."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=60)  # reaped: its pid is nobody's parent (the kernel hands pids out in order)
    code = (
        "import signal\nfrom pytest_gpuperf.core.record.children import die_with_parent\n"
        f"die_with_parent(signal.SIGKILL, parent={gone.pid})\nprint('ran on')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 128 + signal.SIGKILL and "ran on" not in done.stdout, (done.returncode, done.stdout)


def test_a_daemon_that_left_the_group_is_caught_and_ended(tmp_path: Path) -> None:
    """Issue 48, item 5: a `setsid` daemon a command starts leaves the group and outlived the test; as a child
    subreaper the caller gets it back when it is orphaned, and ends it (Linux; elsewhere the docs say so)."""
    from pytest_gpuperf.core.record.children import catching_orphans

    pid_file = tmp_path / "daemon"
    script = f"setsid {shlex.quote(sys.executable)} -c 'import time; time.sleep(60)' & echo $! > {pid_file}; sleep 0.5"
    with catching_orphans(grace=2) as able:
        if not able:
            pytest.skip("no child subreaper on this platform (docs/design/supervised-children.md)")
        with Supervised(["/bin/sh", "-c", script]) as child:
            child.wait(timeout=30)
        daemon = int(pid_file.read_text())
        assert alive(daemon)  # outside the group: the group's stop does not reach it
    assert not alive(daemon)
    with pytest.raises(ChildProcessError):
        os.waitpid(daemon, os.WNOHANG)  # reaped, not left a zombie


@pytest.mark.parametrize("deferred", [False, True])
def test_one_stop_signal_raises_unless_deferred_and_then_the_next_does(deferred: bool) -> None:
    """The first stop signal raises KeyboardInterrupt unless ``defer_first`` says it is taken care of (passed to
    xdist's workers, or the session is finishing); then the second raises. Every one is noted, none raises twice."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers in the main thread only")
    main = threading.main_thread().ident
    assert main is not None
    sent = [signal.SIGHUP, signal.SIGTERM, signal.SIGTERM]
    raising = 1 if deferred else 0
    with signals_interrupt((signal.SIGTERM, signal.SIGHUP), defer_first=lambda sig: deferred) as received:
        for index, sig in enumerate(sent):
            if index == raising:
                with pytest.raises(KeyboardInterrupt):
                    signal.pthread_kill(main, sig)  # to this thread: its handler has run when the call returns
            else:
                signal.pthread_kill(main, sig)
    assert received == sent
