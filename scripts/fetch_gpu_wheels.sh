#!/usr/bin/env bash
# Download, here, the wheels the GPU machine lacks (its image has torch, lightning, numpy...),
# into .whl/ (git-ignored), for Python 3.12 on x86-64. scripts/gpu_check.sh installs them there.
# soundfile needs cffi's compiled backend, which the image does not have either.
set -euo pipefail
cd "$(dirname "$0")/.."
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl \
  'jsonargparse==4.*' docstring-parser typeshed-client 'jiwer>=3.0' rapidfuzz soundfile cffi pycparser espeakng-loader
ls -la .whl
