#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# build_mock.sh OUTDIR — builds the mock plugin (the CPU reference backend)
# into OUTDIR/libgpurt_mock.so (OUTDIR/libgpurt_mock.dylib on macOS), with
# $CC (default cc). Only gpurt_plugin_negotiate is exported.
# Extra flags may be passed in $GPURT_MOCK_CFLAGS (e.g. -fsanitize=...).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
mkdir -p "$out"

srcs=("$root"/csrc/*.c "$root"/plugins/mock/src/*.c)
flags=(-std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden
       -Wall -Wextra -Werror -I"$root/abi" -I"$root/csrc")
# shellcheck disable=SC2206
extra=(${GPURT_MOCK_CFLAGS:-})

case "$(uname -s)" in
  Darwin)
    lib="$out/libgpurt_mock.dylib"
    "$cc" "${flags[@]}" "${extra[@]}" -dynamiclib -o "$lib.tmp" "${srcs[@]}" \
      -Wl,-exported_symbols_list,"$root/plugins/mock/src/exports.txt" \
      -install_name @rpath/libgpurt_mock.dylib -lpthread -lm
    ;;
  *)
    lib="$out/libgpurt_mock.so"
    "$cc" "${flags[@]}" "${extra[@]}" -shared -o "$lib.tmp" "${srcs[@]}" \
      -Wl,--version-script="$root/plugins/mock/src/exports.map" \
      -Wl,-z,noexecstack -Wl,--no-undefined -lpthread -lm
    ;;
esac
mv -f "$lib.tmp" "$lib"
echo "$lib"
