// SPDX-License-Identifier: Apache-2.0

// Command genbind generates, from abi/gpurt.h (the slots of gpurt_api
// with their C parameter lists, the struct and handle typedefs, the
// enumerators and #defines) and internal/abi (the Go mirror: the field of
// abi.API for each slot, the Go type of each struct and opaque handle):
//
//   - core/internal/bind/zslots.go: the typed methods through which the
//     core calls a plugin, one per slot of gpurt_api;
//   - internal/abi/zsizes.go: a Sizeof constant per mirrored struct (the
//     value a caller puts in struct_size). A header struct without a Go
//     mirror is an error here.
//   - internal/abi/zerrors.go: the error codes and their names.
//   - internal/abi/zconsts.go: every other constant of the header (each
//     enumerator and object-like #define), named by one rule (GoConstName).
//   - internal/abi/zmirrored_test.go: the layout test's lists (every
//     struct with its mirror, every constant with its C name).
//   - csrc/gp_zslots.h: the slots as C X-macro lists (GP_ZSLOTS: every
//     slot with its minor and prototype; GP_ZCALLS: the stream operations
//     a graph records as CALL items), which csrc's per-slot tables expand.
//
// Run it from the module root (make generate, or go generate
// ./core/internal/bind):
//
//	go run ./internal/cmd/genbind
//
// With -check it writes nothing and fails when the file on disk differs
// from what it would generate (make test runs that).
//
// The parser is deliberately small and strict: it knows the shapes the
// header's rules allow (see "Shapes" in gpurt.h) and fails, naming the
// line, on anything else, rather than guess.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Command is the command line written on line 1 of the generated file.
const Command = "go run ./internal/cmd/genbind"

// outputs are the files genbind writes, in generate's order: each its
// flag (the file to write) and the flag's help.
var outputs = [...]struct{ flag, path, help string }{
	{"slots", "core/internal/bind/zslots.go", "the bind methods to write"},
	{"sizes", "internal/abi/zsizes.go", "the abi size constants to write"},
	{"errors", "internal/abi/zerrors.go", "the abi error vocabulary to write"},
	{"mirrored", "internal/abi/zmirrored_test.go", "the layout test's lists of mirrored structs and constants to write"},
	{"consts", "internal/abi/zconsts.go", "the abi constants to write"},
	{"structs", "internal/abi/zabi.go", "the abi handle types, structs and API table to write"},
	{"cslots", "csrc/gp_zslots.h", "csrc's X-macro lists of the slots to write"},
}

func main() {
	header := flag.String("header", "abi/gpurt.h", "the C header")
	var paths [len(outputs)]*string
	for i, o := range outputs {
		paths[i] = flag.String(o.flag, o.path, o.help)
	}
	check := flag.Bool("check", false, "write nothing; fail when a file on disk is not what would be generated")
	flag.Parse()
	if err := chdirRoot(); err != nil {
		fail(err)
	}
	files, err := generate(*header)
	if err != nil {
		fail(err)
	}
	for i, src := range files {
		path := *paths[i]
		if *check {
			old, err := os.ReadFile(path)
			if err != nil {
				fail(fmt.Errorf("%w (run `make generate`)", err))
			}
			if !bytes.Equal(old, src) {
				fail(fmt.Errorf("%s is stale: it differs from what `%s` makes from %s; run `make generate` and commit the result", path, Command, *header))
			}
			continue
		}
		if err := os.WriteFile(path, src, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "genbind:", err)
	os.Exit(1)
}

// chdirRoot moves to the module root (the nearest folder above with a
// go.mod), so that go generate from a package folder works too.
func chdirRoot() error {
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return os.Chdir(dir)
		}
		up := filepath.Dir(dir)
		if up == dir {
			return fmt.Errorf("no go.mod above the working folder")
		}
		dir = up
	}
}

// generate returns the bind methods, the abi size constants, the abi
// error vocabulary, the layout test's lists, the abi constants, the abi
// structs and csrc's X-macro lists of the slots (csrc/gp_zslots.h).
func generate(headerPath string) ([len(outputs)][]byte, error) {
	var none [len(outputs)][]byte
	hdr, err := os.ReadFile(headerPath)
	if err != nil {
		return none, err
	}
	h, err := ParseHeader(string(hdr))
	if err != nil {
		return none, fmt.Errorf("%s: %w", headerPath, err)
	}
	m := mirrorFromHeader(h)
	var out [len(outputs)][]byte
	if out[6], err = emitCSlots(h, m); err != nil {
		return none, err
	}
	for i, gen := range []func(*Header, *Mirror) ([]byte, error){emit, emitSizes, emitErrors, emitMirrored, emitConsts, emitStructs} {
		src, err := gen(h, m)
		if err != nil {
			return none, err
		}
		if out[i], err = format.Source(src); err != nil {
			return none, fmt.Errorf("gofmt of the generated code: %w\n%s", err, src)
		}
	}
	return out, nil
}

// emitSizes writes internal/abi/zsizes.go: one constant per header struct.
func emitSizes(h *Header, m *Mirror) ([]byte, error) {
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	preamble(&b, "abi")
	pf("import \"unsafe\"\n\n")
	pf("// Sizes of the mirrored structs: what a caller puts in struct_size.\nconst (\n")
	for _, c := range h.Structs {
		g, err := m.mirrorOf(c)
		if err != nil {
			return nil, err
		}
		pf("Sizeof%s = uint64(unsafe.Sizeof(%s{})) // sizeof(%s)\n", g, g, c)
	}
	pf(")\n")
	return b.Bytes(), nil
}

// Header is what genbind reads from gpurt.h.
type Header struct {
	Minor   int      // GPURT_ABI_MINOR
	Opaque  []string // opaque handle typedefs (gpurt_stream, ...)
	Structs []string // struct typedefs with a body (gpurt_copy_args, ...)
	Slots   []Slot   // gpurt_api's function pointers, in order
	// Errors are the error-code enum's enumerators (GPURT_OK first), in
	// order.
	Errors []ErrorCode
	// StreamStructs are the structs with a `gpurt_stream *stream;` field
	// (an op that names its stream inside its arguments: copy, memset).
	StreamStructs map[string]bool
	// Consts are the header's other constants (enumerators and
	// object-like #defines but the error codes), in groups, in order.
	Consts []ConstGroup
	// Defs are the structs with their fields (all but gpurt_api), in
	// order.
	Defs []CStruct
	// FnTypes are the function-pointer typedefs (gpurt_log_fn, ...).
	FnTypes map[string]bool
}

// ConstGroup is one enum of the header, or one run of #defines.
type ConstGroup struct {
	Doc   string // the comment above it, one line ("" for none)
	Enum  bool   // an enum (a run of #defines is not)
	Items []Const
}

// Const is one constant of the header.
type Const struct {
	C     string // GPURT_DTYPE_F32
	Value string // a decimal integer, or a Go-quoted string
}

// Slot is one function pointer of gpurt_api.
type Slot struct {
	Name   string  // C name: "buffer_alloc"
	Minor  int     // the block it is declared in: "---- 1.2 ----" is 2
	Ret    string  // "gpurt_error *" or "void"
	Params []Param // none for (void)
	Doc    string  // the comment above it, one line
	Line   int     // of the declaration in the header
}

// Param is one C parameter: [const] base [*|**] name.
type Param struct {
	Const bool
	Base  string // "gpurt_runtime", "uint32_t", "char", ...
	Ptr   int    // 0, 1 or 2 stars
	Name  string
}

func (p Param) C() string {
	s := ""
	if p.Const {
		s = "const "
	}
	s += p.Base + " "
	return s + strings.Repeat("*", p.Ptr) + p.Name
}

var (
	reMinor    = regexp.MustCompile(`(?m)^#define GPURT_ABI_MINOR (\d+)\s*$`)
	reOpaque   = regexp.MustCompile(`(?m)^typedef struct (gpurt_\w+) (gpurt_\w+);`)
	reStruct   = regexp.MustCompile(`(?m)^typedef struct (gpurt_\w+) \{`)
	reBlock    = regexp.MustCompile(`^---- 1\.(\d+) ----$`)
	reFuncPtr  = regexp.MustCompile(`^(void|gpurt_error \*) ?\(\*(\w+)\)\((.*)\)$`)
	reParam    = regexp.MustCompile(`^(const )?(\w+) ?(\*{0,2}) ?(\w+)$`)
	reHeadDecl = regexp.MustCompile(`^(uint64_t struct_size|uint32_t abi_major|uint32_t abi_minor)$`)
	reSpaces   = regexp.MustCompile(`\s+`)
	// reErrorCode is an enumerator of the error-code enum.
	reErrorCode = regexp.MustCompile(`(?m)^\s*(GPURT_OK|GPURT_ERR_[A-Z_]+) = (\d+),?`)
	// reStreamField is an argument struct's stream field.
	reStreamField = regexp.MustCompile(`(?m)^\s*gpurt_stream \*stream;`)
)

// ParseHeader reads the parts of gpurt.h genbind needs.
func ParseHeader(src string) (*Header, error) {
	h := &Header{}
	mm := reMinor.FindStringSubmatch(src)
	if mm == nil {
		return nil, fmt.Errorf("no #define GPURT_ABI_MINOR")
	}
	h.Minor, _ = strconv.Atoi(mm[1])
	for _, m := range reOpaque.FindAllStringSubmatch(src, -1) {
		if m[1] != m[2] {
			return nil, fmt.Errorf("typedef struct %s %s: an opaque handle must keep its struct's name", m[1], m[2])
		}
		h.Opaque = append(h.Opaque, m[1])
	}
	for _, m := range reErrorCode.FindAllStringSubmatch(src, -1) {
		v, _ := strconv.Atoi(m[2])
		h.Errors = append(h.Errors, ErrorCode{Enum: m[1], Value: v})
	}
	var err error
	if h.Consts, err = parseConsts(src); err != nil {
		return nil, err
	}
	if h.Defs, err = parseStructs(src); err != nil {
		return nil, err
	}
	h.FnTypes = map[string]bool{}
	for _, m := range reFnTypedef.FindAllStringSubmatch(src, -1) {
		h.FnTypes[m[1]] = true
	}
	h.StreamStructs = map[string]bool{}
	for _, m := range reStruct.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		h.Structs = append(h.Structs, name)
		if end := strings.Index(src[m[1]:], "} "+name+";"); end >= 0 &&
			reStreamField.MatchString(src[m[1]:m[1]+end]) {
			h.StreamStructs[name] = true
		}
	}
	const open, close = "typedef struct gpurt_api {", "} gpurt_api;"
	start := strings.Index(src, open)
	if start < 0 {
		return nil, fmt.Errorf("no %q", open)
	}
	end := strings.Index(src[start:], close)
	if end < 0 {
		return nil, fmt.Errorf("no %q after %q", close, open)
	}
	body := src[start+len(open) : start+end]
	line := strings.Count(src[:start], "\n") + 1
	minor, doc, head := -1, "", 0
	// Walk the body: comments (block markers or docs) and declarations
	// ending in ';'.
	err = walkBody(body, line, "gpurt_api", func(text string, _, line int) error {
		c := cleanComment(text)
		if m := reBlock.FindStringSubmatch(c); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n < minor {
				return fmt.Errorf("line %d: block 1.%d after block 1.%d: blocks must be in version order", line, n, minor)
			}
			minor, doc = n, ""
			return nil
		}
		if strings.HasPrefix(c, "----") {
			return fmt.Errorf("line %d: a block marker must read \"---- 1.N ----\", not %q", line, c)
		}
		if doc != "" {
			doc += " "
		}
		doc += c
		return nil
	}, func(raw string, declLine, _ int) error {
		decl := strings.TrimSpace(reSpaces.ReplaceAllString(raw, " "))
		decl = strings.ReplaceAll(strings.ReplaceAll(decl, "( ", "("), " )", ")")
		decl = strings.ReplaceAll(decl, " ,", ",")
		if minor < 0 {
			if !reHeadDecl.MatchString(decl) {
				return fmt.Errorf("line %d: %q before the \"---- 1.0 ----\" block: only struct_size, abi_major and abi_minor go there", declLine, decl)
			}
			head++
			doc = ""
			return nil
		}
		s, err := parseSlot(decl)
		if err != nil {
			return fmt.Errorf("line %d: %w", declLine, err)
		}
		s.Minor, s.Doc, s.Line = minor, doc, declLine
		doc = ""
		h.Slots = append(h.Slots, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if head != 3 {
		return nil, fmt.Errorf("gpurt_api must begin with struct_size, abi_major and abi_minor")
	}
	if len(h.Slots) == 0 {
		return nil, fmt.Errorf("gpurt_api has no slots")
	}
	if minor != h.Minor {
		return nil, fmt.Errorf("the last block of gpurt_api is 1.%d but GPURT_ABI_MINOR is %d", minor, h.Minor)
	}
	return h, nil
}

// walkBody walks body, a C struct's body starting on line, in order: it
// calls comment with each block comment's text and the lines it starts and
// ends on, and decl with each declaration up to its ';' (without it) and
// the lines it starts and ends on; the first error stops the walk. A //
// comment, an unterminated comment or a declaration without ';' is an
// error naming where (the struct).
func walkBody(body string, line int, where string, comment func(text string, start, end int) error,
	decl func(raw string, start, end int) error) error {
	for i := 0; i < len(body); {
		switch {
		case body[i] == '\n':
			line++
			i++
		case body[i] == ' ' || body[i] == '\t':
			i++
		case strings.HasPrefix(body[i:], "/*"):
			j := strings.Index(body[i:], "*/")
			if j < 0 {
				return fmt.Errorf("line %d: unterminated comment in %s", line, where)
			}
			text := body[i+2 : i+j]
			start := line
			line += strings.Count(text, "\n")
			i += j + 2
			if err := comment(text, start, line); err != nil {
				return err
			}
		case strings.HasPrefix(body[i:], "//"):
			return fmt.Errorf("line %d: use /* */ comments in %s", line, where)
		default:
			j := strings.IndexByte(body[i:], ';')
			if j < 0 {
				return fmt.Errorf("line %d: a declaration without ';' in %s", line, where)
			}
			raw := body[i : i+j]
			start := line
			line += strings.Count(raw, "\n")
			i += j + 1
			if err := decl(raw, start, line); err != nil {
				return err
			}
		}
	}
	return nil
}

func cleanComment(text string) string {
	var parts []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(strings.TrimPrefix(l, "*"))
		if l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func parseSlot(decl string) (Slot, error) {
	m := reFuncPtr.FindStringSubmatch(decl)
	if m == nil {
		return Slot{}, fmt.Errorf("%q is not a slot of a shape genbind knows: `gpurt_error *(*name)(params)` or `void (*name)(params)`", decl)
	}
	s := Slot{Name: m[2], Ret: strings.TrimSpace(m[1])}
	if m[3] == "void" {
		return s, nil
	}
	if strings.TrimSpace(m[3]) == "" {
		return Slot{}, fmt.Errorf("slot %s: write (void) for no parameters", s.Name)
	}
	for _, p := range strings.Split(m[3], ",") {
		p = strings.TrimSpace(p)
		pm := reParam.FindStringSubmatch(p)
		if pm == nil {
			return Slot{}, fmt.Errorf("slot %s: parameter %q is not of the shape `[const] type [*|**] name`", s.Name, p)
		}
		s.Params = append(s.Params, Param{Const: pm[1] != "", Base: pm[2], Ptr: len(pm[3]), Name: pm[4]})
	}
	return s, nil
}

// Mirror is the Go names of the header's types and slots.
type Mirror struct {
	Types     map[string]string // C struct or opaque name -> Go type name
	Handles   map[string]bool   // C names that are opaque handles
	SlotField map[string]string // gpurt_api slot -> abi.API field
	APIFields []string          // C names of abi.API's fields, in order
}

// mirrorFromHeader names the Go mirror of every header type and slot by
// GoName: the mirror (zabi.go) is generated from the header by the same
// rule, so the two cannot drift.
func mirrorFromHeader(h *Header) *Mirror {
	m := &Mirror{Types: map[string]string{}, Handles: map[string]bool{}, SlotField: map[string]string{},
		APIFields: []string{"struct_size", "abi_major", "abi_minor"}}
	for _, o := range h.Opaque {
		m.Types[o] = GoName(o)
		m.Handles[o] = true
	}
	for _, st := range h.Structs {
		m.Types[st] = GoName(st)
	}
	for _, s := range h.Slots {
		m.SlotField[s.Name] = GoName(s.Name)
		m.APIFields = append(m.APIFields, s.Name)
	}
	return m
}

// goParam is one Go parameter of a generated method and how it crosses.
type goParam struct {
	name, typ string
	args      []string // uintptr expressions passed to ffi
	keep      bool     // runtime.KeepAlive after the call
}

var scalars = map[string]string{
	"uint8_t": "uint8", "uint16_t": "uint16", "uint32_t": "uint32", "uint64_t": "uint64",
	"int8_t": "int8", "int16_t": "int16", "int32_t": "int32", "int64_t": "int64",
}

var pointees = map[string]string{
	"uint8_t": "uint8", "uint32_t": "uint32", "uint64_t": "uint64", "int32_t": "int32", "int64_t": "int64", "double": "float64",
}

// reserved are names the generated bodies use.
var reserved = map[string]bool{"p": true, "op": true, "fn": true, "e": true,
	"abi": true, "ffi": true, "runtime": true, "unsafe": true,
	"type": true, "func": true, "range": true, "map": true, "chan": true, "go": true,
	"select": true, "default": true, "var": true, "const": true, "package": true,
	"interface": true, "defer": true, "return": true, "string": true, "len": true}

func goName(c string) string {
	parts := strings.Split(c, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	n := strings.Join(parts, "")
	if reserved[n] {
		n += "Arg"
	}
	return n
}

// goParams maps a slot's C parameters to Go parameters.
func goParams(s Slot, m *Mirror) ([]goParam, error) {
	var out []goParam
	ps := s.Params
	for i := 0; i < len(ps); i++ {
		p := ps[i]
		name := goName(p.Name)
		bad := func(why string) error {
			return fmt.Errorf("slot %s (line %d): parameter %q: %s", s.Name, s.Line, p.C(), why)
		}
		switch {
		case p.Ptr == 0 && scalars[p.Base] != "":
			out = append(out, goParam{name: name, typ: scalars[p.Base], args: []string{"uintptr(" + name + ")"}})
		case p.Ptr == 0 && (p.Base == "double" || p.Base == "float"):
			return nil, bad("a floating-point value by value needs a float register, which core/internal/ffi does not load; pass it in an argument struct")
		case p.Ptr == 0:
			return nil, bad("a type genbind does not know by value")
		case p.Base == "char" && p.Ptr == 1 && p.Const:
			if i+1 >= len(ps) || ps[i+1].Name != p.Name+"_len" || ps[i+1].Base != "uint64_t" || ps[i+1].Ptr != 0 {
				return nil, bad("a string must be followed by `uint64_t " + p.Name + "_len` (the header passes strings as pointer + length)")
			}
			i++
			out = append(out, goParam{name: name, typ: "string", keep: true,
				args: []string{"uintptr(unsafe.Pointer(unsafe.StringData(" + name + ")))", "uintptr(len(" + name + "))"}})
		case m.Handles[p.Base] && p.Ptr == 1:
			out = append(out, goParam{name: name, typ: "abi." + m.Types[p.Base], args: []string{"uintptr(" + name + ")"}})
		case m.Handles[p.Base] && p.Ptr == 2 && !p.Const:
			out = append(out, goParam{name: name, typ: "*abi." + m.Types[p.Base], keep: true,
				args: []string{"uintptr(unsafe.Pointer(" + name + "))"}})
		case p.Ptr == 1 && strings.HasPrefix(p.Base, "gpurt_"):
			t, ok := m.Types[p.Base]
			if !ok {
				return nil, bad("no struct " + p.Base + " in the header (a parameter's struct must be defined there: its Go mirror is generated from it)")
			}
			out = append(out, goParam{name: name, typ: "*abi." + t, keep: true,
				args: []string{"uintptr(unsafe.Pointer(" + name + "))"}})
		case p.Ptr == 1 && !p.Const && pointees[p.Base] != "":
			out = append(out, goParam{name: name, typ: "*" + pointees[p.Base], keep: true,
				args: []string{"uintptr(unsafe.Pointer(" + name + "))"}})
		case p.Ptr == 2 && !p.Const && p.Base == "void":
			out = append(out, goParam{name: name, typ: "*uintptr", keep: true,
				args: []string{"uintptr(unsafe.Pointer(" + name + "))"}})
		default:
			return nil, bad("a parameter shape genbind does not know; teach internal/cmd/genbind or change the slot")
		}
	}
	return out, nil
}

func emit(h *Header, m *Mirror) ([]byte, error) {
	// The mirror's table must be the header's, slot for slot.
	want := []string{"struct_size", "abi_major", "abi_minor"}
	for _, s := range h.Slots {
		want = append(want, s.Name)
	}
	if strings.Join(want, ",") != strings.Join(m.APIFields, ",") {
		for i := range max(len(want), len(m.APIFields)) {
			w, g := "(none)", "(none)"
			if i < len(want) {
				w = want[i]
			}
			if i < len(m.APIFields) {
				g = m.APIFields[i]
			}
			if w != g {
				return nil, fmt.Errorf("abi.API does not mirror gpurt_api: field %d is %s in the header and %s in abi.API (add or move the field, with its c tag)", i, w, g)
			}
		}
	}
	for _, o := range h.Opaque {
		if !m.Handles[o] {
			return nil, fmt.Errorf("opaque handle %s has no Go type in package abi (a uintptr type with the line comment `// %s*`)", o, o)
		}
	}
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	preamble(&b, "bind")
	pf("import (\n\"fmt\"\n\"runtime\"\n\"unsafe\"\n\n\"github.com/metrale/gpurt/internal/abi\"\n\"github.com/metrale/gpurt/core/internal/ffi\"\n)\n\n")
	pf("// Slot names one function pointer of gpurt_api.\ntype Slot int\n\n")
	pf("// The slots, in the table's order.\nconst (\n")
	for i, s := range h.Slots {
		if i == 0 {
			pf("Slot%s Slot = iota // %s (1.%d)\n", m.SlotField[s.Name], s.Name, s.Minor)
		} else {
			pf("Slot%s // %s (1.%d)\n", m.SlotField[s.Name], s.Name, s.Minor)
		}
	}
	pf("\n// NumSlots counts the slots this core knows (ABI 1.%d).\nNumSlots\n)\n\n", h.Minor)
	pf("var slotInfo = [NumSlots]struct {\nname string\nminor uint32\n}{\n")
	for _, s := range h.Slots {
		pf("Slot%s: {%q, %d},\n", m.SlotField[s.Name], s.Name, s.Minor)
	}
	pf("}\n\n")
	pf("// fn is the slot's function pointer: 0 when the plugin's struct_size\n// does not cover it or the plugin left it NULL.\nfunc (p *Plugin) fn(s Slot) uintptr {\nswitch s {\n")
	for _, s := range h.Slots {
		pf("case Slot%s:\nreturn p.API.%s\n", m.SlotField[s.Name], m.SlotField[s.Name])
	}
	pf("}\nreturn 0\n}\n")
	pf("\n// Offset is the byte offset of the slot in gpurt_api (offsetof), as a\n// graph item of kind GPURT_GRAPH_OP_CALL names it.\nfunc (s Slot) Offset() uint64 {\nvar a abi.API\nswitch s {\n")
	for _, s := range h.Slots {
		pf("case Slot%s:\nreturn uint64(unsafe.Offsetof(a.%s))\n", m.SlotField[s.Name], m.SlotField[s.Name])
	}
	pf("}\nreturn 0\n}\n")
	if err := emitSubmit(&b, h, m); err != nil {
		return nil, err
	}
	for _, s := range h.Slots {
		params, err := goParams(s, m)
		if err != nil {
			return nil, err
		}
		field := m.SlotField[s.Name]
		var cps []string
		for _, p := range s.Params {
			cps = append(cps, p.C())
		}
		cdecl := fmt.Sprintf("%s%s(%s)", retPrefix(s.Ret), s.Name, strings.Join(cps, ", "))
		if len(cps) == 0 {
			cdecl = fmt.Sprintf("%s%s(void)", retPrefix(s.Ret), s.Name)
		}
		var gps, args, keeps []string
		if s.Ret != "void" {
			gps = append(gps, "op string")
		}
		for _, p := range params {
			gps = append(gps, p.name+" "+p.typ)
			args = append(args, p.args...)
			if p.keep {
				keeps = append(keeps, p.name)
			}
		}
		call := ""
		switch n := len(args); {
		case n <= 4 || n == 6:
			call = fmt.Sprintf("ffi.Call%d(%s)", n, strings.Join(append([]string{"fn"}, args...), ", "))
		case n == 5:
			call = fmt.Sprintf("ffi.Call6(%s, 0)", strings.Join(append([]string{"fn"}, args...), ", "))
		default:
			return nil, fmt.Errorf("slot %s (line %d): %d integer/pointer arguments; the header allows at most six", s.Name, s.Line, n)
		}
		// The slot's comment in the header is not copied: an edit of a
		// comment must not make the generated file stale.
		pf("\n// %s calls gpurt_api.%s (ABI 1.%d; its contract is the comment\n// above the slot in abi/gpurt.h):\n//\n//\t%s\n", field, s.Name, s.Minor, cdecl)
		if s.Ret == "void" {
			pf("//\n// A plugin without the slot makes this a no-op (Bind refuses a plugin\n// without a required slot).\n")
			pf("func (p *Plugin) %s(%s) {\nfn := p.API.%s\nif fn == 0 {\nreturn\n}\n%s\n", field, strings.Join(gps, ", "), field, call)
			for _, k := range keeps {
				pf("runtime.KeepAlive(%s)\n", k)
			}
			pf("}\n")
			continue
		}
		if s.Ret != "gpurt_error *" {
			return nil, fmt.Errorf("slot %s (line %d): returns %s; a slot returns gpurt_error * or void", s.Name, s.Line, s.Ret)
		}
		pf("//\n// op names the operation in an error (\"\" means %q). A plugin whose\n// table lacks the slot gives an error wrapping ErrUnsupported.\n", s.Name)
		pf("func (p *Plugin) %s(%s) error {\nfn := p.API.%s\nif fn == 0 {\nreturn p.unsupported(op, Slot%s)\n}\ne := %s\n", field, strings.Join(gps, ", "), field, field, call)
		for _, k := range keeps {
			pf("runtime.KeepAlive(%s)\n", k)
		}
		pf("if e == 0 {\nreturn nil\n}\nreturn p.fail(op, Slot%s, abi.Error(e))\n}\n", field)
	}
	if !bytes.Contains(b.Bytes(), []byte("runtime.KeepAlive")) {
		pf("\nvar _ = runtime.KeepAlive\n")
	}
	return b.Bytes(), nil
}

func retPrefix(r string) string {
	if r == "void" {
		return "void "
	}
	return r
}

// streamOp says how a slot enqueues work on a stream, for Submit: the
// Go expressions of its arguments after rt, or ok false when the slot is
// not a stream operation. A stream operation takes, after the runtime,
// a stream and at most one other handle and one argument struct (in any
// order), or only an argument struct with a stream field (copy, memset).
func streamOp(s Slot, h *Header, m *Mirror) (args []string, ok bool) {
	ps := s.Params
	if len(ps) < 2 || ps[0].Base != "gpurt_runtime" || ps[0].Ptr != 1 {
		return nil, false
	}
	stream, handle, st := false, false, ""
	for _, p := range ps[1:] {
		switch {
		case p.Base == "gpurt_stream" && p.Ptr == 1 && !stream:
			stream = true
			args = append(args, "s")
		case m.Handles[p.Base] && p.Ptr == 1 && !handle:
			handle = true
			args = append(args, "abi."+m.Types[p.Base]+"(obj)")
		case p.Ptr == 1 && p.Const && st == "" && m.Types[p.Base] != "" && !m.Handles[p.Base]:
			st = p.Base
			args = append(args, "(*abi."+m.Types[p.Base]+")(args)")
		default:
			return nil, false
		}
	}
	if !stream && !(st != "" && !handle && h.StreamStructs[st]) {
		return nil, false
	}
	// A stream alone (synchronize, query, destroy) enqueues nothing.
	if stream && !handle && st == "" {
		return nil, false
	}
	return args, true
}

// emitSubmit writes Plugin.Submit and IsStreamOp: one call of any stream
// operation by slot, for core's call-or-record funnel.
func emitSubmit(b *bytes.Buffer, h *Header, m *Mirror) error {
	pf := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var ops []Slot
	for _, s := range h.Slots {
		if _, ok := streamOp(s, h, m); ok {
			ops = append(ops, s)
		}
	}
	pf("\n// IsStreamOp reports whether the slot enqueues work on a stream: it takes,\n")
	pf("// after the runtime, a stream and at most one other handle and one\n// argument struct, or an argument struct with a stream field. Submit\n// calls exactly these.\n")
	pf("func (s Slot) IsStreamOp() bool {\nswitch s {\ncase ")
	for i, s := range ops {
		if i > 0 {
			pf(", ")
		}
		pf("Slot%s", m.SlotField[s.Name])
	}
	pf(":\nreturn true\n}\nreturn false\n}\n")
	pf("\n// Submit calls the stream operation slot (IsStreamOp) with the stream s,\n")
	pf("// the other handle obj (0 when the slot takes none) and the argument\n// struct args (of the slot's own type; nil when it takes none). The\n")
	pf("// core's call-or-record funnel calls it for every eager stream\n// operation. Any other slot is an internal error. Allocates nothing.\n")
	pf("func (p *Plugin) Submit(op string, slot Slot, rt abi.Runtime, s abi.Stream, obj uintptr, args unsafe.Pointer) error {\nswitch slot {\n")
	for _, s := range ops {
		a, _ := streamOp(s, h, m)
		pf("case Slot%s:\nreturn p.%s(op, rt, %s)\n", m.SlotField[s.Name], m.SlotField[s.Name], strings.Join(a, ", "))
	}
	pf("}\nreturn NewError(abi.ErrInternal, 0, fmt.Sprintf(\"slot %%d is not a stream operation\", slot), op, p.Backend)\n}\n")
	return nil
}

// ErrorCode is one enumerator of the header's error-code enum.
type ErrorCode struct {
	Enum  string // GPURT_ERR_OUT_OF_MEMORY
	Value int
}

// GoName is the Go constant of the code: OK, ErrOutOfMemory.
func (e ErrorCode) GoName() string {
	if e.Enum == "GPURT_OK" {
		return "OK"
	}
	n := "Err"
	for _, w := range strings.Split(strings.TrimPrefix(e.Enum, "GPURT_ERR_"), "_") {
		if w == "ABI" {
			n += w
			continue
		}
		n += w[:1] + strings.ToLower(w[1:])
	}
	return n
}

// Name is the code's name in messages: "out of memory", "abi mismatch".
func (e ErrorCode) Name() string {
	if e.Enum == "GPURT_OK" {
		return "ok"
	}
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Enum, "GPURT_ERR_"), "_", " "))
}

// emitErrors writes internal/abi/zerrors.go: the error codes and their names, the
// one error vocabulary of the Go side (core, bind and the loader name
// codes through it).
func emitErrors(h *Header, m *Mirror) ([]byte, error) {
	if len(h.Errors) < 2 || h.Errors[0].Enum != "GPURT_OK" || h.Errors[0].Value != 0 {
		return nil, fmt.Errorf("no error-code enum (GPURT_OK = 0, then GPURT_ERR_* = N)")
	}
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	preamble(&b, "abi")
	codes := make([]goConst, len(h.Errors))
	for i, e := range h.Errors {
		codes[i] = goConst{e.GoName(), strconv.Itoa(e.Value), e.Enum}
	}
	pf("// Error codes (GPURT_OK, GPURT_ERR_*), from the header's error-code enum.\n")
	constBlock(pf, codes, true)
	pf("\n")
	pf("// ErrorCodeInfo names one error code.\ntype ErrorCodeInfo struct {\nCode int32\nEnum string // the header's enumerator\nName string // in messages: \"out of memory\"\n}\n\n")
	pf("// ErrorCodes are the header's error codes after GPURT_OK, in order: the\n// one list the Go side's error vocabulary (core.ErrorCode, the bind and\n// loader messages) is made from.\nvar ErrorCodes = [...]ErrorCodeInfo{\n")
	for _, e := range h.Errors[1:] {
		pf("{%s, %q, %q},\n", e.GoName(), e.Enum, e.Name())
	}
	pf("}\n\n")
	pf("// ErrorName is the name of code c in messages (\"out of memory\"; %q\n// for %s), or \"\" for a code the header does not define.\n", h.Errors[0].Name(), h.Errors[0].GoName())
	pf("func ErrorName(c int32) string {\nif c == %s {\nreturn %q\n}\n", h.Errors[0].GoName(), h.Errors[0].Name())
	pf("for _, e := range ErrorCodes {\nif e.Code == c {\nreturn e.Name\n}\n}\nreturn \"\"\n}\n")
	return b.Bytes(), nil
}

// emitMirrored writes internal/abi/zmirrored_test.go: every header struct paired
// with its Go mirror, the list TestLayoutMatchesHeader checks (a new
// struct is checked without a hand-written entry).
func emitMirrored(h *Header, m *Mirror) ([]byte, error) {
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	preamble(&b, "abi")
	pf("// mirrored pairs every struct of the header with its Go mirror, in the\n// header's order.\nvar mirrored = []struct {\nc   string\ngo_ any\n}{\n")
	for _, c := range h.Structs {
		g, err := m.mirrorOf(c)
		if err != nil {
			return nil, err
		}
		pf("{%q, %s{}},\n", c, g)
	}
	pf("}\n\n")
	pf("// constants pairs every integer constant of the header with its Go\n// constant (TestLayoutMatchesHeader compares the values).\nvar constants = map[string]int64{\n")
	for _, e := range h.Errors {
		pf("%q: %s,\n", e.Enum, e.GoName())
	}
	for _, g := range h.Consts {
		for _, c := range g.Items {
			if !strings.HasPrefix(c.Value, "\"") {
				pf("%q: %s,\n", c.C, GoConstName(c.C))
			}
		}
	}
	pf("}\n")
	return b.Bytes(), nil
}

var (
	reEnumOpen   = regexp.MustCompile(`^enum \{$`)
	reEnumerator = regexp.MustCompile(`^(GPURT_[A-Z0-9_]+) = (-?\d+),?$`)
	reDefineInt  = regexp.MustCompile(`^#define (GPURT_[A-Z0-9_]+) (\d+)u?$`)
	reDefineStr  = regexp.MustCompile(`^#define (GPURT_[A-Z0-9_]+) ("[^"\\]*")$`)
	reDefineAny  = regexp.MustCompile(`^#define (GPURT_[A-Z0-9_]+)(\(| |$)`)
	reLineDoc    = regexp.MustCompile(`^/\* (.*?) \*/$`)
	reCComment   = regexp.MustCompile(`(?s)/\*.*?\*/`)
)

// notConsts are the header's object-like macros that are not ABI
// constants.
var notConsts = map[string]bool{"GPURT_H_": true, "GPURT_EXPORT": true}

// parseConsts reads every enumerator and object-like #define of the
// header but the error codes (zerrors.go has those), grouped by enum or
// run of #defines, each group with the one-line comment above it. An
// enumerator without an explicit decimal value, or a #define whose value
// is not a decimal integer (an optional u suffix) or a plain string, is
// an error naming it: the generated Go must have the header's value.
func parseConsts(src string) ([]ConstGroup, error) {
	lines := strings.Split(src, "\n")
	var groups []ConstGroup
	doc := ""
	inDefines := false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case l == "":
			inDefines = false
			doc = ""
		case reLineDoc.MatchString(l):
			doc = reLineDoc.FindStringSubmatch(l)[1]
			if strings.HasPrefix(doc, "---") {
				doc = ""
			}
			inDefines = false
		case reEnumOpen.MatchString(l):
			g := ConstGroup{Doc: doc, Enum: true}
			for i++; i < len(lines); i++ {
				e := strings.TrimSpace(lines[i])
				if e == "};" {
					break
				}
				// Drop a trailing comment (which may go on over lines).
				if j := strings.Index(e, "/*"); j >= 0 {
					rest := strings.Join(lines[i:], "\n")
					k := strings.Index(rest, "*/")
					if k < 0 {
						return nil, fmt.Errorf("line %d: unterminated comment", i+1)
					}
					i += strings.Count(rest[:k], "\n")
					e = strings.TrimSpace(e[:j])
				}
				if e == "" {
					continue
				}
				m := reEnumerator.FindStringSubmatch(e)
				if m == nil {
					return nil, fmt.Errorf("line %d: enumerator %q: write NAME = <decimal value>, (genbind writes the value into Go)", i+1, e)
				}
				g.Items = append(g.Items, Const{C: m[1], Value: m[2]})
			}
			if len(g.Items) > 0 && (g.Items[0].C == "GPURT_OK" || strings.HasPrefix(g.Items[0].C, "GPURT_ERR_")) {
				g.Items = nil // the error codes: zerrors.go
			}
			if len(g.Items) > 0 {
				groups = append(groups, g)
			}
			doc, inDefines = "", false
		case strings.HasPrefix(l, "#define "):
			code := strings.TrimSpace(reCComment.ReplaceAllString(l, ""))
			m := reDefineAny.FindStringSubmatch(code)
			if m == nil || m[2] == "(" || notConsts[m[1]] {
				continue
			}
			var c Const
			if mi := reDefineInt.FindStringSubmatch(code); mi != nil {
				c = Const{C: mi[1], Value: mi[2]}
			} else if ms := reDefineStr.FindStringSubmatch(code); ms != nil {
				c = Const{C: ms[1], Value: ms[2]}
			} else {
				return nil, fmt.Errorf("line %d: #define %s: the value must be a decimal integer (u suffix allowed) or a plain string", i+1, m[1])
			}
			if !inDefines {
				groups = append(groups, ConstGroup{Doc: doc})
				inDefines = true
			}
			g := &groups[len(groups)-1]
			g.Items = append(g.Items, c)
			doc = ""
		default:
			doc, inDefines = "", false
		}
	}
	return groups, nil
}

// constInitialisms are the words GoConstName keeps in capitals (a word
// with a digit is kept as it is too: F32, FP8, E4M3).
var constInitialisms = map[string]bool{"OK": true, "ID": true, "KV": true, "NHD": true, "HND": true, "PTX": true, "ABI": true}

// constNames are the constants whose Go names are not made by the rule.
var constNames = map[string]string{
	"GPURT_ABI_MAJOR": "Major", "GPURT_ABI_MINOR": "Minor", "GPURT_ENTRY_SYMBOL": "EntrySymbol",
}

// GoConstName is the Go name of header constant c: GPURT_ dropped, each
// word capitalised (initialisms and words with digits kept, DTYPE as
// DType): GPURT_DTYPE_FP8_E4M3 is DTypeFP8E4M3, GPURT_KV_LAYOUT_NHD
// KVLayoutNHD, GPURT_COMM_ID_BYTES CommIDBytes.
func GoConstName(c string) string {
	if n, ok := constNames[c]; ok {
		return n
	}
	var n strings.Builder
	for _, w := range strings.Split(strings.TrimPrefix(c, "GPURT_"), "_") {
		switch {
		case w == "DTYPE":
			n.WriteString("DType")
		case constInitialisms[w] || strings.ContainsAny(w, "0123456789"):
			n.WriteString(w)
		default:
			n.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
	}
	return n.String()
}

// emitConsts writes internal/abi/zconsts.go: the header's constants (but
// the error codes), group by group, each named by GoConstName.
func emitConsts(h *Header, m *Mirror) ([]byte, error) {
	var b bytes.Buffer
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	preamble(&b, "abi")
	seen := map[string]string{}
	for _, g := range h.Consts {
		if g.Doc != "" {
			pf("// %s\n", g.Doc)
		}
		items := make([]goConst, len(g.Items))
		for i, c := range g.Items {
			n := GoConstName(c.C)
			if prev, dup := seen[n]; dup {
				return nil, fmt.Errorf("%s and %s both make the Go name %s (add one to constNames)", prev, c.C, n)
			}
			seen[n] = c.C
			items[i] = goConst{n, c.Value, c.C}
		}
		constBlock(pf, items, g.Enum)
		pf("\n")
	}
	return b.Bytes(), nil
}

// goConst is one Go constant to write: its name, its value (a decimal
// integer or a Go-quoted string) and the header's name of it.
type goConst struct{ name, value, c string }

// constBlock writes one const block. An enum whose values count up by
// one from the first (two or more enumerators) is written as Go writes
// an enumeration: a comment naming the header's first and last with
// their values, the first "= iota" (plus its value when not 0), the
// others by name alone, in the header's order. Any other block writes
// each value, with the header's name.
func constBlock(pf func(string, ...any), items []goConst, enum bool) {
	first, counts := 0, enum && len(items) > 1
	if counts {
		var err error
		first, err = strconv.Atoi(items[0].value)
		counts = err == nil
		for i, c := range items {
			counts = counts && c.value == strconv.Itoa(first+i)
		}
	}
	if counts {
		last := items[len(items)-1]
		pf("// %s (%d) to %s (%s), in the header's order.\n", items[0].c, first, last.c, last.value)
	}
	pf("const (\n")
	for i, c := range items {
		switch {
		case !counts:
			pf("%s = %s // %s\n", c.name, c.value, c.c)
		case i > 0:
			pf("%s\n", c.name)
		case first == 0:
			pf("%s = iota\n", c.name)
		default:
			pf("%s = iota + %d\n", c.name, first)
		}
	}
	pf(")\n")
}

// preamble writes a generated file's first lines: the command, the
// "Code generated" line, the licence and the package clause.
func preamble(b *bytes.Buffer, pkg string) {
	fmt.Fprintf(b, "// %s\n// Code generated by the command above from abi/gpurt.h; DO NOT EDIT.\n\n", Command)
	fmt.Fprintf(b, "// SPDX-License-Identifier: Apache-2.0\n\npackage %s\n\n", pkg)
}

// mirrorOf is the Go type mirroring header struct c, or an error saying
// how to add one.
func (m *Mirror) mirrorOf(c string) (string, error) {
	if g, ok := m.Types[c]; ok {
		return g, nil
	}
	return "", fmt.Errorf("struct %s has no Go name (genbind names every struct of the header)", c)
}
