"""core/verdict/policy.py: the one fallback from settings, live or recorded in a results document, to rules."""

from __future__ import annotations

from pytest_gpuperf.core.verdict.policy import DEVICE_DEFAULTS, JOB_ALPHA, first_recorded, paired_policy_for, policy_for


def test_a_setting_is_the_given_else_the_recorded_else_the_recorded_devices_default() -> None:
    cpu, cuda = DEVICE_DEFAULTS["cpu"], DEVICE_DEFAULTS["cuda"]
    assert policy_for(recorded={}).threshold == cpu["threshold"]  # a results file that names nothing: the CPU's
    gpu_file = {"device": "cuda", "noise_limit": 0.3}  # a GPU results file without a threshold: the GPU's
    rules = policy_for(recorded=gpu_file)
    assert (rules.threshold, rules.noise_limit, rules.run_noise) == (cuda["threshold"], 0.3, cuda["run_noise"])
    assert policy_for(given={"threshold": 0.07, "noise_limit": None}, recorded=gpu_file).threshold == 0.07
    assert policy_for(given={"noise_limit": None}, recorded=gpu_file).noise_limit == 0.3  # None: not given
    # a live session: its device, nothing recorded
    assert policy_for(given={"job_alpha": 0.05}, device="cuda", family_size=3).sitting_noise == cuda["sitting_noise"]


def test_a_recorded_value_outside_its_range_is_not_read() -> None:
    odd = {"threshold": 2, "noise_limit": True, "run_noise": "1%", "sitting_noise": 0, "machine_noise": 0,
           "job_alpha": 0.7}  # fmt: skip
    rules = policy_for(recorded=odd)
    cpu = DEVICE_DEFAULTS["cpu"]
    assert (rules.threshold, rules.noise_limit, rules.run_noise) == (
        cpu["threshold"],
        cpu["noise_limit"],
        cpu["run_noise"],
    )
    assert rules.sitting_noise == 0  # 0 switches the shift between sittings off; a 0 machine_noise meant "not measured"
    assert (rules.machine_noise, rules.job_alpha) == (cpu["machine_noise"], JOB_ALPHA)


def test_a_folder_reads_its_first_recorded_settings_and_ab_its_a_sides() -> None:
    assert first_recorded([{}, {"threshold": 0.04}, {"threshold": 0.09}]) == {"threshold": 0.04}
    assert (
        paired_policy_for(threshold=None, recorded={"device": "cuda"}, alpha=0.01, min_pairs=2, max_pairs=4).threshold
        == (DEVICE_DEFAULTS["cuda"]["threshold"])
    )
