#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_pack.sh [--here] — what a GPU session carries, built here: the CUDA
# plugin, every command under cmd/ and examples/ (make gpu-artifacts) and the
# CUPTI tracer (scripts/ktrace/build.sh), packed as .pick/b.txz. build/
# itself (about 60 MB) does not fit beside the tree in the device tool's
# 64 MiB; the archive (about 15 MB) does. scripts/gpu_all.sh unpacks it on
# the GPU machine when build/ has no plugin.
#
# By default the build is made from a clean worktree of HEAD (in a
# temporary folder, with this checkout's .cuda-venv and .fi linked in), so
# the carried binaries are the committed code's whatever the working tree
# holds; --here builds this checkout's build/ instead. .pick/ is added to
# .git/info/exclude. Then, on the device tool: carry [".pick"] and run
#   bash scripts/gpu_all.sh NAME...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
here=0
for a in "$@"; do
  case $a in
    --here) here=1 ;;
    -h|--help) sed -n '4,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_pack.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
src=$root
if [ $here = 0 ]; then
  src=$(mktemp -d)/tree
  trap 'git -C "$root" worktree remove --force "$src" >/dev/null 2>&1 || true; rm -rf "$(dirname "$src")"' EXIT
  git worktree add --detach "$src" HEAD >/dev/null
  for d in .cuda-venv .fi; do
    [ -e "$root/$d" ] && ln -s "$root/$d" "$src/$d"
  done
  echo "gpu_pack: building $(git rev-parse --short HEAD) in a clean worktree"
fi
make -C "$src" gpu-artifacts BUILD="$src/build" >/dev/null
bash "$src/scripts/ktrace/build.sh" "$src/build" >/dev/null
mkdir -p "$root/.pick"
grep -qx '/.pick/' "$root/.git/info/exclude" 2>/dev/null || echo '/.pick/' >>"$root/.git/info/exclude"
tar -C "$src" -cJf "$root/.pick/b.txz" build/libgpurt_cuda.so build/libgpurt_mock.so build/libgpurt_ktrace.so \
  build/libcupti.so.13 $(cd "$src" && find build -maxdepth 1 -type f -perm -u+x ! -name '*.so*' | sort)
ls -l "$root/.pick/b.txz"
echo "gpu_pack: carry [\".pick\"]; on the GPU machine: bash scripts/gpu_all.sh NAME..."
