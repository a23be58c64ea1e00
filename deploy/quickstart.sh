#!/usr/bin/env bash
# Builds ecps (via deploy/setup.sh, which installs what the build and `ecps run` need, not
# the tests' packages) and runs the quickstart job on this machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/deploy/setup.sh"
build="${ECPS_BUILD_DIR:-$root/build}"
if [ ! -x "$build/cli/ecps" ]; then
  echo "quickstart: the ecps binary is not built yet (training lands with issue 3)" >&2
  exit 1
fi
exec "$build/cli/ecps" run "$root/deploy/examples/quickstart.yaml" "$@"
