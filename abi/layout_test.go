// SPDX-License-Identifier: Apache-2.0

package abi

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mirrored pairs every Go struct with its C twin.
var mirrored = []struct {
	c   string
	go_ any
}{
	{"gpurt_error_info", ErrorInfo{}},
	{"gpurt_plugin_info", PluginInfo{}},
	{"gpurt_device_info", DeviceInfo{}},
	{"gpurt_probe_args", ProbeArgs{}},
	{"gpurt_runtime_create_args", RuntimeCreateArgs{}},
	{"gpurt_runtime_stats", RuntimeStats{}},
	{"gpurt_control_args", ControlArgs{}},
	{"gpurt_copy_args", CopyArgs{}},
	{"gpurt_memset_args", MemsetArgs{}},
	{"gpurt_module_load_args", ModuleLoadArgs{}},
	{"gpurt_kernel_info", KernelInfo{}},
	{"gpurt_kernel_arg", KernelArg{}},
	{"gpurt_launch_args", LaunchArgs{}},
	{"gpurt_launch_item", LaunchItem{}},
	{"gpurt_gemm_desc", GemmDesc{}},
	{"gpurt_gemm_run_args", GemmRunArgs{}},
	{"gpurt_graph_item", GraphItem{}},
	{"gpurt_graph_create_args", GraphCreateArgs{}},
	{"gpurt_graph_update_args", GraphUpdateArgs{}},
	{"gpurt_quant_matmul_args", QuantMatmulArgs{}},
	{"gpurt_grouped_gemm_args", GroupedGemmArgs{}},
	{"gpurt_kv_layout", KVLayout{}},
	{"gpurt_kv_pages", KVPages{}},
	{"gpurt_kv_append_args", KVAppendArgs{}},
	{"gpurt_attention_desc", AttentionDesc{}},
	{"gpurt_attention_plan_args", AttentionPlanArgs{}},
	{"gpurt_attention_run_args", AttentionRunArgs{}},
	{"gpurt_comm_id", CommID{}},
	{"gpurt_comm_create_args", CommCreateArgs{}},
	{"gpurt_coll_op", CollOp{}},
	{"gpurt_comm_run_args", CommRunArgs{}},
	{"gpurt_api", API{}},
	{"gpurt_negotiate_args", NegotiateArgs{}},
}

// constants pairs every Go constant with its C macro or enumerator.
var constants = map[string]int64{
	"GPURT_ABI_MAJOR": Major, "GPURT_ABI_MINOR": Minor,
	"GPURT_OK": OK, "GPURT_ERR_INVALID_ARGUMENT": ErrInvalidArgument,
	"GPURT_ERR_INVALID_HANDLE": ErrInvalidHandle, "GPURT_ERR_OUT_OF_RANGE": ErrOutOfRange,
	"GPURT_ERR_OUT_OF_MEMORY": ErrOutOfMemory, "GPURT_ERR_NOT_FOUND": ErrNotFound,
	"GPURT_ERR_UNSUPPORTED": ErrUnsupported, "GPURT_ERR_UNAVAILABLE": ErrUnavailable,
	"GPURT_ERR_DEVICE_LOST": ErrDeviceLost, "GPURT_ERR_LAUNCH_FAILED": ErrLaunchFailed,
	"GPURT_ERR_NOT_READY": ErrNotReady, "GPURT_ERR_ABI_MISMATCH": ErrABIMismatch,
	"GPURT_ERR_INTERNAL": ErrInternal, "GPURT_ERR_FAILED_PRECONDITION": ErrFailedPrecondition,
	"GPURT_PROBE_OK": ProbeOK, "GPURT_PROBE_DRIVER_MISSING": ProbeDriverMissing,
	"GPURT_PROBE_NO_DEVICE": ProbeNoDevice, "GPURT_PROBE_DRIVER_TOO_OLD": ProbeDriverTooOld,
	"GPURT_PROBE_PLATFORM_UNSUPPORTED": ProbePlatformUnsupported,
	"GPURT_PROBE_INIT_FAILED":          ProbeInitFailed, "GPURT_PROBE_DISABLED": ProbeDisabled,
	"GPURT_DTYPE_INVALID": DTypeInvalid, "GPURT_DTYPE_F32": DTypeF32, "GPURT_DTYPE_F16": DTypeF16,
	"GPURT_DTYPE_BF16": DTypeBF16, "GPURT_DTYPE_F64": DTypeF64, "GPURT_DTYPE_I8": DTypeI8,
	"GPURT_DTYPE_I32": DTypeI32, "GPURT_DTYPE_FP8_E4M3": DTypeFP8E4M3,
	"GPURT_DTYPE_FP8_E5M2": DTypeFP8E5M2, "GPURT_DTYPE_U8": DTypeU8,
	"GPURT_ARG_BUFFER": ArgBuffer, "GPURT_ARG_I8": ArgI8, "GPURT_ARG_I16": ArgI16,
	"GPURT_ARG_I32": ArgI32, "GPURT_ARG_I64": ArgI64, "GPURT_ARG_U8": ArgU8,
	"GPURT_ARG_U16": ArgU16, "GPURT_ARG_U32": ArgU32, "GPURT_ARG_U64": ArgU64,
	"GPURT_ARG_F16": ArgF16, "GPURT_ARG_BF16": ArgBF16, "GPURT_ARG_F32": ArgF32,
	"GPURT_ARG_F64": ArgF64, "GPURT_ARG_ANY": ArgAny,
	"GPURT_MODULE_BUILTIN": ModuleBuiltin, "GPURT_MODULE_PTX": ModulePTX,
	"GPURT_MODULE_CUBIN": ModuleCubin, "GPURT_MODULE_FATBIN": ModuleFatbin,
	"GPURT_MODULE_METALLIB": ModuleMetallib, "GPURT_MODULE_METAL_SOURCE": ModuleMetalSource,
	"GPURT_COPY_SYNC": CopySync, "GPURT_EVENT_TIMING": EventTiming,
	"GPURT_DEVICE_UNIFIED_MEMORY": DeviceUnifiedMemory, "GPURT_DEVICE_BF16": DeviceBF16,
	"GPURT_DEVICE_FP8": DeviceFP8, "GPURT_MAX_KERNEL_PARAMS": MaxKernelParams,
	"GPURT_NAME_LEN":        NameLen,
	"GPURT_COMPUTE_DEFAULT": ComputeDefault, "GPURT_COMPUTE_F32": ComputeF32,
	"GPURT_COMPUTE_F32_TF32": ComputeF32TF32, "GPURT_COMPUTE_F16": ComputeF16,
	"GPURT_EPILOGUE_NONE": EpilogueNone, "GPURT_EPILOGUE_BIAS": EpilogueBias,
	"GPURT_EPILOGUE_RELU": EpilogueRelu, "GPURT_EPILOGUE_BIAS_RELU": EpilogueBiasRelu,
	"GPURT_EPILOGUE_GELU": EpilogueGelu, "GPURT_EPILOGUE_BIAS_GELU": EpilogueBiasGelu,
	// 1.3
	"GPURT_GRAPH_OP_LAUNCH": GraphOpLaunch, "GPURT_GRAPH_OP_GEMM": GraphOpGemm,
	"GPURT_GRAPH_OP_COPY": GraphOpCopy, "GPURT_GRAPH_OP_MEMSET": GraphOpMemset,
	"GPURT_GRAPH_OP_EVENT_RECORD": GraphOpEventRecord, "GPURT_GRAPH_OP_EVENT_WAIT": GraphOpEventWait,
	"GPURT_GRAPH_OP_CALL":     GraphOpCall,
	"GPURT_GRAPH_UPDATE_NONE": GraphUpdateNone, "GPURT_GRAPH_UPDATE_PATCHED": GraphUpdatePatched,
	"GPURT_GRAPH_UPDATE_EXEC_UPDATE": GraphUpdateExecUpdate, "GPURT_GRAPH_UPDATE_REINSTANTIATED": GraphUpdateReinstantiated,
	"GPURT_KV_LAYOUT_NHD": KVLayoutNHD, "GPURT_KV_LAYOUT_HND": KVLayoutHND,
	"GPURT_ATTENTION_DECODE": AttentionDecode, "GPURT_ATTENTION_PREFILL": AttentionPrefill,
	"GPURT_COMM_ID_BYTES":   CommIDBytes,
	"GPURT_COLL_ALL_REDUCE": CollAllReduce, "GPURT_COLL_ALL_GATHER": CollAllGather,
	"GPURT_COLL_REDUCE_SCATTER": CollReduceScatter, "GPURT_COLL_BROADCAST": CollBroadcast,
	"GPURT_COLL_SEND": CollSend, "GPURT_COLL_RECV": CollRecv,
	"GPURT_REDUCE_SUM": ReduceSum, "GPURT_REDUCE_MAX": ReduceMax,
}

// goLayout lists "NAME VALUE" lines the C program must print identically.
func goLayout() []string {
	var lines []string
	for _, m := range mirrored {
		t := reflect.TypeOf(m.go_)
		lines = append(lines, fmt.Sprintf("sizeof(%s) %d", m.c, t.Size()))
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			lines = append(lines, fmt.Sprintf("offsetof(%s,%s) %d", m.c, f.Tag.Get("c"), f.Offset))
			lines = append(lines, fmt.Sprintf("sizeof(%s.%s) %d", m.c, f.Tag.Get("c"), f.Type.Size()))
		}
	}
	for name, v := range constants {
		lines = append(lines, fmt.Sprintf("%s %d", name, v))
	}
	return lines
}

func cProgram() string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"gpurt.h\"\nint main(void){\n")
	for _, m := range mirrored {
		t := reflect.TypeOf(m.go_)
		fmt.Fprintf(&b, "printf(\"sizeof(%s) %%zu\\n\", sizeof(%s));\n", m.c, m.c)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i).Tag.Get("c")
			fmt.Fprintf(&b, "printf(\"offsetof(%s,%s) %%zu\\n\", offsetof(%s,%s));\n", m.c, f, m.c, f)
			fmt.Fprintf(&b, "printf(\"sizeof(%s.%s) %%zu\\n\", sizeof(((%s*)0)->%s));\n", m.c, f, m.c, f)
		}
	}
	for name := range constants {
		fmt.Fprintf(&b, "printf(\"%s %%lld\\n\", (long long)(%s));\n", name, name)
	}
	b.WriteString("printf(\"GPURT_ENTRY_SYMBOL %s\\n\", GPURT_ENTRY_SYMBOL);\nreturn 0;}\n")
	return b.String()
}

func cc(t *testing.T) string {
	out, err := exec.Command("go", "env", "CC").Output()
	name := strings.TrimSpace(string(out))
	if err != nil || name == "" {
		name = "cc"
	}
	path, err := exec.LookPath(strings.Fields(name)[0])
	if err != nil {
		t.Skipf("no C compiler (%s): %v", name, err)
	}
	return path
}

// TestLayoutMatchesHeader compiles gpurt.h and compares every struct size,
// field offset, field size and constant with this package.
func TestLayoutMatchesHeader(t *testing.T) {
	compiler := cc(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "layout.c")
	require.NoError(t, os.WriteFile(src, []byte(cProgram()), 0o600))
	bin := filepath.Join(dir, "layout")
	here, err := filepath.Abs(".")
	require.NoError(t, err)
	out, err := exec.Command(compiler, "-std=c11", "-Wall", "-Werror", "-I", here, "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "compiling the layout probe against gpurt.h:\n%s", out)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		got[k] = v
	}
	for _, line := range goLayout() {
		k, v, _ := strings.Cut(line, " ")
		require.Equal(t, got[k], v, "%s differs between gpurt.h (%s) and package abi (%s) on %s/%s", k, got[k], v, runtime.GOOS, runtime.GOARCH)
	}
	require.Equal(t, EntrySymbol, got["GPURT_ENTRY_SYMBOL"])
}

// TestEveryTableSlotIsMirrored fails when a function pointer is added to
// gpurt_api in the header but not here (the struct sizes would differ too,
// but this names the slot).
func TestEveryTableSlotIsMirrored(t *testing.T) {
	hdr, err := os.ReadFile("gpurt.h")
	require.NoError(t, err)
	body := string(hdr)
	start := strings.Index(body, "typedef struct gpurt_api {")
	end := strings.Index(body[start:], "} gpurt_api;")
	require.True(t, start >= 0 && end > 0)
	var slots []string
	for _, line := range strings.Split(body[start:start+end], "\n") {
		if i := strings.Index(line, "(*"); i >= 0 {
			rest := line[i+2:]
			slots = append(slots, rest[:strings.Index(rest, ")")])
		}
	}
	tags := map[string]bool{}
	ty := reflect.TypeOf(API{})
	for i := 0; i < ty.NumField(); i++ {
		tags[ty.Field(i).Tag.Get("c")] = true
	}
	for _, s := range slots {
		require.True(t, tags[s], "gpurt_api.%s has no field in abi.API", s)
	}
}

// notConstants are the header's object-like macros that are not ABI
// constants; every other #define and every enumerator must be in
// constants (so that TestLayoutMatchesHeader compares its value).
var notConstants = map[string]string{
	"GPURT_H_":           "the include guard",
	"GPURT_EXPORT":       "a symbol-visibility attribute for plugin builds",
	"GPURT_ENTRY_SYMBOL": "a string: TestLayoutMatchesHeader compares it with EntrySymbol",
}

var (
	reComment   = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	reStructDef = regexp.MustCompile(`\bstruct\s+(gpurt_\w+)\s*\{`)
	reOpaqueDef = regexp.MustCompile(`\btypedef\s+struct\s+(gpurt_\w+)\s+(gpurt_\w+)\s*;`)
	reDefine    = regexp.MustCompile(`(?m)^\s*#\s*define\s+(\w+)(\()?`)
	reEnum      = regexp.MustCompile(`\benum\s*\w*\s*\{([^}]*)\}`)
	reEnumName  = regexp.MustCompile(`^\s*(\w+)\s*(=|$)`)
	reMirrorDoc = regexp.MustCompile(`\bmirrors (gpurt_\w+)\b`)
	reHandleDoc = regexp.MustCompile(`^(gpurt_\w+)\*`)
)

// headerItems lists, from the text of a header (comments removed), its
// struct definitions, opaque handle typedefs and constants (object-like
// #defines and enumerators).
func headerItems(src string) (structs, opaque, consts []string) {
	src = reComment.ReplaceAllString(src, " ")
	for _, m := range reStructDef.FindAllStringSubmatch(src, -1) {
		structs = append(structs, m[1])
	}
	for _, m := range reOpaqueDef.FindAllStringSubmatch(src, -1) {
		opaque = append(opaque, m[1])
	}
	seen := map[string]bool{}
	for _, m := range reDefine.FindAllStringSubmatch(src, -1) {
		if m[2] == "" && !seen[m[1]] { // function-like macros are not constants
			seen[m[1]] = true
			consts = append(consts, m[1])
		}
	}
	for _, m := range reEnum.FindAllStringSubmatch(src, -1) {
		for _, item := range strings.Split(m[1], ",") {
			if e := reEnumName.FindStringSubmatch(item); e != nil && !seen[e[1]] {
				seen[e[1]] = true
				consts = append(consts, e[1])
			}
		}
	}
	return structs, opaque, consts
}

// goMirrors reads this package's source: the C struct each Go struct says
// it mirrors ("X mirrors gpurt_x" in its doc) and the C handle each
// uintptr type names in its line comment ("// gpurt_x*").
func goMirrors(t *testing.T) (structs, handles map[string]string) {
	structs, handles = map[string]string{}, map[string]string{}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, sp := range gd.Specs {
				ts := sp.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				if _, ok := ts.Type.(*ast.StructType); ok && doc != nil {
					if m := reMirrorDoc.FindStringSubmatch(doc.Text()); m != nil {
						structs[m[1]] = ts.Name.Name
					}
				}
				if id, ok := ts.Type.(*ast.Ident); ok && id.Name == "uintptr" && ts.Comment != nil {
					if m := reHandleDoc.FindStringSubmatch(strings.TrimSpace(ts.Comment.Text())); m != nil {
						handles[m[1]] = ts.Name.Name
					}
				}
			}
		}
	}
	return structs, handles
}

// missingMirrors names what the header declares and this package does
// not mirror (or the layout test does not check).
func missingMirrors(t *testing.T, header string) []string {
	structs, opaque, consts := headerItems(header)
	goStructs, goHandles := goMirrors(t)
	checked := map[string]bool{}
	for _, m := range mirrored {
		checked[m.c] = true
	}
	var missing []string
	for _, s := range structs {
		switch g, ok := goStructs[s]; {
		case !ok:
			missing = append(missing, fmt.Sprintf("struct %s has no Go mirror: add a struct to package abi whose doc says \"X mirrors %s\", with a c:\"name\" tag per field", s, s))
		case !checked[s]:
			missing = append(missing, fmt.Sprintf("struct %s (abi.%s) is not in mirrored in layout_test.go, so its layout is never checked", s, g))
		}
	}
	for _, h := range opaque {
		if _, ok := goHandles[h]; !ok {
			missing = append(missing, fmt.Sprintf("handle %s has no Go type: add `X uintptr // %s*` to package abi", h, h))
		}
	}
	for _, c := range consts {
		if _, ok := constants[c]; !ok && notConstants[c] == "" {
			missing = append(missing, fmt.Sprintf("constant %s has no Go mirror in constants in layout_test.go (add the Go constant and the pair)", c))
		}
	}
	return missing
}

// TestEveryHeaderItemIsMirrored fails, naming them, for the structs,
// opaque handles and constants of gpurt.h (found by reading the header,
// not from a list) that have no Go mirror or whose mirror is not checked
// by TestLayoutMatchesHeader.
func TestEveryHeaderItemIsMirrored(t *testing.T) {
	hdr, err := os.ReadFile("gpurt.h")
	require.NoError(t, err)
	missing := missingMirrors(t, string(hdr))
	require.Empty(t, missing, "gpurt.h declares what package abi does not mirror:\n%s", strings.Join(missing, "\n"))
}

// TestMissingMirrorsAreNamed shows the check above can fail: a header with
// one more struct, handle, #define and enumerator names each of them.
func TestMissingMirrorsAreNamed(t *testing.T) {
	hdr, err := os.ReadFile("gpurt.h")
	require.NoError(t, err)
	extra := "\n/* a comment naming struct gpurt_in_comment { is ignored */\n" +
		"typedef struct gpurt_new_args {\n  uint64_t struct_size;\n} gpurt_new_args;\n" +
		"typedef struct gpurt_new_handle gpurt_new_handle;\n" +
		"#define GPURT_NEW_LIMIT 8\n#define GPURT_NEW_MACRO(x) (x)\n" +
		"enum {\n  GPURT_NEW_A = 0,\n  GPURT_NEW_B /* implicit value */\n};\n"
	missing := missingMirrors(t, string(hdr)+extra)
	text := strings.Join(missing, "\n")
	for _, name := range []string{"struct gpurt_new_args", "handle gpurt_new_handle", "constant GPURT_NEW_LIMIT", "constant GPURT_NEW_A", "constant GPURT_NEW_B"} {
		assert.Contains(t, text, name+" ")
	}
	assert.Len(t, missing, 5, text)
	assert.NotContains(t, text, "gpurt_in_comment")
	assert.NotContains(t, text, "GPURT_NEW_MACRO")
}
