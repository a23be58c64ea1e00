#!/usr/bin/env bash
# The relocatable bundle (deploy/bundle.sh), end to end: packs BUILD_DIR/cli/ecps into a
# temporary folder, unpacks it elsewhere, checks that the loader takes every library from the
# bundle's lib/ except glibc's, then runs a shortened quickstart (the same drill: a server
# SIGKILLed, a spare rebuilding it) with the bundled binary and LD_LIBRARY_PATH unset; as root,
# with the source tree's deploy/ hidden, so that its plot must come from the bundle. About 30 s.
#
#   bash tests/bundle_test.sh BUILD_DIR      (ctest -L bundle)
#
# Never builds, and never modifies BUILD_DIR/cli/ecps: bundle.sh works on a copy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:?usage: bundle_test.sh BUILD_DIR}" && pwd)"
start=$SECONDS

fail() { echo "bundle_test: FAIL: $*" >&2; exit 1; }

# bundle.sh builds when the binary is missing; a test must not (it would race the build that
# runs the tests), so that case fails here first.
[ -x "$build/cli/ecps" ] || fail "$build/cli/ecps is not built"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

ECPS_BUILD_DIR="$build" "$root/deploy/bundle.sh" -o "$tmp/dist"
shopt -s nullglob
tarballs=("$tmp"/dist/ecps-*-linux-*.tar.gz)
((${#tarballs[@]} == 1)) || fail "expected one tarball in $tmp/dist, found ${#tarballs[@]}"

# Unpacked far from the build folder and the source tree: nothing may point back at either.
mkdir "$tmp/unpack"
tar -C "$tmp/unpack" -xzf "${tarballs[0]}"
dirs=("$tmp"/unpack/ecps-*)
((${#dirs[@]} == 1)) || fail "the tarball should hold one ecps-<version>/ folder"
b="${dirs[0]}"

for f in bin/ecps share/ecps/plot_timeline.py share/ecps/recovery_report.py \
  examples/quickstart.yaml README; do
  [ -f "$b/$f" ] || fail "the bundle lacks $f"
done
[ -x "$b/bin/ecps" ] || fail "bin/ecps is not executable"
# readelf's output is kept before grep reads it: grep -q leaving early would SIGPIPE readelf and,
# under pipefail, turn a match into a failure.
sections="$(readelf -S -W "$b/bin/ecps")"
grep -qE '\.(symtab|debug_info) ' <<<"$sections" && fail "bin/ecps is not stripped"
runpath="$(readelf -d "$b/bin/ecps" | sed -nE 's/.*\(RUNPATH\).*\[(.*)\]/\1/p')"
# shellcheck disable=SC2016  # $ORIGIN: the literal the loader expands
[ "$runpath" = '$ORIGIN/../lib' ] || fail "bin/ecps has run path '$runpath', not \$ORIGIN/../lib"
for lib in "$b"/lib/*; do
  [ -L "$lib" ] && fail "lib/$(basename "$lib") is a symlink"
  runpath="$(readelf -d "$lib" | sed -nE 's/.*\(RUNPATH\).*\[(.*)\]/\1/p')"
  # The GPU plugin also looks in CUDA's folder for cuBLAS and NCCL, which are not bundled.
  want='$ORIGIN'
  # shellcheck disable=SC2016
  [ "$(basename "$lib")" = libecps_gpu.so ] && want='$ORIGIN:/usr/local/cuda/lib64'
  [ "$runpath" = "$want" ] || fail "lib/$(basename "$lib") has run path '$runpath', not $want"
done
# The plugin travels when the build has one, and resolves every library it needs (the CUDA
# runtime from lib/, cuBLAS from this machine's CUDA).
if [ -f "$build/cli/libecps_gpu.so" ]; then
  [ -f "$b/lib/libecps_gpu.so" ] || fail "the build has libecps_gpu.so and the bundle does not"
  plugin_ldd="$(env -u LD_LIBRARY_PATH ldd "$b/lib/libecps_gpu.so")"
  grep -q "not found" <<<"$plugin_ldd" && fail "lib/libecps_gpu.so: $(grep "not found" <<<"$plugin_ldd")"
  grep -q "libcudart.*$b/lib" <<<"$plugin_ldd" || fail "lib/libecps_gpu.so does not take libcudart from lib/"
  echo "bundle_test: lib/libecps_gpu.so resolves all its libraries"
fi

# What the loader resolves for the bundled binary, as on a machine without the -dev packages:
# each library from the bundle's lib/ or glibc's (the list deploy/bundle.sh leaves out).
glibc_re='^(ld-linux[-.a-z0-9_]*\.so\.[0-9]+|lib(c|m|mvec|pthread|dl|rt|resolv|util|anl|nsl|BrokenLocale|thread_db|c_malloc_debug|memusage|pcprofile)\.so(\.[0-9]+)?|libnss_[a-z]+\.so\.[0-9]+|linux-vdso\.so\.[0-9]+)$'
ldd_out="$(env -u LD_LIBRARY_PATH ldd "$b/bin/ecps")"
from_bundle=0
from_glibc=()
offenders=()
while read -r soname arrow path _; do
  [ "$arrow" = "=>" ] || continue
  if [ "$path" = "not" ]; then
    offenders+=("$soname => not found")
  elif [ "$(dirname "$(readlink -f "$path")")" = "$(readlink -f "$b/lib")" ]; then
    from_bundle=$((from_bundle + 1))
  elif [[ "$soname" =~ $glibc_re ]]; then
    from_glibc+=("$soname")
  else
    offenders+=("$soname => $path")
  fi
done <<<"$ldd_out"
if ((${#offenders[@]})); then
  printf 'bundle_test: resolved outside the bundle: %s\n' "${offenders[@]}" >&2
  fail "libraries outside the bundle's lib/ that are not glibc's"
fi
((from_bundle > 0)) || fail "no library resolved from the bundle's lib/"
echo "bundle_test: ldd: $from_bundle libraries from lib/, glibc: ${from_glibc[*]}"

# The build folder's binary is left as it was built: not stripped, its own run path.
sections="$(readelf -S -W "$build/cli/ecps")"
grep -q '\.symtab ' <<<"$sections" || fail "$build/cli/ecps was stripped"
dynamic="$(readelf -d "$build/cli/ecps")"
grep -qF 'ORIGIN' <<<"$dynamic" && fail "$build/cli/ecps was patched (\$ORIGIN run path)"

# The quickstart takes about a minute on 2 cores: 300 steps with the drill at step 120 keep
# the kill, the spare's rebuild, the evaluation and the final scrub in about 15 s.
sed -E -e 's/^( *steps:) *1500\b/\1 300/' -e 's/^( *eval_every:) *500\b/\1 150/' \
  -e 's/^( *eval_samples:) *8192\b/\1 2048/' -e 's/^( *- at_step:) *600\b/\1 120/' \
  "$b/examples/quickstart.yaml" >"$tmp/quickstart.yaml"
if ! grep -qE '^ *steps: 300\b' "$tmp/quickstart.yaml" ||
  ! grep -qE 'at_step: 120\b' "$tmp/quickstart.yaml"; then
  fail "examples/quickstart.yaml changed shape: the shortened copy is not 300 steps, drill at 120"
fi

# From an unrelated directory, so that ./deploy cannot supply the scripts or examples. Where a
# private mount namespace is allowed (root), the source tree's deploy/ is also covered by an
# empty folder for this run only: the binary has that path compiled in (ECPS_SOURCE_DIR), and
# hidden, the plot script can come from the bundle's share/ecps alone, as on another machine.
run=(env -u LD_LIBRARY_PATH -u ECPS_SCRIPTS_DIR timeout 240
  "$b/bin/ecps" run "$tmp/quickstart.yaml" --output "$tmp/out" --no-progress)
hidden=0
if [ "$(id -u)" -eq 0 ] && unshare -m --propagation private true 2>/dev/null; then
  hidden=1
  mkdir "$tmp/empty"
  # shellcheck disable=SC2016  # expanded by the inner sh
  hide=(unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    sh "$tmp/empty" "$root/deploy")
  run=("${hide[@]}" "${run[@]}")
fi
rc=0
(cd "$tmp" && "${run[@]}") >"$tmp/run.log" 2>&1 || rc=$?
if ((rc != 0)); then
  cat "$tmp/run.log" >&2
  fail "the bundled quickstart exited with $rc"
fi
sed 's/^/  /' "$tmp/run.log"
[ -f "$tmp/out/report.json" ] || fail "no report.json"
grep -qE '"ok": true' "$tmp/out/report.json" || { cat "$tmp/out/report.json" >&2; fail "report.json is not ok"; }
grep -qE '"clean": true' "$tmp/out/report.json" || fail "the final scrub is not clean"
if ((hidden)) && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  [ -f "$tmp/out/timeline.png" ] || fail "no timeline.png: share/ecps/plot_timeline.py not used"
  echo "bundle_test: plot from share/ecps with the source tree's deploy/ hidden"
else
  echo "bundle_test: share/ecps not checked (needs root for a mount namespace, and matplotlib)"
fi

echo "bundle_test: PASS ($((SECONDS - start)) s)"
