#!/usr/bin/env bash
# Builds (via deploy/setup.sh --tests: the build's packages and the tests' own) and runs the
# whole test suite with ctest.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -R codec).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/deploy/setup.sh" --tests
build="${ECPS_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure -j "${ECPS_TEST_JOBS:-2}" "$@"
