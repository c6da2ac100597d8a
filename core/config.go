// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/internal/loader"
)

// Config says which plugin to load and how to run it. The zero value is
// valid: search the default places, pick the best backend, take every
// other setting from the environment or its default.
//
// This file is the one place that reads the core's environment. Every
// knob is a Config field; the field's zero value means "the environment
// variable, else the default", so a program can fix a setting in code and
// a user can still tune the others without rebuilding:
//
//	Field          Variable             Default
//	Backend        GPURT_BACKEND        auto
//	LogLevel       GPURT_LOG_LEVEL      warn
//	OpCacheSize    GPURT_OPCACHE_SIZE   1024
//	StageChunk     GPURT_STAGE_CHUNK    8 MiB (16 MiB for copies of 256 MiB or more)
//	StageSlots     GPURT_STAGE_SLOTS    4
//	CopyWorkers    GPURT_COPY_WORKERS   min(GOMAXPROCS-1, 12), at least 1
//	ProbeCacheDir  GPURT_PROBE_CACHE    the user's cache folder/gpurt/probe
//	PoolBudget     GPURT_POOL_BUDGET    the device's memory
//
// GPURT_PLUGIN_PATH (folders searched after PluginPaths) and
// GPURT_ALLOW_UNVERIFIED (the default of AllowUnverifiedPlugins) are read
// by the loader itself, because ignoring them in a setuid process is part
// of its trust policy. A value that does not parse or is out of range, in a
// field or a variable, makes Open, Probe and Backends fail with an *Error
// (ErrInvalidArgument) naming the variable or field and the value; it is
// never silently replaced by the default.
type Config struct {
	// PluginPaths are files or folders searched before GPURT_PLUGIN_PATH
	// and the executable's folders. An entry is a plugin file when it
	// names an existing file that is not a folder, or when its base name
	// has a plugin's form (libgpurt_<name>.so, .dylib on macOS) even if it
	// is missing; anything else is a folder. A plugin file given here must
	// be usable: when it is missing, refused or broken, Open and Probe fail
	// with ErrBackendUnavailable naming it, even when another plugin could
	// run. A folder that does not exist is searched in vain, not an error.
	PluginPaths []string
	// Backend is "auto" (or ""), "cuda", "metal", "mock", or the backend
	// of any plugin file found (libgpurt_rocm.so: "rocm"; see Backends);
	// GPURT_BACKEND is used when empty. An explicit backend that cannot
	// run is an *Error matching ErrBackendUnavailable, carrying the report.
	Backend string
	// NoMockFallback forbids auto from settling on the mock.
	NoMockFallback bool
	// PluginOptions is passed to the plugin's runtime_create as
	// "key=value;key=value" (the mock knows "devices=N"). A NUL byte in
	// it is an error (a C plugin would read only what comes before it).
	PluginOptions string
	// Logger receives the loader's and the runtime's messages (leaks,
	// backend choice). Nil: an hclog logger named "gpurt" on stderr at
	// LogLevel.
	Logger hclog.Logger
	// LogLevel is the default logger's level: trace, debug, info, warn,
	// error or off. Empty: GPURT_LOG_LEVEL, else warn. Unused when Logger
	// is set.
	LogLevel string
	// OpCacheSize bounds the GEMM plan cache (entries, 1 to 1<<20).
	// Zero: GPURT_OPCACHE_SIZE, else 1024.
	OpCacheSize int
	// StageChunk is the largest chunk, in bytes, of a synchronous copy of
	// Go memory staged through pinned memory (64 KiB to 1 GiB, rounded up
	// to 4 KiB; the variable takes K, M and G suffixes, binary). Zero:
	// GPURT_STAGE_CHUNK, else 8 MiB, and 16 MiB for copies of 256 MiB or
	// more. Each copy in flight holds StageSlots chunks of pinned memory.
	StageChunk int
	// StageSlots is the number of chunks of one staged copy in flight
	// (2 to 16). Zero: GPURT_STAGE_SLOTS, else 4.
	StageSlots int
	// CopyWorkers is the number of goroutines sharing each staged chunk's
	// memmove, the copying goroutine included (1 to 256). Zero:
	// GPURT_COPY_WORKERS, else min(GOMAXPROCS-1, 12), at least 1.
	CopyWorkers int
	// ProbeInProcess probes plugins in this process instead of in a child
	// process (the executable run again with a hidden subcommand; see
	// Open): a process start faster, but a driver that crashes or hangs
	// while probing takes the process with it. No probe cache is used.
	ProbeInProcess bool
	// ProbeTimeout is the isolated probe's watchdog (0: 30 s; negative is
	// an error).
	ProbeTimeout time.Duration
	// ProbeCacheDir is the folder keeping isolated probe results between
	// processes (see Open): an absolute path, or "off" to keep them in
	// this process's memory only. Empty: GPURT_PROBE_CACHE, else
	// os.UserCacheDir()/gpurt/probe. A folder that group or others may
	// write to (or that is reached through one) is not used.
	ProbeCacheDir string
	// AllowUnverifiedPlugins lets a binary built by `make dist` (which
	// records its plugins' SHA-256) load plugins from PluginPaths or
	// GPURT_PLUGIN_PATH that no recorded checksum covers;
	// GPURT_ALLOW_UNVERIFIED=1 does the same. Plugins beside the
	// executable must always match.
	AllowUnverifiedPlugins bool
	// PoolBudget bounds the bytes each device's memory pool (package
	// core/pool) may reserve: a fraction in (0, 1] of the device's memory (0.9, as
	// servers set it) or a byte count above 1. Zero: GPURT_POOL_BUDGET
	// (the same, with K, M, G, T suffixes), else the device's memory.
	PoolBudget float64
}

// settings is a Config with the environment and the defaults applied.
type settings struct {
	log         hclog.Logger
	opCacheSize int
	stage       stageSettings
	poolBudget  poolBudget
}

// stageSettings are the staging parameters of synchronous copies of Go
// memory (CopyFromHost, CopyToHost) of one runtime.
type stageSettings struct {
	Chunk   int  // bytes per chunk (the largest; small copies use less)
	BigAuto bool // Chunk was not set: copies of bigCopy bytes or more use bigStageChunk
	Slots   int
	Workers int
}

// String is the settings in one line, for the log.
func (s stageSettings) String() string {
	c := fmt.Sprintf("chunk=%s", sizeText(s.Chunk))
	if s.BigAuto {
		c += fmt.Sprintf(" (%s for copies >= %s)", sizeText(bigStageChunk), sizeText(bigCopy))
	}
	return fmt.Sprintf("%s slots=%d workers=%d", c, s.Slots, s.Workers)
}

// resolve applies the environment and the defaults, and checks every
// value. The error is an *Error of op naming the field or variable and
// the value.
func (cfg *Config) resolve(op string) (settings, error) {
	return cfg.resolveEnv(op, os.Getenv, runtime.GOMAXPROCS(0))
}

func (cfg *Config) resolveEnv(op string, getenv func(string) string, procs int) (settings, error) {
	var s settings
	bad := func(name string, v any, want string) (settings, error) {
		return settings{}, errf(codeInvalidArgument, op, "%s=%q: want %s", name, fmt.Sprint(v), want)
	}

	level := cfg.LogLevel
	levelFrom := "Config.LogLevel"
	if strings.TrimSpace(level) == "" {
		level, levelFrom = getenv("GPURT_LOG_LEVEL"), "GPURT_LOG_LEVEL"
	}
	lvl := hclog.Warn
	if strings.TrimSpace(level) != "" {
		if lvl = hclog.LevelFromString(strings.TrimSpace(level)); lvl == hclog.NoLevel {
			return bad(levelFrom, level, "trace, debug, info, warn, error or off")
		}
	}
	s.log = cfg.Logger
	if s.log == nil {
		s.log = hclog.New(&hclog.LoggerOptions{Name: "gpurt", Level: lvl, Output: os.Stderr})
	}

	// num reads a whole number (with K, M, G suffixes when sized) from the
	// field, else the variable; ok is false when neither is set.
	num := func(field, env string, val, lo, hi int, sized bool) (n int, ok bool, err error) {
		want := fmt.Sprintf("a whole number from %d to %d", lo, hi)
		if sized {
			want = fmt.Sprintf("a byte count (K, M, G suffixes) from %s to %s", sizeText(lo), sizeText(hi))
		}
		if val != 0 {
			if val < lo || val > hi {
				_, err = bad("Config."+field, val, want)
				return 0, false, err
			}
			return val, true, nil
		}
		v := strings.TrimSpace(getenv(env))
		if v == "" {
			return 0, false, nil
		}
		t, mul := v, 1
		if sized {
			switch t[len(t)-1] {
			case 'k', 'K':
				mul = 1 << 10
			case 'm', 'M':
				mul = 1 << 20
			case 'g', 'G':
				mul = 1 << 30
			}
			if mul > 1 {
				t = t[:len(t)-1]
			}
		}
		n, perr := strconv.Atoi(t)
		if perr != nil || n < 0 || n > hi/mul || n*mul < lo {
			_, err = bad(env, v, want)
			return 0, false, err
		}
		return n * mul, true, nil
	}

	if i := strings.IndexByte(cfg.PluginOptions, 0); i >= 0 {
		return settings{}, errf(codeInvalidArgument, op, "Config.PluginOptions=%q: NUL byte at offset %d (the plugin would see only %q)",
			cfg.PluginOptions, i, cfg.PluginOptions[:i])
	}
	for i, p := range cfg.PluginPaths {
		if strings.IndexByte(p, 0) >= 0 {
			return bad(fmt.Sprintf("Config.PluginPaths[%d]", i), p, "a path without NUL bytes")
		}
	}
	if cfg.ProbeTimeout < 0 {
		return bad("Config.ProbeTimeout", cfg.ProbeTimeout, "a positive duration, or 0 for the default (30s)")
	}
	if _, err := cfg.probeCacheDir(op, getenv); err != nil {
		return settings{}, err
	}

	s.opCacheSize = 1024
	if n, ok, err := num("OpCacheSize", "GPURT_OPCACHE_SIZE", cfg.OpCacheSize, 1, 1<<20, false); err != nil {
		return settings{}, err
	} else if ok {
		s.opCacheSize = n
	}
	s.stage = stageSettings{Chunk: defaultStageChunk, BigAuto: true, Slots: defaultStageSlots,
		Workers: max(min(procs-1, maxCopyParts), 1)}
	if n, ok, err := num("StageChunk", "GPURT_STAGE_CHUNK", cfg.StageChunk, 64<<10, 1<<30, true); err != nil {
		return settings{}, err
	} else if ok {
		s.stage.Chunk, s.stage.BigAuto = (n+4095)&^4095, false
	}
	if n, ok, err := num("StageSlots", "GPURT_STAGE_SLOTS", cfg.StageSlots, 2, maxStageSlots, false); err != nil {
		return settings{}, err
	} else if ok {
		s.stage.Slots = n
	}
	if n, ok, err := num("CopyWorkers", "GPURT_COPY_WORKERS", cfg.CopyWorkers, 1, 256, false); err != nil {
		return settings{}, err
	} else if ok {
		s.stage.Workers = n
	}
	pb, err := resolvePoolBudget(op, cfg.PoolBudget, getenv)
	if err != nil {
		return settings{}, err
	}
	s.poolBudget = pb
	return s, nil
}

func sizeText(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// probeCacheDir is loader.Options.ProbeCacheDir from ProbeCacheDir or
// GPURT_PROBE_CACHE: "" the default folder, "-" memory only, else a
// clean absolute folder.
func (cfg *Config) probeCacheDir(op string, getenv func(string) string) (string, error) {
	pc, from := cfg.ProbeCacheDir, "Config.ProbeCacheDir"
	if pc == "" {
		pc, from = strings.TrimSpace(getenv("GPURT_PROBE_CACHE")), "GPURT_PROBE_CACHE"
	}
	switch {
	case pc == "":
		return "", nil
	case pc == "off":
		return "-", nil
	case !filepath.IsAbs(pc) || strings.IndexByte(pc, 0) >= 0:
		return "", errf(codeInvalidArgument, op, "%s=%q: want an absolute folder, or \"off\"", from, pc)
	}
	return filepath.Clean(pc), nil
}

// loaderOptions is cfg for the loader (after resolve checked it).
func (cfg *Config) loaderOptions(log hclog.Logger) loader.Options {
	pc, err := cfg.probeCacheDir("", os.Getenv)
	if err != nil {
		pc = "-" // resolve refused it already; never reached
	}
	return loader.Options{
		Paths:           cfg.PluginPaths,
		Backend:         cfg.Backend,
		NoMockFallback:  cfg.NoMockFallback,
		Logger:          log,
		ProbeInProcess:  cfg.ProbeInProcess,
		ProbeTimeout:    cfg.ProbeTimeout,
		ProbeCacheDir:   pc,
		AllowUnverified: cfg.AllowUnverifiedPlugins,
	}
}
