#!/usr/bin/env bash
# The one prepared command for a machine with a TPU: it checks every Pallas
# kernel of specs/ on the TPU against the NumPy reference (`gemmgen verify
# --backend pallas-tpu`: the standard cases, every tile of a LUT) and times
# the benchmark table (scripts/tpu_bench.py), writing each step's output
# under $OUT (default ./tpu-results). Every step has its own time limit and
# a failed step does not stop the next; the whole run takes about 5 minutes
# on a TPU v5e (docs/benchmarks.md).
#
#     bash scripts/tpu_run.sh            # with gemmgen and JAX importable
#     bash scripts/tpu_run.sh verify     # only the checks (or: bench, only the timing;
#                                        # bench's own options may follow)
#     PYTHON=/path/to/python bash scripts/tpu_run.sh
#
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
[ $# -gt 0 ] && shift
case "$what" in all|verify|bench) ;; *) echo "usage: $0 [all|verify|bench] [tpu_bench options]" >&2; exit 2;; esac
OUT="${OUT:-tpu-results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0

# shellcheck source=scripts/steps.sh
. scripts/steps.sh

step env 60 "$PY" -c "import platform, jax, jaxlib; \
print('python', platform.python_version(), 'jax', jax.__version__, 'jaxlib', jaxlib.__version__); \
print(jax.devices())"
if [ "$what" != bench ]; then
  for spec in specs/*.gemm; do
    stem="$(basename "$spec" .gemm)"
    # A spec without a pallas_tpu target (specs/gb10.gemm) has nothing to
    # run on a TPU.
    if ! grep -q '^target pallas_tpu' "$spec"; then
      echo "skip verify_$stem: $spec has no pallas_tpu target"
      continue
    fi
    step "verify_$stem" "${TPU_VERIFY_LIMIT:-300}" \
      "$PY" -m gemmgen verify "$spec" --backend pallas-tpu --no-resources
  done
fi
if [ "$what" != verify ]; then
  step bench "${TPU_BENCH_LIMIT:-500}" "$PY" scripts/tpu_bench.py --out "$OUT" "$@"
fi
exit "$status"
