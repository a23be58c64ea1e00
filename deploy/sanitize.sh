#!/usr/bin/env bash
# Builds ecps with Clang under AddressSanitizer and UndefinedBehaviorSanitizer into its own
# folder (build-asan/; no benchmarks, no CUDA), runs the whole test suite there, then runs
# every libFuzzer target under fuzz/ for a bounded time over its seed corpus.
# (The soak, the cluster tests and the longest drills run in the plain build only; see
# ECPS_SANITIZE_LABELS and ECPS_SANITIZE_SKIP.)
#
#   deploy/sanitize.sh                 build, suite, then each fuzzer for a fixed number of
#                                      inputs from a fixed seed (the same inputs every run,
#                                      about 8 s each here: CI stays deterministic)
#   ECPS_ASAN_BUILD_DIR=dir            build somewhere else
#   ECPS_FUZZ_SECONDS=N                explore instead: N seconds each, a random seed
#   ECPS_FUZZ_SECONDS=0                skip the fuzzers
#   ECPS_WERROR=1                      warnings are errors, -Wthread-safety among them (CI)
#   ECPS_SANITIZE_LABELS="a|b"         CTest labels left out (default soak|multihost|slurm|
#                                      bundle|prometheus|tls); empty: none
#   ECPS_SANITIZE_SKIP="regex"         tests left out by name (default: the longest drills
#                                      that other sanitized tests cover); empty: none
# Extra arguments go to ctest (e.g. -R Peer). A sanitizer report fails the test that made it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ECPS_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${ECPS_JOBS:-$(nproc)}"
fuzz_seconds="${ECPS_FUZZ_SECONDS:--1}"

"$root/deploy/setup.sh" --tests --deps-only  # the packages, the tests' (clang among them) too

launcher=()
# ccache caches files that use the precompiled headers (cmake/EcpsPch.cmake) only with
# these sloppiness settings.
command -v ccache >/dev/null && launcher=(
  "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"
  -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  # -O1 -g1: fast enough to run the suite, line numbers in reports, a shorter build.
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DECPS_SANITIZE=address,undefined -DECPS_FUZZ=ON -DECPS_CUDA=OFF -DECPS_BUILD_BENCH=OFF \
    -DECPS_WERROR="$([ "${ECPS_WERROR:-0}" = 1 ] && echo ON || echo OFF)" \
    "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j "$jobs" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
cmake --build "$build" -j "$jobs" >/dev/null
echo "sanitize: built into $build"

# Leaks are reported too; every error aborts the process (a failed test, a fuzzer finding).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# The soak's shortest form when it runs here (ECPS_SANITIZE_LABELS= includes it): processes
# under ASan are several times slower.
export ECPS_SOAK_FAILURES="${ECPS_SOAK_FAILURES:-5}"
# By default the tests that repeat, at length, code paths the rest of the suite already
# runs under the sanitizers are left to the plain build (deploy/test.sh): the labels soak
# (190 s here under ASan), the cluster tests (multihost, slurm, bundle: the same roles
# through other launchers) and the real Prometheus (prometheus: a drill the e2e tests run, and
# the exposition code the unit tests run), the whole TLS job (tls: the TLS and role checks run
# sanitized in security_test and access_test), and the longest end-to-end drills, each of which another
# sanitized test covers (a spare's rebuild, a replacement process, fencing, a restarted
# worker, training to a useful AUC in-process, the scrub's repairs followed by a replacement:
# OnlineScrubTest repairs under the sanitizers in-process): about 280 s of the 460 s the whole suite took
# under ASan when they were chosen. Also the ABFT sweeps: every flip over every layer
# shape of both models at batch 2048, and the clean steps of both models: 316 s of test time
# under ASan here (ctest's recorded costs), against 250 s for the drills above. The smaller
# ABFT tests (the layer checks, the confirmation, a flipped step recomputed, the CUDA bodies'
# checks) run the same code under the sanitizers. ECPS_SANITIZE_LABELS="" and
# ECPS_SANITIZE_SKIP="" run it all.
exclude="${ECPS_SANITIZE_LABELS-soak|multihost|slurm|bundle|prometheus|tls}"
skip="${ECPS_SANITIZE_SKIP-RebuilderKilledWhileHoldingFreezes|TrainsToUsefulAuc|LocalTrainer.LearnsSyntheticData|ServerStoppedPastTheTimeout|KilledServerWithoutSpare|KilledWorkerIsRestarted|OnlineRebuild.ReplacedWhileTraining|ScrubEndToEnd.TwoParityRows|FlipsAboveTheBoundAreCaught|AFlipInAnyProductIsCaught|CleanStepsRaiseNoAlarm}"
label_args=()
[ -n "$exclude" ] && label_args+=(-LE "$exclude")
[ -n "$skip" ] && label_args+=(-E "$skip")
ctest --test-dir "$build" --output-on-failure -j "${ECPS_TEST_JOBS:-2}" "${label_args[@]}" "$@"

# Inputs per target in the deterministic mode: about 8 s each under ASan on these cores.
declare -A runs=([spec]=2000 [criteo_line]=200000 [manifest]=30000 [ps_requests]=30000
  [parity_frame]=200000)
if [ "$fuzz_seconds" -ne 0 ]; then
  for target in spec criteo_line manifest ps_requests parity_frame; do
    corpus="$(mktemp -d)"
    cp -r "$root/fuzz/corpus/$target/." "$corpus/"
    if [ "$fuzz_seconds" -gt 0 ]; then
      budget=(-max_total_time="$fuzz_seconds")
      echo "sanitize: fuzzing $target for ${fuzz_seconds} s"
    else
      budget=(-runs="${runs[$target]}" -seed=1)
      echo "sanitize: fuzzing $target: ${runs[$target]} inputs from seed 1"
    fi
    # New inputs go to a scratch corpus: the repository's seeds stay as they are.
    if ! "$build/fuzz/fuzz_$target" "${budget[@]}" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/fuzz/$target-" \
        "$corpus" >"$build/fuzz/$target.log" 2>&1; then
      tail -40 "$build/fuzz/$target.log"
      echo "sanitize: fuzz_$target found a crash; the input is in $build/fuzz/$target-*"
      rm -rf "$corpus"
      exit 1
    fi
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz/$target.log" |
      tr '\n' ' '
    echo
    rm -rf "$corpus"
  done
fi
echo "sanitize: suite and fuzzers clean"
