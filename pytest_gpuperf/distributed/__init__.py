"""Multi-rank runs for tests: ``launch()`` spawns (and reuses) ranks or, under torchrun, runs as one of them.

Importing this package does not import torch; the launcher imports it when first called.
"""

from pytest_gpuperf.distributed.devices import assign_worker_devices, devices_for_worker
from pytest_gpuperf.distributed.environment import is_reporting_rank, torchrun_environment
from pytest_gpuperf.distributed.errors import FailureKind, LaunchError, RankFailed, RankFailure
from pytest_gpuperf.distributed.launch import launch
from pytest_gpuperf.distributed.pool import shutdown
from pytest_gpuperf.distributed.rank import current_mesh

__all__ = [
    "FailureKind",
    "LaunchError",
    "RankFailed",
    "RankFailure",
    "assign_worker_devices",
    "current_mesh",
    "devices_for_worker",
    "is_reporting_rank",
    "launch",
    "shutdown",
    "torchrun_environment",
]
