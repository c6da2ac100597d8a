// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package llm

import (
	"io"
	"os"
)

// mapFile reads the file where there is no mmap.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(f, b)
	return b, err
}

func unmapFile([]byte) error { return nil }
