"""The one way from settings to rules: ``policy_for`` forms the ``Rules`` of a stored-baseline verdict,
``paired_policy_for`` the ``PairedRules`` of an A/B comparison, for the session, `gpuperf compare`, `variance`,
`history` and `ab` alike; the per-device defaults they fall back on; and the other settings a reader of results
judges by (``machine_checked``).

Each rule setting is, in this order: the value given (an option, a command-line flag); else the one a results
document recorded in its "settings" (a number in the setting's range; anything else is not read); else the default
of the device those settings name ("device": "cuda" reads the GPU's), the CPU's where they name none: a results
file without a threshold reads 2% (docs/settings.md). Imports no pytest and, until it forms a rule, no numpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pytest_gpuperf.core.stats.paired import PairedRules
    from pytest_gpuperf.core.stats.unpaired import Rules

JOB_ALPHA = 0.01
"""The default family-wise false-failure level of a job (--gpuperf-job-alpha)."""

# Per-device defaults for settings that differ between CPU and GPU timing noise. Where each CPU figure was measured,
# and why the GPU has no sitting noise yet: docs/settings.md and benchmarks/README.md ("Between sittings").
# machine_noise is the prior sd between machines of one hardware key where no fleet measured it; its sources:
# docs/verdicts.md, "Another machine of the key".
DEVICE_DEFAULTS: dict[str, dict[str, float]] = {
    "cpu": {"threshold": 0.02, "noise_limit": 0.10, "run_noise": 0.015, "sitting_noise": 0.08, "machine_noise": 0.12},
    "cuda": {"threshold": 0.01, "noise_limit": 0.05, "run_noise": 0.003, "sitting_noise": 0.0, "machine_noise": 0.08},
}
RULE_SETTINGS = (*DEVICE_DEFAULTS["cpu"], "job_alpha")
"""The settings a ``Rules`` takes from settings (``Settings`` fields and results' "settings" keys of these names)."""


def recorded_value(recorded: Mapping[str, Any], name: str) -> float | None:
    """The value of ``name`` a results document's settings hold, if it is one ``Rules`` takes: a fraction, 0 only
    for sitting_noise (a 0 machine_noise, from sessions before the device prior, meant "not measured"), job_alpha
    below 0.5. None otherwise."""
    value = recorded.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    low = value > 0 or (name == "sitting_noise" and value == 0)
    return float(value) if low and value < (0.5 if name == "job_alpha" else 1) else None


def setting(name: str, *, given: float | None = None, recorded: Mapping[str, Any] | None = None,
            device: str | None = None) -> float:  # fmt: skip
    """One rule setting: ``given``, else ``recorded``'s, else the default of ``device`` (None: the device
    ``recorded`` names)."""
    if given is not None:
        return given
    recorded = recorded or {}
    value = recorded_value(recorded, name)
    if value is not None:
        return value
    device = device if device is not None else recorded.get("device")
    return JOB_ALPHA if name == "job_alpha" else DEVICE_DEFAULTS["cuda" if device == "cuda" else "cpu"][name]


def first_recorded(settings: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The settings of the first of several results (a folder of runs) that records any."""
    return next((block for block in settings if block), {})


def machine_checked(recorded: Iterable[Mapping[str, Any]]) -> bool:
    """Whether results were judged by the machine's state (``machine_check`` "on", the default: results written
    before the option existed say nothing and are judged with it, as a session would judge them now)."""
    return all(block.get("machine_check", "on") == "on" for block in recorded)


def policy_for(
    *,
    given: Mapping[str, float | None] | None = None,
    recorded: Mapping[str, Any] | None = None,
    device: str | None = None,
    family_size: int = 1,
) -> Rules:
    """The ``Rules`` of a stored-baseline comparison: each of RULE_SETTINGS by ``setting`` (None in ``given``: not
    given), over a job that decides ``family_size`` metrics."""
    from pytest_gpuperf.core.stats.unpaired import Rules

    given = given or {}
    values = {name: setting(name, given=given.get(name), recorded=recorded, device=device) for name in RULE_SETTINGS}
    return Rules(**cast(dict[str, Any], values), family_size=family_size)


def paired_policy_for(
    *, threshold: float | None, recorded: Mapping[str, Any] | None, alpha: float, min_pairs: int, max_pairs: int
) -> PairedRules:
    """The ``PairedRules`` of an A/B comparison: its threshold by ``setting`` (the A side's results recorded),
    ``alpha`` the invocation's level already shared among its metrics."""
    from pytest_gpuperf.core.stats.paired import PairedRules

    threshold = setting("threshold", given=threshold, recorded=recorded)
    return PairedRules(threshold=threshold, alpha=alpha, min_pairs=min_pairs, max_pairs=max_pairs)
