"""The defaults that differ between CPU and GPU, and the job's false-failure level: declared here, without pytest,
so the `gpuperf` command's help can quote them as the plugin's options (core/settings.py) use them."""

JOB_ALPHA = 0.01
"""The default family-wise false-failure level of a job (--gpuperf-job-alpha), shared by `gpuperf compare`."""

# Per-device defaults for settings that differ between CPU and GPU timing noise. The CPU run-noise prior is the
# between-run sd of a run's median measured on a shared 2-core VM (1.3-2%, benchmarks/README.md): at 0.5% a
# fifth-run baseline recorded in a quiet minute flagged 2 of 20 unchanged runs REGRESSED even after confirmation.
# The CPU sitting-noise prior is the shift of 30-31 tests' timings between a baseline's sitting and two main jobs
# the next day on that VM, nothing changed (median 8.8% and 10.6% slower, rms 11.7% and 13.6%, against an rms
# 5-6% between the baseline's own runs: 6.4-8.5% per sitting; benchmarks/between_sittings.py). On a GPU it is
# not measured yet, so none is added there until it is (0: a GPU runner's baseline is judged as before;
# --gpuperf-sitting-noise sets one).
DEVICE_DEFAULTS: dict[str, dict[str, float]] = {
    "cpu": {"threshold": 0.02, "noise_limit": 0.10, "run_noise": 0.015, "sitting_noise": 0.08},
    "cuda": {"threshold": 0.01, "noise_limit": 0.05, "run_noise": 0.003, "sitting_noise": 0.0},
}
