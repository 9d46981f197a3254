"""Session set-up of the project's own tests, and which of them run without torch.

The tests are split by directory, and the directory decides whether a module may need torch: those in TORCH_FREE
must pass in a venv with only pytest, numpy, scipy, junitparser, filelock, hypothesis and defusedxml (``.ci/run``
runs them there); workloads/ and integration/ need the full development venv. Where torch cannot be imported, the
other directories are left out of collection, and the header says so. Under pytest-xdist the modules that cost
most start first and idle workers take pending tests from busy ones (STARTED_FIRST), so that no long test starts
last on one worker while the other idles.
"""

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent

TORCH_FREE = frozenset({"unit", "plugin", "cli"})
"""The test directories whose modules pass without torch: they neither import it nor run code that needs it (tests
of the plugin itself included: its runs record "torch: not installed" in the stack). A test in them that needs
torch for one case skips that case with pytest.importorskip; a module that needs torch, or another package of the
full venv (pytest-xdist, the report or sign extras), belongs in workloads/ or integration/."""


STARTED_FIRST = (
    "workloads/test_training_regressions_caught.py",
    "integration/test_docs.py",
    "workloads/test_engine_transformers.py",
    "workloads/test_slurm.py",
    "workloads/test_acceptance_tier.py",
    "workloads/test_rank_processes.py",
    "integration/test_bisect.py",
    "workloads/test_multinode.py",
    "integration/test_upgrade_comparison.py",
    "integration/test_mlperf_training.py",
    "integration/test_ab.py",
    "integration/test_confirmation.py",
    "workloads/test_loadgen.py",
    "workloads/test_launch.py",
    "integration/test_time_budget.py",
)
"""The modules with the most test seconds, most first (``--durations`` of ``pytest tests -n 2``), collected before
all others in this order, each module's tests kept together for its module-scoped fixtures. With the work-stealing
scheduler (pytest_xdist_make_scheduler) a worker that runs out of tests takes the tail of the other's queue: the
light tests at the end fill the gaps, rather than a long test starting last after the other worker ran out."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {name: rank for rank, name in enumerate(STARTED_FIRST)}

    def rank(item: pytest.Item) -> int:
        path = item.path.relative_to(HERE).as_posix() if item.path.is_relative_to(HERE) else ""
        return first.get(path, len(first))

    items.sort(key=rank)  # stable: the order within a module and among the other modules is unchanged


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Work stealing where the default load scheduler would run (``-n 2`` alone, as README and .ci/run give it): in
    pyproject's addopts ``--dist`` would break every pytest run beside it that turns xdist off (``-p no:xdist``,
    as confirmation's fresh sessions do)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)


def _torch_importable() -> bool:
    """Found without importing it (that costs seconds, and `pytest --help` must stay free of torch)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a meta-path hook that refuses torch, as tests/plugin/test_isolation.py uses
        return False


TORCH = _torch_importable()


def _needs_torch(path: Path) -> bool:
    """Whether ``path`` is, or lies in, a directory of tests/ outside TORCH_FREE (its first directory decides)."""
    if not path.is_relative_to(HERE):
        return False
    parts = path.relative_to(HERE).parts
    in_a_directory = len(parts) > 1 or (len(parts) == 1 and path.is_dir())
    return in_a_directory and parts[0] not in TORCH_FREE


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if TORCH:
        return None
    return _needs_torch(collection_path) or None


def pytest_report_header(config: pytest.Config) -> str | None:
    if TORCH:
        return None
    left_out = sorted(
        path.name for path in HERE.iterdir() if path.name not in TORCH_FREE and any(path.glob("test_*.py"))
    )
    return (
        f"torch is not importable: {', '.join(f'{name}/' for name in left_out)} left out; only the torch-free "
        f"test directories {', '.join(f'{name}/' for name in sorted(TORCH_FREE))} run (tests/conftest.py)"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    # pytester's in-process runs drop modules first imported inside them, and numpy's C core cannot be loaded
    # twice in one process: import the heavy libraries the plugin uses once, before any test runs (not at
    # import time, so `pytest --help` stays free of torch).
    import numpy  # noqa: F401
    import scipy.stats  # noqa: F401

    if TORCH:
        import torch

    # Each pytest-xdist worker gets its share of the cores for math libraries' threads, as do the processes the
    # tests start (OMP_NUM_THREADS, unless the caller set it): two workers whose torch each ran a thread per core
    # oversubscribe a 2-core box, and on a loaded one OpenMP's spinning barriers make a test many times slower.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
        if TORCH:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(autouse=True, scope="session")
def _machine_state_not_judged() -> Iterator[None]:
    """The project's own tests feed known samples: the real machine's load (other jobs on a shared CI box) must not
    turn their verdicts NOISY. Tests of the machine-state rule ask for it with --gpuperf-machine-check on.
    Session-scoped, so that module-scoped fixtures running real sessions (cli/test_analysis_commands.py's runs) see
    it too: a function-scoped one is set up after them.

    The inner pytest sessions (pytester) also run without CI and BUILD_NUMBER: pytest prints a failure's whole
    message in its short summary when they are set, so the same inner run would print differently on the CI box
    than on a developer's, and tests that read that output would depend on where they run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUPERF_MACHINE_CHECK", "off")
        patch.delenv("CI", raising=False)
        patch.delenv("BUILD_NUMBER", raising=False)
        yield


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Slurm of 4 nodes (n1..n4) on loopback for this session, stopped after it with nothing left running.
    Under pytest-xdist each worker that asks gets its own (its own ports and folder). Skips naming what is missing
    (root, Debian's slurmctld/slurmd/slurm-client/munge: .ci/run installs them)."""
    from pytest_gpuperf.slurm.local import LocalSlurm, missing

    reason = missing()
    if reason is not None:
        pytest.skip(f"no local Slurm: {reason}")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=4)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
