"""Hooks that pytest-gpuperf adds; implement them in a conftest.py or a plugin."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_gpuperf_stack(config: pytest.Config) -> dict[str, str] | None:
    """Extra stack components to record and diff (firmware, a vendor library); results of all hooks merge."""


@pytest.hookspec
def pytest_gpuperf_judged(item: pytest.Item, results: list[Any]) -> None:
    """Called after a test's metrics were judged, with its list of ``session.MetricResult``."""
