// SPDX-License-Identifier: Apache-2.0

package core

import (
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/internal/loader"
)

// Config says which plugin to load and how to create its runtime. The zero
// value is valid: search the default places, pick the best backend.
type Config struct {
	// PluginPaths are files or folders searched before GPURT_PLUGIN_PATH
	// and the executable's folders.
	PluginPaths []string
	// Backend is "auto" (or ""), "cuda", "metal" or "mock"; GPURT_BACKEND
	// is used when empty. An explicit backend that cannot run is an error
	// carrying the whole report.
	Backend string
	// NoMockFallback forbids auto from settling on the mock.
	NoMockFallback bool
	// PluginOptions is passed to the plugin's runtime_create as
	// "key=value;key=value" (the mock knows "devices=N").
	PluginOptions string
	// Logger receives the loader's and the runtime's messages (leaks,
	// backend choice). Nil: an hclog logger named "gpurt" on stderr with
	// the level from GPURT_LOG_LEVEL (default warn).
	Logger hclog.Logger
	// OpCacheSize bounds the GEMM plan cache (entries). Zero: the value
	// of GPURT_OPCACHE_SIZE, or 1024.
	OpCacheSize int
	// ProbeInProcess probes plugins in this process instead of in a child
	// process (the executable run again with a hidden subcommand): a
	// process start faster, but a driver that crashes or hangs while
	// probing takes the process with it.
	ProbeInProcess bool
	// ProbeTimeout is the isolated probe's watchdog (0: 30 s).
	ProbeTimeout time.Duration
	// AllowUnverifiedPlugins lets a binary built by `make dist` (which
	// records its plugins' SHA-256) load plugins from PluginPaths or
	// GPURT_PLUGIN_PATH that no recorded checksum covers;
	// GPURT_ALLOW_UNVERIFIED=1 does the same. Plugins beside the
	// executable must always match.
	AllowUnverifiedPlugins bool
}

// Report is the loader's account of the search: every candidate and what
// became of it, and the plugin selected.
type Report = loader.Report

// Candidate is one plugin file the loader looked at.
type Candidate = loader.Candidate

func (cfg *Config) logger() hclog.Logger {
	if cfg.Logger != nil {
		return cfg.Logger
	}
	lvl := hclog.LevelFromString(os.Getenv("GPURT_LOG_LEVEL"))
	if lvl == hclog.NoLevel {
		lvl = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{Name: "gpurt", Level: lvl, Output: os.Stderr})
}

func (cfg *Config) opCacheSize() int {
	if cfg.OpCacheSize > 0 {
		return cfg.OpCacheSize
	}
	if v, err := strconv.Atoi(os.Getenv("GPURT_OPCACHE_SIZE")); err == nil && v > 0 {
		return v
	}
	return 1024
}

func (cfg *Config) loaderOptions(log hclog.Logger) loader.Options {
	return loader.Options{
		Paths:           cfg.PluginPaths,
		Backend:         cfg.Backend,
		NoMockFallback:  cfg.NoMockFallback,
		Logger:          log,
		ProbeInProcess:  cfg.ProbeInProcess,
		ProbeTimeout:    cfg.ProbeTimeout,
		AllowUnverified: cfg.AllowUnverifiedPlugins,
	}
}

// Probe runs the loader's search and choice without creating a runtime,
// and returns its report (also on error, when there is one). Safe from
// any goroutine.
func Probe(cfg Config) (*Report, error) {
	rep, _, err := loader.Choose(cfg.loaderOptions(cfg.logger()))
	return rep, err
}
