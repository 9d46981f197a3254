"""The defaults that differ between CPU and GPU, and the job's false-failure level: declared here, without pytest,
so the `gpuperf` command's help can quote them as the plugin's options (core/config/settings.py) use them."""

JOB_ALPHA = 0.01
"""The default family-wise false-failure level of a job (--gpuperf-job-alpha), shared by `gpuperf compare`."""

# Per-device defaults for settings that differ between CPU and GPU timing noise. Where each CPU figure was measured,
# and why the GPU has no sitting noise yet: docs/settings.md and benchmarks/README.md ("Between sittings").
# machine_noise is the prior sd between machines of one hardware key where no fleet measured it; its sources:
# docs/verdicts.md, "Another machine of the key".
DEVICE_DEFAULTS: dict[str, dict[str, float]] = {
    "cpu": {"threshold": 0.02, "noise_limit": 0.10, "run_noise": 0.015, "sitting_noise": 0.08, "machine_noise": 0.12},
    "cuda": {"threshold": 0.01, "noise_limit": 0.05, "run_noise": 0.003, "sitting_noise": 0.0, "machine_noise": 0.08},
}
