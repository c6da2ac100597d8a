// SPDX-License-Identifier: Apache-2.0

//go:build !((linux || darwin) && (amd64 || arm64))

package loader

import (
	"errors"

	"github.com/hashicorp/go-hclog"
)

// platformOK: plugins cannot be loaded here; Choose says so.
const platformOK = false

func openPlugin(c *cand, log hclog.Logger)  { c.skip("plugins cannot be loaded on this platform") }
func probePlugin(c *cand, log hclog.Logger) { c.skip("plugins cannot be loaded on this platform") }

func entryAddress(h uintptr) (uintptr, error) {
	return 0, errors.New("plugins cannot be loaded on this platform")
}
