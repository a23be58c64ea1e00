#!/usr/bin/env bash
# Packs the built ecps into a relocatable tarball, ecps-<version>-linux-<arch>.tar.gz, that runs
# on another Linux machine (or a slim container) without the Debian -dev packages installed:
#
#   ecps-<version>/bin/ecps          the binary, stripped, run path $ORIGIN/../lib
#   ecps-<version>/lib/              every shared library it loads except glibc's, run path $ORIGIN
#   ecps-<version>/share/ecps/       plot_timeline.py, recovery_report.py (python3 + matplotlib)
#   ecps-<version>/share/doc/ecps/   the Debian copyright file of each bundled library's package
#   ecps-<version>/examples/         deploy/examples/*.yaml (synthetic data: no data files)
#   ecps-<version>/README
#
#   deploy/bundle.sh               bundle build/cli/ecps into build/
#   deploy/bundle.sh -o DIR        write the tarball into DIR instead (ECPS_BUNDLE_DIR=DIR too)
#   ECPS_BUILD_DIR=dir             take the binary from dir/cli/ecps (default: build)
#
# Builds (deploy/setup.sh) only when the binary is missing. Needs patchelf (Debian: patchelf),
# strip and ldd. The bundle needs a glibc at least as new as the build machine's (see README).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ECPS_BUILD_DIR:-$root/build}"
out="${ECPS_BUNDLE_DIR:-}"

usage() { sed -nE '2,/^[^#]/s/^# ?//p' "${BASH_SOURCE[0]}"; }  # the header above
while getopts "o:h" opt; do
  case "$opt" in
    o) out="$OPTARG" ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if (($#)); then usage >&2; exit 2; fi
out="${out:-$build}"

version="$(sed -nE 's/^project\(ecps VERSION ([0-9]+(\.[0-9]+)*).*/\1/p' "$root/CMakeLists.txt")"
if [ -z "$version" ]; then
  echo "bundle: no 'project(ecps VERSION x.y.z' in $root/CMakeLists.txt" >&2
  exit 1
fi
arch="$(uname -m)"
name="ecps-$version"
tarball="$name-linux-$arch.tar.gz"

# patchelf, not chrpath: chrpath can only overwrite a run path of at least the same length, and
# most Debian libraries have none to overwrite.
for tool in patchelf strip ldd readelf tar; do
  if ! command -v "$tool" >/dev/null; then
    echo "bundle: $tool is missing (Debian: apt-get install $tool, or binutils for strip/readelf)" >&2
    exit 1
  fi
done

if [ ! -x "$build/cli/ecps" ]; then
  echo "bundle: $build/cli/ecps is not built; building it (deploy/setup.sh)"
  ECPS_BUILD_DIR="$build" "$root/deploy/setup.sh"
fi

tmp="$(mktemp -d)"
partial=""
trap 'rm -rf "$tmp"; [ -z "$partial" ] || rm -f "$partial"' EXIT
stage="$tmp/$name"
mkdir -p "$stage/bin" "$stage/lib" "$stage/share/ecps" "$stage/share/doc/ecps" "$stage/examples"

# Work on a copy from the start: the build folder's binary is never touched, and a rebuild
# running meanwhile cannot swap it between the ldd below and the copy that is shipped.
cp "$build/cli/ecps" "$tmp/ecps.orig"

# glibc's own libraries stay on the target: ld-linux must be the exact match of the libc it
# loads and its path is absolute in the binary (PT_INTERP), so glibc cannot travel piecemeal,
# and every Linux system has one. These are the files of Debian's libc6 package (2.36); anything
# else is bundled, libstdc++ and libgcc_s included, since a slim or older base may carry an
# older libstdc++ than the one ecps was linked against (GLIBCXX_* versions).
glibc_re='^(ld-linux[-.a-z0-9_]*\.so\.[0-9]+|lib(c|m|mvec|pthread|dl|rt|resolv|util|anl|nsl|BrokenLocale|thread_db|c_malloc_debug|memusage|pcprofile)\.so(\.[0-9]+)?|libnss_[a-z]+\.so\.[0-9]+|linux-vdso\.so\.[0-9]+)$'

# ldd lists the whole closure the loader resolves (direct and indirect NEEDED), with the
# binary's own run path (CUDA's lib, openblas-pthread) still in effect on this copy. The loader
# honours LD_LIBRARY_PATH, and so does this: the bundle carries what a run here would load.
declare -A bundled=()
while read -r soname arrow path _; do
  [ "$arrow" = "=>" ] || continue  # linux-vdso and the absolute ld-linux line
  if [ "$path" = "not" ]; then
    echo "bundle: $soname is not found by the loader (ldd $build/cli/ecps)" >&2
    exit 1
  fi
  [[ "$soname" =~ $glibc_re ]] && continue
  # Under its soname (what NEEDED asks for), dereferenced: lib/ holds no symlinks to break.
  cp -L "$path" "$stage/lib/$soname"
  chmod 0644 "$stage/lib/$soname"
  bundled["$soname"]="$(readlink -f "$path")"
done < <(ldd "$tmp/ecps.orig")

# DT_RUNPATH applies to an object's own NEEDED only, so each library needs $ORIGIN as well for
# the libraries it pulls in (libgrpc -> libupb, libopenblas -> libgfortran -> libquadmath).
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
for lib in "$stage"/lib/*; do
  patchelf --set-rpath '$ORIGIN' "$lib"
done

# The GPU worker plugin (cluster.worker_device: cuda), when the build has one. Its own
# libraries (cuBLAS, cuBLASLt, NCCL: 800 MB) stay on the GPU machine, which has CUDA anyway:
# it looks for them in lib/ (the bundled CUDA runtime), then CUDA's usual folder, then
# LD_LIBRARY_PATH's.
if [ -f "$build/cli/libecps_gpu.so" ]; then
  strip --strip-unneeded -o "$stage/lib/libecps_gpu.so" "$build/cli/libecps_gpu.so"
  # shellcheck disable=SC2016
  patchelf --set-rpath '$ORIGIN:/usr/local/cuda/lib64' "$stage/lib/libecps_gpu.so"
  chmod 0644 "$stage/lib/libecps_gpu.so"
fi

# Strip first, patchelf after: strip rewrites the whole ELF layout and is known to produce
# broken files from one patchelf has already rearranged.
strip --strip-all -o "$stage/bin/ecps" "$tmp/ecps.orig"
# shellcheck disable=SC2016
patchelf --set-rpath '$ORIGIN/../lib' "$stage/bin/ecps"
chmod 0755 "$stage/bin/ecps"

# FindScript (cli/python_script.cc) looks in <exe>/../share/ecps: no source tree needed.
install -m 0755 "$root/deploy/plot_timeline.py" "$root/deploy/recovery_report.py" "$stage/share/ecps/"
install -m 0644 "$root"/deploy/examples/*.yaml "$stage/examples/"

# Licences travel with the libraries: Debian's copyright file of each bundled library's
# package (CUDA's runtime is not a Debian package: NVIDIA's licence where the toolkit has it).
if command -v dpkg-query >/dev/null; then
  # One dpkg-query for all (each call reads the whole file database). It knows /lib/... or
  # /usr/lib/... (merged /usr), so both spellings are asked; the ones it lacks are ignored.
  spellings=()
  for real in "${bundled[@]}"; do spellings+=("$real" "${real#/usr}" "/usr${real#/usr}"); done
  while read -r pkg; do
    if [ -f "/usr/share/doc/$pkg/copyright" ]; then
      install -m 0644 "/usr/share/doc/$pkg/copyright" "$stage/share/doc/ecps/$pkg.copyright"
    fi
  done < <(dpkg-query -S "${spellings[@]}" 2>/dev/null | sed -nE 's/^([^ :,]+)(:[a-z0-9_]+)?: \/.*/\1/p' |
    sort -u)
fi
for real in "${bundled[@]}"; do
  [[ "$real" == */cuda* ]] || continue
  # A toolkit install has EULA.txt at its top; a pip-wheel layout keeps the runtime's licence
  # under dist-info/.
  cuda="$(dirname "$(dirname "$real")")"
  for eula in "$cuda/EULA.txt" "$cuda"/dist-info/nvidia_cuda_runtime*/licenses/License.txt; do
    if [ -f "$eula" ]; then
      install -m 0644 "$eula" "$stage/share/doc/ecps/cuda-runtime.license"
      break
    fi
  done
done

# The newest glibc symbol version anything in the bundle needs (its version-needs entries,
# "Name: GLIBC_2.36  Flags: ..."): the oldest glibc the bundle runs on. Here libstdc++ sets it.
glibc_min="$(for f in "$stage/bin/ecps" "$stage"/lib/*; do readelf -V -W "$f"; done |
  sed -nE 's/.*Name: GLIBC_([0-9]+(\.[0-9]+)+) +Flags.*/\1/p' | sort -uV | tail -n1)"

cat >"$stage/README" <<EOF
ecps $version: erasure-coded parameter servers for DLRM training (linux-$arch bundle)

  bin/ecps run examples/quickstart.yaml   # the demo: a server killed at 40%, rebuilt online
  bin/ecps help                           # every command

Unpack anywhere: bin/ecps finds its libraries in lib/ (run path \$ORIGIN/../lib) and the
plotting scripts in share/ecps/. Jobs write into runs/<name> under the current directory
unless job.output_dir or --output says otherwise. Needs glibc $glibc_min or newer (\`ldd
--version\` shows it); every other library is in lib/. Plots (timeline.png, the report of
\`ecps bench recovery\`) need python3 with matplotlib (Debian: python3-matplotlib); without it
a job still runs and says "no timeline plot". LD_LIBRARY_PATH, when set, is searched before
lib/: leave it unset. The CUDA runtime is bundled; GPU codecs also need the NVIDIA driver
(libcuda.so.1) on the host; without one ecps runs on the CPU codecs. GPU workers
(cluster.worker_device: cuda) load lib/libecps_gpu.so, which needs CUDA's cuBLAS, cuBLASLt and
(for gpus_per_worker > 1) NCCL from the GPU machine's CUDA (/usr/local/cuda/lib64, or
LD_LIBRARY_PATH). Licences of the bundled libraries are in share/doc/ecps/.
EOF

mkdir -p "$out"
out="$(cd "$out" && pwd)"
# Root-owned, name-sorted entries: the same tree gives the same listing wherever it is packed.
# Written beside the target and renamed, so a reader never sees half a tarball.
partial="$out/.$tarball.partial"
tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner -czf "$partial" "$name"
mv -f "$partial" "$out/$tarball"
partial=""

size="$(du -h "$out/$tarball" | cut -f1)"
echo "bundle: $out/$tarball ($size; ${#bundled[@]} libraries, glibc >= $glibc_min)"
