// SPDX-License-Identifier: Apache-2.0

package abi

// BuiltinKernel is one kernel of every plugin's built-in module
// (ModuleBuiltin), as gpurt.h lists them under "Built-in kernels".
type BuiltinKernel struct {
	Name   string  // "fill_f32", "sleep_ns"
	Op     string  // the name without its type suffix: "fill", "scale", ..., "rmsnorm", "sample", "sleep_ns"
	DType  int32   // the element type (DTypeF32, DTypeF16, DTypeBF16); DTypeInvalid for sleep_ns
	Params []int32 // the parameters' kinds (Arg*), in order
}

// ArgKindNames name the header's GPURT_ARG_* kinds (Arg*) as the core's
// messages and inspect.Kernel's Param.Kind give them.
var ArgKindNames = map[int32]string{
	ArgBuffer: "buffer", ArgI8: "i8", ArgI16: "i16", ArgI32: "i32", ArgI64: "i64",
	ArgU8: "u8", ArgU16: "u16", ArgU32: "u32", ArgU64: "u64", ArgF16: "f16",
	ArgBF16: "bf16", ArgF32: "f32", ArgF64: "f64", ArgAny: "any",
}

// BuiltinTypes are the element types of the typed built-in kernels, with
// their name suffix and the argument kind of a T value.
var BuiltinTypes = []struct {
	Suffix string
	DType  int32
	Value  int32 // the kind of a "T value" parameter
}{
	{"f32", DTypeF32, ArgF32},
	{"f16", DTypeF16, ArgF16},
	{"bf16", DTypeBF16, ArgBF16},
}

// BuiltinKernels is the one Go list of the built-in kernels: the
// conformance suite iterates it (every entry must have a reference there),
// and tests compare it with gpurt.h's list and with csrc's signature table
// (gp_builtin_kernels in csrc/gp_builtin.c, which every plugin checks
// launches of built-ins against). CONTRIBUTING.md says what else to touch when it grows.
var BuiltinKernels = builtinKernels()

// typedOps are the typed kernels' parameters; ArgAny here stands for the
// "T value" parameter, whose kind follows the type.
var typedOps = []struct {
	op     string
	params []int32
}{
	{"fill", []int32{ArgBuffer, ArgAny, ArgU64}},                   // fill_T (BUFFER y, T value, U64 n)             y[i] = value
	{"scale", []int32{ArgBuffer, ArgBuffer, ArgF32, ArgU64}},       // scale_T(BUFFER y, BUFFER x, F32 alpha, U64 n) y[i] = alpha * x[i]
	{"axpy", []int32{ArgBuffer, ArgBuffer, ArgF32, ArgU64}},        // axpy_T (BUFFER y, BUFFER x, F32 alpha, U64 n) y[i] = alpha * x[i] + y[i]
	{"add", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgU64}},      // add_T  (BUFFER z, BUFFER x, BUFFER y, U64 n)  z[i] = x[i] + y[i]
	{"mul", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgU64}},      // mul_T  (BUFFER z, BUFFER x, BUFFER y, U64 n)  z[i] = x[i] * y[i]
	{"silu_mul", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgU64}}, // silu_mul_T(BUFFER z, BUFFER g, BUFFER u, U64 n) z[i] = g[i] / (1 + exp(-g[i])) * u[i]
	{"softcap", []int32{ArgBuffer, ArgBuffer, ArgF32, ArgU64}},     // softcap_T(BUFFER y, BUFFER x, F32 cap, U64 n)  y[i] = cap * tanh(x[i] / cap)
	// The row kernels (gpurt.h: one-dimensional launches; int32 indices).
	{"rmsnorm", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgF32, ArgU64, ArgU64}},             // rmsnorm_T(y, x, w, eps, rows, cols), one block per row
	{"rope_llama", []int32{ArgBuffer, ArgBuffer, ArgF32, ArgU64, ArgU64, ArgU64}},             // rope_llama_T(x, pos, theta, tokens, heads, head_dim), interleaved pairs
	{"rope_neox", []int32{ArgBuffer, ArgBuffer, ArgF32, ArgU64, ArgU64, ArgU64}},              // rope_neox_T(x, pos, theta, tokens, heads, head_dim), half-split
	{"embed", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgU64, ArgU64, ArgU64}},               // embed_T(y, table, ids, tokens, cols, vocab)
	{"argmax", []int32{ArgBuffer, ArgBuffer, ArgU64, ArgU64}},                                 // argmax_T(idx, x, rows, cols), one block per row
	{"sample", []int32{ArgBuffer, ArgBuffer, ArgU64, ArgU64, ArgU64, ArgF32, ArgF32, ArgU64}}, // sample_T(idx, x, rows, cols, top_k, top_p, temperature, seed)
	// Per-request sampling (1.8): per-row parameter arrays in params (gpurt.h).
	{"sample_rows", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgU64, ArgU64, ArgU64}}, // sample_rows_T(out, x, params, rows, cols, hist)
	// The residual add fused into the next RMSNorm (after 1.8: a plugin may lack it).
	{"add_rmsnorm", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgF32, ArgU64, ArgU64}}, // add_rmsnorm_T(x, r, w, eps, rows, cols): r += x, x = rmsnorm(r) * w
	// Rotary embedding from a frequency table (after 1.8: a plugin may lack it).
	{"rope_neox_freqs", []int32{ArgBuffer, ArgBuffer, ArgBuffer, ArgU64, ArgU64, ArgU64}}, // rope_neox_freqs_T(x, pos, inv_freq, tokens, heads, head_dim)
}

func builtinKernels() []BuiltinKernel {
	var out []BuiltinKernel
	for _, t := range BuiltinTypes {
		for _, o := range typedOps {
			p := append([]int32(nil), o.params...)
			for i := range p {
				if p[i] == ArgAny {
					p[i] = t.Value
				}
			}
			out = append(out, BuiltinKernel{Name: o.op + "_" + t.Suffix, Op: o.op, DType: t.DType, Params: p})
		}
	}
	// sleep_ns(U64 ns): each thread waits about ns nanoseconds (ordering
	// and timing tests; launch 1 thread)
	return append(out, BuiltinKernel{Name: "sleep_ns", Op: "sleep_ns", DType: DTypeInvalid, Params: []int32{ArgU64}})
}
