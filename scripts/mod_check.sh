#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# mod_check.sh — what a program that imports only gpurt's core gets: makes
# a throwaway module in a temporary folder (main.go calls inspect.Probe; a
# replace directive points at this checkout), runs go mod tidy, and checks
# two exact lists, so that a new dependency fails here until it is added
# on purpose:
#  - the modules it compiles: purego, go-hclog (with fatih/color,
#    mattn/go-colorable, mattn/go-isatty) and x/sys;
#  - its module graph (go list -m all): those, plus what their go.mod files
#    require without being compiled. Since Go 1.17 a go.mod lists every
#    module needed to build its module's packages and their tests, and a
#    downstream module loads the go.mod of each module it requires:
#      github.com/stretchr/testify, go.yaml.in/yaml/v3 — gpurt's tests'
#        (testify v1.12's own requirements are pruned: its go.mod says go
#        1.17 or later);
#      github.com/stretchr/testify v1.7.2, github.com/davecgh/go-spew,
#      github.com/pmezard/go-difflib, github.com/stretchr/objx,
#      gopkg.in/yaml.v3, gopkg.in/check.v1 — go-hclog v1.6.3's tests'
#        (its go.mod says go 1.13, so its requirements are not pruned and
#        come with all of theirs; they would be listed without gpurt's
#        tests too).
#    Only the compiled ones are downloaded to build; of the others only
#    the go.mod files are read. llm (safetensors), the examples (progress
#    bar, x/term), metrics (Prometheus) and decodeplot (gonum/plot) are
#    modules of their own and add nothing here.
# Prints both lists. make test runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "mod_check: FAIL: $*" >&2; exit 1; }
goline=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$root/go.mod")
cat >"$tmp/go.mod" <<EOM
module example.com/downstream

go $goline

require github.com/metrale/gpurt v0.0.0-00010101000000-000000000000

replace github.com/metrale/gpurt => $root
EOM
cat >"$tmp/main.go" <<'EOM'
package main

import (
	"fmt"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

func main() {
	rep, err := inspect.Probe(core.Config{})
	fmt.Println(rep != nil, err)
}
EOM
cd "$tmp"
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || { GOFLAGS=-mod=mod go mod tidy; fail "go mod tidy failed in the downstream module"; }
CGO_ENABLED=0 go build -o /dev/null . || fail "the downstream module does not build"
compiled=$(CGO_ENABLED=0 go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}' . | LC_ALL=C sort -u | grep -v '^github.com/metrale/gpurt$')
graph=$(go list -m all | tail -n +2 | grep -v '^github.com/metrale/gpurt ')
echo "mod_check: a module importing only github.com/metrale/gpurt/core compiles:"
sed 's/^/  /' <<<"$compiled"
echo "mod_check: its go list -m all (besides itself and gpurt):"
sed 's/^/  /' <<<"$graph"
want_compiled='github.com/ebitengine/purego
github.com/fatih/color
github.com/hashicorp/go-hclog
github.com/mattn/go-colorable
github.com/mattn/go-isatty
golang.org/x/sys'
want_graph="$want_compiled
github.com/davecgh/go-spew
github.com/pmezard/go-difflib
github.com/stretchr/objx
github.com/stretchr/testify
go.yaml.in/yaml/v3
gopkg.in/check.v1
gopkg.in/yaml.v3"
sorted() { LC_ALL=C sort -u <<<"$1"; }
[ "$compiled" = "$(sorted "$want_compiled")" ] || fail "it compiles other modules than purego, go-hclog (and its color/tty helpers) and x/sys:
$(diff <(sorted "$want_compiled") - <<<"$compiled" | grep '^[<>]' || true)
(<: expected, not compiled; >: compiled, not expected)"
paths=$(awk '{ print $1 }' <<<"$graph" | LC_ALL=C sort -u)
[ "$paths" = "$(sorted "$want_graph")" ] || fail "its go list -m all is not the expected list (a new requirement of the root go.mod, or of a module it requires?):
$(diff <(sorted "$want_graph") - <<<"$paths" | grep '^[<>]' || true)
(<: expected, missing; >: listed, not expected; update want_graph in $0 only for a dependency added on purpose)"
echo "mod_check: ok ($(wc -l <<<"$graph") modules in the graph besides gpurt, as listed in $0; $(wc -l <<<"$compiled") compiled)"
