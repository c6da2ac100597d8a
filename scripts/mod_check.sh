#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# mod_check.sh — what a program that imports only gpurt's core gets: makes
# a throwaway module in a temporary folder (main.go calls core.Probe; a
# replace directive points at this checkout), runs go mod tidy, and checks
# that the Go modules it compiles are purego, go-hclog (with fatih/color,
# mattn/go-colorable, mattn/go-isatty) and x/sys, and that its module graph
# (go list -m all) holds neither Prometheus nor gonum/plot. Prints both
# lists. make test runs it.
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
)

func main() {
	rep, err := core.Probe(core.Config{})
	fmt.Println(rep != nil, err)
}
EOM
cd "$tmp"
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || { GOFLAGS=-mod=mod go mod tidy; fail "go mod tidy failed in the downstream module"; }
CGO_ENABLED=0 go build -o /dev/null . || fail "the downstream module does not build"
compiled=$(CGO_ENABLED=0 go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}' . | LC_ALL=C sort -u | grep -v '^github.com/metrale/gpurt$')
graph=$(go list -m all | tail -n +2)
echo "mod_check: a module importing only github.com/metrale/gpurt/core compiles:"
sed 's/^/  /' <<<"$compiled"
echo "mod_check: its go list -m all:"
sed 's/^/  /' <<<"$graph"
want=$'github.com/ebitengine/purego\ngithub.com/fatih/color\ngithub.com/hashicorp/go-hclog\ngithub.com/mattn/go-colorable\ngithub.com/mattn/go-isatty\ngolang.org/x/sys'
[ "$compiled" = "$want" ] || fail "it compiles other modules than purego, go-hclog (and its color/tty helpers) and x/sys:
$compiled"
if grep -E 'prometheus|gonum|go-latex|go-pdf|go-fonts|protobuf' <<<"$graph"; then
  fail "its module graph holds the modules above (metrics' or decodeplot's, which should stay in their own modules)"
fi
echo "mod_check: ok ($(wc -l <<<"$graph") modules in the graph, $(wc -l <<<"$compiled") compiled)"
