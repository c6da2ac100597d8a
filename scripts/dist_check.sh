#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dist_check.sh [dist.sh flags] — what `make test` checks of `make dist`:
# builds the linux/amd64 archive twice into two folders and compares the
# bytes (reproducible); installs it into a fresh folder and runs
# `bin/gpurt probe --json` there (the mock is chosen and its checksum
# verified); then tampers with the plugin and checks that it is refused
# with a checksum-mismatch reason. Default flags: --platforms linux/amd64
# --no-cuda (the CUDA plugin's compile is checked by build_cuda.sh --ci).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- --platforms linux/amd64 --no-cuda
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "dist_check: FAIL: $*" >&2; exit 1; }

bash "$root/scripts/dist.sh" "$@" "$tmp/a" >/dev/null
bash "$root/scripts/dist.sh" "$@" "$tmp/b" >/dev/null
for f in "$tmp"/a/*.tar.gz; do
  cmp -s "$f" "$tmp/b/$(basename "$f")" || fail "$(basename "$f") differs between two builds (not reproducible)"
  echo "dist_check: ok: $(basename "$f") is byte-identical across two builds ($(sha256sum <"$f" | cut -c1-16)…)"
done

version=$(bash "$root/scripts/version.sh")
arch=$tmp/a/gpurt-$version-linux-amd64.tar.gz
[ -f "$arch" ] || fail "no archive named by the version ($(basename "$arch")) in: $(ls "$tmp/a")"
echo "dist_check: ok: $(basename "$arch") contents:"
tar -tzf "$arch" | sed 's/^/  /'
inst=$tmp/install/opt
mkdir -p "$inst" && chmod 755 "$tmp/install" "$inst"
tar -C "$inst" -xzf "$arch"
top=$(ls -d "$inst"/gpurt-*)
(cd "$top" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS of the unpacked archive do not match"
for f in LICENSE THIRD_PARTY_NOTICES include/gpurt.h licenses/go/LICENSE; do
  [ -s "$top/$f" ] || fail "the archive has no $f"
done
cmp -s "$top/LICENSE" "$root/LICENSE" || fail "the archive's LICENSE is not the checkout's"
cmp -s "$top/include/gpurt.h" "$root/abi/gpurt.h" || fail "the archive's include/gpurt.h is not abi/gpurt.h"
grep -q "Apache License" "$top/LICENSE" || fail "LICENSE is not the Apache-2.0 text"
mods=$(go version -m "$top/bin/gpurt" | awk '$1 == "dep" { print $2, $3 }')
[ -n "$mods" ] || fail "go version -m lists no modules in bin/gpurt"
while read -r mod ver; do
  grep -qF "$mod $ver" "$top/THIRD_PARTY_NOTICES" || fail "THIRD_PARTY_NOTICES does not name $mod $ver (compiled into bin/gpurt)"
  ls "$top/licenses/$mod/"* >/dev/null 2>&1 || fail "no licence text for $mod under licenses/"
done <<<"$mods"
echo "dist_check: ok: LICENSE, include/gpurt.h and THIRD_PARTY_NOTICES naming each of bin/gpurt's $(wc -l <<<"$mods") modules, with licences/"
env -u GPURT_PLUGIN_PATH "$top/bin/gpurt" version >"$tmp/version.txt" || fail "bin/gpurt version failed: $(cat "$tmp/version.txt")"
head -n 1 "$tmp/version.txt" | grep -qxF "gpurt $version" || fail "bin/gpurt version does not print gpurt $version: $(head -n 1 "$tmp/version.txt")"
grep -qF "sha256 $(sha256sum "$top/lib/gpurt/libgpurt_mock.so" | cut -d' ' -f1)" "$tmp/version.txt" ||
  fail "bin/gpurt version does not print the mock plugin's SHA-256: $(cat "$tmp/version.txt")"
echo "dist_check: ok: bin/gpurt version:"
sed 's/^/  /' "$tmp/version.txt"
env -u GPURT_PLUGIN_PATH -u GPURT_BACKEND -u GPURT_ALLOW_UNVERIFIED \
  "$top/bin/gpurt" probe --json >"$tmp/probe.json" || fail "bin/gpurt probe failed in the fresh install: $(cat "$tmp/probe.json")"
python3 - "$tmp/probe.json" <<'PY' || fail "probe report of the fresh install is not as expected"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["backend"] == "mock", r
sel = [c for c in r["candidates"] if c["state"] == "selected"][0]
assert "sha256 verified" in sel["detail"], sel
print("dist_check: ok: fresh install chose", sel["path"], "-", sel["detail"])
PY

plugin=$top/lib/gpurt/libgpurt_mock.so
chmod u+w "$plugin" && printf 'x' >>"$plugin" && chmod go-w "$plugin"
if env -u GPURT_PLUGIN_PATH -u GPURT_BACKEND -u GPURT_ALLOW_UNVERIFIED \
     "$top/bin/gpurt" probe --json >"$tmp/probe2.json" 2>/dev/null; then
  fail "a tampered plugin was accepted"
fi
python3 - "$tmp/probe2.json" <<'PY' || fail "the tampered plugin's reason does not say checksum mismatch"
import json, sys
r = json.load(open(sys.argv[1]))
c = [c for c in r["candidates"] if c["path"].endswith("libgpurt_mock.so")][0]
assert c["state"] == "failed" and "checksum mismatch" in c["reason"], c
print("dist_check: ok: tampered plugin refused:", c["reason"][:90], "…")
PY
echo "dist_check: all passed"
