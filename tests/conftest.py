import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    # pytester's in-process runs drop modules first imported inside them, and numpy's C core cannot be loaded
    # twice in one process: import the heavy libraries the plugin uses once, before any test runs (not at
    # import time, so `pytest --help` stays free of torch).
    import numpy  # noqa: F401
    import scipy.stats  # noqa: F401
    import torch  # noqa: F401
