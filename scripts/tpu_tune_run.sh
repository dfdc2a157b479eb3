#!/usr/bin/env bash
# Tune the Pallas tiles of specs/ on a TPU machine (no network) in one
# command: install gemmgen's own dependencies from .device-wheels/ (lark,
# jinja2: scripts/fetch_peer_wheels.sh fetches them with the peers'), then
# run each `gemmgen tune` job of JOBS below (or of the file named by
# $TUNE_JOBS), one process each, under its own time limit, copying the specs
# and each job's JSON to $OUT after every job, so that a job cut off by its
# limit loses only itself. Each job rewrites the spec's `tuned` block for the
# chip, carrying over the rules of the kernels it did not measure.
#
#     OUT=/path/to/out bash scripts/tpu_tune_run.sh
#     TUNE_JOBS=my-jobs.txt JOB_LIMIT=240 bash scripts/tpu_tune_run.sh
#
# A jobs file holds one job a line: SPEC, then `gemmgen tune` options.
# $OUT receives: tune.log, the tuned specs (moe.gemm, dense.gemm) and
# tune-moe.json / tune-dense.json (every candidate of the spec's last job).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-tpu-results}"
PY="${PYTHON:-python3}"
SITE="${PEER_SITE:-/tmp/site}"
# shellcheck source=scripts/device_setup.sh
. scripts/device_setup.sh

# The jobs, most telling first: the MoE shapes of docs/benchmarks.md ("Peers
# on a TPU") for the kernels its benchmark runs, then dense.
DEFAULT_JOBS='
specs/moe.gemm --kernel gmm_bf16_out --preset qwen3-30b-a3b --preset gpt-oss-120b --preset deepseek-v3 --shapes 8192,28672,4096,8;128,14336,4096,8;512,14336,4096,8
specs/moe.gemm --kernel peer_w8a16_per_channel_rhs_int8 --kernel peer_w4a16_kblock --shapes 8192,14336,4096,8;128,14336,4096,8;512,14336,4096,8
specs/moe.gemm --kernel moe_gateup_silu_bf16 --shapes 8192,28672,4096,8
specs/moe.gemm --kernel peer_w8a16_per_channel_rhs_e4m3 --kernel peer_w8a16_kblock --shapes 8192,14336,4096,8;128,14336,4096,8;512,14336,4096,8
specs/dense.gemm --device v5e --kernel dense_bf16_out_bf16 --shapes 8192,8192,8192;4096,4096,4096
'
if [ -n "${TUNE_JOBS:-}" ]; then jobs="$(cat "$TUNE_JOBS")"; else jobs="$DEFAULT_JOBS"; fi
status=0
while IFS= read -r line; do
  [ -z "${line// }" ] && continue
  case "$line" in \#*) continue;; esac
  read -r -a words <<<"$line"
  spec="${words[0]}"
  stem="$(basename "$spec" .gemm)"
  echo "=== $(date -u +%H:%M:%S) gemmgen tune ${words[*]}" | tee -a "$OUT/tune.log"
  # The job stops starting kernels and shapes a minute before its limit
  # (a candidate compiles in up to ~20 s on a v5e), and writes the block
  # after each: a job cut off still keeps what it measured.
  limit="${JOB_LIMIT:-200}"
  timeout "$limit" "$PY" -m gemmgen tune "${words[@]}" --time-budget "$((limit > 120 ? limit - 60 : limit / 2))" \
    --max-candidates "${CANDIDATES:-5}" --samples "${SAMPLES:-5}" --batch "${BATCH:-5}" \
    --out "$OUT/tune-$stem.json" 2>&1 | tee -a "$OUT/tune.log"
  rc=${PIPESTATUS[0]}
  echo "=== exit $rc" | tee -a "$OUT/tune.log"
  [ "$rc" = 0 ] || status=1
  cp "$spec" "$OUT/$stem.gemm"
done <<<"$jobs"
exit "$status"
