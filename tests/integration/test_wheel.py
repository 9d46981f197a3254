"""The shipped suites run from an installed wheel, not the checkout (issue 12, item 2).

The wheel is built from a copy of the source (``pip wheel --no-deps``) and installed into a fresh venv. To avoid
a 1 GB install of torch and the other dependencies, that venv sees this venv's site-packages through a .pth
file: the dependencies come from there, the package itself from the wheel (the fresh venv's own site-packages
comes first on sys.path, and .pth files inside the borrowed folder, such as an editable install's finder, are
not run). From an empty folder, one shipped suite's CPU tier is run with ``--gpuperf-save`` into a baselines
folder of the test's choosing, by pytest and by ``gpuperf run``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from pytest_gpuperf.cli.main import main
from pytest_gpuperf.cli.suites import pytest_arguments

ROOT = Path(__file__).resolve().parents[2]
SELECTION = "test_memory_bandwidth and copy"  # one CPU-tier test of the micro suite: a few seconds
SUITE_FILE = "pytest_gpuperf__suites__test_micro.json"
OWN_SUITE = """
import pytest

@pytest.mark.perf  # registered by the shipped suites' conftest.py, which this run loads
def test_mine(perf):
    perf.record("rate", [100.0, 101.0, 99.0, 100.5, 99.5], unit="tok/s", higher_is_better=True)
"""


def _run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "PYTEST", "GPUPERF"))}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel installed; returns its bin folder."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"  # a copy, so the build leaves no build/ or egg-info in the checkout
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "baselines"),
    )
    # This venv's setuptools where it has one (no download); else pip fetches the build backend as usual.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(base), "."], source)
    [wheel] = base.glob("pytest_gpuperf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pytest_gpuperf/suites/test_micro.py" in names and "pytest_gpuperf/suites/conftest.py" in names
    assert any(name.startswith("pytest_gpuperf/suites/goldens/inference/") for name in names), names
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], base).stdout.strip()
    )
    borrowed = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site / "borrowed_dependencies.pth").write_text("".join(f"{path}\n" for path in borrowed))
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)], base)
    where = _run([str(python), "-c", "import pytest_gpuperf; print(pytest_gpuperf.__file__)"], base).stdout
    assert Path(where.strip()).is_relative_to(site), f"the package came from {where}, not the wheel"
    return venv / "bin"


def _saved(baselines: Path) -> dict:
    [path] = baselines.glob(f"*/{SUITE_FILE}")
    return json.loads(path.read_text())


def test_a_shipped_suite_runs_from_the_installed_wheel_with_chosen_baselines(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    chosen = tmp_path / "chosen"
    done = _run(
        [str(installed / "python"), "-m", "pytest", "--pyargs", "pytest_gpuperf.suites.test_micro", "-k", SELECTION,
         "-p", "no:cacheprovider", "--gpuperf-save", "--gpuperf-baselines", str(chosen)],
        empty,
    )  # fmt: skip
    assert "1 passed" in done.stdout, done.stdout
    assert "test_memory_bandwidth[copy]" in _saved(chosen)["tests"]
    assert list(empty.iterdir()) == []  # nothing written where it ran

    # gpuperf run, with a suite of the user's own beside the shipped one, into the same baselines folder
    user = tmp_path / "user"
    (user / "my_suites").mkdir(parents=True)
    (user / "my_suites" / "test_mine.py").write_text(OWN_SUITE)
    by_command = tmp_path / "by-command"
    done = _run(
        [str(installed / "gpuperf"), "run", "--suite", "micro", "--baselines", str(by_command), "--", "my_suites",
         "-k", f"({SELECTION}) or test_mine", "-p", "no:cacheprovider", "--gpuperf-save",
         "-W", "error::pytest.PytestUnknownMarkWarning"],
        user,
    )  # fmt: skip
    assert "2 passed" in done.stdout, done.stdout
    # the stable id, not the install path: the file the store names after pytest_gpuperf/suites/test_micro.py
    assert list(by_command.glob("*/pytest_gpuperf__suites__test_micro.json")), sorted(by_command.rglob("*.json"))
    assert "test_memory_bandwidth[copy]" in _saved(by_command)["tests"]
    mine = json.loads(next(by_command.glob("*/my_suites__test_mine.json")).read_text())
    assert list(mine["tests"]) == ["test_mine"]


def test_gpuperf_run_builds_the_pytest_command(tmp_path: Path) -> None:
    plain = argparse.Namespace(suite=[], baselines=None, pytest_args=[])
    assert pytest_arguments(plain) == ["--pyargs", "pytest_gpuperf.suites"]
    namespace = argparse.Namespace(suite=["micro", "training"], baselines=str(tmp_path), pytest_args=["--", "-k", "x"])
    assert pytest_arguments(namespace) == [
        "--pyargs",
        "pytest_gpuperf.suites.test_micro",
        "pytest_gpuperf.suites.test_training",
        "--gpuperf-baselines",
        str(tmp_path.resolve()),
        "-k",
        "x",
    ]


def test_gpuperf_run_names_an_unknown_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--suite", "trainign"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gpuperf run: error: unknown suite 'trainign'; "
        "shipped: acceptance, distributed, frameworks, inference, micro, training"
    )
