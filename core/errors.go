// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"fmt"

	"github.com/metrale/gpurt/core/internal/bind"
)

// Error is an error reported by a plugin, or raised by the core before a
// call crosses, with the same vocabulary: a Code, the plugin's message,
// the operation and the backend. Match it with errors.Is against the
// sentinels below, or errors.As to read the fields.
type Error = bind.Error

// ErrorCode is a GPURT_ERR_* value carried by an *Error.
type ErrorCode = bind.Code

// Error codes.
const (
	CodeInvalidArgument    = bind.CodeInvalidArgument
	CodeInvalidHandle      = bind.CodeInvalidHandle
	CodeOutOfRange         = bind.CodeOutOfRange
	CodeOutOfMemory        = bind.CodeOutOfMemory
	CodeNotFound           = bind.CodeNotFound
	CodeUnsupported        = bind.CodeUnsupported
	CodeUnavailable        = bind.CodeUnavailable
	CodeDeviceLost         = bind.CodeDeviceLost
	CodeLaunchFailed       = bind.CodeLaunchFailed
	CodeNotReady           = bind.CodeNotReady
	CodeABIMismatch        = bind.CodeABIMismatch
	CodeInternal           = bind.CodeInternal
	CodeFailedPrecondition = bind.CodeFailedPrecondition
)

// Sentinels: errors.Is(err, ErrOutOfMemory) matches any *Error with that
// code, whether the plugin or the core raised it.
var (
	ErrInvalidArgument    = bind.ErrInvalidArgument
	ErrInvalidHandle      = bind.ErrInvalidHandle
	ErrOutOfRange         = bind.ErrOutOfRange
	ErrOutOfMemory        = bind.ErrOutOfMemory
	ErrNotFound           = bind.ErrNotFound
	ErrUnsupported        = bind.ErrUnsupported
	ErrUnavailable        = bind.ErrUnavailable
	ErrDeviceLost         = bind.ErrDeviceLost
	ErrLaunchFailed       = bind.ErrLaunchFailed
	ErrNotReady           = bind.ErrNotReady
	ErrABI                = bind.ErrABI
	ErrInternal           = bind.ErrInternal
	ErrFailedPrecondition = bind.ErrFailedPrecondition

	// ErrClosed: the runtime, stream, event or module was closed (or its
	// runtime was). Every call on anything of a closed runtime returns an
	// error wrapping it.
	ErrClosed = errors.New("gpurt: closed")
	// ErrFreed: the buffer, host buffer or host slice was freed (a second
	// Free returns it too).
	ErrFreed = errors.New("gpurt: freed")
)

// errf makes a core-side *Error.
func errf(c ErrorCode, op, format string, args ...any) error {
	return bind.Errorf(c, op, format, args...)
}

// errClosed says that what (a runtime, stream, ...) is closed.
func errClosed(op, what string) error {
	return fmt.Errorf("gpurt: %s: %s is closed: %w", op, what, ErrClosed)
}

// errFreed says that what (a buffer, ...) was freed.
func errFreed(op, what string) error {
	return fmt.Errorf("gpurt: %s: %s was freed: %w", op, what, ErrFreed)
}
