// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// api wraps slot declarations into a minimal header.
func api(minor, body string) string {
	return "#define GPURT_ABI_MINOR " + minor + "\n" +
		"typedef struct gpurt_runtime gpurt_runtime;\n" +
		"typedef struct gpurt_api {\n  uint64_t struct_size;\n  uint32_t abi_major;\n  uint32_t abi_minor;\n" +
		body + "\n} gpurt_api;\n"
}

func TestParseHeaderShapes(t *testing.T) {
	h, err := ParseHeader(api("1", `
  /* ---- 1.0 ---- */
  /* Doc of a. */
  gpurt_error *(*a)(gpurt_runtime *rt,
                    uint32_t device, gpurt_runtime **out);
  void (*b)(void);
  /* ---- 1.1 ---- */
  gpurt_error *(*c)(const char *name, uint64_t name_len);`))
	require.NoError(t, err)
	require.Len(t, h.Slots, 3)
	assert.Equal(t, Slot{Name: "a", Minor: 0, Ret: "gpurt_error *", Doc: "Doc of a.", Line: 10,
		Params: []Param{{Base: "gpurt_runtime", Ptr: 1, Name: "rt"}, {Base: "uint32_t", Name: "device"}, {Base: "gpurt_runtime", Ptr: 2, Name: "out"}}}, h.Slots[0])
	assert.Equal(t, "void", h.Slots[1].Ret)
	assert.Empty(t, h.Slots[1].Params)
	assert.Equal(t, 1, h.Slots[2].Minor)
	assert.Equal(t, []string{"gpurt_runtime"}, h.Opaque)
}

func TestParseHeaderRefusesUnknownShapes(t *testing.T) {
	cases := []struct{ name, minor, body, want string }{
		{"int return", "0", "/* ---- 1.0 ---- */ int (*a)(void);", "not a slot of a shape"},
		{"a field after the header", "0", "/* ---- 1.0 ---- */ uint32_t x;", "not a slot of a shape"},
		{"a field before 1.0", "0", "uint32_t x; /* ---- 1.0 ---- */", "before the \"---- 1.0 ----\" block"},
		{"blocks out of order", "1", "/* ---- 1.1 ---- */ void (*a)(void); /* ---- 1.0 ---- */ void (*b)(void);", "must be in version order"},
		{"minor differs", "2", "/* ---- 1.0 ---- */ void (*a)(void);", "GPURT_ABI_MINOR is 2"},
		{"bad block marker", "0", "/* ---- 1.0 ---- */ /* ---- two ---- */ void (*a)(void);", "block marker"},
		{"line comment", "0", "/* ---- 1.0 ---- */ // no\n void (*a)(void);", "use /* */ comments"},
		{"empty parameter list", "0", "/* ---- 1.0 ---- */ void (*a)();", "write (void)"},
		{"array parameter", "0", "/* ---- 1.0 ---- */ void (*a)(uint32_t x[4]);", "is not of the shape"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseHeader(api(c.minor, c.body))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestGoParamsRefusesUnknownTypes(t *testing.T) {
	m := &Mirror{Types: map[string]string{"gpurt_runtime": "Runtime"}, Handles: map[string]bool{"gpurt_runtime": true}}
	cases := []struct{ decl, want string }{
		{"gpurt_error *(*a)(double alpha)", "float register"},
		{"gpurt_error *(*a)(const char *name)", "must be followed by `uint64_t name_len`"},
		{"gpurt_error *(*a)(gpurt_unknown_args *args)", "no struct gpurt_unknown_args in the header"},
		{"gpurt_error *(*a)(size_t n)", "does not know by value"},
		{"gpurt_error *(*a)(float *x)", "a parameter shape genbind does not know"},
	}
	for _, c := range cases {
		t.Run(c.decl, func(t *testing.T) {
			s, err := parseSlot(c.decl)
			require.NoError(t, err)
			_, err = goParams(s, m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	s, err := parseSlot("gpurt_error *(*a)(gpurt_runtime *rt, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6)")
	require.NoError(t, err)
	_, err = emit(&Header{Slots: []Slot{s}}, &Mirror{Types: m.Types, Handles: m.Handles,
		SlotField: map[string]string{"a": "A"}, APIFields: []string{"struct_size", "abi_major", "abi_minor", "a"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at most six")
}

// TestGeneratedFilesAreFresh is gen-check as a test: the checked-in
// files are what the generator makes from the header.
func TestGeneratedFilesAreFresh(t *testing.T) {
	require.NoError(t, chdirRoot())
	files, err := generate("abi/gpurt.h")
	require.NoError(t, err)
	for i, o := range outputs {
		path := o.path
		old, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, string(old) == string(files[i]), "%s is stale: run `make generate`", path)
		if strings.HasSuffix(path, ".h") {
			assert.True(t, strings.HasPrefix(string(files[i]), "/* SPDX-License-Identifier: Apache-2.0 */\n/* "+Command+"\n * Code generated "), "line 2 is the command")
			continue
		}
		assert.True(t, strings.HasPrefix(string(files[i]), "// "+Command+"\n// Code generated "), "line 1 is the command")
	}
}

// cslotsHeader is a small header with one slot of each shape the C lists
// tell apart.
func cslotsHeader(extra string) string {
	return `#define GPURT_ABI_MINOR 2
typedef struct gpurt_runtime gpurt_runtime;
typedef struct gpurt_stream gpurt_stream;
typedef struct gpurt_event gpurt_event;
typedef struct gpurt_attention gpurt_attention;
typedef struct gpurt_foo_args { uint64_t struct_size; uint32_t n; } gpurt_foo_args;
typedef struct gpurt_copy_args {
  uint64_t struct_size;
  gpurt_stream *stream;
} gpurt_copy_args;
typedef struct gpurt_attention_plan_args { uint64_t struct_size; } gpurt_attention_plan_args;
typedef struct gpurt_attention_run_args { uint64_t struct_size; } gpurt_attention_run_args;
typedef struct gpurt_api {
  uint64_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  /* ---- 1.0 ---- */
  gpurt_error *(*runtime_destroy)(gpurt_runtime *rt);
  gpurt_error *(*copy)(gpurt_runtime *rt, const gpurt_copy_args *args);
  gpurt_error *(*event_record)(gpurt_runtime *rt, gpurt_event *e, gpurt_stream *s);
  gpurt_error *(*stream_synchronize)(gpurt_runtime *rt, gpurt_stream *s);
  /* ---- 1.1 ---- */
  gpurt_error *(*attention_plan)(gpurt_runtime *rt, gpurt_stream *s, gpurt_attention *a,
                                 const gpurt_attention_plan_args *args);
  gpurt_error *(*attention_run)(gpurt_runtime *rt, gpurt_stream *s, gpurt_attention *a,
                                const gpurt_attention_run_args *args);
  /* ---- 1.2 ---- */
  gpurt_error *(*foo)(gpurt_runtime *rt, gpurt_stream *s, const gpurt_foo_args *args);
` + extra + `
} gpurt_api;
`
}

// TestCSlots: GP_ZSLOTS has every slot with its minor and prototype;
// GP_ZCALLS the stream operations a graph records as CALL items (a new
// one, foo, among them), not the item kinds (copy), not a stream and a
// handle alone (event_record), not notCalls (attention_plan).
func TestCSlots(t *testing.T) {
	h, err := ParseHeader(cslotsHeader(""))
	require.NoError(t, err)
	src, err := emitCSlots(h, mirrorFromHeader(h))
	require.NoError(t, err)
	out := string(src)
	for _, want := range []string{
		"  X(runtime_destroy, 0, gpurt_error *, (gpurt_runtime *rt)) \\\n",
		"  X(copy, 0, gpurt_error *, (gpurt_runtime *rt, const gpurt_copy_args *args)) \\\n",
		"  X(foo, 2, gpurt_error *, (gpurt_runtime *rt, gpurt_stream *s, const gpurt_foo_args *args))\n",
		"#define GP_ZCALLS(X) \\\n" +
			"  X(attention_run, ATTENTION_RUN, 1, 0, gpurt_attention_run_args, 1) \\\n" +
			"  X(foo, FOO, 2, 1, gpurt_foo_args, 0)\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, out, " *   attention_plan: plans on the host between replays")

	t.Run("a stream inside a new struct", func(t *testing.T) {
		h, err := ParseHeader(cslotsHeader("  gpurt_error *(*bar)(gpurt_runtime *rt, const gpurt_copy_args *args);"))
		require.NoError(t, err)
		_, err = emitCSlots(h, mirrorFromHeader(h))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "slot bar enqueues with the stream inside gpurt_copy_args")
	})
}

func TestErrorVocabulary(t *testing.T) {
	h, err := ParseHeader(api("0", "/* ---- 1.0 ---- */ void (*a)(void);") + `
enum {
  GPURT_OK = 0,
  GPURT_ERR_OUT_OF_MEMORY = 4, /* device or pinned host memory */
  GPURT_ERR_ABI_MISMATCH = 11,
  GPURT_ERR_NEW_THING = 14
};`)
	require.NoError(t, err)
	require.Len(t, h.Errors, 4)
	tests := []struct{ enum, goName, name string }{
		{"GPURT_OK", "OK", "ok"},
		{"GPURT_ERR_OUT_OF_MEMORY", "ErrOutOfMemory", "out of memory"},
		{"GPURT_ERR_ABI_MISMATCH", "ErrABIMismatch", "abi mismatch"},
		{"GPURT_ERR_NEW_THING", "ErrNewThing", "new thing"},
	}
	for i, tc := range tests {
		t.Run(tc.enum, func(t *testing.T) {
			assert.Equal(t, tc.enum, h.Errors[i].Enum)
			assert.Equal(t, tc.goName, h.Errors[i].GoName())
			assert.Equal(t, tc.name, h.Errors[i].Name())
		})
	}
	src, err := emitErrors(h, nil)
	require.NoError(t, err)
	// A new code of the header is in the generated vocabulary, by itself.
	assert.Contains(t, string(src), `{ErrNewThing, "GPURT_ERR_NEW_THING", "new thing"}`)
	// Codes that do not count up by one keep their values.
	assert.Contains(t, string(src), "ErrNewThing = 14 // GPURT_ERR_NEW_THING\n")
	assert.NotContains(t, string(src), "iota")
	_, err = emitErrors(&Header{}, nil)
	require.ErrorContains(t, err, "no error-code enum")
}

// TestConstants: every enumerator and #define of the header becomes a Go
// constant named by the rule, grouped with its comment; error codes are
// left to zerrors.go; a value the generator cannot copy is an error.
func TestConstants(t *testing.T) {
	h, err := ParseHeader(api("0", "/* ---- 1.0 ---- */ void (*a)(void);") + `
#define GPURT_ABI_MAJOR 1
#define GPURT_ENTRY_SYMBOL "gpurt_plugin_negotiate"
#define GPURT_EXPORT __attribute__((visibility("default")))
#define GPURT_API_HAS(api, field) ((api)->field != 0)
enum {
  GPURT_OK = 0,
  GPURT_ERR_OUT_OF_MEMORY = 4
};

/* Element types. */
enum {
  GPURT_DTYPE_FP8_E4M3 = 7, /* a comment */
  GPURT_NEW_THING = 8       /* a comment that goes
                               on over a line */
};

/* Device capability flags. */
#define GPURT_DEVICE_BF16 2u
#define GPURT_COMM_ID_BYTES 128 /* bytes */

/* Why a probe says what it says. */
enum {
  GPURT_PROBE_OK = 0,
  GPURT_PROBE_NO_DEVICE = 1
};

/* Bits. */
enum {
  GPURT_BIT_A = 1,
  GPURT_BIT_B = 2,
  GPURT_BIT_C = 4
};

/* Defines that count. */
#define GPURT_COUNT_ONE 1
#define GPURT_COUNT_TWO 2
`)
	require.NoError(t, err)
	src, err := emitConsts(h, nil)
	require.NoError(t, err)
	text := string(src)
	for _, want := range []string{
		"Major = 1 // GPURT_ABI_MAJOR",
		`EntrySymbol = "gpurt_plugin_negotiate" // GPURT_ENTRY_SYMBOL`,
		// An enum counting up by one: iota, its ends named with their values.
		"// Element types.\n// GPURT_DTYPE_FP8_E4M3 (7) to GPURT_NEW_THING (8), in the header's order.\nconst (\nDTypeFP8E4M3 = iota + 7\nNewThing\n)",
		"// Why a probe says what it says.\n// GPURT_PROBE_OK (0) to GPURT_PROBE_NO_DEVICE (1), in the header's order.\nconst (\nProbeOK = iota\nProbeNoDevice\n)",
		// An enum with gaps, and #defines even when they count: every value.
		"// Bits.\nconst (\nBitA = 1 // GPURT_BIT_A\nBitB = 2 // GPURT_BIT_B\nBitC = 4 // GPURT_BIT_C\n)",
		"// Defines that count.\nconst (\nCountOne = 1 // GPURT_COUNT_ONE\nCountTwo = 2 // GPURT_COUNT_TWO\n)",
		"// Device capability flags.\nconst (\nDeviceBF16 = 2 // GPURT_DEVICE_BF16\nCommIDBytes = 128 // GPURT_COMM_ID_BYTES\n)",
	} {
		assert.Contains(t, text, want)
	}
	for _, not := range []string{"GPURT_OK", "GPURT_ERR_", "GPURT_EXPORT", "GPURT_API_HAS"} {
		assert.NotContains(t, text, not)
	}
	for c, g := range map[string]string{"GPURT_KV_LAYOUT_NHD": "KVLayoutNHD", "GPURT_COMPUTE_F32_TF32": "ComputeF32TF32",
		"GPURT_MODULE_METAL_SOURCE": "ModuleMetalSource", "GPURT_PROBE_OK": "ProbeOK", "GPURT_ABI_MINOR": "Minor"} {
		assert.Equal(t, g, GoConstName(c))
	}
	for _, bad := range []string{"enum {\n  GPURT_X_A,\n  GPURT_X_B\n};\n", "#define GPURT_X (1u << 3)\n", "enum {\n  GPURT_X_A = 0x10\n};\n"} {
		_, err := ParseHeader(api("0", "/* ---- 1.0 ---- */ void (*a)(void);") + bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "GPURT_X", bad)
	}
	h.Consts = append(h.Consts, ConstGroup{Items: []Const{{C: "GPURT_NEW_THING", Value: "9"}}})
	_, err = emitConsts(h, nil)
	require.ErrorContains(t, err, "both make the Go name NewThing")
}

// TestStructs: the header's structs become Go structs by the mirror's
// rules (handles, embedded structs, arrays with constant lengths, Go
// pointers for what the core fills, uintptr for what the plugin writes
// out and for C functions), and a field genbind cannot map is an error
// naming its line, struct and field.
func TestStructs(t *testing.T) {
	base := api("0", "/* ---- 1.0 ---- */ gpurt_error *(*kv_go)(gpurt_runtime *rt, const gpurt_x_args *args);") + `
typedef struct gpurt_buffer gpurt_buffer;
typedef void (*gpurt_log_fn)(void *user);
#define GPURT_NAME_LEN 64
typedef struct gpurt_kv_in {
  int32_t dtype, qo_dtype; /* both */
  uint8_t reserved[3];
} gpurt_kv_in;
typedef struct gpurt_x_args {
  uint64_t struct_size;
  gpurt_buffer *buffer; uint64_t buffer_offset;
  gpurt_kv_in layout;
  char name[GPURT_NAME_LEN]; /* out */
  const char *message;  /* out: owned by the plugin */
  const int32_t *indptr; /* borrowed */
  const gpurt_kv_in *ins;
  gpurt_log_fn log;
  /* ---- 1.1: more ---- */
  float k_scale;
} gpurt_x_args;
`
	h, err := ParseHeader(base)
	require.NoError(t, err)
	src, err := emitStructs(h, nil)
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(src)), " ")
	for _, want := range []string{
		"Buffer uintptr // gpurt_buffer*",
		"// KVIn mirrors gpurt_kv_in. type KVIn struct { DType int32 `c:\"dtype\"` // both QODType int32 `c:\"qo_dtype\"` // both Reserved [3]uint8 `c:\"reserved\"` }",
		"Buffer Buffer `c:\"buffer\"` BufferOffset uint64 `c:\"buffer_offset\"` Layout KVIn `c:\"layout\"`",
		"Name [NameLen]byte `c:\"name\"` // out",
		"Message uintptr `c:\"message\"` // out: owned by the plugin",
		"Indptr *int32 `c:\"indptr\"` // borrowed",
		"Ins *KVIn `c:\"ins\"`",
		"Log uintptr `c:\"log\"`",
		"// 1.1: more KScale float32 `c:\"k_scale\"`",
		"type API struct { StructSize uint64 `c:\"struct_size\"` ABIMajor uint32 `c:\"abi_major\"` ABIMinor uint32 `c:\"abi_minor\"` // 1.0 KVGo uintptr `c:\"kv_go\"` }",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "import \"unsafe\"", "no void pointer here, so no unsafe")
	for _, c := range []struct{ field, want string }{
		{"void *user_data;", "line 27: gpurt_x_args.user_data (void *user_data): a void pointer: say in voidPointers"},
		{"size_t n;", "gpurt_x_args.n (size_t n): a type genbind does not know by value"},
		{"float *x;", ""},
		{"bool *flag;", "gpurt_x_args.flag (bool *flag): a pointer type genbind does not know"},
		{"uint32_t x[4], *y;", ""},
		{"int (*cb)(void);", "line 27: gpurt_x_args: declarator \"(*cb)(void)\" is not of the shape"},
		{"gpurt_buffer *bufs[2];", "an array of pointers"},
	} {
		t.Run(c.field, func(t *testing.T) {
			h, err := ParseHeader(strings.Replace(base, "  float k_scale;", "  "+c.field, 1))
			if err == nil {
				_, err = emitStructs(h, nil)
			}
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	for c, g := range map[string]string{"gpurt_kv_append_args": "KVAppendArgs", "pci_bus_id": "PCIBusID", "qo_dtype": "QODType",
		"comm_unique_id": "CommUniqueID", "nranks": "NRanks", "timeout_ms": "TimeoutMS", "gpurt_api": "API", "ldd": "LDD"} {
		assert.Equal(t, g, GoName(c))
	}
}
