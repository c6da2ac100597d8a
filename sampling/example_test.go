// SPDX-License-Identifier: Apache-2.0

package sampling_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/sampling"
)

// TestMain puts a freshly built mock plugin on GPURT_PLUGIN_PATH, for the
// runnable example (it opens a runtime as a program would).
func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "sampling")) }

// Two requests in one step: a greedy one, and one sampling the two most
// likely tokens at temperature 0.8 with a repetition penalty on token 2.
func ExampleSampler_Sample() {
	mockrt.Example(core.Config{}, func(_ *core.Runtime, dev *core.Device, s *core.Stream) error {
		const rows, vocab, hist = 2, 4, 8
		logits := []float32{0.5, 2, 1, -1 /* row 1 */, 0.5, 2, 3, -1}
		raw := make([]byte, 4*len(logits))
		for i, v := range logits {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		batch, _ := sampling.NewBatch(rows, vocab, hist)
		greedy := sampling.Greedy()
		if err := batch.Set(0, &greedy); err != nil {
			return err
		}
		p := sampling.Params{Temperature: 0.8, TopK: 2, TopP: 1, RepetitionPenalty: 4, Seed: 42, History: []int32{2}}
		if err := batch.Set(1, &p); err != nil {
			return err
		}
		x, _ := dev.Alloc(len(raw))
		params, _ := dev.Alloc(len(batch.Bytes()))
		out, _ := dev.Alloc(sampling.OutBytes(rows))
		defer x.Free()
		defer params.Free()
		defer out.Free()
		_ = core.CopyFromHost(x, raw)
		_ = core.CopyFromHost(params, batch.Bytes())
		sm, err := sampling.NewSampler(dev, core.F32)
		if err != nil {
			return err
		}
		if err := sm.Sample(s, out, x, params, rows, vocab, hist); err != nil {
			return err
		}
		_ = s.Synchronize()
		res := make([]byte, sampling.OutBytes(rows))
		_ = core.CopyToHost(res, out)
		tokens, logprobs := make([]int32, rows), make([]float32, rows)
		_ = sampling.Decode(res, rows, tokens, logprobs)
		fmt.Println("row 0 (greedy):", tokens[0])
		// Row 1: token 2's logit 3 becomes 3/4, so the two most likely are 1 and 2.
		fmt.Println("row 1 draws 1 or 2:", tokens[1] == 1 || tokens[1] == 2, "logprob < 0:", logprobs[1] < 0)
		return nil
	})
	// Output:
	// row 0 (greedy): 1
	// row 1 draws 1 or 2: true logprob < 0: true
}
