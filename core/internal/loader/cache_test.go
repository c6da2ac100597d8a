// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testPluginPath = "/opt/gpurt/libgpurt_mock.so"

// entryJSON is a well-formed cache entry for testPluginPath with a score.
func entryJSON(t *testing.T, score int32) []byte {
	b, err := json.Marshal(childReport{Version: reportVersion, Candidate: Candidate{
		Path: testPluginPath, Backend: "mock", State: StateAvailable, Score: score, Devices: []Device{{Name: "Cached"}},
	}})
	require.NoError(t, err)
	return b
}

// TestProbeCacheTrust: every entry or folder the loader's rules would not
// trust is a miss with a debug line, never a hang, a crash or a forged
// answer; a good entry is a hit.
func TestProbeCacheTrust(t *testing.T) {
	key := strings.Repeat("ab", 32)
	euid := uint32(os.Geteuid())
	// entry writes b as key's entry into a new private folder, returned
	// with euid.
	entry := func(t *testing.T, b []byte) (string, uint32) {
		d := privDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, cacheEntryName(key)), b, 0o600))
		return d, euid
	}
	// withEntry: an entry of the bytes b makes.
	withEntry := func(b func(t *testing.T) []byte) func(t *testing.T) (string, uint32) {
		return func(t *testing.T) (string, uint32) { return entry(t, b(t)) }
	}
	// edited: a good entry with its first old replaced by new.
	edited := func(old, new string) func(t *testing.T) (string, uint32) {
		return withEntry(func(t *testing.T) []byte { return bytes.Replace(entryJSON(t, 5), []byte(old), []byte(new), 1) })
	}
	// withMode: a good entry, then chmod to mode.
	withMode := func(mode os.FileMode) func(t *testing.T) (string, uint32) {
		return func(t *testing.T) (string, uint32) {
			d, euid := entry(t, entryJSON(t, 5))
			require.NoError(t, os.Chmod(filepath.Join(d, cacheEntryName(key)), mode))
			return d, euid
		}
	}
	// withFolderMode: a good entry, then chmod its folder to mode (back
	// to 0700 when the test ends).
	withFolderMode := func(mode os.FileMode) func(t *testing.T) (string, uint32) {
		return func(t *testing.T) (string, uint32) {
			d, euid := entry(t, entryJSON(t, 5))
			require.NoError(t, os.Chmod(d, mode))
			t.Cleanup(func() { _ = os.Chmod(d, 0o700) })
			return d, euid
		}
	}
	cases := []struct {
		name string
		// setup makes the cache folder (returned) and the entry; it
		// may return another euid to read as.
		setup func(t *testing.T) (dir string, asEUID uint32)
		why   string // "" = a hit
	}{
		{"good entry", withEntry(func(t *testing.T) []byte { return entryJSON(t, 5) }), ""},
		{"FIFO", func(t *testing.T) (string, uint32) {
			d := privDir(t)
			require.NoError(t, syscall.Mkfifo(filepath.Join(d, cacheEntryName(key)), 0o600))
			return d, euid
		}, "not a regular file"},
		{"symbolic link to /dev/zero", func(t *testing.T) (string, uint32) {
			d := privDir(t)
			require.NoError(t, os.Symlink("/dev/zero", filepath.Join(d, cacheEntryName(key))))
			return d, euid
		}, "symbolic link"},
		{"group-writable file", withMode(0o620), "writable by group or others"},
		{"other-writable file", withMode(0o602), "writable by group or others"},
		{"file of another user", func(t *testing.T) (string, uint32) {
			d, euid := entry(t, entryJSON(t, 5))
			if euid == 0 {
				require.NoError(t, os.Chown(filepath.Join(d, cacheEntryName(key)), 65534, 65534))
				return d, euid
			}
			// Not root: the folder and the file are ours; read as
			// another (non-root) user would see them.
			return d, euid + 1
		}, "owned by uid"},
		{"world-writable folder", withFolderMode(0o777), "folder not trusted"},
		{"sticky world-writable folder", withFolderMode(0o777 | os.ModeSticky), "folder not trusted"},
		{"folder under a world-writable folder", func(t *testing.T) (string, uint32) {
			top := privDir(t)
			d := filepath.Join(top, "probe")
			require.NoError(t, os.Mkdir(d, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(d, cacheEntryName(key)), entryJSON(t, 5), 0o600))
			require.NoError(t, os.Chmod(top, 0o777))
			t.Cleanup(func() { _ = os.Chmod(top, 0o700) })
			return d, euid
		}, "folder not trusted"},
		{"oversized file", withEntry(func(t *testing.T) []byte {
			return append(bytes.Repeat([]byte(" "), maxCacheEntry), entryJSON(t, 5)...)
		}), "more than"},
		{"garbage JSON", withEntry(func(*testing.T) []byte { return []byte("{\"gpurt_probe_report\":1,") }), "unreadable entry"},
		{"another report version", edited(fmt.Sprintf(`"gpurt_probe_report":%d`, reportVersion), `"gpurt_probe_report":99`), "report version 99"},
		{"entry for another plugin", edited(testPluginPath, "/elsewhere/libgpurt_mock.so"), "entry for"},
		{"no folder yet", func(t *testing.T) (string, uint32) {
			return filepath.Join(privDir(t), "gpurt", "probe"), euid
		}, "no cache folder yet"},
		{"entry in no final state", edited(`"available"`, `"selected"`), "in state"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, as := tc.setup(t)
			type res struct {
				b   []byte
				why string
			}
			done := make(chan res, 1)
			go func() { b, _, why := readCacheEntry(dir, key, as); done <- res{b, why} }()
			var r res
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("reading the cache entry hung")
			}
			var cand Candidate
			if r.why == "" {
				cand, r.why = decodeCacheEntry(r.b, testPluginPath)
			}
			if tc.why == "" {
				require.Empty(t, r.why)
				assert.Equal(t, int32(5), cand.Score)
				return
			}
			assert.Contains(t, r.why, tc.why)
			assert.LessOrEqual(t, len(r.b), maxCacheEntry)

			// Through cacheGet: a miss, said in the debug log (as the
			// process's own user).
			if as != euid {
				return
			}
			resetProbeCache()
			var buf bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &buf})
			_, hit := cacheGet(Options{ProbeCacheDir: dir}, key, testPluginPath, log)
			assert.False(t, hit)
			assert.Contains(t, buf.String(), "probe cache: miss")
			assert.Contains(t, buf.String(), tc.why)
		})
	}
}

// TestProbeCacheForgedEntry: through Choose, a forged entry is used when
// the folder is trusted (what the cache is for), and not when the folder
// is writable by others: the plugin is probed again.
func TestProbeCacheForgedEntry(t *testing.T) {
	pl, probes, opts := countedPlugin(t)

	_, _, err := Choose(opts)
	require.NoError(t, err)
	require.Equal(t, 1, probes())
	entries, err := filepath.Glob(filepath.Join(opts.ProbeCacheDir, "*.json"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	var r childReport
	b, err := os.ReadFile(entries[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	r.Candidate.Score = 4242
	r.Candidate.Devices[0].Name = "Forged"
	b, err = json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(entries[0], b, 0o600))

	resetProbeCache()
	rep, _, err := Choose(opts)
	require.NoError(t, err)
	assert.Equal(t, int32(4242), find(t, rep, pl).Score, "a trusted folder's entry is used")
	assert.Equal(t, 1, probes())

	require.NoError(t, os.Chmod(opts.ProbeCacheDir, 0o777))
	t.Cleanup(func() { _ = os.Chmod(opts.ProbeCacheDir, 0o700) })
	resetProbeCache()
	rep, _, err = Choose(opts)
	require.NoError(t, err)
	c := find(t, rep, pl)
	assert.Equal(t, int32(0), c.Score, "the forged score was used")
	require.Len(t, c.Devices, 1)
	assert.Equal(t, "Test Device", c.Devices[0].Name)
	assert.Equal(t, 2, probes(), "the plugin was probed again")
	after, err := os.ReadFile(entries[0])
	require.NoError(t, err)
	assert.Equal(t, b, after, "nothing is written into an untrusted folder")
}

// TestProbeCachePrune: writing an entry prunes the folder to
// cacheMaxEntries, drops entries older than cacheMaxAge and stale
// temporary files, and leaves everything else alone.
func TestProbeCachePrune(t *testing.T) {
	dir := privDir(t)
	now := time.Now()
	name := func(i int) string { return cacheEntryName(fmt.Sprintf("%064x", i)) }
	put := func(n string, age time.Duration) {
		p := filepath.Join(dir, n)
		require.NoError(t, os.WriteFile(p, []byte("{}"), 0o600))
		require.NoError(t, os.Chtimes(p, now.Add(-age), now.Add(-age)))
	}
	// 80 entries, entry i used i minutes ago; 3 more older than the age bound.
	for i := 0; i < 80; i++ {
		put(name(i), time.Duration(i)*time.Minute)
	}
	for i := 80; i < 83; i++ {
		put(name(i), cacheMaxAge+time.Hour)
	}
	put(".tmp-stale", cacheTmpAge+time.Minute)
	put(".tmp-writing", time.Second)
	put("README", 400*24*time.Hour)
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, name(999))))

	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &buf})
	writeCacheEntry(dir, fmt.Sprintf("%064x", 1000), entryJSON(t, 1), log)

	exists := func(n string) bool { _, err := os.Lstat(filepath.Join(dir, n)); return err == nil }
	var entries []string
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, de := range des {
		if isCacheEntryName(de.Name()) && de.Type().IsRegular() {
			entries = append(entries, de.Name())
		}
	}
	assert.Len(t, entries, cacheMaxEntries)
	assert.True(t, exists(cacheEntryName(fmt.Sprintf("%064x", 1000))), "the new entry is kept")
	assert.True(t, exists(name(0)), "the most recent entries are kept")
	assert.True(t, exists(name(cacheMaxEntries-2)))
	assert.False(t, exists(name(cacheMaxEntries-1)), "the least recently used go")
	assert.False(t, exists(name(79)))
	assert.False(t, exists(name(81)), "entries older than the age bound go")
	assert.False(t, exists(".tmp-stale"))
	assert.True(t, exists(".tmp-writing"), "a temporary file being written stays")
	assert.True(t, exists("README"), "files that are not entries stay")
	assert.True(t, exists(name(999)), "a symbolic link is not followed nor removed")
	assert.Contains(t, buf.String(), "probe cache: pruned")
}

// TestProbeCacheNegativeAge: a result saying the plugin cannot run is
// used for cacheNegativeAge after it was written, and a hit does not
// refresh it; an available result is refreshed by each hit.
func TestProbeCacheNegativeAge(t *testing.T) {
	key := strings.Repeat("cd", 32)
	entry := func(t *testing.T, state State) []byte {
		b, err := json.Marshal(childReport{Version: reportVersion, Candidate: Candidate{
			Path: testPluginPath, Backend: "mock", State: state, Reason: "probe: unavailable (driver missing)", Devices: []Device{},
		}})
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name    string
		state   State
		age     time.Duration
		hit     bool
		touched bool // the hit refreshed the entry's time
	}{
		{"skipped, fresh", StateSkipped, time.Minute, true, false},
		{"skipped, old", StateSkipped, cacheNegativeAge + time.Minute, false, false},
		{"failed, old", StateFailed, cacheNegativeAge + time.Minute, false, false},
		{"available, a day old", StateAvailable, 24 * time.Hour, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := privDir(t)
			p := filepath.Join(dir, cacheEntryName(key))
			require.NoError(t, os.WriteFile(p, entry(t, tc.state), 0o600))
			then := time.Now().Add(-tc.age)
			require.NoError(t, os.Chtimes(p, then, then))
			resetProbeCache()
			var buf bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &buf})
			r, hit := cacheGet(Options{ProbeCacheDir: dir}, key, testPluginPath, log)
			assert.Equal(t, tc.hit, hit, buf.String())
			if !tc.hit {
				assert.Contains(t, buf.String(), fmt.Sprintf("a %s result older than", tc.state))
				return
			}
			assert.Equal(t, tc.state, r.State)
			fi, err := os.Stat(p)
			require.NoError(t, err)
			assert.Equal(t, tc.touched, fi.ModTime().After(then.Add(time.Second)), "modified %v, written %v", fi.ModTime(), then)
		})
	}
}
