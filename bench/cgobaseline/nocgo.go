// SPDX-License-Identifier: Apache-2.0

//go:build !cgo

package cgobaseline

// Plugin is unavailable without cgo.
type Plugin struct{}

// Open always fails without cgo.
func Open(path string) (*Plugin, error) { return nil, ErrNoCgo }

// OpenOptions always fails without cgo.
func OpenOptions(path, options string) (*Plugin, error) { return nil, ErrNoCgo }

// StreamQuery is never reached without cgo.
func (p *Plugin) StreamQuery() bool { return false }

// StreamQueryLoop is never reached without cgo.
func (p *Plugin) StreamQueryLoop(n int) int { return 0 }

// PrepareLaunch always fails without cgo.
func (p *Plugin) PrepareLaunch() error { return ErrNoCgo }

// LaunchFill always fails without cgo.
func (p *Plugin) LaunchFill() error { return ErrNoCgo }

// LaunchFillLoop always fails without cgo.
func (p *Plugin) LaunchFillLoop(n int) error { return ErrNoCgo }

// HasLaunchBatch is false without cgo.
func (p *Plugin) HasLaunchBatch() bool { return false }

// MaxLaunchBatch is the largest count LaunchFillBatch takes.
const MaxLaunchBatch = 1024

// LaunchFillBatch always fails without cgo.
func (p *Plugin) LaunchFillBatch(count int) error { return ErrNoCgo }

// Synchronize always fails without cgo.
func (p *Plugin) Synchronize() error { return ErrNoCgo }

// PrepareGemm always fails without cgo.
func (p *Plugin) PrepareGemm(m, n, k int, a, b []byte) error { return ErrNoCgo }

// GemmRun always fails without cgo.
func (p *Plugin) GemmRun() error { return ErrNoCgo }

// GemmRunLoop always fails without cgo.
func (p *Plugin) GemmRunLoop(n int) error { return ErrNoCgo }

// Close does nothing without cgo.
func (p *Plugin) Close() {}

// Raw is unavailable without cgo.
type Raw struct{}

// OpenRaw always fails without cgo.
func OpenRaw() (*Raw, error) { return nil, ErrNoCgo }

// PrepareLaunch always fails without cgo.
func (r *Raw) PrepareLaunch() error { return ErrNoCgo }

// LaunchLoop always fails without cgo.
func (r *Raw) LaunchLoop(n int) error { return ErrNoCgo }

// Synchronize always fails without cgo.
func (r *Raw) Synchronize() error { return ErrNoCgo }

// PrepareGemm always fails without cgo.
func (r *Raw) PrepareGemm(m, n, k int, a, b []byte) error { return ErrNoCgo }

// GemmLoop always fails without cgo.
func (r *Raw) GemmLoop(n int) error { return ErrNoCgo }

// Close does nothing without cgo.
func (r *Raw) Close() {}
