// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// maxJSON bounds a config.json or an index read into memory.
const maxJSON = 64 << 20

// openRegular opens p for reading without blocking (a FIFO named like a
// checkpoint file would hang a plain open), follows a symbolic link (the
// Hugging Face cache links its snapshot files into blobs) and requires the
// file it reaches to be a regular file; the stat is of the open
// descriptor, so it is the file that is read. The error wraps the open's
// (errors.Is os.ErrNotExist still works) and is unprefixed: the caller
// says "llm: ..." and what the file is.
func openRegular(p string) (*os.File, fs.FileInfo, error) {
	f, err := openNonblock(p)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file but %s", p, kind(fi.Mode()))
	}
	if err := blocking(f); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	return f, fi, nil
}

// readRegular reads a regular file of at most limit bytes (see
// openRegular).
func readRegular(p string, limit int64) ([]byte, error) {
	f, fi, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d this file may have", p, fi.Size(), limit)
	}
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes while read", p, limit)
	}
	return raw, nil
}

// kind names a file type that is not a regular file.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	default:
		return fmt.Sprintf("of type %v", m.Type())
	}
}
