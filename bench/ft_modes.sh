#!/usr/bin/env bash
# Fault-tolerance modes side by side on one job: samples/s and memory per server of
# erasure_code (4,1) and (4,2) and replication r=1 and r=2, each with ack after_parity and
# async, relative to mode none, all on the same number of servers, in one invocation.
#
#   bench/ft_modes.sh [SPEC] [SERVERS] [REPEATS]
#     SPEC     default deploy/examples/bench-small.yaml (its fault_tolerance section is replaced)
#     SERVERS  default 6 (enough for k + r = 6)
#     REPEATS  default 1: runs per configuration, interleaved; the median is reported, and
#              the range of each run's ratio to none's run of the same round
#   ECPS_MODES="none ec41-async ..." limits the run to those configurations (none always runs).
#   ECPS_PIN="WORKER_CPUS SERVER_CPUS" (taskset lists, e.g. "0 1") runs the coordinator and the
#     servers on SERVER_CPUS and moves the worker, every thread of it, onto WORKER_CPUS as soon
#     as it starts: on one machine, the nearest thing to a cluster in which the worker has a
#     host of its own and the parity work runs on the servers' cores, not the worker's.
#     With SPEC deploy/examples/bench-heavy.yaml (ECRec's compute-heavy model) the servers'
#     core has headroom, as on a cluster; with bench-small one core is saturated by them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
spec="${1:-$root/deploy/examples/bench-small.yaml}"
servers="${2:-6}"
repeats="${3:-1}"
ecps="${ECPS_BIN:-$root/build/cli/ecps}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=bench/ft_common.sh
. "$root/bench/ft_common.sh"
ft_setup_pinning
ft_filter_configs
base="$work/base.yaml"
ft_base_spec "$base"

run_job() {
  ft_start_job "$@"
  wait "$ft_job"
}

for ((rep = 0; rep < repeats; rep++)); do
  for c in "${configs[@]}"; do
    name="${c%%|*}"
    ft="${c#*|}"
    { cat "$base"; echo "fault_tolerance: {$ft}"; } > "$work/$name.yaml"
    out="$work/out-$name-$rep"
    echo "== $name (run $((rep + 1))/$repeats)" >&2
    run_job "$work/$name.yaml" "$out" "$work/$name.err" ||
      { echo "run $name failed:" >&2; cat "$work/$name.err" >&2; exit 1; }
    cp "$out/report.json" "$work/report-$name-$rep.json"
  done
done

python3 - "$work" "$repeats" "${configs[@]}" <<'PY'
import json, statistics, sys
work, repeats, configs = sys.argv[1], int(sys.argv[2]), [c.split("|")[0] for c in sys.argv[3:]]
rows = {}
for name in configs:
    rates, mem = [], []
    for rep in range(repeats):
        r = json.load(open(f"{work}/report-{name}-{rep}.json"))
        rates.append(r["samples_per_s"])
        servers = [n for n in r["final_status"]["nodes"] if n.get("role") == "ROLE_SERVER"]
        mem.append(statistics.mean(int(n.get("server", {}).get("bytes", 0)) for n in servers))
        assert r["ok"], name
        if name != "none":
            assert r["scrub"]["clean"], name
    rows[name] = (statistics.median(rates), statistics.median(mem), rates)
base_rate, base_mem, base_rates = rows["none"]
# vs none: the medians' ratio, and the range of the runs' ratios to none's run of the same round
# (the rounds are interleaved, so a pair shares the machine's state of the moment).
print(f"{'mode':22} {'samples/s':>10} {'vs none':>8} {'(range)':>13} {'MB/server':>10} {'vs none':>8}")
for name in configs:
    rate, mem, rates = rows[name]
    pairs = [r / b for r, b in zip(rates, base_rates)]
    spread = f"({min(pairs):.3f}-{max(pairs):.3f})"
    print(f"{name:22} {rate:10.0f} {rate / base_rate:8.3f} {spread:>13} {mem / 1e6:10.1f} "
          f"{mem / base_mem:8.3f}")
PY
