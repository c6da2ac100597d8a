// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestPrefetchL2Refused: the option is CUDA's (a PTX kernel); the mock
// refuses it with an error that names the option and the backend, and a
// budget out of range is refused on any backend.
func TestPrefetchL2Refused(t *testing.T) {
	_, dev := openMock(t)
	for _, tc := range []struct {
		mib  int
		want string
	}{
		{16, "llm: PrefetchL2MiB needs the cuda backend (its kernel is PTX for sm_90); this runtime's is mock"},
		{-1, "llm: PrefetchL2MiB -1 out of range 0 .. 1048576"},
	} {
		m, err := NewModelWith(dev, tinyConfig(), Options{Batch: 1, MaxLen: 8, MaxPrompt: 2, PrefetchL2MiB: tc.mib})
		assert.Nil(t, m)
		require.Error(t, err)
		assert.Equal(t, tc.want, err.Error())
	}
}

// TestPlanPrefetch: each layer asks for its output projection's weights
// and then the start of its gate/up weights, up to the budget: bf16 the
// two matrices, int8 the projection's scales, biases and codes and then
// the gate/up scales (four regions at most); the grid has a row per
// region and enough 128-thread blocks for the largest at 16 KiB a thread.
func TestPlanPrefetch(t *testing.T) {
	_, dev := openMock(t)
	for _, int8 := range []bool{false, true} {
		c := tinyConfig()
		c.Int8 = int8
		m := testModel(t, dev, c, 1, 8, 2)
		L := &m.layers[0]
		t.Run(map[bool]string{false: "bf16", true: "int8"}[int8], func(t *testing.T) {
			all := planPrefetch(m.layers, 1<<30)
			require.Len(t, all, c.Layers)
			p := all[0]
			if !int8 {
				require.Len(t, p.rs, 2)
				assert.Equal(t, []int{L.wo.w.Len(), L.wgu1.w.Len()}, p.ns)
			} else {
				require.Len(t, p.rs, 4)
				assert.Equal(t, []int{L.wo.qs.Len(), L.wo.qb.Len(), L.wo.qw.Len(), L.wgu1.qs.Len()}, p.ns)
			}
			assert.Len(t, p.args, 8)
			assert.Equal(t, uint32(len(p.rs)), p.cfg.Grid[1])
			most := 0
			for _, n := range p.ns {
				most = max(most, n)
			}
			assert.Equal(t, uint32((most+prefetchPiece*128-1)/(prefetchPiece*128)), p.cfg.Grid[0])

			// A budget below the first region: that region only, cut.
			cut := planPrefetch(m.layers, 100)[0]
			require.Len(t, cut.rs, 1)
			assert.Equal(t, []int{100}, cut.ns)
			assert.Equal(t, uint32(1), cut.cfg.Grid[0])

			// No budget: no launch.
			assert.Nil(t, planPrefetch(m.layers, 0)[0].args)
		})
	}
}

// TestPrefetchPTXAssembles: the kernel's PTX assembles for sm_90 with
// ptxas (PATH, /usr/local/cuda, or the CUDA packages scripts/build_cuda.sh
// installs into .cuda-venv/); skipped where there is none.
func TestPrefetchPTXAssembles(t *testing.T) {
	ptxas := testutil.CUDATool(t, "ptxas", "")
	if ptxas == "" {
		t.Skip("no ptxas (scripts/build_cuda.sh installs one into .cuda-venv/)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prefetch.ptx")
	require.NoError(t, os.WriteFile(src, []byte(prefetchPTX), 0o644))
	testutil.Run(t, "assembling the prefetch kernel", ptxas, "-arch=sm_90", "-o", filepath.Join(dir, "prefetch.cubin"), src)
}
