"""Session set-up of the project's own tests, and which of them run without torch.

The torch-free modules (statistics, store, settings, command line, launcher logic, ...) must pass in a venv with
only pytest, numpy, scipy, junitparser, filelock and hypothesis; ``.ci/run`` runs them there. Where torch cannot
be imported, the test modules not listed in TORCH_FREE are left out of collection, and the header says so.
"""

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

TORCH_FREE = frozenset(
    {
        "test_bounded_reads.py",
        "test_ab_hostile.py",
        "test_changepoints.py",
        "test_cli.py",
        "test_cli_inputs.py",
        "test_cli_outputs.py",
        "test_convergence.py",
        "test_distributed_env.py",
        "test_distributed_mesh.py",
        "test_docstrings.py",
        "test_engine_faults.py",
        "test_fingerprint.py",
        "test_fleet.py",
        "test_framework_adapters.py",
        "test_gpu_check.py",
        "test_inference_sizing.py",
        "test_isolation.py",
        "test_job_verdict.py",
        "test_layout.py",
        "test_micro_suite.py",
        "test_peaks.py",
        "test_plugin.py",
        "test_report_inputs.py",
        "test_record_values.py",
        "test_run_command.py",
        "test_settings_declared_once.py",
        "test_stats.py",
        "test_supervised.py",
        "test_store.py",
        "test_telemetry.py",
        "test_telemetry_verdict.py",
        "test_testid.py",
        "test_training_plugin.py",
        "test_training_tiers.py",
    }
)
"""Test modules that pass without torch: they neither import it nor run code that needs it (tests of the plugin
itself included: its runs record "torch: not installed" in the stack). A test in them that needs torch for one
case skips that case with pytest.importorskip."""


def _torch_importable() -> bool:
    """Found without importing it (that costs seconds, and `pytest --help` must stay free of torch)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a meta-path hook that refuses torch, as tests/test_isolation.py uses
        return False


TORCH = _torch_importable()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if TORCH or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return collection_path.name not in TORCH_FREE or None


def pytest_report_header(config: pytest.Config) -> str | None:
    if TORCH:
        return None
    return f"torch is not importable: only the {len(TORCH_FREE)} torch-free test modules (tests/conftest.py) run"


def pytest_sessionstart(session: pytest.Session) -> None:
    # pytester's in-process runs drop modules first imported inside them, and numpy's C core cannot be loaded
    # twice in one process: import the heavy libraries the plugin uses once, before any test runs (not at
    # import time, so `pytest --help` stays free of torch).
    import numpy  # noqa: F401
    import scipy.stats  # noqa: F401

    if TORCH:
        import torch  # noqa: F401


@pytest.fixture(autouse=True, scope="session")
def _machine_state_not_judged() -> Iterator[None]:
    """The project's own tests feed known samples: the real machine's load (other jobs on a shared CI box) must not
    turn their verdicts NOISY. Tests of the machine-state rule ask for it with --gpuperf-machine-check on.
    Session-scoped, so that module-scoped fixtures running real sessions (test_cli's runs) see it too: a
    function-scoped one is set up after them.

    The inner pytest sessions (pytester) also run without CI and BUILD_NUMBER: pytest prints a failure's whole
    message in its short summary when they are set, so the same inner run would print differently on the CI box
    than on a developer's, and tests that read that output would depend on where they run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUPERF_MACHINE_CHECK", "off")
        patch.delenv("CI", raising=False)
        patch.delenv("BUILD_NUMBER", raising=False)
        yield
