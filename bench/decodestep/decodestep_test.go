// SPDX-License-Identifier: Apache-2.0

package decodestep

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// mockDevice is device 0 of a runtime on the mock, closed at the test's
// end.
func mockDevice(t *testing.T) *core.Device { return mockrt.Device0(t, mockrt.Open(t, "")) }

// tiny is the mock's config: small enough for a CPU, with more than one
// layer and an intermediate size that is not a multiple of the hidden.
var tiny = Config{Hidden: 64, Inter: 160, Layers: 3}

func TestCheckOnMockMatchesReference(t *testing.T) {
	dev := mockDevice(t)
	for _, c := range []struct{ v, norm, want string }{
		{"plain", "auto", "builtin"}, {"fused", "auto", "builtin"}, {"plain", "composed", "composed"}, {"fused", "composed", "composed"},
	} {
		v := c.v
		for _, b := range []int{1, 5} {
			r, err := Check(dev, tiny, b, v, c.norm, 0)
			require.NoError(t, err, "%s %s batch %d", v, c.norm, b)
			assert.Equal(t, v, r.Variant)
			assert.Equal(t, c.want, r.Norm)
			require.NotNil(t, r.OK)
			assert.True(t, *r.OK)
			assert.Equal(t, "identical", r.Match)
			assert.LessOrEqual(t, r.MaxErr, r.Tol)
			t.Logf("%s %s batch %d: max relative error %.4g (tolerance %g), %d ops", v, r.Norm, b, r.MaxErr, r.Tol, r.Ops)
		}
	}
}

// TestCheckFailsOnAWrongStep: the reference comparison catches a step
// that computes something else (the gate GEMM reading W untransposed).
func TestCheckFailsOnAWrongStep(t *testing.T) {
	dev := mockDevice(t)
	k, err := newKit(dev, "composed")
	require.NoError(t, err)
	defer k.close()
	k.tweak = func(m *model) { m.up.TransA, m.up.LDA = false, m.c.Inter }
	r, err := k.check(Config{Hidden: 64, Inter: 64, Layers: 1}, 2, false, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "differs from the Go reference")
	assert.False(t, *r.OK)
}

func TestRunOnMock(t *testing.T) {
	dev := mockDevice(t)
	var rs []Result
	err := Run(dev, Options{Configs: []Config{tiny, {Hidden: 32, Inter: 64, Layers: 2}}, Batches: []int{1, 3}, Norm: "composed",
		Steps: 3, Warmup: 1, Variants: []string{"plain", "fused"}, Emit: func(r Result) error { rs = append(rs, r); return nil }})
	require.NoError(t, err)
	require.Len(t, rs, 16)
	for _, r := range rs {
		assert.Empty(t, r.Note, "%s %s batch %d", r.Config, r.Impl, r.Batch)
		assert.Greater(t, r.StepUs, 0.0, "%s %s", r.Config, r.Impl)
		assert.Greater(t, r.HostUs, 0.0, "%s %s", r.Config, r.Impl)
		assert.Equal(t, 3, r.Steps)
		switch r.Impl {
		case "gpurt eager":
		case "gpurt replayed":
			assert.Equal(t, "identical", r.Match)
		default:
			t.Errorf("unexpected impl %q", r.Impl)
		}
	}
	// Ops: the copy, then per layer the composed norm (55 ops) and 5 more
	// (3 fused).
	assert.Equal(t, "plain", rs[0].Variant)
	assert.Equal(t, 1+3*(55+5), rs[0].Ops)
	assert.Equal(t, rs[0].Ops, rs[1].Ops, "the graph has one node per eager operation")
	assert.Equal(t, "fused", rs[2].Variant)
	assert.Equal(t, 1+3*(55+3), rs[2].Ops)
	assert.Equal(t, rs[2].Ops, rs[3].Ops)
}

func TestBadInput(t *testing.T) {
	dev := mockDevice(t)
	_, err := Check(dev, tiny, 1, "plain", "fast", 0)
	assert.ErrorContains(t, err, `norm "fast"`)
	_, err = Check(dev, tiny, 1, "plain", "ptx", 0)
	assert.ErrorContains(t, err, "rmsnorm.ptx")
	_, err = Check(dev, tiny, 1, "plain", "builtin", 0)
	assert.NoError(t, err, "the mock has rmsnorm_bf16")
	_, err = Check(dev, Config{Hidden: 0, Inter: 4, Layers: 1}, 1, "plain", "", 0)
	assert.ErrorContains(t, err, "must be positive")
	_, err = Check(dev, tiny, 1, "merged", "", 0)
	assert.ErrorContains(t, err, `variant "merged"`)
	assert.ErrorContains(t, Run(dev, Options{}), "Emit is nil")
	assert.ErrorContains(t, Run(dev, Options{Variants: []string{"x"}, Emit: func(Result) error { return nil }}), `variant "x"`)
	_, err = Check(nil, tiny, 1, "plain", "", 0)
	assert.ErrorContains(t, err, "nil device")
	for _, s := range []string{"", "1/2", "1/2/x", "4/0/1"} {
		_, err := ParseConfigs(s)
		assert.Error(t, err, "%q", s)
	}
	cs, err := ParseConfigs("4096/14336/32, 1024/4096/24")
	require.NoError(t, err)
	assert.Equal(t, []Config{{4096, 14336, 32}, {1024, 4096, 24}}, cs)
	_, err = ParseBatches("1,-2")
	assert.ErrorContains(t, err, `"-2"`)
	_, err = ParseConfigs(" , ")
	assert.EqualError(t, err, `decodestep: no config in " , "`)
	bs, err := ParseBatches(" 1,,16 ")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 16}, bs)
	_, err = ParseBatches("")
	assert.EqualError(t, err, `decodestep: no batch size in ""`)
}

// TestPTXUpToDate: rmsnorm.ptx records the sha256 of the rmsnorm.cu it
// was made from; when nvcc is at hand, the PTX is what it makes now.
func TestPTXUpToDate(t *testing.T) {
	src, err := os.ReadFile("rmsnorm.cu")
	require.NoError(t, err)
	first, _, _ := bytes.Cut(rmsnormPTX, []byte("\n"))
	m := regexp.MustCompile(`sha256 ([0-9a-f]{64})`).FindSubmatch(first)
	require.NotNil(t, m, "rmsnorm.ptx's first line names no sha256: %q", first)
	sum := sha256.Sum256(src)
	require.Equal(t, hex.EncodeToString(sum[:]), string(m[1]),
		"rmsnorm.cu changed since rmsnorm.ptx was generated: run scripts/gen_decodestep_ptx.sh")
	assert.Contains(t, string(rmsnormPTX), ".entry decodestep_rmsnorm_bf16(")
	root := testutil.RepoRoot(t)
	nvcc := testutil.CUDATool(t, "nvcc", "NVCC")
	if nvcc == "" {
		t.Skip("no nvcc: only the source hash was checked")
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "gen_decodestep_ptx.sh"), "--check")
	cmd.Env = append(os.Environ(), "NVCC="+nvcc)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}
