"""The built-in adapter names of ``perf.run_command`` (the default ``pytest_gpuperf_adapter``; a conftest.py's own
implementation is asked first and may add or replace names)."""

from __future__ import annotations

from typing import Any

import pytest

NAMES = ("megatron", "torchtitan", "maxtext", "vllm-bench", "sglang-bench", "mlperf")


@pytest.hookimpl(trylast=True)
def pytest_gpuperf_adapter(config: pytest.Config, name: str) -> Any:
    if name == "megatron":
        from pytest_gpuperf.frameworks.megatron import ADAPTER as megatron

        return megatron
    if name == "torchtitan":
        from pytest_gpuperf.frameworks.torchtitan import ADAPTER as torchtitan

        return torchtitan
    if name == "maxtext":
        from pytest_gpuperf.frameworks.maxtext import ADAPTER as maxtext

        return maxtext
    if name == "vllm-bench":
        from pytest_gpuperf.frameworks.serving import VLLM

        return VLLM
    if name == "sglang-bench":
        from pytest_gpuperf.frameworks.serving import SGLANG

        return SGLANG
    if name == "mlperf":
        from pytest_gpuperf.frameworks.mlperf import ADAPTER as mlperf

        return mlperf
    return None
