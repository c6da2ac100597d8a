// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

// Tests of issue 9: hangs, leaks, wrong results that succeed, crashes.

// hangLimit bounds a call that must return: far longer than any of these
// calls takes even under -race on a loaded 2-core machine, so reaching it
// means a hang, not slowness.
const hangLimit = 60 * time.Second

// bounded runs fn and fails the test when it has not returned within
// hangLimit (fn's goroutine is then left behind; the test does not stall).
func bounded(t testing.TB, what string, fn func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s did not return within %v: it hangs", what, hangLimit)
	}
}

// stagedSize takes the staged path (at least 64 KiB) in one small chunk.
const stagedSize = 128 << 10

// Item 1: copies waiting for a staging slot wake when the slot's creation
// fails, and Close then returns.
func TestStagedCopyWaitersWake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(rt *core.Runtime) error
		want  error
	}{
		{"device lost", func(rt *core.Runtime) error { return rt.Control("lose_device", 0) }, core.ErrDeviceLost},
		// The first pinned allocation of the copies fails: one stager's
		// slots cannot be made while others wait.
		{"pinned memory exhausted", func(rt *core.Runtime) error { return rt.Control("fail_alloc_nth", 1) }, core.ErrOutOfMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := openMock(t, "delay_us=0")
			d := dev0(t, rt)
			const copies = 64
			buf, err := d.Alloc(copies * stagedSize)
			require.NoError(t, err)
			require.NoError(t, tc.fault(rt))
			errs := make(chan error, copies)
			bounded(t, "64 concurrent staged copies", func() {
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := 0; i < copies; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						v, err := buf.View(i*stagedSize, stagedSize)
						if err == nil {
							if i%2 == 0 {
								err = core.CopyFromHost(v, make([]byte, stagedSize))
							} else {
								err = core.CopyToHost(make([]byte, stagedSize), v)
							}
						}
						errs <- err
					}()
				}
				close(start)
				wg.Wait()
			})
			close(errs)
			failed := 0
			for err := range errs {
				if err != nil {
					failed++
					assert.ErrorIs(t, err, tc.want)
				}
			}
			assert.NotZero(t, failed, "the fault made no copy fail")
			bounded(t, "Close after the copies", func() { assert.NoError(t, rt.Close()) })
		})
	}
}

// Item 1: Close racing large copies returns, and so does every copy
// (each either completes or fails with ErrClosed).
func TestCloseRacingStagedCopies(t *testing.T) {
	for round := 0; round < 20; round++ {
		rt := openMock(t, "delay_us=0")
		d := dev0(t, rt)
		const copies = 16
		buf, err := d.Alloc(copies * stagedSize)
		require.NoError(t, err)
		bounded(t, "copies racing Close", func() {
			var wg, started sync.WaitGroup
			started.Add(copies)
			for i := 0; i < copies; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := buf.View(i*stagedSize, stagedSize)
					require.NoError(t, err)
					src := make([]byte, stagedSize)
					started.Done()
					for {
						if err := core.CopyFromHost(v, src); err != nil {
							assert.ErrorIs(t, err, core.ErrClosed)
							return
						}
					}
				}()
			}
			// Close while the first copies make the device's stagers.
			started.Wait()
			assert.NoError(t, rt.Close())
			wg.Wait()
		})
	}
}
