"""SIGTERM and SIGHUP end a session as Ctrl-C does (issue 48, item 2).

Slurm sends SIGTERM at --time and on scancel, Kubernetes to an evicted pod: the session must still write the
results of every test that finished, mark them interrupted, exit 128 + the signal, and leave no child running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.core.record.children import alive

PROJECT = """
import os, pathlib, subprocess, sys, time
import pytest

@pytest.mark.perf
@pytest.mark.parametrize("n", range(3))
def test_done(perf, n):
    pathlib.Path(os.environ["PIDS"], str(os.getpid())).touch()
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_waits(perf):
    pathlib.Path(os.environ["PIDS"], str(os.getpid())).touch()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path(os.environ["READY"]).write_text(str(child.pid))
    try:
        time.sleep(60)
    finally:
        child.kill()
        child.wait()
    perf.record("t", [1.0], unit="s", higher_is_better=False)
"""
FINISHED = [f"test_project.py::test_done[{n}]" for n in range(3)]
Stopped = tuple[int, dict[str, object], str, list[int]]
"""A stopped session: (exit status, results document, output, the pids that ran a test or a test's child)."""
SIGNALLED_AT_FINISH = """
import os, signal

def pytest_sessionfinish(session):
    # the tests have ended; gpuperf's sessionfinish (its plugin registered first, so called last) writes the results
    os.kill(os.getpid(), signal.SIGHUP)
"""
"""A project's conftest.py that sends its session SIGHUP as it finishes."""


def _session(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """PROJECT's perf tests started with -v (a test's line is written when it is reported, after its metric was
    judged); (the running pytest, its results path, the folder that gathers the pids that ran a test)."""
    (tmp_path / "test_project.py").write_text(PROJECT)
    results, pids = tmp_path / "n.json", tmp_path / "pids"
    pids.mkdir()
    command = [sys.executable, "-m", "pytest", "-m", "perf", "-v"]
    unused = ("cacheprovider", "randomly", "hypothesispytest", "anyio")  # hypothesis' import slows every process
    command += [arg for name in unused for arg in ("-p", f"no:{name}")]
    command += ["--gpuperf-device", "cpu", "--gpuperf-results", str(results), *extra, "test_project.py"]
    env = {**os.environ, "READY": str(tmp_path / "ready"), "PIDS": str(pids)}
    session = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return session, results, pids


def _ended(session: subprocess.Popen[bytes], seen: bytes, results: Path, pids: Path, *others: int) -> Stopped:
    with session:
        rest, _ = session.communicate(timeout=60)
    document = json.loads(results.read_text()) if results.exists() else {}
    ran = [int(path.name) for path in pids.iterdir()] + list(others)
    return session.returncode, document, (seen + rest).decode(errors="replace"), ran


def interrupt(tmp_path: Path, sig: signal.Signals, *extra: str) -> Stopped:
    """Run PROJECT, signal pytest once the three quick tests are reported passed and test_waits is in its sleep;
    (exit status, results document, output, the pids of every process that ran a test and of test_waits' child)."""
    session, results, pids = _session(tmp_path, *extra)
    ready, seen = tmp_path / "ready", b""
    assert session.stdout is not None
    # read what is written, not lines: under xdist a test's "[gw0] PASSED ..." line ends only when the next
    # line starts, which for the last quick test is when test_waits ends, 60 s later
    while sum(f"PASSED {t}".encode() in seen or f"{t} PASSED".encode() in seen for t in FINISHED) < 3:
        chunk = os.read(session.stdout.fileno(), 65536)
        if not chunk:
            break
        seen += chunk
    deadline = time.monotonic() + 60
    while not ready.exists() and session.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not ready.exists():
        session.kill()
    assert ready.exists(), _ended(session, seen, results, pids)[2]
    time.sleep(0.1)  # the pid is written just before the test sleeps
    session.send_signal(sig)
    return _ended(session, seen, results, pids, int(ready.read_text()))


def check_stopped(code: int, document: dict[str, object], output: str, ran: list[int], sig: signal.Signals) -> None:
    assert code == 128 + sig, output
    assert document, output
    finished = sorted(entry["test"] for entry in document["results"])  # type: ignore[attr-defined]
    assert finished == FINISHED, output
    assert document["settings"]["interrupted"] == sig.name  # type: ignore[index]
    assert [pid for pid in ran if alive(pid)] == [], output  # the test's own child ended as its finally: block ran


def test_a_stop_signal_writes_the_finished_tests_and_exits_with_its_status(tmp_path: Path) -> None:
    check_stopped(*interrupt(tmp_path, signal.SIGTERM), signal.SIGTERM)  # SIGHUP's own status: the test below


def test_sigterm_to_the_xdist_controller_keeps_what_its_workers_finished(tmp_path: Path) -> None:
    """A user's `kill` reaches the controller alone (Slurm signals every process of the job). The controller
    passes the signal to its workers, each ends its session as interrupted and sends its finished tests back: exit
    143, those tests in the results, every worker and the running test's child ended (--max-worker-restart 0: no
    replacement for the stopped worker)."""
    pytest.importorskip("xdist")
    check_stopped(*interrupt(tmp_path, signal.SIGTERM, "-n", "2", "--max-worker-restart", "0"), signal.SIGTERM)


def test_a_stop_signal_while_the_session_finishes_keeps_every_result(tmp_path: Path) -> None:
    """Once the tests have ended a stop signal is noted, not raised. Raised, it aborted pytest's sessionfinish
    hooks, the results writer included (exit -2, nothing written), as it did in an xdist controller whose workers
    were closed (nothing left to pass it to) when a user's `kill` came after the tests or during xdist's teardown."""
    (tmp_path / "conftest.py").write_text(SIGNALLED_AT_FINISH)
    session, results, pids = _session(tmp_path, "-k", "done")
    check_stopped(*_ended(session, b"", results, pids), signal.SIGHUP)
