#!/usr/bin/env bash
# What fault tolerance costs the servers, per row update: server CPU-seconds per million row
# updates (every server process, user + system time from /proc) and parity bytes sent per row
# update, for none, erasure_code (4,1) and (4,2) and replication r=1, in one invocation, the
# configurations interleaved. Measured over a steady-state window of each job (from a quarter
# to three quarters of its steps), so start-up (table initialisation) and shut-down are left
# out: the CPU and the row updates (ServerStats.pushes) of the same window.
#
#   bench/ft_cost.sh [SPEC] [SERVERS] [REPEATS]
#     SPEC     default deploy/examples/bench-small.yaml (its fault_tolerance section is replaced)
#     SERVERS  default 6
#     REPEATS  default 3: runs per configuration, interleaved; medians and ranges reported
#   ECPS_MODES="ec41-async ..." the configurations besides none (default: ec41-after_parity
#            ec41-async ec42-after_parity rep1-after_parity; bench/ft_common.sh lists all).
#   ECPS_PIN="WORKER_CPUS SERVER_CPUS": as bench/ft_modes.sh (the servers on cores of their own).
#   ECPS_BIN=PATH      the ecps binary (default build/cli/ecps).
#   ECPS_BINS="A B …"  compare builds instead: each repeat runs every configuration under each
#            binary in turn, and each row is labelled CONFIG@N (N: the binary's place in the
#            list) with its extra taken over none of the same binary.
#
# Prints one table: per configuration the median (min-max) of server CPU-s per million row
# updates, the extra over none's median, that extra as a share of none's, the user and system
# parts of the CPU (medians of their own), context switches per thousand row updates (summed over
# the threads alive at each sample), parity messages (ServerStats.delta_batches_sent) per
# thousand row updates, and parity bytes per row update.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
spec="${1:-$root/deploy/examples/bench-small.yaml}"
servers="${2:-6}"
repeats="${3:-3}"
ecps="${ECPS_BIN:-$root/build/cli/ecps}"
python=/usr/bin/python3
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=bench/ft_common.sh
. "$root/bench/ft_common.sh"
: "${ECPS_MODES:=ec41-after_parity ec41-async ec42-after_parity rep1-after_parity}"
ft_setup_pinning
ft_filter_configs
base="$work/base.yaml"
ft_base_spec "$base"

steps="$(awk '/^  steps:/ {print $2; exit}' "$spec")"
steps="${steps:-600}"

# Runs one job and samples it: every 0.2 s the status (step, every server's pid, pushes and
# parity bytes) and each server's CPU time from /proc, into DIR/samples.jsonl.
run_one() {
  local name="$1" body="$2" dir="$work/$1-$3"
  mkdir -p "$dir"
  { cat "$base"; echo "fault_tolerance: {$body, checkpoint: {save_final: false}}"; } >"$dir/spec.yaml"
  ft_start_job "$dir/spec.yaml" "$dir/out" "$dir/run.log"
  local job=$ft_job
  until [ -s "$dir/out/coordinator.address" ] || ! kill -0 "$job" 2>/dev/null; do sleep 0.05; done
  while kill -0 "$job" 2>/dev/null; do
    "$ecps" status --job "$dir/out" --json 2>/dev/null | "$python" -c '
import json, os, sys
try:
    s = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
out = {"step": int(s.get("step", 0)), "servers": {}}
for n in s.get("nodes", []):
    if n.get("role") != "ROLE_SERVER" or not n.get("pid"):
        continue
    try:
        f = open("/proc/%d/stat" % int(n["pid"])).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    # utime and stime, in clock ticks; context switches summed over the live threads.
    switches = 0
    try:
        for task in os.listdir("/proc/%d/task" % int(n["pid"])):
            for line in open("/proc/%d/task/%s/status" % (int(n["pid"]), task)):
                if "ctxt_switches:" in line:  # voluntary and nonvoluntary
                    switches += int(line.split()[-1])
    except OSError:
        pass
    st = n.get("server", {})
    out["servers"][str(n["pid"])] = {"user_s": int(f[11]) / 100.0, "sys_s": int(f[12]) / 100.0,
                                     "switches": switches, "pushes": int(st.get("pushes", 0)),
                                     "delta_bytes": int(st.get("delta_bytes_sent", 0)),
                                     "batches": int(st.get("delta_batches_sent", 0))}
print(json.dumps(out))
' >>"$dir/samples.jsonl" || true
    sleep 0.2
  done
  wait "$job" || { echo "$1: ecps run failed, see $dir/run.log" >&2; tail -5 "$dir/run.log" >&2; }
  # The window: the first sample at a quarter of the steps and the last before three quarters.
  "$python" - "$dir/samples.jsonl" "$steps" "$name" >>"$work/results.txt" <<'PY'
import json, sys
path, steps, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(path) if l.strip()]
a = next((r for r in rows if r["step"] >= steps // 4 and r["servers"]), None)
b = next((r for r in reversed(rows) if r["step"] <= 3 * steps // 4 and r["servers"]), None)
if a is None or b is None or b["step"] <= a["step"]:
    sys.exit("%s: no steady-state window in %d samples" % (name, len(rows)))
pids = set(a["servers"]) & set(b["servers"])
def grown(key):
    return sum(b["servers"][p][key] - a["servers"][p][key] for p in pids)
pushes = grown("pushes")
user, system = grown("user_s"), grown("sys_s")
print(name, (user + system) / pushes * 1e6, grown("delta_bytes") / pushes, pushes,
      b["step"] - a["step"], user / pushes * 1e6, system / pushes * 1e6,
      grown("switches") / pushes * 1e3, grown("batches") / pushes * 1e3)
PY
}

read -r -a bins <<<"${ECPS_BINS:-$ecps}"
for ((b = 0; b < ${#bins[@]}; b++)); do
  [[ -x "${bins[b]}" ]] || { echo "not an executable: ${bins[b]}" >&2; exit 2; }
  ((${#bins[@]} == 1)) || echo "binary $((b + 1)): ${bins[b]}" >&2
done
for ((rep = 0; rep < repeats; rep++)); do
  for ((b = 0; b < ${#bins[@]}; b++)); do
    ecps="${bins[b]}"
    suffix=""
    ((${#bins[@]} == 1)) || suffix="@$((b + 1))"
    for entry in "${configs[@]}"; do
      name="${entry%%|*}$suffix"
      body="${entry#*|}"
      echo "run $((rep + 1))/$repeats: $name" >&2
      run_one "$name" "$body" "$rep"
    done
  done
done

"$python" - "$work/results.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, cpu, b, pushes, steps, user, system, switches, batches = line.split()
    runs.setdefault(name, []).append((float(cpu), float(b), int(pushes), float(user),
                                      float(system), float(switches), float(batches)))
def none_of(name):  # none's median under the same binary (CONFIG@N: binary N)
    at = name.find("@")
    return statistics.median(r[0] for r in runs["none" + (name[at:] if at >= 0 else "")])
print("| configuration | server CPU-s per 1M row updates, median (range) | extra over none | extra / none | of it user | of it system | context switches per 1k row updates | parity messages per 1k row updates | parity bytes per row update | row updates in window |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name, rs in runs.items():
    cpus = [r[0] for r in rs]
    med = statistics.median(cpus)
    none = none_of(name)
    extra = med - none
    col = lambda i: statistics.median(r[i] for r in rs)
    print("| %s | %.2f (%.2f-%.2f) | %+.2f | %.2fx | %.2f | %.2f | %.1f | %.2f | %.0f | %d |" % (
        name, med, min(cpus), max(cpus), extra, extra / none, col(3), col(4), col(5), col(6),
        col(1), col(2)))
PY
