"""Matrix-multiply throughput on the selected device: the smallest workload that still says whether a stack
change moved the speed of the math library (MKL/oneDNN on CPU, cuBLAS/hipBLASLt on GPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.perf

# (matrix size, products per timed call): ~3 ms per call on one CPU thread, ~1 ms on a GPU.
SHAPES = {"cpu": (256, 10), "cuda": (8192, 4)}


@pytest.fixture
def one_cpu_thread(perf) -> Iterator[None]:
    """On CPU, time one thread: the machine's other work then steals whole timesteps rather than reshaping
    the math library's thread partition, which keeps run-to-run noise lower."""
    import torch

    previous = torch.get_num_threads()
    if perf.device == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_matmul(perf, one_cpu_thread, dtype_name: str) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    size, products = SHAPES[perf.device]
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(perf.device, dtype)
    b = torch.randn(size, size, generator=generator).to(perf.device, dtype)

    def products_once() -> None:
        for _ in range(products):
            torch.mm(a, b)

    sync = torch.cuda.synchronize if perf.device == "cuda" else None
    samples = perf.measure("matmul_time", products_once, sync=sync)
    assert all(sample > 0 for sample in samples)
