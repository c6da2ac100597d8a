// SPDX-License-Identifier: Apache-2.0

package matmul_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/quant"
)

// TestMain puts a freshly built mock plugin on GPURT_PLUGIN_PATH, for the
// runnable examples (they open a runtime as a program would).
func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "matmul")) }

// Quant multiplies two tokens by int8 weights quantized on the host.
func ExampleQuant() {
	mockrt.Example(core.Config{}, func(_ *core.Runtime, dev *core.Device, s *core.Stream) error {
		// W: 4 output features of 64 inputs, row i all equal to i+1.
		const m, n, k = 4, 2, 64
		w := make([]float32, m*k)
		for i := range w {
			w[i] = float32(i/k + 1)
		}
		q, _ := quant.Quantize(w, m, k, quant.Options{GroupSize: 64, Bits: 8, ScaleType: core.BF16})
		// x: token 0 all ones, token 1 all halves (bf16).
		x := make([]byte, 2*n*k)
		for i := 0; i < n*k; i++ {
			v := float32(1)
			if i >= k {
				v = 0.5
			}
			binary.LittleEndian.PutUint16(x[2*i:], floatbits.BF16FromFloat32(v))
		}
		up := func(b []byte) *core.Buffer {
			buf, _ := dev.Alloc(len(b))
			_ = core.CopyFromHost(buf, b)
			return buf
		}
		W, sc, bi, X := up(q.Q), up(q.Scales), up(q.Biases), up(x)
		Y, _ := dev.Alloc(2 * n * m)
		for _, b := range []*core.Buffer{W, sc, bi, X, Y} {
			defer b.Free()
		}
		err := matmul.Quant(s, matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, GroupSize: 64, M: m, N: n, K: k},
			matmul.QuantOperands{W: W, Scales: sc, Biases: bi, X: X, Y: Y})
		if err != nil {
			return err
		}
		_ = s.Synchronize()
		y := make([]byte, 2*n*m)
		_ = core.CopyToHost(y, Y)
		for t := 0; t < n; t++ {
			fmt.Print("token ", t, ":")
			for i := 0; i < m; i++ {
				fmt.Print(" ", floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(y[2*(t*m+i):])))
			}
			fmt.Println()
		}
		// A shape the plugin cannot run is refused before it crosses.
		err = matmul.Quant(s, matmul.QuantDesc{XType: core.F32, ScaleType: core.BF16, GroupSize: 64, M: m, N: n, K: k},
			matmul.QuantOperands{W: W, Scales: sc, Biases: bi, X: X, Y: Y})
		fmt.Println(err)
		return nil
	})
	// Output:
	// token 0: 64 128 192 256
	// token 1: 32 64 96 128
	// gpurt: quant_matmul: unsupported: x type f32 is not supported (f16 or bf16)
}
