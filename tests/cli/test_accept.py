"""`gpuperf accept`'s bad input: one line and exit 2 before any step starts (tests/workloads/test_slurm.py runs
the command in a real local Slurm)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def accept(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "accept", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, **(env or {})},
    )


@pytest.fixture
def fake_srun(tmp_path: Path) -> dict[str, str]:
    """A PATH whose srun must never run (bad input is refused before any step)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\necho srun ran >&2\nexit 99\n")
    (bin_dir / "srun").chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--nodelist", "n[1-"], {}, "node list 'n[1-': '[' is never closed (from --nodelist)"),
        ([], {"SLURM_JOB_NODELIST": "n[2-1]"}, "'n[2-1]': range '2-1' runs backwards (from SLURM_JOB_NODELIST)"),
        ([], {}, "no nodes: SLURM_JOB_NODELIST is unset"),
        (["--nodes", "4"], {"SLURM_JOB_NODELIST": "n[1-3]"}, "--nodes 4 asked, but SLURM_JOB_NODELIST has 3"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, fake_srun: dict[str, str], args: list[str], env: dict[str, str], message: str
) -> None:
    done = accept("--out", str(tmp_path / "out"), *args, env={**fake_srun, **env})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gpuperf accept: error: ")
    assert message in done.stderr
    assert "srun ran" not in done.stderr


def test_no_slurm_on_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = accept("--out", str(tmp_path / "out"), "--nodelist", "n1", env={"PATH": str(empty)})
    assert done.returncode == 2
    assert done.stderr == (
        "gpuperf accept: error: no srun on PATH: gpuperf accept runs inside a Slurm allocation (sbatch "
        "examples/slurm/acceptance.sbatch) on a machine with Slurm's client commands\n"
    )
