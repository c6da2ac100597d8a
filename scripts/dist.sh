#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist.sh [--platforms LIST] [--no-cuda] [OUTDIR] — builds one archive per
# platform (default linux/amd64 linux/arm64 darwin/arm64) into OUTDIR
# (default dist/): gpurt-VERSION-OS-ARCH.tar.gz holding
#
#   gpurt-VERSION-OS-ARCH/bin/gpurt                 CGO_ENABLED=0, -trimpath
#   gpurt-VERSION-OS-ARCH/lib/gpurt/libgpurt_*.so   the plugins that build here
#   gpurt-VERSION-OS-ARCH/include/gpurt.h           abi/gpurt.h, for plugin authors
#   gpurt-VERSION-OS-ARCH/LICENSE                   Apache-2.0
#   gpurt-VERSION-OS-ARCH/THIRD_PARTY_NOTICES       what the binary and plugins link or embed
#   gpurt-VERSION-OS-ARCH/licenses/...              those components' licence texts
#   gpurt-VERSION-OS-ARCH/README.txt
#   gpurt-VERSION-OS-ARCH/SHA256SUMS                of every file above
#
# and OUTDIR/SHA256SUMS of the archives. VERSION is scripts/version.sh's
# (vX.Y.Z on a tagged commit, else a Go pseudo-version; +dirty with
# uncommitted changes), also stamped into bin/gpurt (`gpurt version`). The
# SHA-256 of each plugin is recorded in the binary (-ldflags -X
# ...loader.embeddedDigests), and the loader refuses a plugin beside the
# binary that does not match.
#
# Plugins per platform, built on this (Linux amd64) machine:
#   linux/amd64   mock ($CC), cuda (scripts/build_cuda.sh; nvcc from PyPI
#                 into .cuda-venv/ when none is installed; --no-cuda leaves
#                 it out)
#   linux/arm64   mock, with aarch64-linux-gnu-gcc (or $CC_LINUX_ARM64);
#                 without one the archive has no plugin and this script
#                 says what to install. It never installs system packages.
#   darwin/arm64  none here: the Metal and mock plugins need macOS's
#                 toolchain (run scripts/build_metal.sh on a Mac and add
#                 them); the binary alone still runs `gpurt probe`
# On macOS the darwin archive gets the mock and Metal plugins instead.
#
# Reproducible: the same checkout gives the same bytes (file times are
# the last commit's, owners 0, sorted entries, gzip -n, -trimpath,
# -buildid=, -ffile-prefix-map for the C code).
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
    -h|--help) sed -n '4,/^set -euo pipefail/{/^set /d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "dist.sh: unknown flag $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
out=${out:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)

say() { echo "dist.sh: $*" >&2; }
version=$(bash "$root/scripts/version.sh")
commit=$(bash "$root/scripts/version.sh" --commit)
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
export SOURCE_DATE_EPOCH=$epoch
hostos=$(uname -s | tr '[:upper:]' '[:lower:]')
hostarch=$(uname -m)
case "$hostarch" in x86_64) hostarch=amd64 ;; aarch64) hostarch=arm64 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefixmap="-ffile-prefix-map=$root=. -ffile-prefix-map=$work=."
archives=()

# cross_cc ARCH: a C compiler for linux/ARCH ($CC_LINUX_<ARCH> first), or
# "" after saying what is missing and how to get it. Never installs anything.
cross_cc() {
  local arch=$1 want var
  if [ "$hostos/$hostarch" = "linux/$arch" ]; then echo "${CC:-cc}"; return; fi
  var=CC_LINUX_$(tr '[:lower:]' '[:upper:]' <<<"$arch")
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  case "$arch" in arm64) want=aarch64-linux-gnu-gcc ;; amd64) want=x86_64-linux-gnu-gcc ;; *) return ;; esac
  if command -v "$want" >/dev/null 2>&1; then echo "$want"; return; fi
  say "linux/$arch: no C compiler for it here ($want not on PATH), so its archive gets no mock plugin." \
      "To include it: install the cross compiler (Debian/Ubuntu: sudo apt-get install gcc-${want%-gcc};" \
      "Fedora: sudo dnf install gcc-${want%-linux-gnu-gcc}-linux-gnu) or set $var to one, then run make dist again"
}

# licences STAGE GOOS GOARCH: the licence texts THIRD_PARTY_NOTICES points
# to, into STAGE/licenses/: Go's, each Go module's compiled into bin/gpurt,
# and, when the CUDA plugin is in the archive, the CUDA EULA and the
# licence files of the pinned flashinfer-python wheel (FlashInfer, CUTLASS,
# CCCL).
licences() {
  local stage=$1 goos=$2 goarch=$3 mod dir f
  mkdir -p "$stage/licenses/go"
  cp "$(go env GOROOT)/LICENSE" "$stage/licenses/go/LICENSE"
  while read -r mod dir; do
    [ -n "$dir" ] || continue
    mkdir -p "$stage/licenses/$mod"
    for f in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/NOTICE*; do
      [ -f "$f" ] && cp "$f" "$stage/licenses/$mod/"
    done
    ls "$stage/licenses/$mod"/* >/dev/null 2>&1 || { say "FAILED: no licence file in $dir ($mod)"; exit 1; }
  done < <(CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go list -deps \
             -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Dir}}{{end}}{{end}}' ./cmd/gpurt | LC_ALL=C sort -u)
  [ -f "$stage/lib/gpurt/libgpurt_cuda.so" ] || return 0
  mkdir -p "$stage/licenses/nvidia-cuda" "$stage/licenses/flashinfer-python"
  local eula="" nvcc_dir
  nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/..
  for f in "${NVCC:+$(dirname "$NVCC")/../EULA.txt}" "$nvcc_dir/EULA.txt" \
           "$root"/.cuda-venv/lib/python3*/site-packages/nvidia_cuda_runtime*.dist-info/License.txt \
           "$root"/.cuda-venv/lib/python3*/site-packages/nvidia_cuda_runtime*.dist-info/licenses/*; do
    if [ -n "$f" ] && [ -f "$f" ]; then eula=$f; break; fi
  done
  [ -n "$eula" ] || { say "FAILED: the CUDA plugin is in the archive but no CUDA EULA was found (EULA.txt beside nvcc, or .cuda-venv's nvidia_cuda_runtime .dist-info)"; exit 1; }
  cp "$eula" "$stage/licenses/nvidia-cuda/EULA.txt"
  # CUTLASS and CCCL come inside the wheel's flashinfer/data without
  # licence files of their own: CUTLASS's BSD-3-Clause text is the comment
  # atop include/cutlass/cutlass.h; CCCL's headers carry SPDX notices.
  local fi_data=${GPURT_FLASHINFER_DATA:-$root/.fi/flashinfer/data} cl_dir=${GPURT_CUTLASS_DIR:-}
  [ -n "$cl_dir" ] || cl_dir=$fi_data/cutlass
  [ -f "$cl_dir/include/cutlass/cutlass.h" ] ||
    { say "FAILED: the CUDA plugin is in the archive but CUTLASS's headers ($cl_dir/include/cutlass/cutlass.h) are missing"; exit 1; }
  mkdir -p "$stage/licenses/cutlass" "$stage/licenses/cccl"
  { echo "CUTLASS $(sed -n 's/^#define CUTLASS_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$cl_dir/include/cutlass/version.h" | paste -sd.)" \
         "(from flashinfer-python's flashinfer/data/cutlass): the licence comment of include/cutlass/cutlass.h"
    echo
    sed -n '1,/^ \*\*\*\*\*\*\*\*\*\**\/$/p' "$cl_dir/include/cutlass/cutlass.h"; } >"$stage/licenses/cutlass/LICENSE.txt"
  {
    echo "CCCL (libcu++, CUB, Thrust) from flashinfer-python's flashinfer/data/cccl: the headers' notices."
    echo "Apache-2.0: licenses/cccl/LICENSE-Apache-2.0. LLVM exception: https://llvm.org/LICENSE.txt."
    echo "BSD-3-Clause: the clauses of licenses/cutlass/LICENSE.txt, with CUB's copyright holders below."
    for f in "$fi_data/cccl/libcudacxx/include/cuda/std/version" "$fi_data/cccl/cub/cub/cub.cuh" "$fi_data/cccl/thrust/thrust/version.h"; do
      [ -f "$f" ] || continue
      echo
      echo "${f#"$fi_data/"}:"
      grep -m 6 -E 'SPDX|Copyright|License' "$f" | sed 's/^/  /'
    done
  } >"$stage/licenses/cccl/NOTICE"
  cp "$root/LICENSE" "$stage/licenses/cccl/LICENSE-Apache-2.0"
  local whl
  whl=$(ls "$root"/.fi/flashinfer_python-*.whl 2>/dev/null | head -n 1)
  [ -n "$whl" ] || { say "FAILED: the CUDA plugin is in the archive but .fi/flashinfer_python-*.whl (its FlashInfer, CUTLASS and CCCL licences) is missing"; exit 1; }
  python3 - "$whl" "$stage/licenses/flashinfer-python" <<'PY' || { say "FAILED: could not copy the licence files out of $whl"; exit 1; }
import os, re, sys, zipfile
z, out = zipfile.ZipFile(sys.argv[1]), sys.argv[2]
pat = re.compile(r'(^|/)(LICEN[CS]E|COPYING|NOTICE)[^/]*$', re.I)
names = [n for n in z.namelist() if pat.search(n) and not n.endswith('/')
         and ('.dist-info/' in n or n.startswith(('flashinfer/data/cutlass/', 'flashinfer/data/cccl/')) or n.count('/') <= 2)]
if not names:
    sys.exit('no licence files in ' + sys.argv[1])
for n in names:
    dst = os.path.join(out, n)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, 'wb') as f:
        f.write(z.read(n))
PY
}

for plat in $platforms; do
  goos=${plat%/*}
  goarch=${plat#*/}
  name=gpurt-$version-$goos-$goarch
  stage=$work/$name
  mkdir -p "$stage/bin" "$stage/lib/gpurt" "$stage/include"
  notes=()
  # ---- plugins -------------------------------------------------------------
  if [ "$goos" = linux ]; then
    if pcc=$(cross_cc "$goarch") && [ -n "$pcc" ]; then
      CC=$pcc GPURT_MOCK_CFLAGS="$prefixmap" bash scripts/build_mock.sh "$stage/lib/gpurt" >/dev/null
    else
      notes+=("mock plugin: not built (no C compiler for linux/$goarch on the build machine)")
    fi
    if [ "$goarch" = amd64 ] && [ $cuda = 1 ]; then
      if [ "$hostos/$hostarch" = linux/amd64 ]; then
        GPURT_CUDA_CFLAGS="$prefixmap" bash scripts/build_cuda.sh "$stage/lib/gpurt" >/dev/null ||
          { say "FAILED: the CUDA plugin did not build (its reason is above; make dist DIST_FLAGS=--no-cuda leaves it out)"; exit 1; }
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
    -ldflags "-s -w -buildid= -X github.com/metrale/gpurt/core/internal/loader.embeddedDigests=$digests -X main.version=$version -X main.commit=$commit" \
    -o "$stage/bin/gpurt" ./cmd/gpurt
  # ---- licence, notices, the ABI header ---------------------------------------
  cp LICENSE THIRD_PARTY_NOTICES "$stage/"
  cp abi/gpurt.h "$stage/include/gpurt.h"
  licences "$stage" "$goos" "$goarch"
  # ---- README, checksums, archive ----------------------------------------------
  {
    echo "gpurt $version for $goos/$goarch"
    echo
    echo "bin/gpurt is the gpurt command (no cgo; on Linux it needs glibc);"
    echo "bin/gpurt version prints its version, commit and ABI and each plugin's"
    echo "version and SHA-256. include/gpurt.h is the plugin ABI (abi/gpurt.h)."
    echo "gpurt is Apache-2.0 (LICENSE); THIRD_PARTY_NOTICES lists what the"
    echo "binary and the plugins link or embed, with their licences in licenses/."
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
