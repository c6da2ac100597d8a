// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/bytesize"
	"github.com/metrale/gpurt/internal/cli"
)

func init() {
	register("probe", "which plugin would be used, and why (--json for the report as JSON)",
		func(args []string) int { return runProbe(args, os.Stdout, os.Stderr) })
}

// probeJSON is the JSON `gpurt probe --json` prints: the loader's report
// and the error, if any ("" when a backend was chosen). README documents
// every field; keep them stable.
type probeJSON struct {
	*diag.Report
	Error string `json:"error"`
}

func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt probe", "[--json] [--backend NAME] [--plugin-path PATH]...",
		"Prints which plugin would be used, and why: the folders searched, every candidate\nand its state, and the chosen backend's devices.", stdout, stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON (also when it ends in an error)")
	rf := fs.Runtime("", "backend to use: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	cfg := core.Config{PluginPaths: *rf.Paths, Backend: *rf.Backend}
	rep, err := inspect.Probe(cfg)
	if rf.UnknownBackend(err) {
		// A usage error; --json still prints the report, the error in it.
		if *asJSON {
			writeProbeJSON(stdout, stderr, rep, err)
		}
		return fs.Usage("--backend: %s", text(strings.TrimPrefix(err.Error(), "gpurt: ")))
	}
	// Probe does not create a runtime; Open does, and can still fail (a
	// malformed plugin setting such as GPURT_MOCK_DEVICES=x, a device held
	// by another process). Report what Open would do: create the chosen
	// backend's runtime and close it again.
	runtimeLine := ""
	if err == nil && rep != nil && rep.Selected != "" {
		rt, oerr := core.Open(cfg)
		if oerr != nil {
			err = fmt.Errorf("gpurt probe: %s (%s) was chosen, but its runtime cannot be created: %s",
				rep.Backend, rep.Selected, strings.TrimPrefix(oerr.Error(), "gpurt: "))
			runtimeLine = "runtime: cannot be created: " + oerr.Error()
		} else {
			runtimeLine = fmt.Sprintf("runtime: created (%d devices) and closed", len(rt.Devices()))
			if cerr := rt.Close(); cerr != nil {
				err = fmt.Errorf("gpurt probe: closing the %s runtime: %s", rep.Backend, strings.TrimPrefix(cerr.Error(), "gpurt: "))
				runtimeLine = "runtime: created, but closing it failed: " + cerr.Error()
			}
		}
	}
	if *asJSON {
		if !writeProbeJSON(stdout, stderr, rep, err) {
			return cli.ExitError
		}
	} else if rep != nil {
		printReport(stdout, rep)
		if runtimeLine != "" {
			fmt.Fprintln(stdout, text(runtimeLine))
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, text(err.Error()))
		return 1
	}
	return 0
}

// writeProbeJSON prints the JSON report with err in it; false when it
// could not be written (the error printed).
func writeProbeJSON(stdout, stderr io.Writer, rep *diag.Report, err error) bool {
	out := probeJSON{Report: jsonReport(rep)}
	if err != nil {
		out.Error = jsonText(err.Error())
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if e := enc.Encode(out); e != nil {
		fmt.Fprintf(stderr, "gpurt probe: %v\n", e)
		return false
	}
	return true
}

func printReport(w io.Writer, rep *diag.Report) {
	fmt.Fprintf(w, "requested backend: %s\n", text(rep.Requested))
	fmt.Fprintln(w, "folders searched:")
	for _, s := range rep.Searched {
		fmt.Fprintf(w, "  %s\n", text(s))
	}
	if len(rep.Searched) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	fmt.Fprintln(w, "candidates:")
	if len(rep.Candidates) == 0 {
		fmt.Fprintln(w, "  (no plugin files found)")
	}
	for _, c := range rep.Candidates {
		fmt.Fprintf(w, "  %-9s %-6s %s\n", text(string(c.State)), dash(c.Backend), text(c.Path))
		if c.Version != "" || c.ABI != "" {
			fmt.Fprintf(w, "            version %s, ABI %s, priority %d, score %d\n", dash(c.Version), dash(c.ABI), c.Priority, c.Score)
		}
		fmt.Fprintf(w, "            %s\n", text(c.Reason))
		if c.Detail != "" {
			fmt.Fprintf(w, "            %s\n", text(c.Detail))
		}
	}
	if rep.Selected == "" {
		fmt.Fprintln(w, "chosen: none")
		return
	}
	fmt.Fprintf(w, "chosen: %s (%s)\n", dash(rep.Backend), text(filepath.Clean(rep.Selected)))
	for _, c := range rep.Candidates {
		if c.State != "selected" {
			continue
		}
		fmt.Fprintf(w, "devices: %d\n", len(c.Devices))
		for _, d := range c.Devices {
			fmt.Fprintf(w, "  [%d] %s (%s, %s)\n", d.Index, text(d.Name), dash(d.Vendor), dash(d.Arch))
			fmt.Fprintf(w, "      memory %s total, %s free\n", bytesize.FormatUint(d.MemoryTotal), bytesize.FormatUint(d.MemoryFree))
			fmt.Fprintf(w, "      compute capability %d.%d, %d multiprocessors\n", d.ComputeMajor, d.ComputeMinor, d.MultiprocessorCount)
			fmt.Fprintf(w, "      driver %s, PCI %s\n", dash(d.DriverVersion), dash(d.PCIBusID))
		}
	}
}

// dash is text(s), or "-" when s is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return text(s)
}
