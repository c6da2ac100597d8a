#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# abi_suite.sh PLUGIN      build the C ABI suite (csrc/test/abi_suite.c) with
#                          $CC (default cc) and run it against PLUGIN (any
#                          libgpurt_*.so / .dylib, on its device 0)
# abi_suite.sh --mock      build the mock plugin and the suite three ways
#                          (plain, ASan+UBSan, TSan) and run the suite
#                          against each (what `make test` runs); the
#                          sanitizer builds of the plugin stay in
#                          build/sanitize/NAME/ with a stamp (the compiler's
#                          resolved path and the flags), where plugins/mock's
#                          TestSelftest reuses them while they are newer than
#                          their sources (it builds its own otherwise)
#
# The suite prints one line per check and last "N passed, M failed"; this
# script exits non-zero when any run has a failure. A sanitizer the compiler
# cannot build or run here is reported as SKIP (never a silent pass).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpurt-abi-suite.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

ldl=()
[ "$(uname -s)" = Linux ] && ldl=(-ldl)
ext=so
[ "$(uname -s)" = Darwin ] && ext=dylib

# build_suite OUT FLAGS...
build_suite() {
  local out=$1
  shift
  "$cc" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror "$@" -I"$root/abi" \
    -o "$out" "$root/csrc/test/abi_suite.c" "${ldl[@]}"
}

# supports FLAGS...: the compiler builds and runs a program with them.
supports() {
  printf 'int main(void) { return 0; }\n' >"$tmp/probe.c"
  "$cc" "$@" -o "$tmp/probe" "$tmp/probe.c" >/dev/null 2>&1 && "$tmp/probe" >/dev/null 2>&1
}

# run NAME SUITE PLUGIN: runs the suite, prints its failures and its last line.
run() {
  local name=$1 suite=$2 lib=$3 log=$tmp/$1.log rc=0
  GPURT_MOCK_DELAY_US=${GPURT_MOCK_DELAY_US:-20} "$suite" "$lib" >"$log" 2>&1 || rc=$?
  grep -v '^ok ' "$log" | grep -v ' passed, ' || true
  echo "abi_suite ($name, $(basename "$lib")): $(tail -n 1 "$log")"
  if [ $rc -ne 0 ] || ! tail -n 1 "$log" | grep -q ' 0 failed$'; then
    echo "abi_suite ($name): FAILED (exit $rc)" >&2
    return 1
  fi
}

if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'
  [ $# -eq 1 ] && exit 0
  exit 2
fi

if [ "$1" != --mock ]; then
  lib=$1
  [ -f "$lib" ] || { echo "abi_suite.sh: no plugin at $lib" >&2; exit 2; }
  build_suite "$tmp/abi_suite"
  run plain "$tmp/abi_suite" "$lib"
  exit $?
fi

fail=0
for cfg in "plain|" \
           "asan+ubsan|-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
           "tsan|-fsanitize=thread"; do
  name=${cfg%%|*}
  # shellcheck disable=SC2206
  flags=(${cfg#*|})
  if [ ${#flags[@]} -gt 0 ] && ! supports "${flags[@]}"; then
    echo "abi_suite ($name): SKIP: $cc cannot build and run ${flags[*]} here"
    continue
  fi
  dir=$tmp/$name
  if [ ${#flags[@]} -gt 0 ]; then
    dir=$root/build/sanitize/$name
    rm -rf "$dir"
  fi
  mkdir -p "$dir"
  CC=$cc GPURT_MOCK_CFLAGS="${flags[*]:-}" bash "$root/scripts/build_mock.sh" "$dir" >/dev/null
  if [ ${#flags[@]} -gt 0 ]; then
    # The stamp TestSelftest compares: the compiler (symlinks resolved, so
    # cc and gcc name one compiler) and the flags, one per line.
    ccpath=$(command -v "${cc%% *}")
    printf '%s\n%s\n' "$(realpath "$ccpath")" "${flags[*]}" >"$dir/stamp"
  fi
  build_suite "$dir/abi_suite" "${flags[@]}"
  run "$name" "$dir/abi_suite" "$dir/libgpurt_mock.$ext" || fail=1
done
exit $fail
