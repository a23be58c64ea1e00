#!/usr/bin/env bash
# The worker's training step against PyTorch's, side by side in one invocation: ecps'
# bench/worker_bench (BM_TrainStep, BM_TrainStepHeavy) and bench/peer/dlrm_torch.py on the
# same two models (worker_bench's and ECRec's compute-heavy one), at 1 and 2 threads,
# interleaved run by run, REPEATS times. Prints samples/s medians with ranges and the ratios.
#
#   bench/worker_vs_torch.sh [REPEATS]     (default 3)
#   ECPS_BENCH=build/bench/worker_bench    the ecps benchmark binary
#   ECPS_KEEP_OPENBLAS_CORETYPE=1          keep an OPENBLAS_CORETYPE narrower than the CPU
# Needs Debian's python3-torch (run with /usr/bin/python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repeats="${1:-3}"
bench="${ECPS_BENCH:-$root/build/bench/worker_bench}"
python=/usr/bin/python3
"$python" -c "import torch" 2>/dev/null || {
  echo "worker_vs_torch: needs python3-torch (apt install python3-torch)" >&2
  exit 2
}
[ -x "$bench" ] || { echo "worker_vs_torch: no $bench (build it first)" >&2; exit 2; }
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
export OMP_WAIT_POLICY=PASSIVE  # PyTorch's OpenMP threads must not spin between ops
# PyTorch's GEMMs go to OpenBLAS, which picks its kernels by CPU model: on a CPU it does not
# know (a VM reporting a generic model) it falls back to Prescott's SSE3 kernels, 4-5x slower,
# and the ratio would flatter ecps (whose oneDNN GEMMs read the CPU's features). The same when
# OPENBLAS_CORETYPE names a core narrower than the CPU (a machine's environment may set one:
# Haswell's AVX2 kernels on an AVX-512 CPU ran PyTorch's heavy model 1.7x slower). Then both
# sides run with the core for the CPU's widest vectors, as the worker's own warning advises
# (kernels/dense_ops.h, OpenBlasCoreFor; the benchmark binary, which loads the same OpenBLAS,
# answers for it). ECPS_KEEP_OPENBLAS_CORETYPE=1 keeps a core set in the environment.
core="$("$bench" --openblas_core_advice)"
if [ -n "$core" ] && [ -n "${OPENBLAS_CORETYPE:-}" ] && [ "${ECPS_KEEP_OPENBLAS_CORETYPE:-0}" = 1 ]; then
  echo "worker_vs_torch: keeping OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, narrower than this" \
    "CPU's vectors: PyTorch runs below its best and the ratios flatter ecps" >&2
elif [ -n "$core" ]; then
  if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    echo "worker_vs_torch: OpenBLAS chose its ${core#* } kernels on this CPU; running with" \
      "OPENBLAS_CORETYPE=${core%% *}" >&2
  else
    echo "worker_vs_torch: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (from the environment) is" \
      "narrower than this CPU's vectors, and PyTorch would run below its best; running with" \
      "OPENBLAS_CORETYPE=${core%% *} (ECPS_KEEP_OPENBLAS_CORETYPE=1 keeps yours)" >&2
  fi
  export OPENBLAS_CORETYPE="${core%% *}"
fi

for ((rep = 1; rep <= repeats; rep++)); do
  for model in small heavy; do
    for threads in 1 2; do
      name=BM_TrainStep
      [ "$model" = heavy ] && name=BM_TrainStepHeavy
      ecps="$("$bench" --benchmark_filter="^$name/$threads/" --benchmark_min_time=2 \
        --benchmark_format=json 2>/dev/null |
        "$python" -c 'import json,sys; print(json.load(sys.stdin)["benchmarks"][0]["items_per_second"])')"
      # PyTorch's GEMMs go to Debian's OpenBLAS, whose own threads torch.set_num_threads does
      # not bound: without OPENBLAS_NUM_THREADS its "1 thread" runs GEMMs on every core.
      # --flush-denormal: as ecps' dense math does; without it PyTorch slows several-fold once
      # the heavy model's gradients reach the denormal range (after a few dozen steps).
      torch="$(OPENBLAS_NUM_THREADS="$threads" "$python" "$root/bench/peer/dlrm_torch.py" \
        --model "$model" --threads "$threads" --flush-denormal \
        --steps "$([ "$model" = heavy ] && echo 8 || echo 30)" | sed 's/.*samples_per_s=//')"
      echo "$model $threads $ecps $torch" >>"$results"
      echo "run $rep: $model, $threads thread(s): ecps $(printf %.0f "$ecps"), torch $torch samples/s" >&2
    done
  done
done

"$python" - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    model, threads, ecps, torch = line.split()
    r = rows.setdefault((model, int(threads)), {"ecps": [], "torch": [], "ratio": []})
    r["ecps"].append(float(ecps))
    r["torch"].append(float(torch))
    r["ratio"].append(float(ecps) / float(torch))
def fmt(v):
    return "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v))
print("| model | threads | ecps samples/s, median (range) | PyTorch samples/s | ecps / PyTorch, median (range) |")
print("| --- | --- | --- | --- | --- |")
for (model, threads), r in sorted(rows.items()):
    print("| %s | %d | %s | %s | %.2fx (%.2f-%.2f) |" % (
        model, threads, fmt(r["ecps"]), fmt(r["torch"]), statistics.median(r["ratio"]),
        min(r["ratio"]), max(r["ratio"])))
for model in ("small", "heavy"):
    if (model, 1) in rows and (model, 2) in rows:
        print("%s: ecps 2 threads / 1 thread = %.2fx, PyTorch %.2fx" % (
            model, statistics.median(rows[(model, 2)]["ecps"]) / statistics.median(rows[(model, 1)]["ecps"]),
            statistics.median(rows[(model, 2)]["torch"]) / statistics.median(rows[(model, 1)]["torch"])))
PY
