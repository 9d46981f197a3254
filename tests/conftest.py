import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    # pytester's in-process runs drop modules first imported inside them, and numpy's C core cannot be loaded
    # twice in one process: import the heavy libraries the plugin uses once, before any test runs (not at
    # import time, so `pytest --help` stays free of torch).
    import numpy  # noqa: F401
    import scipy.stats  # noqa: F401
    import torch  # noqa: F401


@pytest.fixture(autouse=True)
def _machine_state_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's own tests feed known samples: the real machine's load (other jobs on a shared CI box) must not
    turn their verdicts NOISY. Tests of the machine-state rule ask for it with --gpuperf-machine-check on."""
    monkeypatch.setenv("GPUPERF_MACHINE_CHECK", "off")
