"""Multi-rank runs for tests: ``launch()`` spawns (and reuses) ranks or, under torchrun, runs as one of them.

Importing this package imports nothing but itself (names resolve on first use), so the pytest plugin can load
``distributed.plugin`` cheaply; torch is imported when ``launch()`` is first called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.distributed.devices import assign_worker_devices, devices_for_worker
    from pytest_gpuperf.distributed.environment import is_reporting_rank, torchrun_environment
    from pytest_gpuperf.distributed.errors import FailureKind, LaunchError, RankFailed, RankFailure
    from pytest_gpuperf.distributed.launch import launch
    from pytest_gpuperf.distributed.pool import shutdown
    from pytest_gpuperf.distributed.rank import current_mesh

__all__ = [
    "assign_worker_devices",
    "devices_for_worker",
    "is_reporting_rank",
    "torchrun_environment",
    "FailureKind",
    "LaunchError",
    "RankFailed",
    "RankFailure",
    "launch",
    "shutdown",
    "current_mesh",
]

_WHERE = {
    "assign_worker_devices": "devices",
    "devices_for_worker": "devices",
    "is_reporting_rank": "environment",
    "torchrun_environment": "environment",
    "FailureKind": "errors",
    "LaunchError": "errors",
    "RankFailed": "errors",
    "RankFailure": "errors",
    "launch": "launch",
    "shutdown": "pool",
    "current_mesh": "rank",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_gpuperf.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_gpuperf.distributed.{module}"), name)
    globals()[name] = value
    return value
