"""pytest plugin of the microbenchmark suite: the device timer fixture. No torch at import. (Its markers, ``micro``
and ``gpu_tier``, are the suites' own: pytest_gpuperf/suites/conftest.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def device_timer(perf: Any) -> Callable[[Callable[[], object], int], list[float]] | None:
    """The timer for ``perf.measure(timer=...)`` on this run's device: CUDA events with an L2 flush between
    repetitions on a GPU; None on CPU, where ``perf.measure``'s wall clock applies."""
    if perf.device != "cuda":
        return None
    from pytest_gpuperf.micro.timing import CudaEventTimer

    return CudaEventTimer()
