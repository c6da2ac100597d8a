// SPDX-License-Identifier: Apache-2.0

package loader

// The probe cache: isolated probe results, in memory for this process and
// on disk for the next ones (by default os.UserCacheDir()/gpurt/probe,
// Options.ProbeCacheDir otherwise, "-" for memory only). One file per key,
// <64 hex digits>.json, holding the child's versioned report.
//
// A cache entry decides which plugin a process loads and what `gpurt
// probe` reports, so the disk is not trusted blindly (cache_unix.go): the
// folder must pass the loader's path rules (trust_unix.go) and be
// writable by its owner only; an entry is opened without following a
// symbolic link and without blocking, must be a regular file of the user
// running the process (or root) that group and others cannot write, and
// is read up to maxCacheEntry bytes. Anything else is a miss, said in the
// debug log, and the plugin is probed again.
//
// The folder is pruned whenever an entry is written: entries older than
// cacheMaxAge and all but the cacheMaxEntries most recently used go (a
// hit refreshes an entry's time), as do leftover temporary files. A result
// saying the plugin cannot run (skipped, failed) is used for
// cacheNegativeAge after it was written, never refreshed: the library it
// missed may be installed meanwhile.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	// maxCacheEntry bounds the bytes read from one cache entry (a
	// report of probeCapacity devices is a few KiB).
	maxCacheEntry = 256 << 10
	// cacheMaxEntries and cacheMaxAge bound the disk cache.
	cacheMaxEntries = 64
	cacheMaxAge     = 7 * 24 * time.Hour
	// cacheTmpAge: a temporary file older than this was left by a
	// process that died while writing.
	cacheTmpAge = 10 * time.Minute
	// cacheNegativeAge bounds the life on disk of a result saying a
	// plugin cannot run (skipped or failed): what it depends on may
	// change without changing the key (a missing library installed, a
	// device freed), and a hit does not refresh it.
	cacheNegativeAge = 10 * time.Minute
)

// probeCache holds isolated probe results: in memory for this process,
// on disk (best effort) for the next ones.
var probeCache = struct {
	sync.Mutex
	m map[string]Candidate
}{m: map[string]Candidate{}}

// cacheKey identifies what a probe result depends on: the plugin file
// (path, device, inode, size, times of the file opened), the driver, the
// child's environment and this executable. "" when the file cannot be
// read.
func cacheKey(c *cand, env []string) string {
	if c.file == nil {
		return ""
	}
	id, err := openIdentity(c.file)
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "v%d\x00%s\x00%s\x00%s\x00", reportVersion, c.Path, c.real, id)
	if exe, err := os.Executable(); err == nil {
		fmt.Fprintf(h, "%s\x00", exe)
	}
	if img, err := childExecutable(); err == nil { // the image the child runs
		if eid, err := fileIdentity(img); err == nil {
			fmt.Fprintf(h, "%s\x00", eid)
		}
	}
	// The driver version: NVIDIA's kernel module says it here on Linux.
	if b, err := os.ReadFile("/proc/driver/nvidia/version"); err == nil {
		h.Write(b)
	}
	for _, kv := range env {
		if probeRelevant(kv) {
			fmt.Fprintf(h, "\x00%s", kv)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CacheDir is the disk probe cache folder Options.ProbeCacheDir names:
// "" is the user's cache folder (os.UserCacheDir()/gpurt/probe), "-"
// none (memory only; also "" when the user has no cache folder).
func CacheDir(probeCacheDir string) string {
	switch probeCacheDir {
	case "-":
		return ""
	case "":
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(d, "gpurt", "probe")
	}
	return probeCacheDir
}

// cacheEntryName is the file name of key's entry.
func cacheEntryName(key string) string { return key + ".json" }

// isCacheEntryName says whether name is an entry's name (64 lowercase hex
// digits and .json): pruning touches nothing else but temporary files.
func isCacheEntryName(name string) bool {
	if len(name) != 64+len(".json") || filepath.Ext(name) != ".json" {
		return false
	}
	for _, r := range name[:64] {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func cacheGet(opts Options, key, path string, log hclog.Logger) (Candidate, bool) {
	probeCache.Lock()
	defer probeCache.Unlock()
	if r, ok := probeCache.m[key]; ok {
		return r, true
	}
	dir := CacheDir(opts.ProbeCacheDir)
	if dir == "" {
		return Candidate{}, false
	}
	b, mod, why := readCacheEntry(dir, key, uint32(os.Geteuid()))
	if why != "" {
		log.Debug("probe cache: miss", "dir", dir, "key", key, "why", why)
		return Candidate{}, false
	}
	r, why := decodeCacheEntry(b, path)
	if why == "" && r.State != StateAvailable && time.Since(mod) > cacheNegativeAge {
		why = fmt.Sprintf("a %s result older than %s", r.State, cacheNegativeAge)
	}
	if why != "" {
		log.Debug("probe cache: miss", "dir", dir, "key", key, "why", why)
		return Candidate{}, false
	}
	if r.State == StateAvailable {
		touchCacheEntry(dir, key) // a negative result keeps its age
	}
	probeCache.m[key] = r
	return r, true
}

// decodeCacheEntry parses an entry and checks it is a report this
// version writes, for path, in a final state.
func decodeCacheEntry(b []byte, path string) (Candidate, string) {
	var r childReport
	if err := json.Unmarshal(b, &r); err != nil {
		return Candidate{}, "unreadable entry: " + err.Error()
	}
	if r.Version != reportVersion {
		return Candidate{}, fmt.Sprintf("entry of report version %d, want %d", r.Version, reportVersion)
	}
	if r.Candidate.Path != path {
		return Candidate{}, fmt.Sprintf("entry for %q, want %q", r.Candidate.Path, path)
	}
	switch r.Candidate.State {
	case StateAvailable, StateSkipped, StateFailed:
	default:
		return Candidate{}, fmt.Sprintf("entry in state %q", r.Candidate.State)
	}
	if len(r.Candidate.Devices) > probeCapacity {
		return Candidate{}, fmt.Sprintf("entry lists %d devices, a probe reports at most %d", len(r.Candidate.Devices), probeCapacity)
	}
	return r.Candidate, ""
}

func cachePut(opts Options, key string, r Candidate, log hclog.Logger) {
	probeCache.Lock()
	defer probeCache.Unlock()
	probeCache.m[key] = r
	dir := CacheDir(opts.ProbeCacheDir)
	if dir == "" {
		return
	}
	b, _ := json.Marshal(childReport{Version: reportVersion, Candidate: r})
	writeCacheEntry(dir, key, b, log)
}
