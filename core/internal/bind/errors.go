// SPDX-License-Identifier: Apache-2.0

package bind

import (
	"errors"
	"fmt"

	"github.com/metrale/gpurt/internal/abi"
)

// Code is a GPURT_ERR_* value: one of the header's error codes, which
// internal/abi names (abi.ErrUnsupported, ...).
type Code int32

func (c Code) String() string {
	if s := abi.ErrorName(int32(c)); s != "" && c != 0 {
		return s
	}
	return fmt.Sprintf("code %d", int32(c))
}

// Sentinels: errors.Is(err, ErrUnsupported) matches any *Error with that
// code. The package names the ones it uses; every code of the header
// (abi.ErrorCodes) has one in sentinels, named as the header names it.
var (
	ErrInvalidHandle = errors.New("gpurt: invalid handle")
	ErrUnsupported   = errors.New("gpurt: unsupported")
	ErrABI           = errors.New("gpurt: abi mismatch")
	ErrInternal      = errors.New("gpurt: internal error")
)

var sentinels = func() map[Code]error {
	m := map[Code]error{abi.ErrInvalidHandle: ErrInvalidHandle, abi.ErrUnsupported: ErrUnsupported,
		abi.ErrABIMismatch: ErrABI, abi.ErrInternal: ErrInternal}
	for _, c := range abi.ErrorCodes {
		if m[Code(c.Code)] == nil {
			m[Code(c.Code)] = errors.New("gpurt: " + c.Name)
		}
	}
	return m
}()

// Sentinel returns the sentinel error of a code (ErrInternal when unknown).
func Sentinel(c Code) error {
	if s, ok := sentinels[c]; ok {
		return s
	}
	return ErrInternal
}

// Error is an error reported by a plugin, or raised by the core with the
// same vocabulary before a call crosses.
type Error struct {
	Code       Code
	VendorCode int64  // the vendor's own code (a CUresult, ...), 0 if none
	Message    string // the plugin's message
	Op         string // the operation, "buffer_alloc"
	Backend    string // "mock", "cuda", ...
}

func (e *Error) Error() string {
	s := "gpurt: "
	if e.Backend != "" {
		s += e.Backend + ": "
	}
	if e.Op != "" {
		s += e.Op + ": "
	}
	s += e.Code.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.VendorCode != 0 {
		s += fmt.Sprintf(" (vendor code %d)", e.VendorCode)
	}
	return s
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool { return Sentinel(e.Code) == target }

// NewError makes the error value of a failed call. The core sets it when
// it initializes, so that every error a plugin reports is the core's
// public *Error; the default makes a *Error of this package (for the
// loader and the tests of internal packages).
var NewError = func(c Code, vendor int64, msg, op, backend string) error {
	return &Error{Code: c, VendorCode: vendor, Message: msg, Op: op, Backend: backend}
}
