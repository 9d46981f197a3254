"""pytest hooks of the distributed area: device split per xdist worker, rank pools stopped with the session.

Listed in the foundation's ``pytest_plugins``; imports nothing heavy (the pool module only if a test used it).
"""

from __future__ import annotations

import os
import sys

import pytest

from pytest_gpuperf.distributed.devices import assign_worker_devices


def pytest_configure(config: pytest.Config) -> None:
    # Before any test touches CUDA/ROCm: afterwards the visibility variable is no longer read.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assign_worker_devices()


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = sys.modules.get("pytest_gpuperf.distributed.pool")
    if pool is not None:
        pool.shutdown()
