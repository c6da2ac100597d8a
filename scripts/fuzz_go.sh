#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# fuzz_go.sh [REGEXP]      run every Go fuzz target of the repository
#                          (func FuzzXxx(f *testing.F) in a _test.go file),
#                          one after another, each for FUZZTIME (default
#                          30s; go test's -fuzztime: 90s, 5m, 10000x; a bare
#                          number is seconds); with REGEXP, only the targets
#                          whose name matches it (grep -E)
#
# The targets are found in every module of the checkout (the root module,
# llm, examples and the other folders with a go.mod): the packages whose
# test files declare a fuzz function, then `go test -list '^Fuzz'` in each
# (which also leaves out the files a build constraint excludes). Each target
# runs with `go test -run '^$' -fuzz '^Name$'` in its module, with cgo off
# unless CGO_ENABLED says otherwise (as the tests run); $GO is the go
# command (default go). A failing input is written by go test under the
# package's testdata/fuzz/<Name>/, where `go test` then runs it as a seed:
# keep it with the fix. The script prints go test's output and a PASS or
# FAIL line per target, last "N passed, M failed", and exits non-zero when
# any target failed (or none was found).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
fuzztime=${FUZZTIME:-30s}
[[ $fuzztime =~ ^[0-9]+$ ]] && fuzztime=${fuzztime}s
pattern=${1:-.}
export CGO_ENABLED=${CGO_ENABLED:-0}

# The modules: every go.mod outside hidden folders, build/ and testdata/
# ("" is the root module).
modules=$(cd "$root" && find . \( -name '.?*' -o -name build -o -name testdata -o -name node_modules \) -prune \
  -o -name go.mod -print | sed 's|/go.mod$||; s|^\./||; s|^\.$||' | sort)

# targets: "MODULE<tab>PACKAGE<tab>FOLDER<tab>NAME" (bash 3.2, macOS's, has
# no mapfile: lists are read line by line)
targets=()
while IFS= read -r mod; do
  dir=$root${mod:+/$mod}
  # the packages with a fuzz function in a test file (build constraints
  # applied): "PACKAGE<tab>FOLDER<tab>FILE" lines from go list, then grep
  files=$("$go" -C "$dir" list -f '{{range .TestGoFiles}}{{$.ImportPath}}{{"\t"}}{{$.Dir}}{{"\t"}}{{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$.ImportPath}}{{"\t"}}{{$.Dir}}{{"\t"}}{{.}}{{"\n"}}{{end}}' ./...)
  pkgs=$(while IFS=$'\t' read -r pkg pdir file; do
    if [ -n "$file" ] && grep -qE '^func Fuzz[A-Z0-9_]' "$pdir/$file"; then printf '%s\t%s\n' "$pkg" "$pdir"; fi
  done <<<"$files" | sort -u)
  while IFS=$'\t' read -r pkg pdir; do
    [ -n "$pkg" ] || continue
    if ! names=$("$go" -C "$dir" test -list '^Fuzz' "$pkg" </dev/null 2>&1); then
      echo "fuzz_go.sh: go test -list '^Fuzz' $pkg (in ${mod:-the root module}) failed:" >&2
      echo "$names" >&2
      exit 1
    fi
    while read -r name; do
      if [[ $name =~ ^Fuzz ]] && grep -qE -- "$pattern" <<<"$name"; then
        targets+=("${mod:-.}"$'\t'"$pkg"$'\t'"$pdir"$'\t'"$name")
      fi
    done <<<"$names"
  done <<<"$pkgs"
done <<<"$modules"
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz_go.sh: no Go fuzz target${1:+ matches $1}" >&2
  exit 1
fi

echo "== ${#targets[@]} Go fuzz targets, $fuzztime each (CGO_ENABLED=$CGO_ENABLED)"
passed=0
failed=()
for t in "${targets[@]}"; do
  IFS=$'\t' read -r mod pkg pdir name <<<"$t"
  echo "== $name ($pkg)"
  start=$SECONDS
  # -timeout 0: the fuzz time bounds the run (go test's default 10m would
  # end a longer FUZZTIME as a failure)
  if "$go" -C "$root/$mod" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -timeout 0 "$pkg"; then
    passed=$((passed + 1))
    echo "PASS $name ($((SECONDS - start))s)"
  else
    failed+=("$name ($pkg)")
    echo "FAIL $name ($((SECONDS - start))s): the failing input is in ${pdir#"$root"/}/testdata/fuzz/$name/"
  fi
done
echo "$passed passed, ${#failed[@]} failed"
for f in ${failed[@]+"${failed[@]}"}; do
  echo "  FAIL $f"
done
[ ${#failed[@]} -eq 0 ]
