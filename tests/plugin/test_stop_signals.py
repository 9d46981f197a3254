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

PROJECT = """
import os, pathlib, subprocess, sys, time
import pytest

@pytest.mark.perf
@pytest.mark.parametrize("n", range(3))
def test_done(perf, n):
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_waits(perf):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path(os.environ["READY"]).write_text(str(child.pid))
    try:
        time.sleep(60)
    finally:
        child.kill()
        child.wait()
    perf.record("t", [1.0], unit="s", higher_is_better=False)
"""


def interrupt(tmp_path: Path, sig: signal.Signals, *extra: str) -> tuple[int, dict[str, object], str, int]:
    (tmp_path / "test_project.py").write_text(PROJECT)
    ready, results = tmp_path / "ready", tmp_path / "n.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "perf"]
    command += ["--gpuperf-device", "cpu", "--gpuperf-results", str(results), *extra, "test_project.py"]
    env = {**os.environ, "READY": str(ready)}
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as session:
        deadline = time.monotonic() + 60
        while not ready.exists() and session.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), session.communicate(timeout=30)[0]
        time.sleep(0.1)  # the pid is written just before the test sleeps
        session.send_signal(sig)
        output, _ = session.communicate(timeout=60)
    document = json.loads(results.read_text()) if results.exists() else {}
    return session.returncode, document, output, int(ready.read_text())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_writes_the_finished_tests_and_exits_with_its_status(tmp_path: Path, sig: signal.Signals) -> None:
    code, document, output, child = interrupt(tmp_path, sig)
    assert code == 128 + sig, output
    assert document, output
    finished = sorted(entry["test"] for entry in document["results"])
    assert finished == [f"test_project.py::test_done[{n}]" for n in range(3)], output
    assert document["settings"]["interrupted"] == sig.name
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the test's own child was ended as its finally: block ran
