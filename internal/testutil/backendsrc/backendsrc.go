// SPDX-License-Identifier: Apache-2.0

// Package backendsrc holds, by reading a plugin's source, what can be
// checked of a backend of csrc's engine on a machine that cannot build or
// run it (Metal on Linux, CUDA without a GPU): that it is only a backend
// (no gpurt_* handle, api table, struct_size or engine helper in its
// files), and that its gp_backend table sets every entry its ABI minor
// promises, names only members of gp_backend and only functions of its
// own sources. plugins/cuda and plugins/metal test themselves with it;
// plugins/mock's test of every plugin's file layering reads the sources
// with it.
package backendsrc

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	reTok = regexp.MustCompile(`[A-Za-z_]\w*`)
	// Comments and string literals say names without using them.
	reComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"`)
	reNeed    = regexp.MustCompile(`NEED\((\w+),\s*(\d+)\)`)
	// A GP_ZCALLS entry: X(name, NAME, minor, idx, atype, obj).
	reZCall = regexp.MustCompile(`(?m)^\s*X\((\w+), [A-Z0-9_]+, (\d+), \d+, \w+, [01]\)`)
	reEntry = regexp.MustCompile(`(?m)^\s*\.(\w+)\s*=\s*([A-Za-z_]\w*)\s*,`)
	// A member of gp_backend: `type (*name)(` or `type name;`.
	reMember = regexp.MustCompile(`\(\*(\w+)\)\(|\b(\w+);`)
	reCDef   = regexp.MustCompile(`(?m)^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{`)
	reMacro  = regexp.MustCompile(`(?m)^#define\s+(\w+)\(`)
	reCall   = regexp.MustCompile(`(?m)^\s*(\w+)\(([^()]*)\)`)
)

// Blank replaces text's comments and string literals with a space.
func Blank(text string) string { return reComment.ReplaceAllString(text, " ") }

// Source is the file at path with its comments and string literals blanked.
func Source(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return Blank(string(b))
}

// Names lists the identifiers of text, in order, repeats included.
func Names(text string) []string { return reTok.FindAllString(text, -1) }

// Functions lists the C functions text defines (a definition starts at
// column 0: `type name(...) {`); with external, only those that are not
// static.
func Functions(text string, external bool) []string {
	var out []string
	for _, m := range reCDef.FindAllStringSubmatchIndex(text, -1) {
		if external && strings.HasPrefix(text[m[0]:m[1]], "static") {
			continue
		}
		out = append(out, text[m[2]:m[3]])
	}
	return out
}

// Forbidden reports every token of text that names the engine's side of
// the ABI, with why.
func Forbidden(text string) []string {
	forbidden := map[string]string{
		"gpurt_api": "the ABI table (the engine's)", "struct_size": "a caller's struct (the engine reads it)",
		"gp_read_struct": "a caller's struct", "gp_write_struct": "a caller's struct", "gp_check_out": "a caller's struct",
		"gp_table_insert": "a handle table", "gp_table_lookup": "a handle table", "gp_table_remove": "a handle table",
		"gp_table_take": "a handle table", "gp_handle_error": "a handle",
		"gp_negotiate": "negotiation (gp_engine_negotiate is the entry)",
	}
	for _, h := range []string{"runtime", "buffer", "host_buffer", "stream", "event", "module", "kernel",
		"gemm_plan", "graph", "attention", "comm"} {
		forbidden["gpurt_"+h] = "a gpurt_* handle"
	}
	var out []string
	for _, tok := range Names(text) {
		if why, ok := forbidden[tok]; ok {
			out = append(out, tok+": "+why)
		}
	}
	return out
}

// CheckOnlyABackend fails for every file of src matching patterns that
// names the engine's side of the ABI (Forbidden), or, but for entry (the
// file of the table), includes gp_engine.h.
func CheckOnlyABackend(t *testing.T, src, entry string, patterns ...string) {
	t.Helper()
	var files []string
	for _, pat := range patterns {
		m, err := filepath.Glob(filepath.Join(src, pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	for _, f := range files {
		for _, bad := range Forbidden(Source(t, f)) {
			t.Errorf("%s uses %s; a backend sees resolved operands only (csrc/gp_backend.h)", f, bad)
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if filepath.Base(f) != entry {
			require.NotContains(t, string(b), `#include "gp_engine.h"`, "%s includes the engine's header", f)
		}
	}
}

// Table returns the designated initializers (field -> value) of the
// gp_backend table that starts at decl (e.g. "gp_backend cu_backend = {")
// in file.
func Table(t *testing.T, file, decl string) map[string]string {
	t.Helper()
	text := Source(t, file)
	name := filepath.Base(file)
	start := strings.Index(text, decl)
	require.GreaterOrEqual(t, start, 0, "%s has no `%s` table", name, decl)
	end := strings.Index(text[start:], "};")
	require.Greater(t, end, 0)
	table := map[string]string{}
	for _, m := range reEntry.FindAllStringSubmatch(text[start:start+end], -1) {
		table[m[1]] = m[2]
	}
	require.NotEmpty(t, table)
	return table
}

// CheckTable holds that table (from the file named file, in the sources
// matching srcGlob) declares abi_minor = GPURT_ABI_MINOR; so that it sets
// every entry csrc/gp_backend.c's gp_backend_needs lists and every run of
// csrc/gp_zslots.h's GP_ZCALLS (gp_backend_check refuses it at negotiation
// otherwise); that every field it sets is a member of gp_backend; and that
// every value with one of prefixes names a function defined in the
// sources. csrc is the path of the csrc folder.
func CheckTable(t *testing.T, table map[string]string, file, csrc, srcGlob string, prefixes ...string) {
	t.Helper()
	require.Equal(t, "GPURT_ABI_MINOR", table["abi_minor"], "%s's table must declare abi_minor = GPURT_ABI_MINOR", file)

	needs := reNeed.FindAllStringSubmatch(Source(t, filepath.Join(csrc, "gp_backend.c")), -1)
	require.NotEmpty(t, needs, "csrc/gp_backend.c lists no NEED(entry, minor)")
	// The runs of the recordable ops are entries of gp_backend, promised
	// from their slot's minor, through csrc/gp_zslots.h's GP_ZCALLS.
	calls := reZCall.FindAllStringSubmatch(Source(t, filepath.Join(csrc, "gp_zslots.h")), -1)
	require.NotEmpty(t, calls, "csrc/gp_zslots.h lists no GP_ZCALLS entry")
	needs = append(needs, calls...)
	for _, n := range needs {
		v, ok := table[n[1]]
		require.Truef(t, ok && v != "NULL", "%s's table leaves %s unset, which ABI 1.%s promises", file, n[1], n[2])
	}

	hdr := Source(t, filepath.Join(csrc, "gp_backend.h"))
	start := strings.Index(hdr, "typedef struct gp_backend {")
	end := strings.Index(hdr, "} gp_backend;")
	require.True(t, start >= 0 && end > start, "csrc/gp_backend.h has no gp_backend struct")
	members := map[string]bool{}
	for _, m := range reMember.FindAllStringSubmatch(hdr[start:end], -1) {
		members[m[1]+m[2]] = true
	}
	for _, c := range calls {
		members[c[1]] = true
	}
	defined := map[string]bool{}
	files, err := filepath.Glob(srcGlob)
	require.NoError(t, err)
	for _, f := range files {
		for _, name := range Functions(Source(t, f), false) {
			defined[name] = true
		}
	}
	for field, v := range table {
		require.Truef(t, members[field], "%s sets .%s, which gp_backend does not have", file, field)
		for _, p := range prefixes {
			if strings.HasPrefix(v, p) {
				require.Truef(t, defined[v], "%s's .%s = %s names no function of %s", file, field, v, filepath.Dir(srcGlob))
			}
		}
	}
}

// Expand collects the names text defines (kernel names, a built-in
// table's rows): plain ones, outside function-like macros (plain's first
// group), and, inside each `#define M(...)` macro (with its continuation
// lines), prefixes (prefix's first group) completed by the argument at
// index arg of every invocation `M(...)` at the start of a line.
func Expand(text string, plain, prefix *regexp.Regexp, arg int) map[string]bool {
	out := map[string]bool{}
	lines := strings.Split(text, "\n")
	macros := map[string][]string{}
	for i := 0; i < len(lines); i++ {
		m := reMacro.FindStringSubmatch(lines[i])
		if m == nil {
			for _, k := range plain.FindAllStringSubmatch(lines[i], -1) {
				out[k[1]] = true
			}
			continue
		}
		for ; i < len(lines); i++ {
			for _, k := range prefix.FindAllStringSubmatch(lines[i], -1) {
				macros[m[1]] = append(macros[m[1]], k[1])
			}
			if !strings.HasSuffix(strings.TrimSpace(lines[i]), `\`) {
				break
			}
		}
	}
	for _, c := range reCall.FindAllStringSubmatch(text, -1) {
		pre, ok := macros[c[1]]
		if !ok {
			continue
		}
		args := strings.Split(c[2], ",")
		if arg >= len(args) {
			continue
		}
		sfx := strings.Trim(strings.TrimSpace(args[arg]), `"`)
		for _, p := range pre {
			out[p+sfx] = true
		}
	}
	return out
}
