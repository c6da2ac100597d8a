// SPDX-License-Identifier: Apache-2.0

// Command crosscheck type-checks Go packages for other targets without
// compiling them: make test's cross step. For each GOOS/GOARCH given it
// asks go list for the packages and their dependencies as that target
// builds them (CGO_ENABLED=0: build constraints and file names applied),
// then type-checks every package from source with go/types in dependency
// order: this module's packages in full, the standard library's and other
// modules' declarations only (their function bodies are theirs to check).
// It reports every type error with its position and exits 1.
//
// What it checks is what the compiler's front end checks (every
// identifier, type, conversion, unused variable and import, for the
// target's files); what it leaves out is code generation and linking:
// an assembly function missing for one architecture is found when that
// target is built (make dist builds linux/amd64, linux/arm64 and
// darwin/arm64). A cross-build of the tree and its standard library costs
// about a CPU-minute per target; this takes seconds.
//
//	go run ./internal/cmd/crosscheck [-C DIR] GOOS/GOARCH... -- PACKAGES...
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("crosscheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("C", ".", "the module folder to run go list in")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: crosscheck [-C DIR] GOOS/GOARCH... -- PACKAGES...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var targets, patterns []string
	rest := fs.Args()
	for i, a := range rest {
		if a == "--" {
			targets, patterns = rest[:i], rest[i+1:]
			break
		}
	}
	if len(targets) == 0 || len(patterns) == 0 {
		fmt.Fprintln(stderr, "crosscheck: want at least one GOOS/GOARCH, then --, then at least one package pattern")
		return 2
	}
	for _, t := range targets {
		goos, goarch, ok := strings.Cut(t, "/")
		if !ok || goos == "" || goarch == "" {
			fmt.Fprintf(stderr, "crosscheck: target %q is not GOOS/GOARCH\n", t)
			return 2
		}
		n, errs, err := check(*dir, goos, goarch, patterns)
		if err != nil {
			fmt.Fprintf(stderr, "crosscheck: %s: %v\n", t, err)
			return 1
		}
		if len(errs) > 0 {
			for _, e := range errs {
				fmt.Fprintf(stderr, "%s: %s\n", t, e)
			}
			fmt.Fprintf(stderr, "crosscheck: %s: %d type errors\n", t, len(errs))
			return 1
		}
		fmt.Fprintf(stdout, "crosscheck: %s: %d packages of this module type-check (CGO_ENABLED=0)\n", t, n)
	}
	return 0
}

// listed is what go list -json says of one package.
type listed struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	CgoFiles   []string
	ImportMap  map[string]string
	Standard   bool
	DepOnly    bool
	Module     *struct {
		Path      string
		Main      bool
		GoVersion string
	}
	Error *struct{ Err string }
}

// check type-checks patterns and their dependencies for goos/goarch and
// returns how many of the main module's packages it checked in full and
// the type errors found.
func check(dir, goos, goarch string, patterns []string) (int, []string, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-json=ImportPath,Dir,Name,GoFiles,CgoFiles,ImportMap,Standard,DepOnly,Module,Error"}, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return 0, nil, fmt.Errorf("go list: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	sizes := types.SizesFor("gc", goarch)
	if sizes == nil {
		return 0, nil, fmt.Errorf("unknown GOARCH %q", goarch)
	}
	fset := token.NewFileSet()
	done := map[string]*types.Package{"unsafe": types.Unsafe}
	var errs []string
	n := 0
	dec := json.NewDecoder(&out)
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return 0, nil, fmt.Errorf("go list output: %v", err)
		}
		if p.ImportPath == "unsafe" {
			continue
		}
		if p.Error != nil {
			errs = append(errs, fmt.Sprintf("%s: %s", p.ImportPath, p.Error.Err))
			continue
		}
		if len(p.CgoFiles) > 0 {
			errs = append(errs, fmt.Sprintf("%s: cgo files %v with CGO_ENABLED=0", p.ImportPath, p.CgoFiles))
			continue
		}
		full := p.Module != nil && p.Module.Main
		var files []*ast.File
		mode := parser.SkipObjectResolution
		if full {
			mode |= parser.ParseComments
		}
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, mode)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			files = append(files, af)
		}
		goVersion := ""
		if p.Module != nil && p.Module.GoVersion != "" {
			goVersion = "go" + p.Module.GoVersion
		}
		var pkgErrs []string
		conf := types.Config{
			GoVersion:        goVersion,
			Sizes:            sizes,
			IgnoreFuncBodies: !full,
			Importer: importerFunc(func(path string) (*types.Package, error) {
				if m, ok := p.ImportMap[path]; ok {
					path = m
				}
				if tp, ok := done[path]; ok {
					return tp, nil
				}
				return nil, fmt.Errorf("%s: %s not type-checked before it (go list order)", p.ImportPath, path)
			}),
			Error: func(err error) {
				if len(pkgErrs) < 20 {
					pkgErrs = append(pkgErrs, err.Error())
				}
			},
		}
		tp, _ := conf.Check(p.ImportPath, fset, files, nil)
		done[p.ImportPath] = tp
		if len(pkgErrs) > 0 {
			if !full {
				pkgErrs = append([]string{fmt.Sprintf("%s (a dependency, declarations only; Go %s here):", p.ImportPath, runtime.Version())}, pkgErrs...)
			}
			errs = append(errs, pkgErrs...)
		}
		if full {
			n++
		}
	}
	if n == 0 && len(errs) == 0 {
		return 0, nil, errors.New("no package of the main module matched")
	}
	return n, errs, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
