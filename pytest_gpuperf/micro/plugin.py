"""pytest plugin of the microbenchmark suite: its markers and the device timer fixture. No torch at import."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "micro: a kernel-level microbenchmark (GEMM, memory bandwidth, attention) (pytest-gpuperf)"
    )
    config.addinivalue_line(
        "markers",
        "gpu_tier: the workload that scripts/gpu_check.sh runs on a GPU (selected with -m 'perf and gpu_tier')",
    )


@pytest.fixture
def device_timer(perf: Any) -> Callable[[Callable[[], object], int], list[float]] | None:
    """The timer for ``perf.measure(timer=...)`` on this run's device: CUDA events with an L2 flush between
    repetitions on a GPU; None on CPU, where ``perf.measure``'s wall clock applies."""
    if perf.device != "cuda":
        return None
    from pytest_gpuperf.micro.timing import cuda_event_timer

    return cuda_event_timer()
