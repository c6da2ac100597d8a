// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/metrale/gpurt/core"
)

func init() {
	register("probe", "which plugin would be used, and why (--json for the report as JSON)",
		func(args []string) int { return runProbe(args, os.Stdout, os.Stderr) })
}

// probeJSON is the JSON `gpurt probe --json` prints: the loader's report
// and the error, if any ("" when a backend was chosen). README documents
// every field; keep them stable.
type probeJSON struct {
	*core.Report
	Error string `json:"error"`
}

// pathList collects --plugin-path values; each may hold several paths
// separated by ':'.
type pathList []string

func (p *pathList) String() string { return strings.Join(*p, ":") }

func (p *pathList) Set(v string) error {
	for _, s := range strings.Split(v, ":") {
		if s != "" {
			*p = append(*p, s)
		}
	}
	return nil
}

func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpurt probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	backend := fs.String("backend", "", "backend to use: auto, cuda, metal, mock (default: $GPURT_BACKEND, else auto)")
	var paths pathList
	fs.Var(&paths, "plugin-path", "folder or plugin file to search first (repeatable; ':' separates several)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpurt probe: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	rep, err := core.Probe(core.Config{PluginPaths: paths, Backend: *backend})
	if *asJSON {
		out := probeJSON{Report: rep}
		if err != nil {
			out.Error = err.Error()
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if e := enc.Encode(out); e != nil {
			fmt.Fprintf(stderr, "gpurt probe: %v\n", e)
			return 1
		}
	} else {
		printReport(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	return 0
}

func printReport(w io.Writer, rep *core.Report) {
	fmt.Fprintf(w, "requested backend: %s\n", rep.Requested)
	fmt.Fprintln(w, "folders searched:")
	for _, s := range rep.Searched {
		fmt.Fprintf(w, "  %s\n", s)
	}
	if len(rep.Searched) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	fmt.Fprintln(w, "candidates:")
	if len(rep.Candidates) == 0 {
		fmt.Fprintln(w, "  (no plugin files found)")
	}
	for _, c := range rep.Candidates {
		fmt.Fprintf(w, "  %-9s %-6s %s\n", c.State, dash(c.Backend), c.Path)
		if c.Version != "" || c.ABI != "" {
			fmt.Fprintf(w, "            version %s, ABI %s, priority %d, score %d\n", dash(c.Version), dash(c.ABI), c.Priority, c.Score)
		}
		fmt.Fprintf(w, "            %s\n", c.Reason)
		if c.Detail != "" {
			fmt.Fprintf(w, "            %s\n", c.Detail)
		}
	}
	if rep.Selected == "" {
		fmt.Fprintln(w, "chosen: none")
		return
	}
	fmt.Fprintf(w, "chosen: %s (%s)\n", rep.Backend, filepath.Clean(rep.Selected))
	for _, c := range rep.Candidates {
		if c.State != "selected" {
			continue
		}
		fmt.Fprintf(w, "devices: %d\n", len(c.Devices))
		for _, d := range c.Devices {
			fmt.Fprintf(w, "  [%d] %s (%s, %s)\n", d.Index, d.Name, dash(d.Vendor), dash(d.Arch))
			fmt.Fprintf(w, "      memory %s total, %s free\n", bytesHuman(d.MemoryTotal), bytesHuman(d.MemoryFree))
			fmt.Fprintf(w, "      compute capability %d.%d, %d multiprocessors\n", d.ComputeMajor, d.ComputeMinor, d.MultiprocessorCount)
			fmt.Fprintf(w, "      driver %s, PCI %s\n", dash(d.DriverVersion), dash(d.PCIBusID))
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesHuman(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
