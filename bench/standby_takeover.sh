#!/usr/bin/env bash
# How soon a standby coordinator serves after the active one's SIGKILL (issue 40's target: within
# 3 s), with the state in a real three-member etcd: runs the etcd end-to-end test that kills the
# active coordinator of an `ecps run` job (coordinator.replicas 2, lease_ttl_s 1) REPEATS times
# and reports the median and range of "a standby serves X s after the active coordinator's
# SIGKILL" (from the SIGKILL to a status answered by the new leader).
#
#   bench/standby_takeover.sh [REPEATS]     default 5
#   ECPS_BUILD_DIR=dir                       the build (default build)
# Needs etcd (deploy/setup.sh --tests). Run it on an otherwise idle machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ECPS_BUILD_DIR:-$root/build}"
repeats="${1:-5}"
test_bin="$build/tests/etcd_e2e_test"
[ -x "$test_bin" ] || { echo "standby_takeover: build $test_bin first (ninja -C $build etcd_e2e_test)" >&2; exit 2; }
times=()
for i in $(seq 1 "$repeats"); do
  line="$(ECPS_BINARY="$build/cli/ecps" "$test_bin" \
    --gtest_filter='EtcdEndToEnd.AStandbyServesAfterTheActiveCoordinatorsDeath' 2>&1 |
    grep -o 'a standby serves [0-9.]* s' || true)"
  [ -n "$line" ] || { echo "standby_takeover: run $i did not report a takeover" >&2; exit 1; }
  t="$(echo "$line" | awk '{print $4}')"
  echo "run $i: a standby serves $t s after the SIGKILL"
  times+=("$t")
done
printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {
  m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
  printf "median %.2f s (%.2f-%.2f), %d runs; target: within 3 s\n", m, a[1], a[NR], NR }'
