# Sourced by scripts/gpu_run.sh and scripts/tpu_run.sh (after they set OUT
# and status=0): `step NAME SECONDS COMMAND...` runs COMMAND under a time
# limit, logs it to $OUT/NAME.txt, appends its exit status and time to
# $OUT/steps.txt, prints the log's last lines, and sets status=1 when it
# failed, so a failed step does not stop the next.
step() {
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s (log $OUT/$name.txt)" | tee -a "$OUT/steps.txt"
  tail -n 5 "$OUT/$name.txt"
  [ "$rc" = 0 ] || status=1
}
