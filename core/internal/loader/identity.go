// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"
	"os"
	"sync"
)

// A plugin is never dlclosed, and dlopen of a path already loaded returns
// the library already mapped: a plugin file replaced on disk after this
// process loaded it would keep running the old code under the new file's
// name. The loader records each file's identity (device, inode, size,
// modification time) when it first loads it, and refuses the file when a
// later search finds it changed: the process must restart to use the new
// file.
var loaded struct {
	sync.Mutex
	m map[string]fileID // resolved path -> identity at first load
}

// checkUnchanged refuses a file this process loaded before whose identity
// has changed since.
func checkUnchanged(real string, now fileID) *refusal {
	loaded.Lock()
	first, ok := loaded.m[real]
	loaded.Unlock()
	if !ok || first == now {
		return nil
	}
	return &refusal{
		reason: fmt.Sprintf("refused: %s changed on disk since this process loaded it; the process would keep running the old code (restart it to load the new file)", real),
		detail: fmt.Sprintf("loaded: %s; now: %s", first, now),
	}
}

// rememberLoaded records a file's identity the first time it is loaded.
func rememberLoaded(real string, id fileID) {
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.m == nil {
		loaded.m = map[string]fileID{}
	}
	if _, ok := loaded.m[real]; !ok {
		loaded.m[real] = id
	}
}

// statOpened is how pinFile starts on every platform, given what opening
// the file returned: the refusal when it could not be opened, or when its
// information could not be read (f is closed then); else that information.
func statOpened(f *os.File, err error) (os.FileInfo, *refusal) {
	if err != nil {
		return nil, &refusal{"cannot open file", err.Error()}
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, &refusal{"cannot read file", err.Error()}
	}
	return fi, nil
}
