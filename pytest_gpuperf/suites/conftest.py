"""The suites' markers and shared fixtures.

The markers are registered here, not by the plugin: the plugin is loaded into every pytest run of an environment
that installs it, and generic names (perf, training, ...) would change other projects' ``--markers`` and
``--strict-markers`` runs. Suites of your own beside these register the markers they use the same way (or in
their ini file).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

MARKERS = (
    "perf: a performance or convergence test judged against stored baselines (pytest-gpuperf suites)",
    "training: a training workload with convergence and throughput assertions (pytest-gpuperf suites)",
    "inference: an inference workload: latency percentiles, throughput vs interactivity, output parity "
    "(pytest-gpuperf suites)",
    "micro: a kernel-level microbenchmark (GEMM, memory bandwidth, attention) (pytest-gpuperf suites)",
    "distributed: a multi-rank workload (strategies, collectives) (pytest-gpuperf suites)",
    "gpu_tier: the workload that scripts/gpu_check.sh runs on a GPU (selected with -m 'perf and gpu_tier')",
    "acceptance: node acceptance, every local device measured on its own against datasheet floors, for "
    "`gpuperf fleet` (pytest-gpuperf suites; not part of -m perf)",
    "burnin: sustained load per device for --gpuperf-burnin-minutes with health counters read (pytest-gpuperf "
    "suites; skips unless that option is given)",
    "frameworks: a user's framework (Megatron, TorchTitan, MaxText, vllm bench serve, SGLang bench_serving) run by "
    "perf.run_command on its tiny configuration (pytest-gpuperf suites; not part of -m perf)",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


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
