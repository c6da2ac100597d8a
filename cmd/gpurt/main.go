// SPDX-License-Identifier: Apache-2.0

// Command gpurt probes, checks and measures gpurt backends:
//
//	gpurt probe [--json]              which plugin would be used, and why
//	gpurt conform [--backend NAME] [--plugin-path PATH]... [--json]
//	gpurt bench [--quick] [--json | --benchfmt FILE]
//
// Every subcommand follows internal/cli's convention: --plugin-path (and
// GPURT_PLUGIN_PATH) say where plugins are, -h prints the usage to stdout
// and exits 0, a usage error exits 2, a runtime or setup error exits 1.
//
// Each subcommand lives in its own file and registers itself in init.
package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/metrale/gpurt/internal/cli"
)

// command is one subcommand: run gets the arguments after its name and
// returns the process exit status.
type command struct {
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) int) {
	if _, dup := commands[name]; dup {
		panic("gpurt: duplicate command " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gpurt <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'gpurt <command> -h' for a command's flags")
}

func main() { cli.Main(run) }

// run is gpurt with the arguments after its name: -h, --help and help
// print the usage to stdout (status 0); no command or an unknown one is a
// usage error (status 2).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "gpurt: no command given")
		usage(stderr)
		return cli.ExitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		usage(stdout)
		return cli.ExitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gpurt: unknown command %q\n", args[0])
		usage(stderr)
		return cli.ExitUsage
	}
	return c.run(args[1:])
}
