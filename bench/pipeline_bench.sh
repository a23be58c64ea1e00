#!/usr/bin/env bash
# Pipelined steps against synchronous ones, and one build against another, in one invocation
# (docs/design.md, "Pipelined steps"):
#  1. throughput: bench-small and the quickstart under each binary of ECPS_BINS, interleaved
#     run by run, REPEATS times; samples/s medians (min-max) and each binary's ratio to the
#     first's (the range: of the runs' ratios to the first binary's run of the same round);
#  2. quality: a generated Criteo-format file (bench/criteo_file.py, LINES lines, hash
#     collisions), the issue's model (13-64-16 / 367-64-32-1, dim 16, batch 2048, sparse
#     Adagrad 0.05, dense Adam 1e-3, one pass), job.synchronous true and false, seeds 1..SEEDS,
#     under each binary: the held-out logloss of each run, its mean per mode and the gap
#     pipelined - synchronous.
#
#   bench/pipeline_bench.sh [REPEATS] [SEEDS] [LINES]     (defaults 3, 3, 400000)
#   ECPS_BINS="old/ecps new/ecps"   the builds to compare (default build/cli/ecps)
#   ECPS_PARTS="throughput quality" which parts to run (default both)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repeats="${1:-3}"
seeds="${2:-3}"
lines="${3:-400000}"
read -r -a bins <<<"${ECPS_BINS:-$root/build/cli/ecps}"
parts="${ECPS_PARTS:-throughput quality}"
python=/usr/bin/python3
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

run() {  # BIN SPEC OUT: one job; its report.json stays in OUT
  "$1" run "$2" --output "$3" --no-progress >/dev/null 2>"$3.err" ||
    { echo "run of $2 under $1 failed:" >&2; tail -20 "$3.err" >&2; exit 1; }
}

if [[ " $parts " == *" throughput "* ]]; then
  for ((rep = 0; rep < repeats; rep++)); do
    for spec in bench-small quickstart; do
      for b in "${!bins[@]}"; do
        echo "== throughput $spec, binary $b (round $((rep + 1))/$repeats)" >&2
        run "${bins[$b]}" "$root/deploy/examples/$spec.yaml" "$work/tp-$spec-$b-$rep"
      done
    done
  done
fi

if [[ " $parts " == *" quality "* ]]; then
  "$python" "$root/bench/criteo_file.py" "$work/criteo.tsv" "$lines" 1
  steps=$((lines * 9 / 10 / 2048))  # one pass over the training split (eval_fraction 0.1)
  for ((seed = 1; seed <= seeds; seed++)); do
    for b in "${!bins[@]}"; do
      for sync in true false; do
        echo "== quality seed $seed, binary $b, synchronous $sync" >&2
        cat >"$work/q-$seed-$b-$sync.yaml" <<YAML
job: {name: pipeline-quality, steps: $steps, eval_every: 0, eval_samples: $((lines / 10)), seed: $seed, synchronous: $sync}
cluster: {servers: 2, workers: 1}
model: {num_dense: 13, num_sparse: 26, embedding_dim: 16, table_rows: 20000, bottom_mlp: [64, 16], top_mlp: [64, 32]}
optimizer: {sparse: {type: adagrad, lr: 0.05}, dense: {type: adam, lr: 0.001}}
data: {source: criteo_tsv, paths: [$work/criteo.tsv], batch_size: 2048, eval_fraction: 0.1}
fault_tolerance: {mode: none}
monitoring: {progress: false, log_level: warn}
YAML
        run "${bins[$b]}" "$work/q-$seed-$b-$sync.yaml" "$work/q-$seed-$b-$sync"
      done
    done
  done
fi

"$python" - "$work" "$repeats" "$seeds" "${#bins[@]}" "$parts" <<'PY'
import json, os, statistics, sys
work, repeats, seeds, nbins, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def report(path):
    r = json.load(open(os.path.join(work, path, "report.json")))
    assert r["ok"], path
    return r
if "throughput" in parts:
    print(f"{'spec':12} {'binary':>6} {'samples/s':>10} {'(min-max)':>17} {'vs binary 0':>11} {'(range)':>13}")
    for spec in ("bench-small", "quickstart"):
        rates = [[report(f"tp-{spec}-{b}-{rep}")["samples_per_s"] for rep in range(repeats)]
                 for b in range(nbins)]
        for b in range(nbins):
            m = statistics.median(rates[b])
            pairs = [x / y for x, y in zip(rates[b], rates[0])]
            print(f"{spec:12} {b:>6} {m:10.0f} {f'({min(rates[b]):.0f}-{max(rates[b]):.0f})':>17} "
                  f"{m / statistics.median(rates[0]):11.3f} {f'({min(pairs):.3f}-{max(pairs):.3f})':>13}")
if "quality" in parts:
    print(f"\n{'binary':>6} {'seed':>4} {'sync logloss':>12} {'pipelined':>10} {'gap':>9} {'sync s/s':>9} {'pipe s/s':>9}")
    for b in range(nbins):
        gaps, ls, lp = [], [], []
        for seed in range(1, seeds + 1):
            s, p = report(f"q-{seed}-{b}-true"), report(f"q-{seed}-{b}-false")
            ls.append(s["eval_logloss"]); lp.append(p["eval_logloss"]); gaps.append(lp[-1] - ls[-1])
            print(f"{b:>6} {seed:>4} {ls[-1]:12.6f} {lp[-1]:10.6f} {gaps[-1]:+9.6f} "
                  f"{s['samples_per_s']:9.0f} {p['samples_per_s']:9.0f}")
        print(f"{b:>6} {'mean':>4} {statistics.mean(ls):12.6f} {statistics.mean(lp):10.6f} "
              f"{statistics.mean(gaps):+9.6f}")
PY
