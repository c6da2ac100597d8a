// SPDX-License-Identifier: Apache-2.0

// Package conform is the conformance suite: what "a backend works" means.
// The same checks run in Go tests (on the mock) and in `gpurt conform` on
// any plugin; a backend must pass them unchanged.
//
// Each check is named ("roundtrip/sizes", "gemm/bf16/bias_gelu", ...),
// runs on fresh random data (never zeros), poisons outputs before running
// so that unwritten elements show, and ends passed, failed (with a
// message) or skipped (with the reason). A panic in a check is a failure,
// not a crash of the suite.
package conform

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// Options tune a run.
type Options struct {
	// Quick shrinks the large checks (the large round trip, large GEMMs).
	Quick bool
	// Long runs the long-context attention checks (batch 64 x 8K, 32K
	// tokens): seconds on a GPU, many minutes on the mock.
	Long bool
	// Seed of the random data; 0 picks one from the clock (the result
	// says which).
	Seed uint64
	// OpenRuntime opens a second runtime of the same plugin, for the
	// cross-runtime and closed-runtime checks; nil skips them.
	OpenRuntime func() (*core.Runtime, error)
	// Filter runs only the checks whose name matches (nil: all).
	Filter *regexp.Regexp
	// Progress, when set, is called as each check ends.
	Progress func(c Check)
}

// Check is one named check's outcome.
type Check struct {
	Name     string        `json:"name"`
	Passed   bool          `json:"passed"`
	Skipped  bool          `json:"skipped,omitempty"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Result is a whole run.
type Result struct {
	Backend string  `json:"backend"`
	Devices int     `json:"devices"`
	Seed    uint64  `json:"seed"`
	Quick   bool    `json:"quick"`
	Checks  []Check `json:"checks"`
	Passed  int     `json:"passed"`
	Failed  int     `json:"failed"`
	Skipped int     `json:"skipped"`
}

// OK reports whether no check failed.
func (r *Result) OK() bool { return r.Failed == 0 }

// Summary is the last line `gpurt conform` prints: "N passed, M failed",
// followed by ", K skipped" when a check was skipped.
func (r *Result) Summary() string {
	s := fmt.Sprintf("%d passed, %d failed", r.Passed, r.Failed)
	if r.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped", r.Skipped)
	}
	return s
}

// errSkip marks a check skipped.
type skipError struct{ reason string }

func (e skipError) Error() string { return "skipped: " + e.reason }

func skip(format string, args ...any) error { return skipError{fmt.Sprintf(format, args...)} }

// env is what checks see.
type env struct {
	ctx  context.Context
	rt   *core.Runtime
	dev  *core.Device
	opts Options
	rng  *rand.Rand
	seed uint64
}

type check struct {
	name string
	run  func(e *env) error
}

// registry, in run order; each file of checks adds its own.
func checks() []check {
	var cs []check
	cs = append(cs, apiChecks()...)
	cs = append(cs, misuseChecks()...)
	cs = append(cs, dataChecks()...)
	cs = append(cs, kernelChecks()...)
	cs = append(cs, sampleEdgeChecks()...)
	cs = append(cs, batchChecks()...)
	cs = append(cs, graphChecks()...)
	cs = append(cs, graphOrderChecks()...)
	cs = append(cs, graphAttentionChecks()...)
	cs = append(cs, orderChecks()...)
	cs = append(cs, concurrencyChecks()...)
	cs = append(cs, gemmChecks()...)
	cs = append(cs, quantChecks()...)
	cs = append(cs, attentionChecks()...)
	cs = append(cs, kvBoundsChecks()...)
	cs = append(cs, commChecks()...)
	return cs
}

// slotChecks names, for every slot of gpurt_api, a check of the suite that
// calls it (TestEverySlotHasAConformanceCheck holds the two lists together) (its name, or a prefix of names: "quant/" or "comm/all_reduce" for a family). The slots the
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

// Run runs the suite on rt and returns every check's outcome. It does not
// close rt. The last check compares the plugin's live counters with those
// at the start (after Runtime.Trim): nothing may leak. Safe to call while
// other goroutines use rt, but then the leak check may fail.
func Run(ctx context.Context, rt *core.Runtime, opts Options) *Result {
	seed := opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	res := &Result{Backend: rt.Backend(), Devices: len(rt.Devices()), Seed: seed, Quick: opts.Quick}
	dev, err := rt.Device(0)
	e := &env{ctx: ctx, rt: rt, dev: dev, opts: opts, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), seed: seed}
	add := func(c Check) {
		switch {
		case c.Skipped:
			res.Skipped++
		case c.Passed:
			res.Passed++
		default:
			res.Failed++
		}
		res.Checks = append(res.Checks, c)
		if opts.Progress != nil {
			opts.Progress(c)
		}
	}
	if err != nil {
		add(Check{Name: "devices", Message: err.Error()})
		return res
	}
	_ = rt.Trim()
	base, baseErr := inspect.Stats(rt)
	_, builtinErr := dev.Module(core.BuiltinModuleName) // nil: the caller had it loaded
	for _, c := range checks() {
		if opts.Filter != nil && !opts.Filter.MatchString(c.name) {
			continue
		}
		if ctx.Err() != nil {
			add(Check{Name: c.name, Skipped: true, Message: "skipped: " + ctx.Err().Error()})
			continue
		}
		add(runOne(e, c))
	}
	// Leaks.
	start := time.Now()
	lc := Check{Name: "leaks"}
	if baseErr != nil {
		lc.Message = "stats at the start: " + baseErr.Error()
	} else {
		if builtinErr != nil { // the suite loaded it: unload it again
			for _, d := range rt.Devices() {
				if m, err := d.Module(core.BuiltinModuleName); err == nil {
					_ = m.Unload()
				}
			}
		}
		if err := rt.Trim(); err != nil {
			lc.Message = "trim: " + err.Error()
		} else if now, err := inspect.Stats(rt); err != nil {
			lc.Message = "stats at the end: " + err.Error()
		} else if now != base {
			lc.Message = fmt.Sprintf("live objects at the start %+v, at the end %+v", base, now)
		} else {
			lc.Passed = true
		}
	}
	lc.Duration = time.Since(start)
	add(lc)
	return res
}

func runOne(e *env, c check) (out Check) {
	out.Name = c.name
	start := time.Now()
	defer func() {
		out.Duration = time.Since(start)
		if p := recover(); p != nil {
			out.Passed = false
			out.Message = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	err := c.run(e)
	var sk skipError
	switch {
	case err == nil:
		out.Passed = true
	case errors.As(err, &sk):
		out.Skipped, out.Message = true, err.Error()
	default:
		out.Message = err.Error()
	}
	return out
}

// expect returns an error unless err matches want.
func expect(what string, err, want error) error {
	if err == nil {
		return fmt.Errorf("%s: no error, want %v", what, want)
	}
	if !errors.Is(err, want) {
		return fmt.Errorf("%s: %v, want an error wrapping %v", what, err, want)
	}
	return nil
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// withStream runs fn on a new stream of e.dev and closes the stream
// after (and after fn's own deferred calls).
func withStream(e *env, fn func(s *core.Stream) error) error {
	s, err := e.dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// bufferAndStream allocates n bytes on e.dev and makes a stream there;
// done closes the stream and frees the buffer.
func bufferAndStream(e *env, n int) (b *core.Buffer, s *core.Stream, done func(), err error) {
	if b, err = e.dev.Alloc(n); err != nil {
		return nil, nil, nil, err
	}
	if s, err = e.dev.NewStream(); err != nil {
		b.Free()
		return nil, nil, nil, err
	}
	return b, s, func() { s.Close(); b.Free() }, nil
}
