"""Where the session's run state lives: one GpuperfSession per pytest process, in ``config.stash``.

The plugin module and the feature plugins (training, distributed, JUnit) reach the run state through here, so
none of them imports the plugin module. It also holds how a signal stops the session (``stop_on_signals``).
No torch, numpy or scipy at import time.
"""

from __future__ import annotations

import contextlib
import os
import signal
from functools import partial
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.core.config.settings import get_settings
from pytest_gpuperf.core.record.children import INTERRUPTING_SIGNALS, signals_interrupt

if TYPE_CHECKING:
    from pytest_gpuperf.core.session.session import GpuperfSession

session_key = pytest.StashKey["GpuperfSession"]()
reporting_key = pytest.StashKey[bool]()
stop_key = pytest.StashKey[tuple[contextlib.ExitStack, list[int]]]()
"""The handlers that make SIGTERM and SIGHUP stop the session as Ctrl-C does, and the signals received."""
finishing_key = pytest.StashKey[bool]()
"""Whether the session's tests have ended and it is finishing (tearing down, writing what finished)."""
SESSION_SIGNALS = tuple(sig for sig in INTERRUPTING_SIGNALS if sig != signal.SIGINT)
"""pytest's own SIGINT handling (a second Ctrl-C ends at once) is kept; the others take its path."""


def stop_on_signals(config: pytest.Config) -> None:
    """From now to ``restore_signals``: SIGTERM and SIGHUP end the session as Ctrl-C does (controller and xdist
    workers alike), so Slurm's --time, scancel or an evicted pod still leave the results of what finished."""
    stack = contextlib.ExitStack()
    received = stack.enter_context(signals_interrupt(SESSION_SIGNALS, defer_first=partial(_first_deferred, config)))
    config.stash[stop_key] = (stack, received)


def tests_ended(config: pytest.Config) -> None:
    """The session's tests have ended (or were stopped): what is left is its finish (fixtures torn down, xdist's
    workers closed, the results written), which a stop signal must not cut short."""
    config.stash[finishing_key] = True


def _first_deferred(config: pytest.Config, sig: int) -> bool:
    """Whether the first stop signal is noted rather than raised (a second one raises). During the finish:
    raised, it would abort pytest's sessionfinish hooks (xdist's teardown of its workers runs before the results
    are written) and lose every result, exit -2; noted, the session still ends with the signal's status and the
    interrupted marker. During the tests: where xdist's controller passed it on to its workers."""
    return config.stash.get(finishing_key, False) or _to_workers(config, sig)


def _to_workers(config: pytest.Config, sig: int) -> bool:
    """xdist's controller passes a stop signal on to its workers and keeps going: each worker ends its session
    as interrupted and sends what it finished, which the controller keeps (stopped at once, it would drop their
    results). A second signal stops the controller. False (it stops now) where there is no worker: no xdist, an
    xdist worker itself, or before the workers started."""
    dsession = config.pluginmanager.getplugin("dsession")  # xdist's controller (registered after this plugin)
    group = getattr(getattr(dsession, "nodemanager", None), "group", None)
    pids = [getattr(getattr(getattr(gateway, "_io", None), "popen", None), "pid", None) for gateway in group or ()]
    sent = False
    for pid in pids:
        if isinstance(pid, int):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
                sent = True
    return sent


def stop_signal(config: pytest.Config) -> int | None:
    """The signal (SIGTERM, SIGHUP) that stopped the session, if one did."""
    held = config.stash.get(stop_key, None)
    return held[1][0] if held and held[1] else None


def restore_signals(config: pytest.Config) -> None:
    held = config.stash.get(stop_key, None)
    if held is not None:
        held[0].close()


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
        profiler = config.pluginmanager.get_plugin("gpuperf-profiler")
        if profiler is not None:  # --gpuperf-profile: each test's summary counts the calls it timed
            session.gate = profiler.counting(session.gate)
        config.stash[session_key] = session
    return session
