#!/usr/bin/env bash
# What worker.abft costs the whole dense step (Dlrm::ForwardBackward, batch 2048, one thread)
# on both benchmark models, the modes interleaved: each round times off, detect, auto and
# "all panel" one after the other (abft_bench's BM_Step, at least MIN_TIME seconds each), so
# that every mode's time has an "off" of the same moment to be divided by.
#
#   bench/abft_steps.sh [ROUNDS] [MIN_TIME]     defaults 5 and 1
#   ECPS_ABFT_BENCH=PATH   the abft_bench binary (default build/bench/abft_bench)
#
# Prints per model and mode the median step time, and the median (min-max) of the rounds'
# ratios to off minus one: the overhead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-5}"
min_time="${2:-1}"
bench="${ECPS_ABFT_BENCH:-$root/build/bench/abft_bench}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for ((r = 0; r < rounds; r++)); do
  for model in 0 1; do
    for mode in 0 1 2 3; do
      "$bench" --benchmark_filter="^BM_Step/model:$model/mode:$mode/" \
        --benchmark_min_time="$min_time" --benchmark_format=json \
        >"$work/r$r-m$model-$mode.json" 2>/dev/null
    done
  done
  echo "round $((r + 1))/$rounds done" >&2
done

python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
names = ["off", "detect", "auto", "all panel"]
def t(r, model, mode):
    b = json.load(open(f"{work}/r{r}-m{model}-{mode}.json"))["benchmarks"][0]
    return b["real_time"]
print(f"{'model':11} {'mode':10} {'step ms':>9} {'overhead':>9} {'(range over rounds)':>22}")
for model, label in ((0, "quickstart"), (1, "heavy")):
    off = [t(r, model, 0) for r in range(rounds)]
    for mode in range(4):
        times = [t(r, model, mode) for r in range(rounds)]
        extra = [x / o - 1 for x, o in zip(times, off)]
        cell = "" if mode == 0 else f"{100 * statistics.median(extra):+8.1f}%"
        span = "" if mode == 0 else f"({100 * min(extra):+.1f}..{100 * max(extra):+.1f}%)"
        print(f"{label:11} {names[mode]:10} {statistics.median(times):9.2f} {cell:>9} {span:>22}")
PY
