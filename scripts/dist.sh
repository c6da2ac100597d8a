#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist.sh [--platforms LIST] [--no-cuda] [OUTDIR] — builds one archive per
# platform (default linux/amd64 linux/arm64 darwin/arm64) into OUTDIR
# (default dist/): gpurt-VERSION-OS-ARCH.tar.gz holding
#
#   gpurt-VERSION-OS-ARCH/bin/gpurt                 CGO_ENABLED=0, -trimpath
#   gpurt-VERSION-OS-ARCH/lib/gpurt/libgpurt_*.so   the plugins that build here
#   gpurt-VERSION-OS-ARCH/README.txt
#   gpurt-VERSION-OS-ARCH/SHA256SUMS                of every file above
#
# and OUTDIR/SHA256SUMS of the archives. The SHA-256 of each plugin is
# recorded in the binary (-ldflags -X ...loader.embeddedDigests), and the
# loader refuses a plugin beside the binary that does not match.
#
# Plugins per platform, built on this (Linux amd64) machine:
#   linux/amd64   mock ($CC), cuda (scripts/build_cuda.sh; nvcc from PyPI
#                 when none is installed; --no-cuda leaves it out)
#   linux/arm64   mock (aarch64-linux-gnu-gcc; installed with apt-get when
#                 running as root and it is missing; else left out, said)
#   darwin/arm64  none here: the Metal and mock plugins need macOS's
#                 toolchain (run scripts/build_metal.sh on a Mac and add
#                 them); the binary alone still runs `gpurt probe`
# On macOS the darwin archive gets the mock and Metal plugins instead.
#
# Reproducible: the same checkout gives the same bytes (file times are
# the last commit's, owners 0, sorted entries, gzip -n, -trimpath,
# -buildid=, -ffile-prefix-map for the C code). VERSION is
# `git describe --always --dirty`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
platforms="linux/amd64 linux/arm64 darwin/arm64"
cuda=1
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --platforms) platforms=$2; shift 2 ;;
    --no-cuda) cuda=0; shift ;;
    -h|--help) sed -n '3,31p' "$0"; exit 0 ;;
    -*) echo "dist.sh: unknown flag $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
out=${out:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)

say() { echo "dist.sh: $*" >&2; }
version=$(git describe --always --dirty 2>/dev/null || echo unknown)
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
export SOURCE_DATE_EPOCH=$epoch
hostos=$(uname -s | tr '[:upper:]' '[:lower:]')
hostarch=$(uname -m)
case "$hostarch" in x86_64) hostarch=amd64 ;; aarch64) hostarch=arm64 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefixmap="-ffile-prefix-map=$root=. -ffile-prefix-map=$work=."
archives=()

# cross_cc ARCH: a C compiler for linux/ARCH, or "" (installed when root).
cross_cc() {
  local arch=$1 want
  if [ "$hostos/$hostarch" = "linux/$arch" ]; then echo "${CC:-cc}"; return; fi
  case "$arch" in arm64) want=aarch64-linux-gnu-gcc ;; amd64) want=x86_64-linux-gnu-gcc ;; *) return ;; esac
  if ! command -v "$want" >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${want%-gcc} cross compiler (apt-get install gcc-${want%-gcc})"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "gcc-${want%-gcc}"; } >&2 || true
  fi
  command -v "$want" >/dev/null 2>&1 && echo "$want"
}

for plat in $platforms; do
  goos=${plat%/*}
  goarch=${plat#*/}
  name=gpurt-$version-$goos-$goarch
  stage=$work/$name
  mkdir -p "$stage/bin" "$stage/lib/gpurt"
  notes=()
  # ---- plugins -------------------------------------------------------------
  if [ "$goos" = linux ]; then
    if pcc=$(cross_cc "$goarch") && [ -n "$pcc" ]; then
      CC=$pcc GPURT_MOCK_CFLAGS="$prefixmap" bash scripts/build_mock.sh "$stage/lib/gpurt" >/dev/null
    else
      notes+=("mock plugin: not built (no C compiler for linux/$goarch here)")
    fi
    if [ "$goarch" = amd64 ] && [ $cuda = 1 ]; then
      if [ "$hostos/$hostarch" = linux/amd64 ]; then
        GPURT_CUDA_CFLAGS="$prefixmap" bash scripts/build_cuda.sh "$stage/lib/gpurt" >/dev/null ||
          { say "FAILED: the CUDA plugin did not build"; exit 1; }
      else
        notes+=("cuda plugin: not built (needs a linux/amd64 build machine)")
      fi
    elif [ "$goarch" = amd64 ]; then
      notes+=("cuda plugin: left out (--no-cuda)")
    fi
  elif [ "$goos" = darwin ]; then
    if [ "$hostos" = darwin ]; then
      GPURT_MOCK_CFLAGS="$prefixmap" bash scripts/build_mock.sh "$stage/lib/gpurt" >/dev/null
      bash scripts/build_metal.sh "$stage/lib/gpurt" >/dev/null || notes+=("metal plugin: build failed")
    else
      notes+=("mock and metal plugins: not built (they need macOS's toolchain; run scripts/build_metal.sh and scripts/build_mock.sh on a Mac into lib/gpurt/, then rebuild the binary there with this script so their checksums are recorded)")
    fi
  fi
  # ---- binary, with the plugins' checksums ------------------------------------
  digests=""
  for f in "$stage"/lib/gpurt/libgpurt_*; do
    [ -e "$f" ] || continue
    be=$(basename "$f"); be=${be#libgpurt_}; be=${be%.*}
    digests+="${digests:+,}$be=$(sha256sum "$f" | cut -d' ' -f1)"
  done
  CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath \
    -ldflags "-s -w -buildid= -X github.com/metrale/gpurt/core/internal/loader.embeddedDigests=$digests" \
    -o "$stage/bin/gpurt" ./cmd/gpurt
  # ---- README, checksums, archive ----------------------------------------------
  {
    echo "gpurt $version for $goos/$goarch"
    echo
    echo "bin/gpurt is the gpurt command (no cgo; on Linux it needs glibc)."
    echo "lib/gpurt/ holds the backend plugins built for this platform; the"
    echo "binary finds them there (bin/../lib/gpurt) and refuses any plugin"
    echo "beside it whose SHA-256 differs from the one recorded at build time:"
    if [ -n "$digests" ]; then
      tr ',' '\n' <<<"$digests" | sed 's/^/  /; s/=/: /'
    else
      echo "  (none built here)"
    fi
    echo
    echo "Plugins from GPURT_PLUGIN_PATH load only if they match a recorded"
    echo "checksum, or with GPURT_ALLOW_UNVERIFIED=1."
    echo
    echo "Try it:   bin/gpurt probe        (which backend, and why)"
    echo "          bin/gpurt conform      (the conformance suite)"
    echo "          bin/gpurt bench --quick"
    for n in "${notes[@]}"; do echo; echo "Note: $n"; done
  } >"$stage/README.txt"
  chmod -R go-w "$stage"
  (cd "$stage" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | sed 's|^\./||' |
     xargs sha256sum >SHA256SUMS)
  find "$stage" -exec touch -h -d "@$epoch" {} +
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
      --mode='go-w' -C "$work" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
  archives+=("$name.tar.gz")
  say "$out/$name.tar.gz (plugins: ${digests:-none})"
  for n in "${notes[@]}"; do say "  note: $n"; done
done
(cd "$out" && sha256sum "${archives[@]}" >SHA256SUMS)
printf '%s\n' "${archives[@]/#/$out/}"
