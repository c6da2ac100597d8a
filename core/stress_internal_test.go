// SPDX-License-Identifier: Apache-2.0

package core

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestStressCloseCopiesTrimDeviceLoss (issue 9): for stressRounds rounds,
// a runtime's Close races staged synchronous copies up and down on six
// goroutines, a goroutine trimming the runtime and its host heap, and (in
// two rounds of three) the device's loss. Every round must end (bounded:
// a hang fails), every call must either succeed with the right bytes or
// fail with ErrClosed or ErrDeviceLost, and afterwards no copy holds a
// staging token. The copies are small (128 KiB in 64 KiB chunks, from
// 1 MiB heap blocks) but take the staged path, so a round is cheap.
// GPURT_STRESS_ROUNDS overrides the count.
func TestStressCloseCopiesTrimDeviceLoss(t *testing.T) {
	rounds := 1000
	if v, err := strconv.Atoi(os.Getenv("GPURT_STRESS_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if testing.Short() {
		rounds = 100
	}
	dir := testutil.MockPlugin(t)
	const (
		copiers = 6
		size    = 128 << 10 // above directMax: staged, two 64 KiB chunks
	)
	rng := rand.New(rand.NewPCG(9, 9))
	var outcomes [4]atomic.Int64 // ok, closed, lost, rounds with a lost device
	for round := 0; round < rounds; round++ {
		rt, err := Open(Config{PluginPaths: []string{dir}, Backend: "mock", PluginOptions: "delay_us=0",
			ProbeInProcess: true, StageChunk: 64 << 10, StageSlots: 2, CopyWorkers: 1})
		require.NoError(t, err)
		rt.heap.blockSize = 1 << 20 // 64 MiB blocks would cost a 64 MiB memset a round
		d := rt.devices[0]
		buf, err := d.Alloc(copiers * size)
		require.NoError(t, err)
		lose := round%3 != 0
		closeAfter := int64(rng.IntN(3 * copiers)) // copies done before Close
		loseAfter := int64(rng.IntN(3 * copiers))
		if lose {
			outcomes[3].Add(1)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		finished := make(chan struct{})
		var problems []string
		var mu sync.Mutex
		problem := func(f string, err error) {
			mu.Lock()
			problems = append(problems, f+": "+err.Error())
			mu.Unlock()
		}
		expected := func(err error) bool {
			switch {
			case err == nil:
				outcomes[0].Add(1)
			case errors.Is(err, ErrClosed):
				outcomes[1].Add(1)
			case errors.Is(err, ErrDeviceLost):
				outcomes[2].Add(1)
			default:
				return false
			}
			return true
		}
		go func() {
			defer close(finished)
			var done, stopped atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < copiers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer stopped.Add(1)
					v, err := buf.View(g*size, size)
					if err != nil {
						problem("view", err)
						return
					}
					src := bytes.Repeat([]byte{byte(round), byte(g), 0x5a}, size/3+1)[:size]
					got := make([]byte, size)
					for {
						up := CopyFromHost(v, src)
						if !expected(up) {
							problem("copy_from_host", up)
						}
						down := CopyToHost(got, v)
						if !expected(down) {
							problem("copy_to_host", down)
						}
						if up == nil && down == nil && !bytes.Equal(src, got) {
							problem("round trip", errors.New("the bytes read back differ from those written"))
						}
						done.Add(1)
						if up != nil || down != nil {
							return // closed or lost: every later copy fails alike
						}
					}
				}()
			}
			wg.Add(1)
			go func() { // trim until closed
				defer wg.Done()
				for {
					err := rt.Trim()
					if !expected(err) {
						problem("trim", err)
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}()
			if lose {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done.Load() < loseAfter && rt.l.alive() {
						time.Sleep(20 * time.Microsecond)
					}
					if err := rt.control("lose_device", 0); !expected(err) {
						problem("lose_device", err)
					}
				}()
			}
			for done.Load() < closeAfter && stopped.Load() < copiers {
				time.Sleep(20 * time.Microsecond)
			}
			if err := rt.Close(); err != nil {
				problem("close", err)
			}
			wg.Wait()
		}()
		select {
		case <-finished:
		case <-ctx.Done():
			t.Fatalf("round %d (device lost: %v) did not end within a minute: a hang", round, lose)
		}
		cancel()
		require.Empty(t, problems, "round %d (device lost: %v)", round, lose)
		assert.Zero(t, len(d.stageTokens), "round %d: a copy kept its staging token", round)
	}
	t.Logf("%d rounds (%d with a lost device): %d calls succeeded, %d closed, %d device lost",
		rounds, outcomes[3].Load(), outcomes[0].Load(), outcomes[1].Load(), outcomes[2].Load())
}
