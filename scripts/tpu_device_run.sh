#!/usr/bin/env bash
# The one command for the peer benchmark on a TPU machine (no network): it
# installs the peers' wheels from .device-wheels/ (scripts/fetch_peer_wheels.sh
# fetched them) into /tmp/site, after the machine's own packages on the path
# only in the sense that no jax/jaxlib/libtpu/numpy/ml_dtypes wheel is among
# them, prints the versions, then runs scripts/tpu_peers.py with a time budget,
# its log teed to $OUT. Extra arguments go to tpu_peers.py.
#
#     OUT=/path/to/out bash scripts/tpu_device_run.sh [tpu_peers.py options]
#     BUDGET=300 bash scripts/tpu_device_run.sh --case 'mixtral*'
#
# $OUT receives 4 files: versions.txt, tpu_peers.log, tpu_peers.json, tpu_peers.md.
# Exit status: tpu_peers.py's (a failing or wrong implementation is a row of the
# table, not a failure of the run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-tpu-results}"
PY="${PYTHON:-python3}"
SITE="${PEER_SITE:-/tmp/site}"
# shellcheck source=scripts/device_setup.sh
. scripts/device_setup.sh

"$PY" - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import importlib.metadata as md
import platform

print("python", platform.python_version())
for dist in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "tpu-inference", "tokamax", "qwix",
             "flax", "numpy", "ml_dtypes"):
    try:
        print(dist, md.version(dist))
    except md.PackageNotFoundError:
        print(dist, "not installed")
try:
    import jax

    print("devices", jax.devices())
except Exception as e:  # the log says why, the benchmark still reports
    print("devices: error", type(e).__name__, e)
PY

"$PY" scripts/tpu_peers.py --out "$OUT" --time-budget "${BUDGET:-420}" "$@" 2>&1 | tee "$OUT/tpu_peers.log"
exit "${PIPESTATUS[0]}"
