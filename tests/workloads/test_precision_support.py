"""Which precisions a device can train in, and why not, without a GPU or torchao: the GPU check's machine has a
Hopper GPU and no torchao, so what its fp8 tests do (skip, with the reason) and what MFU is computed against are
decided here. Runs whether or not torchao is installed (tests/workloads/test_precision.py needs it)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pytest_gpuperf.models import get_spec
from pytest_gpuperf.training import precision


@pytest.fixture
def hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch reports one compute capability 9.0 CUDA device (an H100/H200) and no ROCm."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    precision._torchao_float8_problem.cache_clear()
    yield
    precision._torchao_float8_problem.cache_clear()


def _without_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "torchao" or n.startswith("torchao.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao.* now raises ModuleNotFoundError


def test_on_hopper_without_torchao_fp8_skips_saying_so_and_bf16_runs(
    hopper: None, fresh_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_torchao(monkeypatch)
    for name in ("fp8", "fp8-rowwise"):
        reason = precision.unsupported_reason(name, "cuda")
        assert (
            reason == f"{name} on cuda: fp8 training is torchao's float8 recipe, and torchao is not installed "
            "(pip install torchao)"
        )
    for name in ("fp32", "tf32", "bf16", "fp16", "fp4"):
        assert precision.unsupported_reason(name, "cuda") is None, name
    assert precision.execution_mode("bf16", "cuda") == "native"


def test_a_torchao_that_fails_to_import_skips_fp8_instead_of_erroring(
    hopper: None, fresh_probe: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A torchao wheel built for another torch dies on import with a RuntimeError or OSError (missing
    # operator or symbol), not an ImportError.
    (tmp_path / "float8.py").write_text("raise RuntimeError('undefined symbol: _ZN2at4_ops')\n")
    package = types.ModuleType("torchao")
    package.__path__ = [str(tmp_path)]
    _without_torchao(monkeypatch)
    monkeypatch.setitem(sys.modules, "torchao", package)
    reason = precision.unsupported_reason("fp8", "cuda")
    assert reason is not None and "torchao failed to import (RuntimeError: undefined symbol" in reason
    assert f"built for torch {torch.__version__}" in reason


def test_ada_cannot_run_the_rowwise_recipe(monkeypatch: pytest.MonkeyPatch, hopper: None) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    reason = precision.unsupported_reason("fp8-rowwise", "cuda")
    assert reason is not None and "needs compute capability 9.0+, this GPU is 8.9" in reason


def test_mfu_on_cuda_is_against_the_bf16_peak_and_absent_for_mixed_formats(hopper: None) -> None:
    model = get_spec("tiny-llama").build(seed=0)  # prepare converts in place; it does not move the model
    bf16 = precision.prepare(model, "bf16", "cuda")
    assert (bf16.execution, bf16.mfu_peak_dtype, bf16.scaler) == ("native", "bf16", None)
    fp4 = precision.prepare(get_spec("tiny-llama").build(seed=0), "fp4", "cuda")
    assert fp4.execution == "emulated" and fp4.mfu_peak_dtype is None
    assert precision.PRECISIONS["fp8"].peak_dtype is None  # fp8 matmuls inside bf16 autocast: no single peak
