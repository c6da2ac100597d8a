# SPDX-License-Identifier: Apache-2.0
#
# step.sh — sourced by the GPU-machine scripts (gpu_attention.sh,
# gpu_quant_bench.sh, gpu_multi.sh): one step runner, so each script only
# lists its steps.
#
#   step NAME TIMEOUT CMD...   runs CMD under a time limit, its output to
#                              $logs/NAME.log; prints the log's last
#                              $STEP_TAIL lines and "== [NAME] STATE in Ns";
#                              appends a row to the summary array; sets
#                              failed=1 and returns CMD's status on failure.
#
#   step_jsonl NAME TIMEOUT FILE CMD...   step, then appends the JSON lines
#                              ("{" first) of its log to FILE.
#   copy_out                   copies the summary, JSON lines and logs of
#                              $logs into $OUT when OUT is set.
#
#   conform_cuda TIMEOUT WHAT RUN   step conform: build/gpurt conform
#                              --backend cuda --run RUN, announced as
#                              "== [conform] WHAT"; without build/gpurt or
#                              build/libgpurt_cuda.so a skip row and failed=1.
#
#   bench_table FILE...        runs the Python program on stdin (a table
#                              heredoc) with FILE... as its arguments and
#                              scripts/lib ($root/scripts/lib: benchrows)
#                              on PYTHONPATH.
#
#   step_budget NAME SECONDS  for the scripts run against a time budget
#                              (gpu_roofline.sh, gpu_serve.sh): out and logs
#                              ($OUT, default $root/build/NAME; created),
#                              total ($TOTAL, default SECONDS), py ($PYTHON,
#                              default python3), failed=0, summary=(),
#                              t_start (now), skip (" $SKIP ": step names to
#                              leave out), STEP_TIMEOUT_STATE=1.
#   budget_left                prints the seconds left of total.
#   want NAME                  false (and a "skipped" summary row) when NAME
#                              is in SKIP.
#
# The caller sets logs, failed=0 and summary=() first (step_budget does). Knobs: STEP_TAIL
# (lines shown, default 15), STEP_ROW (printf format of a summary row:
# name, state, seconds; default '%-8s %-8s %5ss'), STEP_TIMEOUT_STATE=1
# (a limit reached reads TIMEOUT(Ns) rather than FAIL(124)).
step() {
  local name=$1 to=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s)
  timeout --kill-after=10 "$to" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  t1=$(date +%s)
  tail -n "${STEP_TAIL:-15}" "$logs/$name.log"
  local st=ok
  if [ "${STEP_TIMEOUT_STATE:-0}" = 1 ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
    st="TIMEOUT(${to}s)"
    failed=1
  elif [ $rc -ne 0 ]; then
    st="FAIL($rc)"
    failed=1
  fi
  # shellcheck disable=SC2059 # the row format is the caller's
  summary+=("$(printf "${STEP_ROW:-%-8s %-8s %5ss}" "$name" "$st" $((t1 - t0)))")
  echo "== [$name] $st in $((t1 - t0))s"
  return $rc
}

step_jsonl() {
  local name=$1 to=$2 file=$3 rc
  shift 3
  step "$name" "$to" "$@"
  rc=$?
  grep '^{' "$logs/$name.log" >>"$file" || true
  return $rc
}

copy_out() {
  if [ -n "${OUT:-}" ]; then
    cp "$logs"/*.txt "$logs"/*.jsonl "$logs"/*.log "$OUT"/ 2>/dev/null || true
  fi
}

conform_cuda() {
  if [ -x build/gpurt ] && [ -f build/libgpurt_cuda.so ]; then
    echo "== [conform] $2"
    step conform "$1" build/gpurt conform --backend cuda --run "$3"
  else
    summary+=("conform  skip     (no build/gpurt or no plugin)")
    failed=1
  fi
}

bench_table() {
  PYTHONPATH="$root/scripts/lib${PYTHONPATH:+:$PYTHONPATH}" python3 - "$@"
}

step_budget() {
  out=${OUT:-$root/build/$1}
  logs=$out
  total=${TOTAL:-$2}
  py=${PYTHON:-python3}
  mkdir -p "$logs"
  failed=0
  summary=()
  t_start=$(date +%s)
  skip=" ${SKIP:-} "
  STEP_TIMEOUT_STATE=1
}

budget_left() {
  echo $((total - ($(date +%s) - t_start)))
}

# want NAME: true unless NAME is in SKIP (step_budget's skip); a skipped
# step gets a summary row.
want() {
  case "$skip" in *" $1 "*) summary+=("$(printf '%-8s %-8s' "$1" skipped)"); return 1 ;; esac
}
