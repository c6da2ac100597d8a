// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/cli"
)

// Stamped by `make` and scripts/dist.sh with -ldflags "-X
// main.version=... -X main.commit=...". Without them (go build, go
// install), versionInfo takes both from the binary's build information.
var (
	version = ""
	commit  = ""
)

func init() {
	run := func(args []string) int { return runVersion(args, os.Stdout, os.Stderr) }
	register("version", "the version, commit and ABI of this binary, and each plugin found (version, SHA-256)", run)
	register("--version", "same as `gpurt version`", run)
}

// versionReport is what `gpurt version --json` prints.
type versionReport struct {
	Module   string          `json:"module"`
	Version  string          `json:"version"`
	Commit   string          `json:"commit"`
	Modified bool            `json:"modified"`
	Go       string          `json:"go"`
	Platform string          `json:"platform"`
	ABI      string          `json:"abi"`
	Plugins  []pluginVersion `json:"plugins"`
}

// pluginVersion is one plugin file found by the loader's search.
type pluginVersion struct {
	Path    string `json:"path"`
	Backend string `json:"backend"`
	Version string `json:"version"` // the plugin's own; "" when it was not loaded
	ABI     string `json:"abi"`     // "major.minor"; "" when not negotiated
	SHA256  string `json:"sha256"`  // of the file's bytes; "" when it could not be read
	State   string `json:"state"`
	Note    string `json:"note"` // why no version (the loader's reason), or why no SHA-256
}

// versionInfo fills the binary's own fields: the stamped version and
// commit when there are any, else the module version and VCS settings Go
// recorded in the binary.
func versionInfo() versionReport {
	r := versionReport{
		Module:   "github.com/metrale/gpurt",
		Version:  version,
		Commit:   commit,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		ABI:      fmt.Sprintf("%d.%d", abi.Major, abi.Minor),
		Plugins:  []pluginVersion{},
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			r.Module = bi.Main.Path
		}
		if r.Version == "" {
			r.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if r.Commit == "" {
					r.Commit = s.Value
				}
			case "vcs.modified":
				r.Modified = s.Value == "true"
			}
		}
	}
	if r.Version == "" {
		r.Version = "(devel)"
	}
	if strings.HasSuffix(r.Version, "-dirty") || strings.HasSuffix(r.Version, "+dirty") {
		r.Modified = true
	}
	if r.Commit == "" {
		r.Commit = "unknown"
	}
	return r
}

// pluginVersions lists every plugin file the loader's search finds, with
// its SHA-256. The probe's error (no backend usable) is no error here:
// version reports what is there, usable or not.
func pluginVersions(paths []string) ([]pluginVersion, []string) {
	rep, _ := inspect.Probe(core.Config{PluginPaths: paths})
	if rep == nil {
		return []pluginVersion{}, nil
	}
	out := make([]pluginVersion, 0, len(rep.Candidates))
	for _, c := range rep.Candidates {
		p := pluginVersion{Path: c.Path, Backend: c.Backend, Version: c.Version, ABI: c.ABI, State: string(c.State)}
		if c.Version == "" {
			p.Note = c.Reason
		}
		sum, err := fileSHA256(c.Path)
		if err != nil {
			p.Note = strings.TrimPrefix(err.Error(), "gpurt version: ")
		}
		p.SHA256 = sum
		out = append(out, p)
	}
	return out, rep.Searched
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("gpurt version: cannot read %s for its SHA-256: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("gpurt version: cannot read %s for its SHA-256: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt version", "[--json] [--plugin-path PATH]...",
		"Prints this binary's version, commit, Go version and ABI, and every plugin the\nloader finds with its version and SHA-256.", stdout, stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pl := fs.PluginPath()
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	paths := []string(*pl)
	r := versionInfo()
	var searched []string
	r.Plugins, searched = pluginVersions(paths)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(stderr, "gpurt version: %v\n", err)
			return 1
		}
		return 0
	}
	modified := ""
	if r.Modified {
		modified = " (modified)"
	}
	fmt.Fprintf(stdout, "gpurt %s\n", r.Version)
	fmt.Fprintf(stdout, "module   %s\n", r.Module)
	fmt.Fprintf(stdout, "commit   %s%s\n", r.Commit, modified)
	fmt.Fprintf(stdout, "go       %s %s\n", r.Go, r.Platform)
	fmt.Fprintf(stdout, "abi      %s (abi/gpurt.h)\n", r.ABI)
	if len(r.Plugins) == 0 {
		fmt.Fprintf(stdout, "plugins  none found (searched: %s)\n", text(strings.Join(searched, ", ")))
		return 0
	}
	fmt.Fprintln(stdout, "plugins:")
	for _, p := range r.Plugins {
		fmt.Fprintf(stdout, "  %-6s %s\n", dash(p.Backend), text(p.Path))
		fmt.Fprintf(stdout, "         version %s, ABI %s, %s\n", dash(p.Version), dash(p.ABI), p.State)
		if p.SHA256 != "" {
			fmt.Fprintf(stdout, "         sha256 %s\n", p.SHA256)
		}
		if p.Note != "" {
			fmt.Fprintf(stdout, "         %s\n", text(p.Note))
		}
	}
	return 0
}
