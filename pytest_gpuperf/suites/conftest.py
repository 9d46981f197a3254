"""Fixtures shared by the suites."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def cpu_threads(perf: Any) -> Iterator[None]:
    """One thread on CPU: the machine's other work then steals whole timesteps instead of reshaping the math
    library's partition of the work, which keeps run-to-run noise lower."""
    import torch

    previous = torch.get_num_threads()
    if perf.device == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
