#!/bin/sh
# Fetch the wheels a GPU machine without a package index needs for the GPU check, into .whl/ (git-ignored).
# Run it where pip reaches PyPI, then take .whl/ along; scripts/gpu_check.sh installs the ones that machine's
# Python lacks into a temporary folder of its own, never into that Python.
#
#   scripts/gpu_check_wheels.sh                 # for CPython 3.12 on x86-64 Linux
#   scripts/gpu_check_wheels.sh 3.11 torchao    # another Python version, other packages
#
# Default packages: torchao (fp8 training; pure Python plus optional kernels, no dependencies) and junitparser
# (the gpuperf command line). torch is never fetched: the machine keeps the build its GPU stack ships.
set -eu
version="${1:-3.12}"
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- torchao junitparser
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: --dest .whl \
    --python-version "$version" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 "$@"
