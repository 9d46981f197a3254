"""pytest-gpuperf: ML training and inference workloads as pytest tests with statistical, stack-keyed baselines.

Importing this package must stay cheap: nothing here imports torch.
"""

from typing import Any

__version__ = "0.1.0"

# Names resolved on first use (PEP 562) so that 'import pytest_gpuperf' loads nothing of the launcher.
_LAZY = {
    "launch": "pytest_gpuperf.distributed",
    "RankFailed": "pytest_gpuperf.distributed",
    "current_mesh": "pytest_gpuperf.distributed",
    "is_reporting_rank": "pytest_gpuperf.distributed",
    "FailureKind": "pytest_gpuperf.distributed",
    "LaunchError": "pytest_gpuperf.distributed",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_gpuperf' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
