// SPDX-License-Identifier: Apache-2.0

//go:build !cgo

package cgobaseline

// Plugin is unavailable without cgo.
type Plugin struct{}

// Open always fails without cgo.
func Open(path string) (*Plugin, error) { return nil, ErrNoCgo }

// StreamQuery is never reached without cgo.
func (p *Plugin) StreamQuery() bool { return false }

// StreamQueryLoop is never reached without cgo.
func (p *Plugin) StreamQueryLoop(n int) int { return 0 }

// Close does nothing without cgo.
func (p *Plugin) Close() {}
