// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/internal/abi"
)

// slotChecks names, for every slot of gpurt_api, a check of the suite that
// calls it (its name, or a prefix of names: "quant/" or "comm/all_reduce" for a family). The slots the
// loader and the binding layer call themselves, on every run, are "".
var slotChecks = map[string]string{
	"error_get": "", "error_destroy": "", "plugin_info": "", "probe": "", "shutdown": "",
	"runtime_create": "api/devices", "runtime_destroy": "api/devices",
	"runtime_stats": "api/stats_and_control", "runtime_control": "api/stats_and_control",
	"device_count": "api/devices", "device_info": "api/devices", "device_synchronize": "api/streams_and_events",
	"buffer_alloc": "api/buffer_views", "buffer_free": "api/buffer_views",
	"host_alloc": "api/host_buffer", "host_free": "api/host_buffer",
	"copy": "data/roundtrip_sizes", "memset": "data/memset",
	"stream_create": "api/streams_and_events", "stream_destroy": "api/streams_and_events",
	"stream_synchronize": "api/streams_and_events", "stream_query": "api/streams_and_events",
	"stream_wait_event": "order/across_streams",
	"event_create":      "api/streams_and_events", "event_destroy": "api/streams_and_events",
	"event_record": "api/streams_and_events", "event_query": "api/streams_and_events",
	"event_synchronize": "api/streams_and_events", "event_elapsed": "order/elapsed_time",
	"module_load": "api/modules", "module_unload": "api/modules", "kernel_get": "api/modules",
	"kernel_info": "api/modules", "launch": "kernel/",
	"gemm_plan_create": "gemm/f32", "gemm_plan_destroy": "gemm/op_cache_hits", "gemm_run": "gemm/f32",
	"launch_batch": "batch/reuse",
	"graph_create": "graph/replay_matches_eager", "graph_launch": "graph/replay_matches_eager",
	"graph_update": "graph/set_arg", "graph_destroy": "graph/replay_matches_eager",
	"quant_matmul": "quant/", "grouped_gemm": "grouped/",
	"kv_append":        "attention/append",
	"attention_create": "attention/decode", "attention_destroy": "attention/decode",
	"attention_plan": "attention/decode", "attention_run": "attention/decode",
	"comm_unique_id": "comm/multi_runtime", "comm_create": "comm/all_reduce", "comm_destroy": "comm/all_reduce",
	"comm_abort": "comm/abort", "comm_query": "comm/abort", "comm_run": "comm/all_reduce",
	"graph_recordable": "graph/decode_step_attention",
}

// TestEverySlotHasAConformanceCheck fails, naming the slot, when a slot of
// the table (abi.API, generated from the header) has no entry in
// slotChecks, or its entry names no check of the suite: a new operation
// needs its conformance checks (CONTRIBUTING.md, step 12).
func TestEverySlotHasAConformanceCheck(t *testing.T) {
	var names []string
	for _, c := range checks() {
		names = append(names, c.name)
	}
	api := reflect.TypeOf(abi.API{})
	seen := map[string]bool{}
	for i := 3; i < api.NumField(); i++ { // after struct_size, abi_major, abi_minor
		slot := api.Field(i).Tag.Get("c")
		seen[slot] = true
		want, ok := slotChecks[slot]
		if !assert.True(t, ok, "slot %s has no conformance check: add conform/<op>.go, register it in checks() (conform.go) and name it in slotChecks", slot) || want == "" {
			continue
		}
		found := false
		for _, n := range names {
			found = found || n == want || strings.HasPrefix(n, strings.TrimSuffix(want, "/")+"/")
		}
		assert.True(t, found, "slot %s: slotChecks names %q, which is no check of the suite", slot, want)
	}
	for slot := range slotChecks {
		assert.True(t, seen[slot], "slotChecks names %s, which is no slot of gpurt_api", slot)
	}
}
