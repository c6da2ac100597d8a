// SPDX-License-Identifier: Apache-2.0

// Command gpurt-multibench times the several-GPU paths of gpurt, all-reduce
// and peer copies: package bench/multibench, whose doc says what and how
// (scripts/gpu_multi.sh runs it on 2 GPUs; it needs no cgo and is built
// with CGO_ENABLED=0). With -procs it starts itself once per rank. Every
// line of output is one JSON object.
package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/metrale/gpurt/bench/multibench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/internal/bytesize"
	"github.com/metrale/gpurt/internal/cli"
)

// The flags (set by run).
var (
	rf                             cli.Runtime // -plugin-path and -backend
	options, sizesF, dtypeF, peerF *string
	only, childID                  *string
	ranksF, shrink, childRank      *int
	procs                          *bool
	stdoutW, stderrW               io.Writer
)

func main() { cli.Main(run) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-multibench", "[flags]",
		"Times all-reduce (one process, and with -procs one process per GPU) and peer copies\nacross GPUs; one JSON object per output line (scripts/gpu_multi.sh makes the table).\n-backend mock -options devices=2 -shrink N checks the program on the mock.", stdout, stderr)
	stdoutW, stderrW = stdout, stderr
	rf = fs.Runtime("cuda", "backend (the mock, with -shrink, checks this program)")
	options = fs.String("options", "", "plugin runtime options (the mock: devices=2)")
	sizesF = fs.String("sizes", "8K,64K,512K,1M,4M,16M,64M,256M,1G", "all-reduce sizes in bytes (K, M, G suffixes)")
	dtypeF = fs.String("dtype", "bf16", "all-reduce element type: f32, f16, bf16")
	ranksF = fs.Int("ranks", 2, "GPUs to use (devices 0 .. ranks-1)")
	peerF = fs.String("peer", "1G", "peer copy size (0: skip)")
	procs = fs.Bool("procs", false, "also time one process per GPU (re-runs this program per rank)")
	only = fs.String("only", "", "run only allreduce or peer")
	shrink = fs.Int("shrink", 1, fmt.Sprintf("divide every size by this, 1 to %d (a quick run on the mock)", maxShrink))
	// one rank of -procs (set by the parent)
	childRank = fs.Int("child-rank", -1, "internal: this process is rank R of -procs")
	childID = fs.String("child-id", "", "internal: the communicator's unique id (hex)")
	fs.Hide("child-rank")
	fs.Hide("child-id")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	switch {
	case *shrink < 1 || *shrink > maxShrink:
		return fs.Usage("-shrink %d: want 1 to %d", *shrink, maxShrink)
	case *ranksF < 1:
		return fs.Usage("-ranks %d: want at least 1", *ranksF)
	case *only != "" && *only != "allreduce" && *only != "peer":
		return fs.Usage("-only %q: want allreduce or peer", *only)
	}
	sizes, err := bytesize.ParseEach(*sizesF, func(f string) (int64, error) { return parseSize(f, false) })
	if err != nil {
		return fs.Usage("-sizes: %v", err)
	}
	peerN, err := parseSize(*peerF, true)
	if err != nil {
		return fs.Usage("-peer: %v", err)
	}
	dt, err := parseDType(*dtypeF)
	if err != nil {
		return fs.Usage("%v", err)
	}
	rt, err := rf.OpenRuntime(core.Config{PluginOptions: *options})
	if err != nil {
		return fs.Fail(err)
	}
	defer rt.Close()
	out := json.NewEncoder(stdout)
	if *childRank >= 0 {
		if err := child(rt, out, sizes, dt); err != nil {
			return fs.Fail(err)
		}
		return cli.ExitOK
	}
	if len(rt.Devices()) < *ranksF {
		return fs.Fail(fmt.Errorf("the runtime has %d devices, -ranks is %d", len(rt.Devices()), *ranksF))
	}
	devs := rt.Devices()[:*ranksF]
	for _, d := range devs {
		i := d.Info()
		fmt.Fprintf(stderr, "device %d: %s, %s, PCI %s\n", d.Index(), i.Name, i.UUID, i.PCIBusID)
	}
	if *only == "" || *only == "allreduce" {
		c, err := collective.New(rt, devs...)
		if err != nil {
			return fs.Fail(err)
		}
		if err := errors.Join(multibench.Sweep(out, "gpurt", c, devs, sizes, dt), c.Close()); err != nil {
			return fs.Fail(err)
		}
		if *procs && rt.Backend() == "mock" {
			// The mock's ranks meet inside one process only.
			_ = out.Encode(multibench.Result{Name: "all_reduce", Impl: "gpurt 1 proc/GPU", Note: "skipped: the mock has no transport between processes"})
		} else if *procs {
			if err := parent(rt, out); err != nil {
				fmt.Fprintln(stderr, "gpurt-multibench: one process per GPU:", err)
				_ = out.Encode(multibench.Result{Name: "all_reduce", Impl: "gpurt 1 proc/GPU", Note: err.Error()})
			}
		}
	}
	if *only == "" || *only == "peer" {
		if peerN > 0 && len(devs) >= 2 {
			multibench.Peer(out, devs[0], devs[1], peerN)
			multibench.Peer(out, devs[1], devs[0], peerN)
		}
	}
	return cli.ExitOK
}

// maxShrink bounds -shrink.
const maxShrink = 1 << 16

func parseDType(s string) (core.DType, error) {
	switch s {
	case "f32":
		return core.F32, nil
	case "f16":
		return core.F16, nil
	case "bf16":
		return core.BF16, nil
	}
	return 0, fmt.Errorf("-dtype %q: f32, f16 or bf16", s)
}

// parseSize reads a byte count (internal/bytesize's syntax) and divides
// it by -shrink; 0 is allowed only when zero is (the peer copy's "skip"),
// and a count that -shrink takes below 4 bytes (one f32) is an error.
func parseSize(s string, zero bool) (int64, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		if zero {
			return 0, nil
		}
		return 0, fmt.Errorf("byte count %q: want at least 4 bytes", s)
	}
	if n/int64(*shrink) < 4 {
		return 0, fmt.Errorf("byte count %q divided by -shrink %d: under 4 bytes", s, *shrink)
	}
	return n / int64(*shrink), nil
}

// parent makes the unique id and runs this program once per rank; rank
// 0's results are printed.
func parent(rt *core.Runtime, out *json.Encoder) error {
	id, err := collective.NewID(rt)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var cmds []*exec.Cmd
	for r := 0; r < *ranksF; r++ {
		args := []string{"-plugin-path", rf.Paths.String(), "-backend", *rf.Backend, "-options", *options, "-sizes", *sizesF,
			"-dtype", *dtypeF, "-ranks", strconv.Itoa(*ranksF), "-shrink", strconv.Itoa(*shrink),
			"-child-rank", strconv.Itoa(r), "-child-id", hex.EncodeToString(id[:])}
		cmd := exec.Command(exe, args...)
		cmd.Stderr = stderrW
		if r == 0 {
			cmd.Stdout = stdoutW
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds = append(cmds, cmd)
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// child is rank -child-rank of -procs: its own runtime, device rank.
func child(rt *core.Runtime, out *json.Encoder, sizes []int64, dt core.DType) error {
	raw, err := hex.DecodeString(*childID)
	if err != nil || len(raw) != len(collective.ID{}) {
		return fmt.Errorf("-child-id is not a %d-byte hex id", len(collective.ID{}))
	}
	var id collective.ID
	copy(id[:], raw)
	d, err := rt.Device(*childRank)
	if err != nil {
		return err
	}
	c, err := collective.Join(rt, collective.JoinConfig{ID: id, NRanks: *ranksF, FirstRank: *childRank, Devices: []*core.Device{d}, Timeout: 120 * time.Second})
	if err != nil {
		return err
	}
	return errors.Join(multibench.Sweep(out, "gpurt 1 proc/GPU", c, []*core.Device{d}, sizes, dt), c.Close())
}
