// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExported(t *testing.T) {
	dir := t.TempDir()
	src := `package p

const A, b = 1, 2
var V int
type T struct{ Field int; hidden int }
type I interface{ M(); m() }
type g struct{}
type G[X any] struct{}
func F() {}
func f() {}
func (T) M() {}
func (*T) P() {}
func (T) q() {}
func (g) M() {}
func (G[X]) N() {}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nfunc Untested() {}\n"), 0o600))
	ids, err := Exported(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"A", "F", "G", "G.N", "I", "I.M", "T", "T.M", "T.P", "V"}, ids)

	_, err = Exported(filepath.Join(dir, "missing"))
	require.Error(t, err)
}
