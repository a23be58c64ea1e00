#!/usr/bin/env bash
# The Slurm test (CTest label slurm): a real Slurm runs the script `ecps slurm` writes.
#
#   tests/slurm_test.sh ECPS_BINARY
#
# Brings up a private cluster on this host (tests/slurm/cluster.sh: munged, slurmctld and two
# slurmd as two virtual nodes, every file in a temp dir), writes the sbatch script for a
# small erasure-coded job over both nodes, submits it, SIGKILLs one server step's process
# mid training, then, once that server is rebuilt, the coordinator step's process; waits
# for the job and checks its report: the server was replaced by a new job step and rebuilt
# online; the coordinator was relaunched as a new step on the other node, on another
# address, which the roles found through the job's address file, and it took the job over;
# every configured sample trained, the scrub clean. Also checks that the job token is on no
# command line. Every daemon it started is stopped by pid, also on failure. Exits 77 (CTest:
# skipped) when not root or Slurm is not installed.
set -euo pipefail
ecps="$(realpath "${1:?usage: slurm_test.sh ECPS_BINARY}")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

test_name=slurm_test
work=""
fail_logs=()
# shellcheck source=tests/lib/job_test.sh
. "$here/lib/job_test.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (the private cluster's daemons run as root)"
for tool in slurmctld slurmd munged sbatch srun scontrol; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (slurmctld slurmd slurm-client munge)"
done

work="$(mktemp -d /tmp/ecps-slurm-test.XXXXXX)"
chmod 755 "$work"  # munged wants every folder above its socket world-executable
fail_logs=("$work/out/slurm-*.out" "$work/out/logs/*.log")
cluster="$work/cluster"
cleanup() {
  "$here/slurm/cluster.sh" stop "$cluster" >/dev/null 2>&1 || true
  remove_work
}
trap cleanup EXIT

"$here/slurm/cluster.sh" start "$cluster" >/dev/null || fail "the private Slurm cluster did not start"
# shellcheck disable=SC1091
. "$cluster/env"

steps=3000
cat >"$work/spec.yaml" <<EOF
job: {name: slurmtest, steps: $steps, eval_every: 0, eval_samples: 2048}
cluster:
  servers: 3
  spares: 0              # the dead server's replacement is a new job step
  workers: 1
  heartbeat_interval_ms: 200
  heartbeat_timeout_ms: 1500
model: {num_dense: 13, num_sparse: 8, embedding_dim: 8, table_rows: 4000, bottom_mlp: [16, 8], top_mlp: [16]}
data: {source: synthetic, batch_size: 128}
fault_tolerance: {mode: erasure_code, k: 2, r: 1, checkpoint: {save_final: false}}
slurm:
  nodes: 2
  time: "00:10:00"
EOF

script="$work/job.sbatch"
out="$work/out"
"$ecps" slurm "$work/spec.yaml" -o "$script" --output "$out" >/dev/null ||
  fail "ecps slurm refused the spec"
grep -q -- "--backend slurm" "$script" || fail "the script does not run ecps run --backend slurm"
! grep -qi "token" <(grep -v '^#' "$script") || fail "the script names a token"

job_id="$(sbatch --parsable "$script")" || fail "sbatch refused the script"
echo "slurm_test: submitted job $job_id"

status_json() { "$ecps" status --job "$out" --json 2>/dev/null; }
# A field of the status, via Python's json (the status is protobuf's JSON rendering).
status_field() {
  status_json | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null
}
training() { [ "$(status_field "int(d.get('step', 0)) >= $steps // 5")" = True ]; }
wait_for "the job to train a fifth of its steps" 120 training

# One step per role, over both nodes.
steps_now="$(squeue -h -s -j "$job_id" -o "%j %N")"
echo "slurm_test: job steps (name node):" $steps_now
for role in coordinator server-0 server-1 server-2 worker-0; do
  grep -q "^$role " <<<"$steps_now" || fail "no job step for $role: $steps_now"
done
grep -q " node1$" <<<"$steps_now" && grep -q " node2$" <<<"$steps_now" ||
  fail "the steps are not spread over both nodes: $steps_now"

# The token reaches the roles in their environment, never on a command line.
token="$(cat "$out/token")"
for p in $(pgrep -f "$ecps"); do
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$token"; then
    fail "the job token is on the command line of pid $p"
  fi
done

# SIGKILL server 1's own process (both virtual nodes are this host).
victim="$(status_field "[n['pid'] for n in d['nodes'] if n.get('role') == 'ROLE_SERVER' and n.get('id', 0) == 1][0]")"
[ -n "$victim" ] || fail "server 1 has no pid in the status"
kill -9 "$victim"
echo "slurm_test: killed server 1 (pid $victim)"

# Once server 1's replacement is rebuilt (ACTIVE, another pid), SIGKILL the coordinator's own
# process: its step ends (srun: 137) and the launcher relaunches it on the other node.
server_rebuilt() {
  [ "$(status_field "any(n.get('role') == 'ROLE_SERVER' and n.get('id', 0) == 1 and n.get('state') == 'NODE_ACTIVE' and int(n.get('pid', 0)) != $victim for n in d['nodes'])")" = True ]
}
wait_for "server 1's replacement to be rebuilt" 120 server_rebuilt
coordinator_node() { squeue -h -s -j "$job_id" -o "%j %N" | sed -n 's/^coordinator //p'; }
first_node="$(coordinator_node)"
first_address="$(cat "$out/coordinator.address")"
step_before="$(status_field "int(d.get('step', 0))")"
# The role's own process (its step's srun names the same command line after its options).
coordinator="$(pgrep -f -- "^$ecps coordinator --spec $out/spec.resolved.yaml")" ||
  fail "no coordinator process of this job"
[ "$(wc -w <<<"$coordinator")" -eq 1 ] || fail "several coordinator processes: $coordinator"
kill -9 "$coordinator"
echo "slurm_test: killed the coordinator (pid $coordinator on $first_node, $first_address) at step $step_before"
relaunched() {
  [ -f "$out/logs/coordinator-2.log" ] && grep -q "as term 2" "$out/logs/coordinator-2.log" &&
    [ -n "$(status_field "int(d.get('step', 0))")" ]
}
wait_for "a relaunched coordinator to take the job over" 120 relaunched
second_node="$(coordinator_node)"
second_address="$(cat "$out/coordinator.address")"
echo "slurm_test: the new coordinator runs on ${second_node:-?} at $second_address"
[ -n "$second_node" ] && [ "$second_node" != "$first_node" ] ||
  fail "the coordinator was not relaunched on the other node ($first_node, then '$second_node')"
[ "$second_address" != "$first_address" ] ||
  fail "the new coordinator listens at the old address $first_address: no move to find"

job_over() {
  local state
  state="$(scontrol show job "$job_id" -o 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac
  return 1
}
wait_for "the Slurm job to end" 240 job_over
state="$(scontrol show job "$job_id" -o | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
[ "$state" = COMPLETED ] || fail "the Slurm job ended $state"
[ -f "$out/report.json" ] || fail "no report.json"

/usr/bin/python3 - "$out/report.json" "$victim" <<'EOF' || fail "the report does not show the recovery"
import json, sys
r = json.load(open(sys.argv[1]))
victim = int(sys.argv[2])
problems = []
if not r["ok"]: problems.append("ok is false: " + r["error"])
if r["samples"] != r["samples_asked"]:
    problems.append(f"trained {r['samples']} of {r['samples_asked']} samples")
if not (r["scrub"]["done"] and r["scrub"]["clean"]): problems.append(f"scrub {r['scrub']}")
dead = [f for f in r["failures"] if f["pid"] == victim]
if len(dead) != 1: problems.append(f"no failure of pid {victim}: {r['failures']}")
elif dead[0]["state"] != "recovered" or dead[0]["by_spare"]:
    problems.append(f"server 1 not recovered by a new step: {dead[0]}")
for p in problems: print("report:", p)
f = dead[0] if len(dead) == 1 else {}
print(f"slurm_test: report ok={r['ok']} samples={r['samples']}/{r['samples_asked']} "
      f"scrub clean={r['scrub']['clean']} ({r['scrub']['stripes_checked']} stripes); "
      f"server 1 detected in {f.get('detection_s')} s, rebuilt in {f.get('rebuild_s')} s")
sys.exit(1 if problems else 0)
EOF
[ -f "$out/logs/server-1-r1.log" ] || fail "no replacement step's log (logs/server-1-r1.log)"
grep -q "slurmtest" <(scontrol show job "$job_id" -o) || fail "scontrol does not know the job"
# The coordinator's death and takeover, in the report.
/usr/bin/python3 - "$out/report.json" <<'EOF' || fail "the report does not show the coordinator's relaunch"
import json, sys
r = json.load(open(sys.argv[1]))
c = r.get("coordinator_failures", [])
if len(c) != 1 or c[0].get("downtime_s", -1) < 0 or c[0].get("step_at_restart", -1) < 0:
    print("report: coordinator_failures", c)
    sys.exit(1)
print(f"slurm_test: coordinator died at step {c[0].get('step_at_death')}, answered again "
      f"after {c[0].get('downtime_s')} s, training went on to step {c[0].get('step_at_restart')}")
EOF
# Every role found the moved coordinator through the address file.
for role in server-0 server-2 worker-0; do
  grep -q "the coordinator moved from $first_address to $second_address" "$out/logs/$role.log" ||
    fail "$role did not find the moved coordinator (logs/$role.log)"
done
echo "slurm_test: PASS"
