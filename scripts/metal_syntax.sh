#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# metal_syntax.sh — type-checks the Metal plugin's Objective-C on any host
# with clang (Linux included): clang -fsyntax-only over every
# plugins/metal/src/*.m, with the flags of scripts/build_metal.sh that
# apply (ARC, -Wall -Wextra -Wno-unused-parameter, hidden visibility, the
# abi/, csrc/ and src/ include paths) and the stub headers of
# plugins/metal/stubs in place of Apple's SDK (Foundation, Metal,
# MetalPerformanceShaders, dispatch, mach_time: only what the plugin uses,
# for type-checking only; a Mac builds against the real SDK). Nothing is
# compiled or linked. Exits 0 when no file has a diagnostic (warnings
# count), 1 otherwise.
# The compiler: $CLANG, else clang, clang-19 .. clang-14 on the PATH, else
# the clang inside PyPI's ziglang wheel (pinned, installed once into
# .zig-venv/, gitignored; no root needed), as make test-cuda fetches nvcc.
# Only when none of them can be had (no python3 venv, no index) does it
# say "skipped: no clang" and exit 0.
# Extra flags may be passed in $GPURT_METAL_CFLAGS, as for build_metal.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/plugins/metal
zig_pin=ziglang==0.17.1

cc=()
if [ -n "${CLANG:-}" ]; then
  cc=("$CLANG")
else
  for c in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
    if command -v "$c" >/dev/null 2>&1; then
      cc=("$c")
      break
    fi
  done
fi
if [ ${#cc[@]} -eq 0 ]; then
  venv=$root/.zig-venv
  if ! "$venv/bin/python" -c 'import ziglang' >/dev/null 2>&1; then
    echo "metal_syntax: no clang on the PATH: installing $zig_pin (its clang) into .zig-venv/"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check "$zig_pin"; } >&2; then
      echo "metal_syntax: skipped: no clang, and $zig_pin could not be installed"
      exit 0
    fi
  fi
  z=$("$venv/bin/python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))')
  # zig's clang driver, given the host's C headers and its own compiler
  # headers (stdbool.h and the like).
  cc=("$venv/bin/python" -m ziglang clang -target x86_64-linux-gnu -isystem "$z/lib/include")
fi
if [ ${#cc[@]} -eq 1 ] && ! command -v "${cc[0]}" >/dev/null 2>&1; then
  echo "metal_syntax: skipped: no clang (${cc[0]} not found)"
  exit 0
fi

# -fobjc-runtime: ARC needs Apple's runtime, which a Linux target does not
# default to (semantics only: nothing is generated).
# shellcheck disable=SC2206
extra=(${GPURT_METAL_CFLAGS:-})
flags=(-fsyntax-only -x objective-c -fobjc-runtime=macosx-11.0 -fobjc-arc -fblocks -fvisibility=hidden
  -Wall -Wextra -Wno-unused-parameter
  -I"$src/stubs" -I"$root/abi" -I"$root/csrc" -I"$src/src" "${extra[@]}")

n=0
bad=0
out=$(mktemp "${TMPDIR:-/tmp}/gpurt-metal-syntax.XXXXXX")
trap 'rm -f "$out"' EXIT
for f in "$src"/src/*.m; do
  n=$((n + 1))
  if ! "${cc[@]}" "${flags[@]}" "$f" >"$out" 2>&1 || [ -s "$out" ]; then
    bad=$((bad + 1))
    cat "$out" >&2
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "metal_syntax: $bad of $n files of plugins/metal/src have diagnostics ($("${cc[@]}" --version | head -n 1))" >&2
  exit 1
fi
echo "metal_syntax: ok ($n files of plugins/metal/src type-check with $("${cc[@]}" --version | head -n 1) against plugins/metal/stubs)"
