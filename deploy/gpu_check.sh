#!/usr/bin/env bash
# The GPU checks, as one prepared script for a machine with an NVIDIA GPU (an H200) that has
# nvcc, CMake and ninja but none of Debian's libraries and no network. Builds the GPU-only
# target (-DECPS_GPU_ONLY=ON: codec/cuda, kernels/cuda and their tests, googletest from
# source), runs the GPU tests (ctest -L gpu), the GPU step benchmark (samples/s of the
# worker_bench model and ECRec's on one GPU, NCCL's all-reduce time) and, when a relocatable
# bundle is at hand, one short whole `ecps run` with cluster.worker_device: cuda. Everything
# it prints goes to OUT_DIR too. Meant to finish in under 8 minutes.
#
#   deploy/gpu_check.sh --prepare   (here, before sending the tree) copy googletest's sources
#                                   into build-deps/googletest (ignored by git: carry it)
#   deploy/gpu_check.sh OUT_DIR     (on the GPU machine) build, test, benchmark
#   ECPS_GTEST_SOURCE_DIR=dir       googletest's sources elsewhere
#   ECPS_BUNDLE=path.tar.gz         the bundle (default: build/ecps-*-linux-*.tar.gz if there)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "${1:-}" = "--prepare" ]; then
  src="${ECPS_GTEST_SOURCE_DIR:-/usr/src/googletest}"
  [ -f "$src/CMakeLists.txt" ] || { echo "gpu_check: no googletest sources at $src" >&2; exit 1; }
  rm -rf "$root/build-deps/googletest"
  mkdir -p "$root/build-deps"
  cp -r "$src" "$root/build-deps/googletest"
  echo "gpu_check: googletest copied to build-deps/googletest"
  exit 0
fi
if [ $# -ne 1 ]; then
  echo "usage: deploy/gpu_check.sh OUT_DIR | --prepare" >&2
  exit 2
fi
out="$1"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu_check.log"
: >"$log"
say() { echo "gpu_check: $*" | tee -a "$log"; }
# step NAME SECONDS CMD...: runs CMD with a time limit, its output into OUT_DIR/NAME.txt.
failed=0
step() {
  local name="$1" limit="$2"
  shift 2
  say "== $name"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.txt" | tee -a "$log"
  say "$name: exit $rc in $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

gtest="${ECPS_GTEST_SOURCE_DIR:-}"
if [ -z "$gtest" ]; then
  for d in "$root/build-deps/googletest" /usr/src/googletest; do
    [ -f "$d/CMakeLists.txt" ] && { gtest="$d"; break; }
  done
fi
[ -n "$gtest" ] || { say "no googletest sources (run deploy/gpu_check.sh --prepare first)"; exit 1; }

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  nvcc --version | tail -n 1; cmake --version | head -n 1; nproc; } 2>&1 | tee -a "$log"

build="$root/build-gpu"
jobs="$(nproc)"
step configure 120 cmake -S "$root" -B "$build" -G Ninja -DECPS_GPU_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DECPS_GTEST_SOURCE_DIR="$gtest" -DCMAKE_CUDA_ARCHITECTURES=90 ||
  exit 1
step build 300 cmake --build "$build" -j "$jobs" || exit 1
step tests 120 ctest --test-dir "$build" -L gpu --output-on-failure -j 1
# The skipped tests would mean no GPU was seen: say so plainly.
grep -q "Skipped" "$out/tests.txt" && say "some GPU tests SKIPPED (see tests.txt)"
step bench 120 "$build/kernels/cuda/gpu_step_bench" 50 1

bundle="${ECPS_BUNDLE:-$(ls "$root"/build/ecps-*-linux-*.tar.gz 2>/dev/null | head -n 1)}"
if [ -n "$bundle" ] && [ -f "$bundle" ]; then
  run="$out/run"
  mkdir -p "$run"
  tar -xzf "$bundle" -C "$run"
  ecps="$(ls "$run"/ecps-*/bin/ecps | head -n 1)"
  # The bundle's plugin needs cuBLAS from this machine's CUDA.
  cuda_lib="$(dirname "$(dirname "$(command -v nvcc)")")/lib64"
  sed -e 's/^  workers: 1$/  workers: 1\n  worker_device: cuda/' \
      -e 's/^  steps: .*/  steps: 200/' "$(dirname "$ecps")/../examples/quickstart.yaml" \
      >"$run/spec.yaml"
  step ecps_run 120 env LD_LIBRARY_PATH="$cuda_lib" "$ecps" run "$run/spec.yaml" \
    --output "$run/job"
else
  say "no bundle (build/ecps-*-linux-*.tar.gz): the whole-job run with worker_device: cuda is skipped"
fi
say "done: results in $out (failed=$failed)"
exit "$failed"
