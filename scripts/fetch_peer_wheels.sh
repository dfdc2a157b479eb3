#!/usr/bin/env bash
# Download the wheels of scripts/tpu_peers_wheels.txt into .device-wheels/ at
# the repository root (git-ignored), for a TPU machine without network:
# CPython 3.11, x86-64 manylinux, no dependencies resolved (the list is
# complete; jax, jaxlib, libtpu, numpy, ml_dtypes and torch are the machine's).
#
#   bash scripts/fetch_peer_wheels.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-python3}"
mkdir -p .device-wheels
pins=$(grep -v '^#' scripts/tpu_peers_wheels.txt | grep -v '^[[:space:]]*$')
for pin in $pins; do
  "$python" -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -q -d .device-wheels "$pin"
done
# Nothing the machine must keep its own of.
if ls .device-wheels | grep -Eiq '^(jax|jaxlib|libtpu|numpy|ml_dtypes|torch)-'; then
  echo "fetch_peer_wheels: a jax/jaxlib/libtpu/numpy/ml_dtypes/torch wheel is in .device-wheels/" >&2
  exit 1
fi
du -sh .device-wheels
