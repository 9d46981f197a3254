"""Settings of a judging CPU session for tests that build a GpuperfSession by hand (no pytest options parsed)."""

from pathlib import Path
from typing import Any

from pytest_gpuperf.core.config.settings import Settings


def cpu_settings(baselines_dir: Path, **overrides: Any) -> Settings:
    """The CPU defaults, judging and not saving; ``overrides`` replace any field."""
    fields: dict[str, Any] = {
        "baselines_dir": baselines_dir,
        "save": False,
        "results_path": None,
        "device_request": "cpu",
        "threshold": None,
        "noise_limit": None,
        "run_noise": None,
        "repeats": 10,
        "warmup": 0,
        "strict": False,
        "baseline_runs": 5,
        "confirm": 1,
        "remeasure": 2,
        # Machine state and sequential sampling stay off here (the options' defaults turn them on): the tests that
        # build a session by hand judge only the samples they script; those that test either turn it on.
        "machine_check": "off",
        "extend": 0,
        "extend_seconds": 0.0,
    }
    return Settings(**(fields | overrides))


def this_machine() -> dict[str, str]:
    """The context key a baseline run recorded on this machine carries (core/session/session.py accept): hand-built runs
    that stand for this machine's own add it, so the verdict compares like with like, not across machines."""
    from pytest_gpuperf.machine.identity import read_identity

    return {"machine_id": read_identity().id}
