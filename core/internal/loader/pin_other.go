// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package loader

import (
	"fmt"
	"os"
)

// pinFile opens c.real once; plugins cannot be loaded on this platform
// (platformOK is false), so the file is only format-checked through it.
func pinFile(c *cand) *refusal {
	f, err := os.Open(c.real)
	fi, r := statOpened(f, err)
	if r != nil {
		return r
	}
	if now := identityOf(fi); !fi.Mode().IsRegular() || now != c.ident {
		_ = f.Close()
		return &refusal{reason: fmt.Sprintf("refused: %s was replaced while it was checked", c.real)}
	}
	c.file = f
	return nil
}

// releaseFile closes c's file.
func releaseFile(c *cand) {
	if c.file != nil {
		_ = c.file.Close()
	}
	c.file = nil
}
