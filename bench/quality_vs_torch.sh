#!/usr/bin/env bash
# Model quality of ecps against PyTorch on the same data, in one invocation: a generated
# Criteo-format file with collisions (bench/peer/criteo_gen.py), trained by ecps (one worker,
# two servers; synchronous, then pipelined) and by bench/peer/dlrm_quality.py (PyTorch, the
# same model, row mapping, initialisation scheme, optimizers, batches and held-out split),
# over SEEDS seeds each; prints held-out AUC and logloss per run, then medians with ranges.
# Then `ecps export` of the first synchronous run's final checkpoint is loaded by the PyTorch
# peer, which must get the AUC ecps reported for it.
#
#   bench/quality_vs_torch.sh [SEEDS]          (default 3)
#   LINES=200000 EPOCHS=2 BATCH=512 ROWS=10000 the data and the job
#   ECPS_BINARY=build/cli/ecps                 the ecps binary
# Needs Debian's python3-torch and python3-onnx (run with /usr/bin/python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seeds="${1:-3}"
lines="${LINES:-200000}"
epochs="${EPOCHS:-2}"
batch="${BATCH:-512}"
rows="${ROWS:-10000}"
ecps="${ECPS_BINARY:-$root/build/cli/ecps}"
python=/usr/bin/python3
"$python" -c "import torch, onnx" 2>/dev/null || {
  echo "quality_vs_torch: needs python3-torch and python3-onnx" >&2
  exit 2
}
[ -x "$ecps" ] || { echo "quality_vs_torch: no $ecps (build it first)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1

"$python" "$root/bench/peer/criteo_gen.py" "$work/data.tsv" --lines "$lines" --seed 7
# Every 20th line held out (eval_fraction 0.05); the rest trains, `epochs` times.
train_lines=$((lines - lines / 20))
steps=$(( (train_lines * epochs + batch - 1) / batch ))

# ecps_run SEED SYNCHRONOUS: one job; prints "auc logloss samples".
ecps_run() {
  local dir="$work/ecps-$1-$2"
  mkdir -p "$dir"
  cat > "$dir/job.yaml" <<SPEC
job:
  name: quality-$1-$2
  steps: $steps
  eval_samples: $lines
  seed: $1
  synchronous: $2
cluster:
  servers: 2
  workers: 1
  worker_threads: 1
model:
  table_rows: $rows
optimizer:
  sparse: {type: adagrad, lr: 0.05}
  dense: {type: adam, lr: 0.001}
data:
  source: criteo_tsv
  paths: [$work/data.tsv]
  batch_size: $batch
  eval_fraction: 0.05
  epochs: $epochs
SPEC
  "$ecps" run "$dir/job.yaml" --output "$dir/out" --no-progress > "$dir/run.log" 2>&1 || {
    echo "quality_vs_torch: ecps run failed (seed $1, synchronous $2):" >&2
    tail -20 "$dir/run.log" >&2
    exit 1
  }
  "$python" - "$dir/out/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
j = r
print(j["eval_auc"], j["eval_logloss"], j["samples"])
PY
}

results="$work/results"
: > "$results"
for seed in $(seq 1 "$seeds"); do
  for sync in true false; do
    read -r auc ll samples < <(ecps_run "$seed" "$sync")
    name=$([ "$sync" = true ] && echo ecps_sync || echo ecps_pipelined)
    echo "$name seed=$seed auc=$auc logloss=$ll samples=$samples"
    echo "$name $auc $ll" >> "$results"
  done
done
"$python" "$root/bench/peer/dlrm_quality.py" train "$work/data.tsv" --epochs "$epochs" \
  --batch "$batch" --rows "$rows" --seeds "$(seq -s, 1 "$seeds")" |
  while read -r name seed auc ll; do
    echo "$name $seed $auc $ll"
    echo "torch ${auc#auc=} ${ll#logloss=}" >> "$results"
  done

# The export of seed 1's synchronous run, evaluated by PyTorch.
ckpt="$work/ecps-1-true/out/checkpoints"
"$ecps" export "$ckpt" -o "$work/export" > "$work/export.log" 2>&1 || {
  cat "$work/export.log" >&2
  exit 1
}
exported="$("$python" "$root/bench/peer/dlrm_quality.py" export "$work/data.tsv" "$work/export" \
  --rows "$rows")"
echo "torch on ecps' export (seed 1, synchronous): $exported"
echo "export ${exported#export }" | sed 's/auc=//; s/logloss=//' >> "$results"

"$python" - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, auc, ll = line.split()
    runs.setdefault(name, []).append((float(auc), float(ll)))
print()
print("| trainer | runs | AUC median (min – max) | logloss median (min – max) |")
print("| --- | --- | --- | --- |")
def cell(v):
    return "%.4f (%.4f – %.4f)" % (statistics.median(v), min(v), max(v))
for name in ("ecps_sync", "ecps_pipelined", "torch"):
    r = runs[name]
    print("| %s | %d | %s | %s |" % (name, len(r), cell([x[0] for x in r]), cell([x[1] for x in r])))
t_auc = [x[0] for x in runs["torch"]]
t_ll = [x[1] for x in runs["torch"]]
for name in ("ecps_sync", "ecps_pipelined"):
    a = statistics.median(x[0] for x in runs[name])
    l = statistics.median(x[1] for x in runs[name])
    print("%s median within PyTorch's seed range: AUC %s, logloss %s; AUC - torch median %+.4f"
          % (name, min(t_auc) <= a <= max(t_auc), min(t_ll) <= l <= max(t_ll),
             a - statistics.median(t_auc)))
sync1 = runs["ecps_sync"][0]
exp = runs["export"][0]
print("export: ecps reported AUC %.6f logloss %.6f; PyTorch on the export %.6f %.6f "
      "(differences %.1e, %.1e)" % (sync1[0], sync1[1], exp[0], exp[1],
                                    abs(sync1[0] - exp[0]), abs(sync1[1] - exp[1])))
PY
