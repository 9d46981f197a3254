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


def interrupt(tmp_path: Path, sig: signal.Signals, *extra: str) -> tuple[int, dict[str, object], str, list[int]]:
    """Run PROJECT, signal pytest once the three quick tests are reported passed and test_waits is in its sleep;
    (exit status, results document, output, the pids of every process that ran a test and of test_waits' child)."""
    (tmp_path / "test_project.py").write_text(PROJECT)
    ready, results, pids = tmp_path / "ready", tmp_path / "n.json", tmp_path / "pids"
    pids.mkdir()
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "perf", "-v"]
    command += ["--gpuperf-device", "cpu", "--gpuperf-results", str(results), *extra, "test_project.py"]
    env = {**os.environ, "READY": str(ready), "PIDS": str(pids)}
    lines: list[str] = []
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as session:
        assert session.stdout is not None
        for line in session.stdout:  # -v: a test's line ends when it is reported, after its metric was judged
            lines.append(line)
            if sum(f"PASSED {t}" in line or f"{t} PASSED" in line for t in FINISHED for line in lines) == 3:
                break
        deadline = time.monotonic() + 60
        while not ready.exists() and session.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "".join(lines) + session.communicate(timeout=30)[0]
        time.sleep(0.1)  # the pid is written just before the test sleeps
        session.send_signal(sig)
        output, _ = session.communicate(timeout=60)
    document = json.loads(results.read_text()) if results.exists() else {}
    ran = [int(path.name) for path in pids.iterdir()] + [int(ready.read_text())]
    return session.returncode, document, "".join(lines) + output, ran


def check_stopped(code: int, document: dict[str, object], output: str, ran: list[int], sig: signal.Signals) -> None:
    assert code == 128 + sig, output
    assert document, output
    finished = sorted(entry["test"] for entry in document["results"])  # type: ignore[attr-defined]
    assert finished == FINISHED, output
    assert document["settings"]["interrupted"] == sig.name  # type: ignore[index]
    assert [pid for pid in ran if alive(pid)] == [], output  # the test's own child ended as its finally: block ran


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_writes_the_finished_tests_and_exits_with_its_status(tmp_path: Path, sig: signal.Signals) -> None:
    check_stopped(*interrupt(tmp_path, sig), sig)
