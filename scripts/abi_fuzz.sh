#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# abi_fuzz.sh --quick [N]        the mock under ASan+UBSan: N inputs (default
#                                2000) from fixed seeds, then the saved
#                                inputs of csrc/test/fuzz/ (what `make test`
#                                runs; reuses build/sanitize/asan+ubsan's
#                                mock that abi_suite.sh --mock leaves when it
#                                is newer than the sources)
# abi_fuzz.sh --libfuzzer [SEC]  coverage-guided with clang's libFuzzer for
#                                SEC seconds (default 300), the harness and
#                                the mock's sources in one binary; corpus in
#                                build/fuzz/corpus, a failing input in
#                                build/fuzz/ (copy it into csrc/test/fuzz/
#                                once fixed: the quick run replays it)
# abi_fuzz.sh PLUGIN [N [SEED]]  any plugin file (the CUDA one on the GPU
#                                machine), plain build, N inputs (default
#                                300) from SEED (default 1)
#
# The harness is csrc/test/abi_fuzz.c (what it calls and what must hold:
# its header). It exits non-zero on the first violated property, printing
# the call and the reason; so does this script.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
san=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
cflags=(-std=gnu11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -I"$root/abi")
ldl=()
[ "$(uname -s)" = Linux ] && ldl=(-ldl)
ext=so
[ "$(uname -s)" = Darwin ] && ext=dylib
# ASan's notes on the huge allocations the inputs ask for (refused as they
# should be) are not findings.
quiet() { grep -v 'AddressSanitizer failed to allocate' || true; }

usage() {
  sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'
}

# driver OUT FLAGS...: the harness as a program over a dlopen'd plugin.
driver() {
  local out=$1
  shift
  "$cc" "${cflags[@]}" -DGPURT_FUZZ_DRIVER "$@" -o "$out" "$root/csrc/test/abi_fuzz.c" "${ldl[@]}" -lm
}

# replay DRIVER PLUGIN: the saved inputs, if any.
replay() {
  local files=("$root"/csrc/test/fuzz/*)
  [ -e "${files[0]}" ] || return 0
  "$1" "$2" "${files[@]}" 2>&1 | quiet
  return "${PIPESTATUS[0]}"
}

[ $# -ge 1 ] || { usage; exit 2; }
case "$1" in
  -h|--help) usage; exit 0 ;;
  --quick)
    n=${2:-2000}
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpurt-abi-fuzz.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    printf 'int main(void) { return 0; }\n' >"$tmp/probe.c"
    if ! "$cc" "${san[@]}" -o "$tmp/probe" "$tmp/probe.c" >/dev/null 2>&1 || ! "$tmp/probe"; then
      echo "abi_fuzz: $cc cannot build and run ${san[*]} here: plain build"
      san=()
    fi
    lib=$root/build/sanitize/asan+ubsan/libgpurt_mock.$ext
    newest=$(find "$root/csrc" "$root/plugins/mock/src" "$root/abi" -newer "$lib" -type f 2>/dev/null | head -n 1 || true)
    if [ ${#san[@]} -eq 0 ] || [ ! -f "$lib" ] || [ -n "$newest" ]; then
      CC=$cc GPURT_MOCK_CFLAGS="${san[*]:-}" bash "$root/scripts/build_mock.sh" "$tmp/mock" >/dev/null
      lib=$tmp/mock/libgpurt_mock.$ext
    fi
    driver "$tmp/abi_fuzz" "${san[@]}"
    rc=0
    # Three seeds, a third of the inputs each (the runtimes differ: each
    # input's first bytes choose the options).
    for seed in 1 2 3; do
      "$tmp/abi_fuzz" "$lib" $((n / 3)) "$seed" 2>&1 | quiet
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done
    replay "$tmp/abi_fuzz" "$lib" || rc=1
    [ $rc -eq 0 ] || echo "abi_fuzz: FAILED" >&2
    exit $rc
    ;;
  --libfuzzer)
    secs=${2:-300}
    lcc=${FUZZ_CC:-clang}
    out=$root/build/fuzz
    mkdir -p "$out/corpus"
    "$lcc" "${cflags[@]}" -DGPURT_FUZZ_STATIC -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer \
      -fno-sanitize-recover=undefined -I"$root/csrc" -o "$out/abi_fuzz" "$root/csrc/test/abi_fuzz.c" \
      "$root"/csrc/*.c "$root"/plugins/mock/src/*.c "${ldl[@]}" -lm -lpthread
    seeds=()
    [ -d "$root/csrc/test/fuzz" ] && seeds=("$root/csrc/test/fuzz")
    cd "$out"
    ./abi_fuzz -max_total_time="$secs" -len_control=0 -timeout=30 -rss_limit_mb=6000 -print_final_stats=1 \
      -artifact_prefix="$out/" corpus "${seeds[@]}" 2>&1 | quiet | grep -v '^#[0-9]*[[:space:]]*\(NEW\|REDUCE\|pulse\)'
    exit "${PIPESTATUS[0]}"
    ;;
  *)
    lib=$1
    [ -f "$lib" ] || { echo "abi_fuzz.sh: no plugin at $lib" >&2; exit 2; }
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpurt-abi-fuzz.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    driver "$tmp/abi_fuzz"
    rc=0
    "$tmp/abi_fuzz" "$lib" "${2:-300}" "${3:-1}" || rc=1
    replay "$tmp/abi_fuzz" "$lib" || rc=1
    exit $rc
    ;;
esac
