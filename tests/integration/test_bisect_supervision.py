"""`gpuperf bisect` keeps its builds supervised and its history (issue 48, items 2 and 4).

A build runs as a process group with --budget as its limit; SIGTERM mid-build ends the build's shell and what it
started, and bisect.json is still written; a built folder whose gpuperf-python cannot be read is UNBUILDABLE
naming the file; a second run into the same --out is refused; the message when both stacks run one command says
what differs. No torch and no sessions: the builds are shell one-liners.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.ab.bisection import same_stacks
from pytest_gpuperf.ab.builders import BuildError, BuildTimeout, CachedBuilder
from pytest_gpuperf.cli import main as cli

LINGERING_BUILD = "sleep 60 & echo $! > {dir}/child; wait"


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def child_of(cache: Path, within: float = 30.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [path for path in cache.glob("*/child") if path.read_text().strip()]
        if found:
            return int(found[0].read_text())
        time.sleep(0.05)
    raise AssertionError(f"no build started under {cache}")


def test_a_build_past_its_time_is_stopped_with_its_children_and_not_remembered(tmp_path: Path) -> None:
    builder = CachedBuilder(tmp_path / "envs", LINGERING_BUILD, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(BuildTimeout, match=r"ran past --budget 0.5 s and was stopped with what it started"):
        builder({"a": "1"})
    assert time.monotonic() - started < 20
    assert gone(child_of(tmp_path / "envs"))
    assert not list((tmp_path / "envs").glob("*/gpuperf-unbuildable"))  # the next run, with more time, tries again


def test_sigterm_mid_build_ends_the_build_and_writes_bisect_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pytest_gpuperf.cli", "bisect", "--good", "a==1", "--bad", "a==2"]
    command += ["--build", LINGERING_BUILD, "--out", str(out), "--no-take-turns", "--", "x.py"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as bisect:
        child = child_of(out / "envs")
        bisect.send_signal(signal.SIGTERM)
        output, _ = bisect.communicate(timeout=60)
    assert bisect.returncode == 143, output
    assert "interrupted (SIGTERM)" in output and (out / "bisect.json").is_file()
    assert gone(child), f"the build's child {child} outlived gpuperf bisect"


def test_a_built_folder_whose_python_cannot_be_read_is_unbuildable_naming_it(tmp_path: Path) -> None:
    builder = CachedBuilder(tmp_path / "envs", 'echo "\'{python}" > {dir}/gpuperf-python')
    for _ in range(2):  # marked built, read again by the next run: the same one-line reason
        with pytest.raises(BuildError, match=r"gpuperf-python: cannot be read as a command \(No closing quotation\)"):
            builder({"a": "1"})


def test_a_second_run_into_the_same_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    (out / "steps").mkdir(parents=True)
    (out / "bisect.json").write_text("{}")
    code = cli.main(["bisect", "--good", "a==1", "--bad", "a==2", "--out", str(out), "--", "x.py"])
    err = capsys.readouterr().err
    assert code == 2 and "already holds a bisection" in err and "give a new --out" in err
    assert (out / "bisect.json").read_text() == "{}"


def test_one_command_for_both_stacks_says_what_differs() -> None:
    many = [f"pkg{i}" for i in range(2000)]
    text = same_stacks(many, ("python",))
    assert "differ in 2000 swappable component(s) (pkg0, pkg1, pkg2, pkg3, pkg4 and 1995 more)" in text
    assert "only non-swappable" not in text and "the build does not install the pins" in text
    assert same_stacks(["nvidia-driver"], ("python",)).startswith("only non-swappable components differ (nvidia")
