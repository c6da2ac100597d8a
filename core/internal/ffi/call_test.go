// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package ffi

import (
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

func buildLib(t testing.TB) uintptr {
	out := filepath.Join(t.TempDir(), "libadd.so")
	testutil.Compile(t, "testdata/add.c", "-shared", "-fPIC", "-O2", "-o", out, "testdata/add.c")
	h, err := purego.Dlopen(out, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	return h
}

func sym(t testing.TB, h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	require.NoError(t, err)
	return p
}

func TestCallArgumentsAndResult(t *testing.T) {
	h := buildLib(t)
	add6 := sym(t, h, "add6")
	require.Equal(t, uintptr(1+2*2+3*3+4*4+5*5+6*6), Call6(add6, 1, 2, 3, 4, 5, 6))
	neg := int64(-5)
	require.Equal(t, int64(-5+2*1), int64(Call6(add6, uintptr(neg), 1, 0, 0, 0, 0)))
	require.Equal(t, uintptr(7), Call0(sym(t, h, "nop")))
	var v int64
	Call2(sym(t, h, "store"), uintptr(unsafe.Pointer(&v)), 42)
	runtime.KeepAlive(&v)
	require.Equal(t, int64(42), v)
}

func TestCallAllocatesNothing(t *testing.T) {
	h := buildLib(t)
	store := sym(t, h, "store")
	var v int64
	allocs := testing.AllocsPerRun(1000, func() {
		var local int64
		Call2(store, uintptr(unsafe.Pointer(&local)), 3)
		runtime.KeepAlive(&local)
		v += local
	})
	require.Zero(t, allocs)
}

func BenchmarkCall0(b *testing.B) {
	h := buildLib(b)
	fn := sym(b, h, "nop")
	b.ReportAllocs()
	for b.Loop() {
		Call0(fn)
	}
}
