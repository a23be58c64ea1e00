# Shared helpers of the shell tests that run a job (tests/*_test.sh); source it after setting
#   test_name   the prefix of every message ("tls_test")
#   work        the test's folder: removed at the end unless the test failed or
#               ECPS_KEEP_LOGS is set
#   fail_logs   an array of glob patterns: the files whose tails a failure prints
# and, while a job runs, job_pid: wait_for gives up at once when that process has ended, and
# stop_job stops it. The test's own EXIT trap stops what it started and then calls remove_work.

skip() { echo "$test_name: skipped: $*"; exit 77; }

# Stops the job's process ($job_pid, when set) and waits for it.
stop_job() {
  if [ -n "${job_pid:-}" ]; then
    kill "$job_pid" 2>/dev/null || true
    wait "$job_pid" 2>/dev/null || true
    job_pid=""
  fi
}

remove_work() {
  if [ "${keep:-0}" = 1 ] || [ -n "${ECPS_KEEP_LOGS:-}" ]; then
    echo "$test_name: files kept in $work"
  else
    rm -rf "$work"
  fi
}

fail() {
  echo "$test_name: FAIL: $*" >&2
  local pattern f
  for pattern in "${fail_logs[@]}"; do
    for f in $pattern; do
      [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
  done
  keep=1
  exit 1
}

# Waits until `$@` succeeds, up to $deadline_s seconds (polling: no sleep stands in for an
# event). Fails at once if the job ($job_pid, when set) ended before it did.
wait_for() {
  local what="$1" deadline_s="$2"
  shift 2
  local end=$((SECONDS + deadline_s))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || fail "timed out after ${deadline_s} s waiting for $what"
    if [ -n "${job_pid:-}" ] && ! kill -0 "$job_pid" 2>/dev/null; then
      fail "the job ended while waiting for $what"
    fi
    sleep 0.2
  done
}
