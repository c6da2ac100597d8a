// SPDX-License-Identifier: Apache-2.0

// Command apisurface counts the exported identifiers of Go packages, the
// measure of an API's surface that issue 21 states its goals in:
// package-level exported constants, variables, types and functions, plus
// the exported methods of exported types and of exported interfaces.
// Struct fields are not counted (they are listed with their type). By
// this measure database/sql has 124 (go1.26.8).
//
//	go run ./internal/cmd/apisurface ./core ./core/inspect
//	go run ./internal/cmd/apisurface -v ./core   # every identifier, one a line
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list every identifier counted")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apisurface [-v] DIR...")
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		ids, err := Exported(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%d\n", dir, len(ids))
		if *verbose {
			for _, id := range ids {
				fmt.Println("\t" + id)
			}
		}
	}
}

// Exported lists, sorted, the exported identifiers of the package in dir
// (its non-test files): "Name" for a package-level one, "Type.Method" for
// a method.
func Exported(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return nil, err
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("%s: %d packages, want 1", dir, len(pkgs))
	}
	var ids []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				ids = append(ids, declared(d)...)
			}
		}
	}
	sort.Strings(ids)
	return ids, nil
}

func declared(d ast.Decl) []string {
	var ids []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		if d.Recv == nil {
			return []string{d.Name.Name}
		}
		t := d.Recv.List[0].Type
		if s, ok := t.(*ast.StarExpr); ok {
			t = s.X
		}
		if ix, ok := t.(*ast.IndexExpr); ok { // a generic type's method
			t = ix.X
		}
		if id, ok := t.(*ast.Ident); ok && id.IsExported() {
			ids = append(ids, id.Name+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						ids = append(ids, n.Name)
					}
				}
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				ids = append(ids, s.Name.Name)
				if it, ok := s.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						for _, n := range m.Names {
							if n.IsExported() {
								ids = append(ids, s.Name.Name+"."+n.Name)
							}
						}
					}
				}
			}
		}
	}
	return ids
}
