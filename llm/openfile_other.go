// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package llm

import "os"

// openNonblock opens p read-only (no FIFO can block an open here).
func openNonblock(p string) (*os.File, error) { return os.Open(p) }

func blocking(*os.File) error { return nil }
