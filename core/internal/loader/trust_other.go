// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package loader

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// refusal is why a path is not trusted.
type refusal struct{ reason, detail string }

// trustedFile: plugins cannot be loaded on this platform (platformOK is
// false), so only the file's existence and type are checked.
func trustedFile(path string) (string, fs.FileInfo, *refusal) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", nil, &refusal{"cannot read file", err.Error()}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, &refusal{"cannot read file", err.Error()}
	}
	if !fi.Mode().IsRegular() {
		return "", nil, &refusal{reason: fmt.Sprintf("not a regular file (mode %s)", fi.Mode())}
	}
	return real, fi, nil
}

// fileID is what says a file on disk is still the one loaded.
type fileID struct {
	size  int64
	mtime int64
}

func identityOf(fi fs.FileInfo) fileID {
	return fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}

func (id fileID) String() string {
	return fmt.Sprintf("%d bytes, modified %d ns", id.size, id.mtime)
}
