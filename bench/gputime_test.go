// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// The timer runs fn iters times behind the sleep and reports a positive
// time per call; a failing fn and an unknown backend are errors.
func TestGPUTimer(t *testing.T) {
	_, err := OpenGPUTimer([]string{testutil.MockPlugin(t)}, "nonesuch")
	require.Error(t, err)
	tm, err := OpenGPUTimer([]string{testutil.MockPlugin(t)}, "mock")
	require.NoError(t, err)
	defer tm.Close()
	_, err = tm.BehindSleep(time.Millisecond, 4, func() error { return tm.Stream.Memset(nil, 0) })
	assert.Error(t, err, "a nil region must fail the call")
	buf, err := tm.Device.Alloc(64)
	require.NoError(t, err)
	defer buf.Free()
	calls := 0
	us, err := tm.BehindSleep(time.Millisecond, 4, func() error { calls++; return tm.Stream.Memset(buf, 1) })
	require.NoError(t, err)
	assert.Equal(t, 4, calls)
	assert.Greater(t, us, 0.0)
}

// Time makes the warm-up, host-timed and behind-the-sleep calls and
// reports both figures; a failing fn is an error.
func TestGPUTimerTime(t *testing.T) {
	tm, err := OpenGPUTimer([]string{testutil.MockPlugin(t)}, "mock")
	require.NoError(t, err)
	defer tm.Close()
	_, _, err = tm.Time(3, func() error { return tm.Stream.Memset(nil, 0) })
	assert.Error(t, err, "a nil region must fail the call")
	buf, err := tm.Device.Alloc(64)
	require.NoError(t, err)
	defer buf.Free()
	calls := 0
	gpu, wall, err := tm.Time(3, func() error { calls++; return tm.Stream.Memset(buf, 1) })
	require.NoError(t, err)
	assert.Equal(t, 5+3+3, calls)
	assert.Greater(t, gpu, 0.0)
	assert.Greater(t, wall, 0.0)
}
