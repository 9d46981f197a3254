"""An installed plugin leaves a project that does not use it exactly as it was (issue 12, item 1).

pytest loads a pytest11 plugin into every run of the environment. A project with its own ``model``,
``precision``, ``device_mesh`` and ``perf`` fixtures, its own ``perf``/``training`` markers, a marker it never
registered (``micro``, once the plugin's) and a ``baselines/`` folder of its own must collect and run as with
``-p no:gpuperf``: same collected ids, same outcomes and output, same ``--strict-markers`` result, the same
``--markers`` list apart from the plugin's own ``gpuperf_*`` markers, and no torch import; with torch importable
and without it (a ``sitecustomize`` on PYTHONPATH makes ``import torch`` raise ModuleNotFoundError in the
pytest subprocess, as on a machine without torch). What a plugin cannot help adding is its own fixtures to
pytest's list of available ones (``--fixtures``, a "fixture not found" message): a project's fixture of the
same name wins over it.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

CONFTEST = """
import sys
from pathlib import Path

import pytest


@pytest.fixture(params=["small", "large"])
def model(request):
    return request.param


@pytest.fixture
def precision():
    return "fp32"


@pytest.fixture
def device_mesh():
    return "their mesh"


@pytest.fixture
def perf():
    return "their perf"


def pytest_unconfigure(config):
    Path(config.rootpath, "torch_loaded.txt").write_text(str("torch" in sys.modules))
"""

TESTS = """
import pytest


@pytest.mark.perf
def test_model(model, precision):
    assert model in ("small", "large") and precision == "fp32"


@pytest.mark.training
def test_mesh_and_perf(device_mesh, perf):
    assert (device_mesh, perf) == ("their mesh", "their perf")


@pytest.mark.parametrize("precision", ["bf16"])
def test_parametrized_by_the_test(precision):
    assert precision == "bf16"
"""

UNREGISTERED = """
import pytest


@pytest.mark.micro
def test_micro():
    pass
"""

BLOCK_TORCH = """
import importlib.abc
import sys


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
"""

TIMING = re.compile(r" in \d+\.\d+s")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\nmarkers =\n    perf: ours\n    training: ours too\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_project=TESTS, test_unregistered=UNREGISTERED)
    (pytester.path / "baselines" / "some-machine").mkdir(parents=True)
    (pytester.path / "baselines" / "some-machine" / "numbers.json").write_text('{"not": "a gpuperf file"')
    return pytester


def _run(project: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, pytest.RunResult]:
    """The same command with the plugin and without it."""
    return project.runpytest_subprocess(*args), project.runpytest_subprocess("-p", "no:gpuperf", *args)


def _text(result: pytest.RunResult) -> list[str]:
    return [TIMING.sub(" in Ns", line) for line in result.outlines + result.errlines]


def _assert_same(project: pytest.Pytester, *args: str) -> list[str]:
    with_plugin, without = _run(project, *args)
    assert with_plugin.ret == without.ret
    assert _text(with_plugin) == _text(without)
    assert (project.path / "torch_loaded.txt").read_text() == "False"
    return _text(with_plugin)


@pytest.mark.parametrize("torch_importable", [True, False], ids=["torch", "no-torch"])
def test_a_project_that_does_not_use_the_plugin_is_unchanged(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, torch_importable: bool
) -> None:
    if not torch_importable:
        blocker = project.path / "no_torch"
        blocker.mkdir()
        (blocker / "sitecustomize.py").write_text(BLOCK_TORCH)
        monkeypatch.setenv("PYTHONPATH", str(blocker))
        probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True)
        assert "ModuleNotFoundError: No module named 'torch'" in probe.stderr

    collected = _assert_same(project, "--co", "-q", "test_project.py")
    assert [line for line in collected if "::" in line] == [
        "test_project.py::test_model[small]",
        "test_project.py::test_model[large]",
        "test_project.py::test_mesh_and_perf",
        "test_project.py::test_parametrized_by_the_test[bf16]",
    ]
    ran = _assert_same(project, "-q", "-rA")
    assert any("5 passed, 1 warning" in line for line in ran), ran  # the unregistered marker warns
    strict = _assert_same(project, "-q", "--strict-markers")
    assert any("'micro' not found in `markers` configuration option" in line for line in strict), strict
    selected = _assert_same(project, "-q", "-m", "perf and not training", "test_project.py")
    assert any("2 passed, 2 deselected" in line for line in selected), selected

    with_plugin, without = _run(project, "--markers")
    assert with_plugin.ret == without.ret == 0
    assert any(line.startswith("@pytest.mark.gpuperf_models") for line in with_plugin.outlines)  # it was loaded
    assert _without_own_markers(with_plugin.outlines) == without.outlines


def _without_own_markers(lines: list[str]) -> list[str]:
    """``--markers`` output less the plugin's ``gpuperf_*`` entries (each a line and the blank line after it)."""
    kept: list[str] = []
    skip_blank = False
    for line in lines:
        if line.startswith("@pytest.mark.gpuperf_"):
            skip_blank = True
            continue
        if not (skip_blank and not line.strip()):
            kept.append(line)
        skip_blank = False
    return kept


def test_the_plugin_still_parametrizes_its_own_fixtures(pytester: pytest.Pytester) -> None:
    """The other side: a test that gets the plugin's model, precision and device_mesh is parametrized from the
    options, also through a project fixture that extends the plugin's (requests its own name)."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def precision(precision):
            return precision.upper()
        """
    )
    pytester.makepyfile(
        test_training="""
        def test_training(model, precision):
            pass

        def test_mesh(device_mesh):
            pass
        """
    )
    result = pytester.runpytest_subprocess(
        "--co", "-q", "--gpuperf-models", "tiny-llama", "--gpuperf-precisions", "fp32,bf16", "--gpuperf-mesh", "1 2"
    )
    assert [line for line in result.outlines if "::" in line] == [
        "test_training.py::test_training[tiny-llama-fp32]",
        "test_training.py::test_training[tiny-llama-bf16]",
        "test_training.py::test_mesh[mesh=1]",
        "test_training.py::test_mesh[mesh=2]",
    ]
