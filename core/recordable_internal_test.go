// SPDX-License-Identifier: Apache-2.0

package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/testutil"
)

// notRecordable are the stream operations the mock does not record in a
// graph, each with why. Every other slot that enqueues on a stream must be
// recordable on the mock (CONTRIBUTING.md, step 9).
var notRecordable = map[bind.Slot]string{
	bind.SlotGraphLaunch:     "a graph is not recorded into another graph",
	bind.SlotStreamWaitEvent: "recorded as an EVENT_WAIT item, not a CALL",
	bind.SlotEventRecord:     "recorded as an EVENT_RECORD item, not a CALL",
	bind.SlotAttentionPlan:   "plans on the host between replays; the run is recorded",
}

// TestEveryStreamSlotIsRecordable fails, naming the slot and the places to
// add it, when an operation that enqueues on a stream is not recordable
// on the mock: the mirror of the slot list in csrc's graph tables was
// forgotten.
func TestEveryStreamSlotIsRecordable(t *testing.T) {
	rt, err := Open(Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock"})
	require.NoError(t, err)
	defer rt.Close()
	for s := bind.Slot(0); s < bind.NumSlots; s++ {
		if !s.IsStreamOp() {
			continue
		}
		t.Run(s.String(), func(t *testing.T) {
			var out uint8
			require.NoError(t, rt.p.GraphRecordable("graph_recordable", rt.h, s.Offset(), &out))
			if why, ok := notRecordable[s]; ok {
				assert.NotEmpty(t, why)
				assert.Equal(t, uint8(0), out, "slot %s is in notRecordable but the mock records it: take it off the list", s)
				return
			}
			assert.Equal(t, uint8(1), out, "slot %s enqueues on a stream but the mock's graph_recordable answers 0: is it in GP_ZCALLS of csrc/gp_zslots.h (make generate; genbind's notCalls leaves a slot out) and does the mock leave its GP_REC_* bit clear? (CONTRIBUTING.md, step 9)", s)
		})
	}
}
