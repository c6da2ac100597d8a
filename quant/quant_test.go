// SPDX-License-Identifier: Apache-2.0

package quant

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

type vectorFile struct {
	MLXVersion string `json:"mlx_version"`
	Seed       int    `json:"seed"`
	Cases      []struct {
		DType     string `json:"dtype"`
		Rows      int    `json:"rows"`
		Cols      int    `json:"cols"`
		GroupSize int    `json:"group_size"`
		Bits      int    `json:"bits"`
		W         string `json:"w"`
		Q         string `json:"q"`
		Scales    string `json:"scales"`
		Biases    string `json:"biases"`
	} `json:"cases"`
}

func unb64(t *testing.T, s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}

// checkVectors quantizes every case's weights and compares the result
// with MLX's, byte for byte.
func checkVectors(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var vf vectorFile
	require.NoError(t, json.Unmarshal(raw, &vf))
	require.NotEmpty(t, vf.Cases)
	types := map[string]core.DType{"f32": core.F32, "f16": core.F16, "bf16": core.BF16}
	for i, c := range vf.Cases {
		t.Run(fmt.Sprintf("%d_%s_%dx%d_g%d_b%d", i, c.DType, c.Rows, c.Cols, c.GroupSize, c.Bits), func(t *testing.T) {
			st, ok := types[c.DType]
			require.True(t, ok, c.DType)
			wb := unb64(t, c.W)
			w := make([]float32, c.Rows*c.Cols)
			require.Len(t, wb, len(w)*st.Size())
			for j := range w {
				switch st {
				case core.F32:
					w[j] = math.Float32frombits(binary.LittleEndian.Uint32(wb[4*j:]))
				case core.F16:
					w[j] = floatbits.F16ToFloat32(binary.LittleEndian.Uint16(wb[2*j:]))
				default:
					w[j] = floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(wb[2*j:]))
				}
			}
			q, err := Quantize(w, c.Rows, c.Cols, Options{GroupSize: c.GroupSize, Bits: c.Bits, ScaleType: st})
			require.NoError(t, err)
			assert.Equal(t, unb64(t, c.Q), q.Q, "codes")
			assert.Equal(t, unb64(t, c.Scales), q.Scales, "scales")
			assert.Equal(t, unb64(t, c.Biases), q.Biases, "biases")
		})
	}
}

// TestMatchesMLXVectors compares with vectors made once by
// scripts/mlx_quant_vectors.py (mlx 0.32.4) and committed.
func TestMatchesMLXVectors(t *testing.T) {
	checkVectors(t, filepath.Join("testdata", "mlx_vectors.json"))
}

// TestMatchesMLXLive makes fresh vectors with the mlx wheel, installed
// into a temporary virtual environment, with a new seed. It needs the
// network, so it runs only with GPURT_MLX_LIVE=1, and skips when python3
// or the wheel cannot be had.
func TestMatchesMLXLive(t *testing.T) {
	if os.Getenv("GPURT_MLX_LIVE") != "1" {
		t.Skip("set GPURT_MLX_LIVE=1 to install mlx from PyPI and compare with fresh vectors")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv failed: %v\n%s", err, out)
	}
	pip := filepath.Join(venv, "bin", "pip")
	if out, err := exec.Command(pip, "install", "-q", "mlx[cpu]", "numpy").CombinedOutput(); err != nil {
		t.Skipf("pip install mlx failed (no wheel for this platform, or no network): %v\n%s", err, out)
	}
	out := filepath.Join(dir, "vectors.json")
	seed := fmt.Sprint(rand.IntN(1 << 30))
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), filepath.Join("..", "scripts", "mlx_quant_vectors.py"), "--seed", seed, out)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	t.Logf("seed %s", seed)
	checkVectors(t, out)
}

func TestQuantizeErrors(t *testing.T) {
	w := make([]float32, 64)
	for _, tc := range []struct {
		name       string
		rows, cols int
		opt        Options
		want       string
	}{
		{"group", 1, 64, Options{GroupSize: 16}, "group size 16"},
		{"bits", 1, 64, Options{Bits: 3}, "3 bits"},
		{"scale type", 1, 64, Options{ScaleType: core.FP8E4M3}, "scale type"},
		{"cols", 2, 32, Options{GroupSize: 64}, "not a multiple"},
		{"len", 2, 64, Options{}, "has 64 values"},
		{"rows", 0, 64, Options{}, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Quantize(w, tc.rows, tc.cols, tc.opt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "quant: ")
		})
	}
}

// TestRoundTrip: every dequantized value is within 1.5 steps (plus the
// rounding of the stored scale and bias) of the original. Half a step is
// rounding; MLX's exact edge (s = edge/q0) stretches the step by up to
// 0.5/|q0| with |q0| >= 127, which moves the far end by up to one step.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, st := range []core.DType{core.F32, core.F16, core.BF16} {
		for _, gs := range []int{32, 64, 128} {
			t.Run(fmt.Sprintf("%v_g%d", st, gs), func(t *testing.T) {
				rows, cols := 4, 256
				w := make([]float32, rows*cols)
				for i := range w {
					w[i] = float32(r.NormFloat64())
				}
				q, err := Quantize(w, rows, cols, Options{GroupSize: gs, Bits: 8, ScaleType: st})
				require.NoError(t, err)
				require.Len(t, q.Q, rows*cols)
				d := q.Dequantize()
				for i, v := range w {
					s := math.Abs(q.Scale(i/cols, i%cols))
					tol := 1.5*s + 256*s*relEps(st) + math.Abs(q.Bias(i/cols, i%cols))*relEps(st) + 1e-6
					require.InDelta(t, float64(v), d[i], tol, "element %d", i)
				}
			})
		}
	}
}

func relEps(t core.DType) float64 {
	switch t {
	case core.F16:
		return 1.0 / 1024
	case core.BF16:
		return 1.0 / 128
	}
	return 1e-7
}
