// SPDX-License-Identifier: Apache-2.0

package sampling

import (
	"fmt"

	"github.com/metrale/gpurt/core"
)

// Sampler launches sample_rows_T for one logits element type on one
// device. Safe for concurrent use (it holds only the kernel).
type Sampler struct {
	k     *core.Kernel
	dtype core.DType
}

// NewSampler finds sample_rows_T of dtype (F32, F16 or BF16) in dev's
// built-in module. A plugin older than ABI 1.8 has no such kernel: the
// error says so.
func NewSampler(dev *core.Device, dtype core.DType) (*Sampler, error) {
	switch dtype {
	case core.F32, core.F16, core.BF16:
	default:
		return nil, fmt.Errorf("sampling: logits type %v: want f32, f16 or bf16", dtype)
	}
	mod, err := dev.BuiltinModule()
	if err != nil {
		return nil, fmt.Errorf("sampling: %w", err)
	}
	name := "sample_rows_" + dtype.String()
	k, err := mod.Kernel(name)
	if err != nil {
		return nil, fmt.Errorf("sampling: built-in kernel %s (ABI 1.8): %w", name, err)
	}
	return &Sampler{k: k, dtype: dtype}, nil
}

// block is the threads per row: a power of two from 32 to 1024, about a
// quarter of a row's elements per thread.
func block(cols int) uint32 {
	b := 32
	for b < 1024 && b*4 < cols {
		b *= 2
	}
	return uint32(b)
}

// Sample enqueues on s the draw of one token per row of logits (rows x
// vocab of the sampler's type, row-major): out receives OutBytes(rows)
// bytes (Decode reads them), params holds a Batch's Bytes for rows rows
// and hist history slots. The penalties are applied to logits in place.
// The plugin checks every view's extent; this checks the shape. It
// allocates nothing, and on a capturing stream it is recorded.
func (sm *Sampler) Sample(s *core.Stream, out, logits, params core.Region, rows, vocab, hist int) error {
	if rows < 1 || vocab < 1 || hist < 0 || hist > MaxHistory {
		return fmt.Errorf("sampling: rows %d, vocab %d, hist %d: want rows and vocab >= 1, hist in 0 .. %d", rows, vocab, hist, MaxHistory)
	}
	cfg := core.LaunchConfig{Grid: [3]uint32{uint32(rows), 1, 1}, Block: [3]uint32{block(vocab), 1, 1}}
	return s.Launch(sm.k, cfg, core.ArgBuffer(out), core.ArgBuffer(logits), core.ArgBuffer(params),
		core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(vocab)), core.ArgScalar[uint64](uint64(hist)))
}
