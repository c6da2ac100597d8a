// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package loader

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// Isolated probes need linux or darwin; elsewhere the disk cache is off.

func readCacheEntry(dir, key string, euid uint32) ([]byte, time.Time, string) {
	return nil, time.Time{}, "no disk cache on this platform"
}

func touchCacheEntry(dir, key string) {}

func writeCacheEntry(dir, key string, b []byte, log hclog.Logger) {}
