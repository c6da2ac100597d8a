// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// CStruct is one struct typedef of the header with its fields.
type CStruct struct {
	Name   string // gpurt_copy_args
	Line   int    // of its "typedef struct" line
	Fields []CField
}

// CField is one declarator of a struct field: `int32_t a_type, b_type;`
// is two fields.
type CField struct {
	Const   bool
	Base    string // uint64_t, gpurt_buffer, gpurt_kv_layout, char, void, gpurt_log_fn
	Ptr     int    // 0 or 1 star
	Name    string
	Array   string // "" or the length: "32", "GPURT_NAME_LEN"
	Comment string // its trailing comment, cleaned ("" for none)
	Group   string // the comment line above it inside the struct that starts a group ("1.7: CALL")
	Line    int
}

func (f CField) C() string {
	s := ""
	if f.Const {
		s = "const "
	}
	s += f.Base + " " + strings.Repeat("*", f.Ptr) + f.Name
	if f.Array != "" {
		s += "[" + f.Array + "]"
	}
	return s
}

var (
	reFieldDecl  = regexp.MustCompile(`^(const )?(\w+) (.+)$`)
	reDeclarator = regexp.MustCompile(`^(\*?) ?(\w+)(?: ?\[(\w+)\])?$`)
	reFnTypedef  = regexp.MustCompile(`(?m)^typedef \w+ \*?\s*\(\*(gpurt_\w+)\)\(`)
	reGroupMark  = regexp.MustCompile(`^---- (.*?) ----`)
)

// parseStructs reads the fields of every struct typedef of the header
// (but gpurt_api, whose slots ParseHeader reads). Declarations and
// comments only: anything else is an error naming the line.
func parseStructs(src string) ([]CStruct, error) {
	var out []CStruct
	for _, m := range reStruct.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		if name == "gpurt_api" {
			continue
		}
		end := strings.Index(src[m[1]:], "} "+name+";")
		if end < 0 {
			return nil, fmt.Errorf("struct %s: no closing `} %s;`", name, name)
		}
		body := src[m[1] : m[1]+end]
		line := strings.Count(src[:m[0]], "\n") + 1
		st := CStruct{Name: name, Line: line}
		lastDeclLine, lastDecl := -1, -1 // the line a declaration ended on, and its first field
		group := ""
		err := walkBody(body, line, name, func(text string, start, _ int) error {
			c := cleanComment(text)
			if start == lastDeclLine && lastDecl >= 0 {
				// A trailing comment: it belongs to every declarator
				// of the declaration it follows (`float a, b; /* x */`).
				for k := lastDecl; k < len(st.Fields); k++ {
					st.Fields[k].Comment = c
				}
				return nil
			}
			if g := reGroupMark.FindStringSubmatch(c); g != nil {
				group = g[1]
			}
			return nil
		}, func(raw string, declLine, end int) error {
			decl := strings.TrimSpace(reSpaces.ReplaceAllString(raw, " "))
			dm := reFieldDecl.FindStringSubmatch(decl)
			if dm == nil {
				return fmt.Errorf("line %d: %s: %q is not a field of a shape genbind knows: `[const] type [*]name[, ...]`", declLine, name, decl)
			}
			lastDecl, lastDeclLine = len(st.Fields), end
			for _, d := range strings.Split(dm[3], ",") {
				d = strings.TrimSpace(d)
				pm := reDeclarator.FindStringSubmatch(d)
				if pm == nil {
					return fmt.Errorf("line %d: %s: declarator %q is not of the shape `[*]name` or `name[N]`", declLine, name, d)
				}
				f := CField{Const: dm[1] != "", Base: dm[2], Ptr: len(pm[1]), Name: pm[2], Array: pm[3], Line: declLine, Group: group}
				if f.Ptr > 0 && f.Array != "" {
					return fmt.Errorf("line %d: %s: an array of pointers (%s) has no mirror rule", declLine, name, f.C())
				}
				group = ""
				st.Fields = append(st.Fields, f)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(st.Fields) == 0 {
			return nil, fmt.Errorf("line %d: struct %s has no fields", st.Line, name)
		}
		out = append(out, st)
	}
	return out, nil
}

// goWords are the words of a C name that GoName writes other than
// capitalised: initialisms, and the words the mirror spells its own way.
var goWords = map[string]string{
	"abi": "ABI", "api": "API", "id": "ID", "pci": "PCI", "uuid": "UUID",
	"kv": "KV", "qo": "QO", "sm": "SM", "ab": "AB", "nnz": "NNZ", "ms": "MS",
	"lda": "LDA", "ldb": "LDB", "ldc": "LDC", "ldd": "LDD",
	"dtype": "DType", "nranks": "NRanks",
}

// GoName is the exported Go name of a C name: gpurt_ dropped, the words
// capitalised, goWords as they say: gpurt_kv_append_args is
// KVAppendArgs, pci_bus_id PCIBusID, qo_dtype QODType, comm_unique_id
// CommUniqueID.
func GoName(c string) string {
	var n strings.Builder
	for _, w := range strings.Split(strings.TrimPrefix(c, "gpurt_"), "_") {
		if w == "" {
			continue
		}
		if g, ok := goWords[w]; ok {
			n.WriteString(g)
		} else {
			n.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return n.String()
}

// voidPointers says, for each `void *` field of the header, which Go type
// mirrors it: a pointer the core sets to Go memory has a Go pointer type
// (*byte, or unsafe.Pointer for an argument struct of any type), so the
// garbage collector and the stack copier see it; a value the core never
// points at Go memory (a handle of any kind, a user word handed back) is
// a uintptr. A new `void *` field must be added here: genbind refuses to
// guess.
var voidPointers = map[string]string{
	"gpurt_runtime_create_args.log_user": "uintptr",
	"gpurt_copy_args.dst_ptr":            "*byte",
	"gpurt_copy_args.src_ptr":            "*byte",
	"gpurt_module_load_args.data":        "*byte",
	"gpurt_graph_item.object":            "uintptr",
	"gpurt_graph_item.args":              "unsafe.Pointer",
}

// fieldPointees are the element types a data pointer field may point at.
var fieldPointees = map[string]string{
	"char": "byte", "uint8_t": "byte", "uint32_t": "uint32", "uint64_t": "uint64",
	"int32_t": "int32", "int64_t": "int64", "float": "float32", "double": "float64",
}

// fieldScalars are the value types of a field.
var fieldScalars = map[string]string{
	"uint8_t": "uint8", "uint16_t": "uint16", "uint32_t": "uint32", "uint64_t": "uint64",
	"int8_t": "int8", "int16_t": "int16", "int32_t": "int32", "int64_t": "int64",
	"float": "float32", "double": "float64", "char": "byte",
}

// goFieldType is the Go type of field f of struct s, by the mirror's
// rules: a handle is its handle type; an embedded struct its mirror; a
// pointer the plugin writes out (its comment starts "out") or a C
// function is a uintptr (plugin-owned memory, never Go's); a pointer the
// core fills is a Go pointer to its element or struct; `void *` as
// voidPointers says.
func goFieldType(s string, f CField, h *Header) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("line %d: %s.%s (%s): %s", f.Line, s, f.Name, f.C(), why)
	}
	handle := map[string]bool{}
	for _, o := range h.Opaque {
		handle[o] = true
	}
	isStruct := false
	for _, st := range h.Structs {
		if st == f.Base {
			isStruct = true
		}
	}
	var t string
	switch {
	case h.FnTypes[f.Base] && f.Ptr == 0:
		t = "uintptr"
	case f.Ptr == 0 && fieldScalars[f.Base] != "":
		t = fieldScalars[f.Base]
	case f.Ptr == 0 && isStruct:
		t = GoName(f.Base)
	case f.Ptr == 0:
		return "", bad("a type genbind does not know by value")
	case f.Base == "void":
		v, ok := voidPointers[s+"."+f.Name]
		if !ok {
			return "", bad("a void pointer: say in voidPointers (internal/cmd/genbind/structs.go) whether the core points it at Go memory (*byte, unsafe.Pointer) or not (uintptr)")
		}
		t = v
	case handle[f.Base]:
		t = GoName(f.Base)
	case strings.HasPrefix(f.Comment, "out"):
		t = "uintptr" // written by the plugin: its memory, never Go's
	case isStruct:
		t = "*" + GoName(f.Base)
	case fieldPointees[f.Base] != "":
		t = "*" + fieldPointees[f.Base]
	default:
		return "", bad("a pointer type genbind does not know")
	}
	if f.Array != "" {
		if f.Ptr > 0 {
			return "", bad("an array of pointers")
		}
		n := f.Array
		if strings.HasPrefix(n, "GPURT_") {
			n = GoConstName(n)
		}
		t = "[" + n + "]" + t
	}
	return t, nil
}

// emitStructs writes internal/abi/zabi.go: a Go type per opaque handle,
// a struct per header struct with the same layout (fields tagged with
// their C names), and API, gpurt_api's table.
func emitStructs(h *Header, _ *Mirror) ([]byte, error) {
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pf("// Opaque handles: pointers the plugin owns and Go never dereferences.\ntype (\n")
	for _, o := range h.Opaque {
		pf("%s uintptr // %s*\n", GoName(o), o)
	}
	pf(")\n\n")
	usesUnsafe := false
	for _, st := range h.Defs {
		pf("// %s mirrors %s.\ntype %s struct {\n", GoName(st.Name), st.Name, GoName(st.Name))
		for _, f := range st.Fields {
			t, err := goFieldType(st.Name, f, h)
			if err != nil {
				return nil, err
			}
			usesUnsafe = usesUnsafe || t == "unsafe.Pointer"
			if f.Group != "" {
				pf("// %s\n", f.Group)
			}
			pf("%s %s `c:%q`", GoName(f.Name), t, f.Name)
			if c := f.Comment; c != "" && !strings.Contains(c, "\n") && len(c) <= 72 {
				pf(" // %s", c)
			}
			pf("\n")
		}
		pf("}\n\n")
	}
	pf("// API mirrors gpurt_api: the function table, every slot a C function\n// pointer. Slots after a plugin's struct_size must not be read.\n")
	pf("type API struct {\nStructSize uint64 `c:\"struct_size\"`\nABIMajor uint32 `c:\"abi_major\"`\nABIMinor uint32 `c:\"abi_minor\"`\n")
	minor := -1
	for _, s := range h.Slots {
		if s.Minor != minor {
			minor = s.Minor
			pf("// 1.%d\n", minor)
		}
		pf("%s uintptr `c:%q`\n", GoName(s.Name), s.Name)
	}
	pf("}\n")
	var out bytes.Buffer
	preamble(&out, "abi")
	if usesUnsafe {
		out.WriteString("import \"unsafe\"\n\n")
	}
	out.Write(b.Bytes())
	return out.Bytes(), nil
}
