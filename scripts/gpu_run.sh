#!/usr/bin/env bash
# The one prepared command for a machine with a CUDA GPU: it checks every
# CUDA kernel of specs/ on the GPU against the NumPy reference, runs the
# runtime primitives' vectors there, and times the benchmark table, writing
# each step's output under $OUT (default ./gpu-results), so that the few
# minutes a GPU is lent go to measuring. Every step has its own time limit
# and a failed step does not stop the next; the whole run fits in 10
# minutes on an H200 (docs/benchmarks.md).
#
#     bash scripts/gpu_run.sh            # with gemmgen and CuPy importable
#     PYTHON=/path/to/python bash scripts/gpu_run.sh
#
# Exit status: 0 when every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0

# shellcheck source=scripts/steps.sh
. scripts/steps.sh

step env 60 bash -c "nvidia-smi; $PY - <<'PYEOF'
import platform, cupy
from cupy_backends.cuda.libs import nvrtc
print('python', platform.python_version(), 'cupy', cupy.__version__)
print('CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver',
      cupy.cuda.runtime.driverGetVersion(), 'NVRTC', nvrtc.getVersion())
props = cupy.cuda.runtime.getDeviceProperties(0)
print(props['name'].decode(), 'cc', props['major'], props['minor'], 'SMs',
      props['multiProcessorCount'])
PYEOF"
step runtime "${GPU_RUNTIME_LIMIT:-90}" "$PY" scripts/gpu_check_cuda_runtime.py

# Why the CUDA kernels of generated/$1 cannot run on this device (their
# launcher's arch_error: specs/gb10.gemm declares sm_120a / sm_121a only,
# specs/b200.gemm sm_100a only); nothing when they can.
not_here() {
  "$PY" - "$1" <<'PYEOF'
import pathlib, sys
import cupy
from gemmgen.harness.runner import load_generated_module
props = cupy.cuda.runtime.getDeviceProperties(0)
sm = int(props["major"]) * 10 + int(props["minor"])
for path in sorted(pathlib.Path("generated", sys.argv[1], "cuda").glob("*.py")):
    module = load_generated_module(path, f"not_here_{path.stem}")
    if hasattr(module, "arch_error"):
        print(module.arch_error(sm) or "", end="")
        break
PYEOF
}

for spec in specs/*.gemm; do
  stem="$(basename "$spec" .gemm)"
  why="$(not_here "$stem")"
  if [ -n "$why" ]; then
    echo "verify_$stem: skipped: $why" | tee -a "$OUT/steps.txt"
    continue
  fi
  step "verify_$stem" "${GPU_VERIFY_LIMIT:-150}" \
    "$PY" -m gemmgen verify "$spec" --backend cuda --no-resources
done
step host_overhead 60 "$PY" scripts/host_overhead.py
step bench "${GPU_BENCH_LIMIT:-200}" "$PY" scripts/gpu_bench.py --out "$OUT" --no-deepseek "$@"
step bench_deepseek "${GPU_DEEPSEEK_LIMIT:-150}" "$PY" scripts/gpu_bench.py --out "$OUT" --deepseek-only
# Compute capability 12.x only (GB10, RTX 50, RTX PRO 6000): the
# specs/gb10.gemm rows; elsewhere it says so and passes.
step bench_sm12x "${GPU_SM12X_LIMIT:-200}" "$PY" scripts/gpu_bench.py --out "$OUT" --sm12x-only
# Compute capability 10.0 only (B200, GB200): the specs/b200.gemm rows;
# elsewhere it says so and passes.
step bench_sm100 "${GPU_SM100_LIMIT:-200}" "$PY" scripts/gpu_bench.py --out "$OUT" --sm100-only
exit "$status"
