"""Where the session's run state lives: one GpuperfSession per pytest process, in ``config.stash``.

The plugin module and the feature plugins (training, distributed, JUnit) reach the run state through here, so
none of them imports the plugin module. No torch, numpy or scipy at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.core.config.settings import get_settings

if TYPE_CHECKING:
    from pytest_gpuperf.core.session.session import GpuperfSession

session_key = pytest.StashKey["GpuperfSession"]()
reporting_key = pytest.StashKey[bool]()


def reporting(config: pytest.Config) -> bool:
    """Whether this pytest process judges, saves baselines, writes results and prints the summary."""
    return config.stash.get(reporting_key, True)


def gpuperf_session(config: pytest.Config) -> GpuperfSession:
    """The session's run state, created on first use."""
    session = config.stash.get(session_key, None)
    if session is None:
        from pytest_gpuperf.core.session.session import GpuperfSession

        extra: dict[str, str] = {}
        for found in config.hook.pytest_gpuperf_stack(config=config):
            extra.update({str(k): str(v) for k, v in (found or {}).items()})
        # the runner's own name for itself first, then a conftest's (a scheduler's node name), then the system's
        machine = get_settings(config).machine_id or config.hook.pytest_gpuperf_machine(config=config)
        session = GpuperfSession(
            get_settings(config),
            extra_stack=extra,
            machine_name=str(machine) if machine is not None else None,
            telemetry=lambda device: config.hook.pytest_gpuperf_telemetry_reader(config=config, device=device),
            adapter_named=lambda name: config.hook.pytest_gpuperf_adapter(config=config, name=name),
        )
        config.stash[session_key] = session
    return session
