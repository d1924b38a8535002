#!/usr/bin/env bash
# Packs TensorFlow 2.21 and what tfdist needs for a lent GPU machine that has no TensorFlow,
# no network and CUDA 13 libraries (this workplace's H200, docs/PERFORMANCE.md "On a GPU"):
# Python 3.12 wheels unpacked, debug symbols stripped, xz-compressed and split into six parts
# of about 53 MB under .gpu/ (git-ignored), so that each part fits one device call.
#   bash scripts/gpu_machine/pack.sh        # about 6 minutes on 2 cores
# Then, on the device, one call per part (carry .gpu/pNN; run `mkdir -p /tmp/parts && cp
# .gpu/pNN /tmp/parts/`), while the machine stays warm; a carried folder replaces the last one,
# so each part is copied out. Then `. scripts/gpu_machine/env.sh` and `bash scripts/gpu_check.sh $OUT`.
set -euo pipefail
cd "$(dirname "$0")/../.."
site=$(mktemp -d)/site312
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# The machine already has numpy, absl-py, grpcio, h5py, ml_dtypes, etils, pyarrow, psutil, tqdm,
# requests and tensorboard; these are the rest (promise has no wheel: built here, pure Python).
python3 -m pip wheel -q --no-deps -w "$site.wheels" promise==2.3
python3 -m pip install -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp $platforms --target "$site" "$site".wheels/promise-*.whl \
  tensorflow==2.21.0 tf-keras==2.21.0 tensorflow-datasets==4.9.10 'protobuf>=6.31.1,<7' \
  astunparse gast google-pasta termcolor portpicker importlib_resources keras==3.15.* namex \
  optree dm-tree array-record immutabledict simple-parsing docstring-parser \
  tensorflow-metadata googleapis-common-protos toml 'flatbuffers>=25.9.23' 'wrapt==1.17.*' \
  'nvidia-cuda-runtime-cu12==12.9.*'
rm -rf "$site/tensorflow/include"
find "$site" -name __pycache__ -prune -exec rm -rf {} +
find "$site" -name '*.so*' -type f -size +1M -exec strip --strip-unneeded {} \;
mkdir -p .gpu && grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
rm -f .gpu/p??
tar -cf - -C "$(dirname "$site")" site312 | xz -6 -T2 | split -b 53400000 -d -a 2 - .gpu/p
rm -rf "$(dirname "$site")"
ls -l .gpu
