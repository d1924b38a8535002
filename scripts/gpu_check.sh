#!/usr/bin/env bash
# The GPU proof kit (docs/gpus.md): runs every GPU path of tfdist once and writes
# OUT_DIR/gpu_check.json; without a GPU, says so and runs doctor only. See scripts/gpu_check.py.
#   bash scripts/gpu_check.sh [OUT_DIR]
set -euo pipefail
out_dir=$(realpath -m "${1:-.}")
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$out_dir"
