#!/usr/bin/env bash
# Training throughput while the coordinator is down, against before and after: `ecps run` of
# an erasure-coded job whose coordinator a drill SIGKILLs and keeps down DOWN_S seconds
# (faults: kill_coordinator with duration_s) before a new one takes the job over. The rate
# comes from the workers' own record (worker 0's evaluation lines, one every 20 steps, with
# their timestamps), since nobody else watches the job while the coordinator is away.
#
#   bench/coordinator_down.sh [REPEATS] [DOWN_S]
#     REPEATS  default 3: runs; medians and ranges reported
#     DOWN_S   default 10: how long the coordinator stays down
#   ECPS_BIN=PATH  the ecps binary (default build/cli/ecps)
#
# Per run: steps/s in the DOWN_S seconds before the worker noticed the coordinator gone, in
# the outage (from that notice to its "answers again"), and in the DOWN_S seconds after; the
# longest gap between two of the worker's step timestamps in the outage; the downtime and the
# takeover from report.json. Then the medians (min-max) and the ratios down/before and
# after/before.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repeats="${1:-3}"
down_s="${2:-10}"
ecps="${ECPS_BIN:-$root/build/cli/ecps}"
python=/usr/bin/python3
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for i in $(seq 1 "$repeats"); do
  dir="$work/run-$i"
  mkdir -p "$dir"
  cat >"$dir/job.yaml" <<EOF
job: {name: coordinator-down, steps: 100000, eval_every: 20, eval_samples: 256, token: bench}
cluster: {servers: 3, spares: 0, workers: 1, heartbeat_interval_ms: 200, heartbeat_timeout_ms: 2000}
model: {embedding_dim: 16, bottom_mlp: [64, 16], top_mlp: [64, 32], table_rows: 20000}
data: {source: synthetic, batch_size: 256}
fault_tolerance: {mode: erasure_code, k: 2, r: 1, checkpoint: {save_final: false}}
faults:
  - {at_step: 1500, action: kill_coordinator, duration_s: $down_s}
monitoring: {progress: false}
EOF
  # The job runs until well after the new coordinator took over, then is interrupted.
  "$ecps" run "$dir/job.yaml" --output "$dir/out" --no-progress >"$dir/run.log" 2>&1 &
  job=$!
  log="$dir/out/logs/worker-0.log"
  deadline=$((SECONDS + 300))
  until grep -q "the coordinator answers again" "$log" 2>/dev/null; do
    if ((SECONDS > deadline)) || ! kill -0 "$job" 2>/dev/null; then
      echo "run $i: the coordinator never came back; see $dir/run.log" >&2
      cat "$dir/run.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  back=$SECONDS
  while ((SECONDS < back + down_s + 2)); do sleep 0.5; done
  kill -INT "$job"
  wait "$job" || true
  "$python" - "$log" "$down_s" "$i" >>"$work/rows.txt" <<'EOF'
import re, sys
log, window, run = sys.argv[1], float(sys.argv[2]), sys.argv[3]
text = open(log).read()
stamp = r"\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\]"
def seconds(m):
    return int(m[0]) * 3600 + int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1000
evals = [(seconds(m.groups()[:4]), int(m.group(5)))
         for m in re.finditer(stamp + r" \[worker\] \[info\] worker 0: step (\d+) eval", text)]
def when(what):
    m = re.search(stamp + r"[^\n]*" + what, text)
    return seconds(m.groups())
gone, back = when("the coordinator does not answer"), when("the coordinator answers again")
def rate(t0, t1):
    inside = [(t, s) for t, s in evals if t0 <= t <= t1]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
during = [t for t, _ in evals if gone <= t <= back]
gap = max((b - a for a, b in zip(during, during[1:])), default=float("nan"))
print(run, rate(gone - window, gone), rate(gone, back), rate(back, back + window), back - gone, gap)
EOF
  tail -n 1 "$work/rows.txt" | awk -v i="$i" '{printf "run %s: %.0f steps/s before, %.0f down, %.0f after; outage seen by the worker %.1f s, longest step gap in it %.2f s\n", i, $2, $3, $4, $5, $6}'
done

"$python" - "$work/rows.txt" <<'EOF'
import statistics, sys
rows = [list(map(float, line.split()[1:])) for line in open(sys.argv[1])]
def cell(values):
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"
before = [r[0] for r in rows]; down = [r[1] for r in rows]; after = [r[2] for r in rows]
print(f"steps/s, median (min-max) of {len(rows)} runs: before {cell(before)}, "
      f"coordinator down {cell(down)}, after {cell(after)}")
ratios = [d / b for d, b in zip(down, before)]
after_ratios = [a / b for a, b in zip(after, before)]
print(f"down/before {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
      f"after/before {statistics.median(after_ratios):.3f} "
      f"({min(after_ratios):.3f}-{max(after_ratios):.3f}); "
      f"longest step gap while down {max(r[4] for r in rows):.2f} s")
EOF
