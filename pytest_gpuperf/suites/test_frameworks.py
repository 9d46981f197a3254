"""The users' own frameworks as perf tests: one test per framework on its tiny/debug configuration, run by
``perf.run_command`` with that framework's adapter. Marked ``frameworks``, not ``perf``: ``pytest -m frameworks``
runs them, and a test skips with the exact reason where its framework or its device is absent.

vLLM's ``bench serve`` (``.venv-vllm`` on a CPU), SGLang's ``bench_serving`` (``.venv-sglang`` on a CPU, both
against ``transformers serve``), Megatron-LM (a checkout in ``GPUPERF_MEGATRON_LM``), TorchTitan (a checkout in
``GPUPERF_TORCHTITAN``) and MaxText (``GPUPERF_MAXTEXT_PYTHON``). What each needs, and which have run where:
docs/frameworks.md.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.core.config.settings import SettingError, environment_setting, environment_spec
from pytest_gpuperf.suites.serving_clients import BENCH_CLIENTS, BenchClient, ServingProxy

pytestmark = pytest.mark.frameworks

TINY = "tiny-llama"


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def _checkout(setting: str, marker: str, why: str) -> Path:
    env = environment_spec(setting).env
    folder: str | None = environment_setting(setting)
    if not folder:
        pytest.skip(f"{env} is not set: name a checkout holding {marker} ({why})")
    if not (Path(folder) / marker).exists():
        pytest.skip(f"{env}={folder} holds no {marker}")
    return Path(folder)


def _serve(kind: str, tmp_path_factory: pytest.TempPathFactory, device: str) -> tuple[Any, Any, str]:
    """A launched server of ``kind`` on the suite's tiny Llama: (its pool, its engine, the model folder whose
    tokenizer the benchmark client reads)."""
    from pytest_gpuperf.inference.servers import EngineChoice, ServerPool

    pool = ServerPool(choice=EngineChoice(kind), workdir=tmp_path_factory.mktemp(f"frameworks-{kind}"))
    dtype = "float32" if device == "cpu" else "bfloat16"
    engine = pool.engine(model=TINY, max_len=128, device=device, dtype=dtype)
    # transformers serve names its model by the folder; vLLM and SGLang by the served name (servers.py)
    folder = (
        engine.model
        if kind == "transformers"
        else str(pool.model_folder(TINY, spec=None, max_len=4096, device=device, dtype=dtype))
    )
    from pytest_gpuperf.inference.requests import Request

    # a fresh server's first requests run slower: warm it, or the first measured run would hold its warm-up
    warm = [Request(id=i, prompt=tuple((7 * i + j) % 200 for j in range(16)), max_new_tokens=32) for i in range(16)]
    engine.generate(warm, concurrency=2)
    return pool, engine, folder


REQUESTS = 96
"""Prompts of each serving benchmark run (the clients' commands: suites/serving_clients.py)."""


def _bench_served_model(perf: Any, tmp_path_factory: pytest.TempPathFactory, client: BenchClient) -> None:
    """Run a serving benchmark client against the tiny Llama: on a GPU with the client's engine installed its own
    server, else transformers serve behind a ServingProxy (it refuses no-op fields the clients send; the proxy
    drops them)."""
    try:
        program = client.find()
    except SettingError as error:  # GPUPERF_VLLM naming no program: said of the setting, not of a derived Python
        pytest.fail(f"gpuperf: {error}", pytrace=False)
    if program is None:
        pytest.skip(client.missing)
    on_gpu = perf.device == "cuda" and importlib.util.find_spec(client.name) is not None
    for module in ("transformers",) if on_gpu else ("transformers", "fastapi", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(
                f"{module} is not installed: the model folder and the CPU server (transformers serve) need it "
                "(pip install transformers[serving])"
            )
    pool, served, folder = _serve(client.name if on_gpu else "transformers", tmp_path_factory, perf.device)
    proxy = None if on_gpu else ServingProxy(served.url)
    try:
        url = proxy.url if proxy is not None else served.url
        argv = client.command(program, url=url, model=served.model, tokenizer=folder, requests=REQUESTS)
        perf.run_command(argv, adapter=client.adapter(REQUESTS), timeout=600)
    finally:
        if proxy is not None:
            proxy.close()
        pool.close()


def test_vllm_bench_serve(perf: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    _bench_served_model(perf, tmp_path_factory, BENCH_CLIENTS["vllm"])


def test_sglang_bench_serving(perf: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    _bench_served_model(perf, tmp_path_factory, BENCH_CLIENTS["sglang"])


def test_megatron_pretrain_gpt_mock_data(perf: Any) -> None:
    if not _cuda():
        pytest.skip("Megatron-Core has no CPU path (its training loop puts tensors on device='cuda'): needs a GPU")
    checkout = _checkout("megatron-lm", "pretrain_gpt.py", "pretrain_gpt.py is not in the megatron-core wheel")
    if importlib.util.find_spec("megatron") is None and not (checkout / "megatron" / "core").exists():
        pytest.skip("megatron-core is not installed and the checkout has no megatron/core")
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    perf.run_command(
        [torchrun, "--nproc_per_node", "1", "pretrain_gpt.py", "--mock-data", "--tokenizer-type", "NullTokenizer",
         "--vocab-size", "4096", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "512", "--max-position-embeddings", "512", "--micro-batch-size", "4",
         "--global-batch-size", "8", "--train-iters", "40", "--lr", "1e-4", "--log-interval", "1",
         "--log-throughput", "--bf16", "--transformer-impl", "local", "--no-gradient-accumulation-fusion",
         "--eval-iters", "0"],
        adapter="megatron",
        cwd=checkout,
        env={"PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])),
             "CUDA_DEVICE_MAX_CONNECTIONS": "1"},
        timeout=900,
    )  # fmt: skip


def test_torchtitan_debug_model(perf: Any) -> None:
    if not _cuda():
        pytest.skip("TorchTitan has no CPU path (it falls back to 'cuda' without an accelerator): needs a GPU")
    if importlib.util.find_spec("torchtitan") is None:
        pytest.skip("torchtitan is not installed (pip install torchtitan)")
    config = "torchtitan/models/llama3/train_configs/debug_model.toml"
    checkout = _checkout("torchtitan", config, "its debug config and test tokenizer are not in the wheel")
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    perf.run_command(
        [torchrun, "--nproc_per_node", "1", "-m", "torchtitan.train", "--job.config_file", config,
         "--training.steps", "40", "--metrics.log_freq", "1", "--metrics.disable_color_printing"],
        adapter="torchtitan",
        cwd=checkout,
        timeout=900,
    )  # fmt: skip


def test_maxtext_synthetic_tiny(perf: Any, tmp_path: Path) -> None:
    python = environment_setting("maxtext-python") or sys.executable
    if python == sys.executable and sys.version_info < (3, 12):
        pytest.skip(
            f"MaxText needs Python >= 3.12 (this is {sys.version_info.major}.{sys.version_info.minor}): name one that "
            "has it with GPUPERF_MAXTEXT_PYTHON"
        )
    found = subprocess.run(
        [python, "-c", "import MaxText, os; print(os.path.dirname(MaxText.__file__))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(f"MaxText is not importable in {python} (pip install maxtext)")
    base = Path(found.stdout.strip()) / "configs" / "base.yml"
    platform = {"JAX_PLATFORMS": "cpu"} if perf.device == "cpu" else {}
    perf.run_command(
        [python, "-m", "MaxText.train", str(base), "run_name=gpuperf", f"base_output_directory={tmp_path}",
         "dataset_type=synthetic", "steps=30", "per_device_batch_size=1", "max_target_length=128",
         "base_emb_dim=128", "base_mlp_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4", "head_dim=32",
         "base_num_decoder_layers=2", "vocab_size=1024", "enable_checkpointing=false", "metrics_file={output}"],
        adapter="maxtext",
        env=platform,
        timeout=900,
    )  # fmt: skip
