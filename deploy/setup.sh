#!/usr/bin/env bash
# Installs what ecps needs (Debian packages, only those missing), then configures and builds
# into build/ (RelWithDebInfo; ccache when present). Idempotent and quiet when all is there.
#
#   deploy/setup.sh            what building ecps and running a job need (deploy/quickstart.sh),
#                              then configure + build everything
#   deploy/setup.sh --tests    also what only the tests need (deploy/test.sh): Slurm, munge,
#                              Prometheus, openssl, python3-grpcio, clang, patchelf, iproute2, etcd,
#                              python3-onnx, node and the k8s and export tests' npm modules
#   deploy/setup.sh --deps-only    install the packages, build nothing (with --tests too:
#                              deploy/sanitize.sh)
#   ECPS_BUILD_DIR=dir         build somewhere else (default: build)
#   ECPS_CMAKE_ARGS="..."      extra CMake arguments (e.g. -DECPS_CUDA=OFF)
#   ECPS_JOBS=n                parallel compile jobs (default: number of cores)
#   ECPS_DEBUG_INFO=lines      line tables only (-g1) instead of full debug info: about 30%
#                              less compile time, backtraces keep their line numbers (CI)
#   ECPS_WERROR=1              the project's warnings (-Wall -Wextra) are errors (CI)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ECPS_BUILD_DIR:-$root/build}"
jobs="${ECPS_JOBS:-$(nproc)}"
tests=0
deps_only=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    --deps-only) deps_only=1 ;;
    *) echo "setup: unknown argument $arg (--tests, --deps-only)" >&2; exit 2 ;;
  esac
done

# What the build configures against (every find_package of cmake/EcpsDeps.cmake is REQUIRED,
# GoogleTest and Google Benchmark too: the build compiles the unit tests and the benchmarks)
# and what `ecps run` uses.
packages=(cmake ninja-build pkg-config g++ ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev libfmt-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libisal-dev
  libdnnl-dev            # oneDNN: the worker's GEMMs (optional to the build; faster than OpenBLAS's)
  libxxhash-dev nlohmann-json3-dev libcli11-dev  # checkpoint hashes, JSON, the command line
  prometheus-cpp-dev     # /metrics (runtime/metrics.h)
  libssl-dev             # role tokens (HMAC-SHA256) and TLS checks (runtime/security.h)
  python3 python3-matplotlib)  # the build's layering check; the timeline plot of `ecps run`
# What only the tests run (each skips or fails saying what is missing without it).
if ((tests)); then
  packages+=(prometheus  # promtool and a real Prometheus: the prometheus tests
    openssl              # the TLS tests' certificates (tests/tls/make_certs.sh)
    python3-grpcio       # the TLS test's outside client
    clang libclang-rt-dev  # deploy/sanitize.sh (ASan, UBSan, libFuzzer)
    patchelf             # deploy/bundle.sh, run by the bundle test: the bundle's $ORIGIN run paths
    etcd-server etcd-client  # label etcd: a real etcd cluster for the coordinator's state and standbys
    iproute2             # the multihost test's network namespaces
    python3-onnx         # label export: ONNX's own checker on the model `ecps export` writes
    slurmctld slurmd slurm-client munge)  # the slurm test's private cluster
  # node and npm: the k8s test's offline schema check (tests/k8s). A Node.js that is there
  # already is used as it is: NodeSource's nodejs, for one, brings its own npm and conflicts
  # with Debian's npm package.
  command -v npm >/dev/null || packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The k8s test's npm modules, exactly as tests/k8s/package-lock.json pins them, when they are
# missing or older than the lock file (npm records what it installed in .package-lock.json).
k8s_modules="$root/tests/k8s/node_modules/.package-lock.json"
if ((tests)) &&
   { [ ! -f "$k8s_modules" ] || [ "$root/tests/k8s/package-lock.json" -nt "$k8s_modules" ]; }; then
  echo "setup: installing the k8s test's npm modules (tests/k8s)"
  # Not fatal here (the build needs none of it); the k8s test then fails and says why.
  npm ci --prefix "$root/tests/k8s" --no-audit --no-fund --loglevel=error >/dev/null ||
    echo "setup: warning: npm ci --prefix tests/k8s failed; the k8s test will fail" >&2
fi

# The export test's ONNX Runtime (onnxruntime-node, as tests/export/package-lock.json pins it),
# the same way. Its install script would fetch the CUDA provider from NuGet: the CPU runtime
# the test uses is in the npm package itself, so that download is skipped.
export_modules="$root/tests/export/node_modules/.package-lock.json"
if ((tests)) &&
   { [ ! -f "$export_modules" ] || [ "$root/tests/export/package-lock.json" -nt "$export_modules" ]; }; then
  echo "setup: installing the export test's npm modules (tests/export)"
  ONNXRUNTIME_NODE_INSTALL=skip npm ci --prefix "$root/tests/export" --no-audit --no-fund \
    --loglevel=error >/dev/null ||
    echo "setup: warning: npm ci --prefix tests/export failed; the export test will skip" >&2
fi

# --deps-only: install and stop (deploy/sanitize.sh builds elsewhere, with Clang).
if ((deps_only)); then exit 0; fi

launcher=()
# ccache caches files that use the precompiled headers (cmake/EcpsPch.cmake) only with
# these sloppiness settings.
command -v ccache >/dev/null && launcher=(
  "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"
  -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  debug=()
  [ "${ECPS_WERROR:-0}" = 1 ] && debug+=(-DECPS_WERROR=ON)
  if [ "${ECPS_DEBUG_INFO:-}" = lines ]; then
    debug+=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
            "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
  fi
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    "${debug[@]}" ${ECPS_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build" -j "$jobs" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
# grep swallows the build's exit status: check it again (a no-op when the build succeeded).
cmake --build "$build" -j "$jobs" >/dev/null
echo "setup: built into $build"
