"""Hooks that pytest-gpuperf adds; implement them in a conftest.py or a plugin."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_gpuperf_stack(config: pytest.Config) -> dict[str, str] | None:
    """Extra stack components to record and diff (firmware, a vendor library); results of all hooks merge."""


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_machine(config: pytest.Config) -> str | None:
    """A name for this machine that replaces the identity read from the system (a scheduler's node name, say):
    baseline runs recorded under another name are another machine's. None: read it (machine/identity.py)."""


@pytest.hookspec
def pytest_gpuperf_judged(item: pytest.Item, results: list[Any]) -> None:
    """Called after a test's metrics were judged, with its list of ``session.MetricResult``."""


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_telemetry_reader(config: pytest.Config, device: str) -> Any:
    """The session's device telemetry source for ``device`` ("cpu" or "cuda"), opened once, on first use.

    Return a ``telemetry.DeviceReader``, a ``telemetry.TelemetryUnavailable`` saying why there is none (reported
    once in the summary), or None where no telemetry is expected. The default opens NVML or amdsmi on cuda runs
    and expects nothing on CPU; implement it to read another source or to replay recorded samples in tests.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_adapter(config: pytest.Config, name: str) -> Any:
    """The adapter ``perf.run_command(argv, adapter=name)`` reads a framework's output with (core/record/readings.py's
    ``Adapter``), or None for a name this implementation does not know. The default knows the built-in ones."""
