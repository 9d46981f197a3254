#!/bin/sh
# Make a venv that runs SGLang's benchmark client (`python -m sglang.bench_serving`, sglang 0.5.23) on this CPU,
# for tests/workloads/test_serving_bench_clients.py and the frameworks suite's SGLang test, which point it at a
# `transformers serve` on loopback. SGLang publishes no CPU build, and `pip install sglang` pulls its GPU server
# (sgl-kernel, FlashInfer, a CUDA torch). The client needs none of it to run, but its module imports part of the
# server package on the way (sglang/__init__.py, sglang.srt.disaggregation.utils -> model_config -> the
# quantization layers), so sglang goes in without its dependencies and this list is what that import chain asks
# for, found by running the client until it imported (2026-12-06). transformers and tokenizers are the releases
# sglang 0.5.23 pins. Its server modules import torch, torchvision and triton (nothing of them runs): PyPI's pair,
# whatever release; on a machine without a local copy that is a CUDA torch of a few GB.
#
#   scripts/sglang_bench_venv.sh [VENV]     # default .venv-sglang (git-ignored); a few minutes
#   .venv/bin/python -m pytest tests/workloads/test_serving_bench_clients.py -v
set -eu
cd "$(dirname "$0")/.."
venv="${1:-.venv-sglang}"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --quiet torch torchvision triton "transformers==5.19.0" "tokenizers==0.23.2" \
    aiohttp msgspec numpy orjson requests tqdm psutil pybase64 pillow starlette pyzmq ipython datasets \
    apache-tvm-ffi sentencepiece compressed-tensors gguf
"$venv/bin/pip" install --quiet --no-deps "sglang==0.5.23"
"$venv/bin/python" -m sglang.bench_serving --help >/dev/null 2>&1 || {
    echo "sglang's benchmark client does not import in $venv:" >&2
    "$venv/bin/python" -m sglang.bench_serving --help 2>&1 | tail -3 >&2
    exit 1
}
"$venv/bin/python" -c 'import importlib.metadata as m; print("sglang", m.version("sglang"), "torch", m.version("torch"))'
