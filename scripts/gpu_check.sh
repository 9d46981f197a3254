#!/bin/sh
# The one-command GPU check (README, "Running on a GPU"): micro suite, training and inference proxies in the GPU tier,
# the quick acceptance tier on every GPU (docs/acceptance.md), baselines recorded under baselines/<hardware-key>/,
# then a summary. PYTHON picks the interpreter to use.
exec "${PYTHON:-python3}" "$(dirname "$0")/gpu_check.py" "$@"
