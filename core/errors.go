// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/loader"
	"github.com/metrale/gpurt/internal/abi"
)

// Error is the one error type of gpurt: every error a method of this
// package returns is an *Error, or wraps one. A plugin reports it, or the
// core raises it with the same vocabulary before a call crosses (a freed
// buffer, a closed stream, an argument checked in Go).
//
// Match it with errors.Is against the sentinels (ErrOutOfMemory,
// ErrFreed, ErrNoBackend, ...): they are the vocabulary, one per code.
// Read its fields with errors.As:
//
//	var e *core.Error
//	if errors.As(err, &e) && errors.Is(e, core.ErrOutOfMemory) { log(e.Backend, e.VendorCode) }
//
// Its text is "gpurt: [backend: ]op: code: message[ (vendor code N)]";
// for the codes only the core raises (closed, freed, the backend codes),
// whose message already says it ("stream is closed"), the code's name is
// left out.
type Error struct {
	// Op is the operation that failed: the ABI slot the plugin ran
	// ("buffer_alloc", "launch", "gemm_plan_create") or, for an error the
	// core raised, the method's operation ("buffer_free", "copy", "open").
	Op string
	// Code classifies the failure; errors.Is(err, ErrX) compares it.
	Code ErrorCode
	// Message says what failed and why, in the plugin's or the core's
	// words; it names the object and the values involved. May be empty.
	Message string
	// Backend is the plugin that reported the error ("cuda", "metal",
	// "mock"); empty when the core raised it.
	Backend string
	// VendorCode is the vendor library's own code (a CUresult, a
	// cublasStatus_t, an MTLCommandBufferError), 0 when there is none.
	VendorCode int64
	// Report is the loader's account of the search, for the errors of
	// Open and Probe that choose a backend (ErrNoBackend,
	// ErrBackendUnavailable, ErrUnknownBackend); nil for every other error.
	Report *diag.Report
}

// ErrorCode classifies an *Error; its sentinel (Err*) is what errors.Is
// matches, its String the name in the error's text. Codes 1 to 999 are
// the ABI's GPURT_ERR_* values, which plugins return; 1001 to 1005 are
// raised by the core alone (closed, freed and the three backend-choice
// codes).
type ErrorCode int32

// Error codes. The first thirteen are gpurt.h's GPURT_ERR_* values; the
// sentinels below are their public names.
const (
	codeInvalidArgument    ErrorCode = abi.ErrInvalidArgument    // a bad value, size, kind or count
	codeInvalidHandle      ErrorCode = abi.ErrInvalidHandle      // a handle the plugin does not know
	codeOutOfRange         ErrorCode = abi.ErrOutOfRange         // an offset or length past the end
	codeOutOfMemory        ErrorCode = abi.ErrOutOfMemory        // device or pinned memory exhausted
	codeNotFound           ErrorCode = abi.ErrNotFound           // no such kernel, module, device
	codeUnsupported        ErrorCode = abi.ErrUnsupported        // the backend or its ABI version cannot do it
	codeUnavailable        ErrorCode = abi.ErrUnavailable        // the backend cannot run here (no driver, no device)
	codeDeviceLost         ErrorCode = abi.ErrDeviceLost         // the device or its context is gone; close the runtime
	codeLaunchFailed       ErrorCode = abi.ErrLaunchFailed       // a kernel failed to launch or faulted
	codeNotReady           ErrorCode = abi.ErrNotReady           // work has not completed yet
	codeABIMismatch        ErrorCode = abi.ErrABIMismatch        // the plugin speaks another ABI major
	codeInternal           ErrorCode = abi.ErrInternal           // a bug or an unexpected vendor error
	codeFailedPrecondition ErrorCode = abi.ErrFailedPrecondition // the object is not in a state that allows it

	codeClosed             ErrorCode = 1001 // the runtime, stream, event or module was closed
	codeFreed              ErrorCode = 1002 // the buffer, host buffer or host slice was freed
	codeNoBackend          ErrorCode = 1003 // auto found no usable plugin
	codeBackendUnavailable ErrorCode = 1004 // the requested backend cannot run here
	codeUnknownBackend     ErrorCode = 1005 // the requested backend is not one gpurt knows or found
)

// codeInfo names each code and gives its sentinel. The names of the
// ABI's codes are the header's (abi.ErrorCodes, generated from its enum):
// one vocabulary for the plugin's errors and the core's.
var codeInfo = map[ErrorCode]struct {
	name     string
	sentinel error
}{
	codeClosed:             {"closed", ErrClosed},
	codeFreed:              {"freed", ErrFreed},
	codeNoBackend:          {"no usable backend", ErrNoBackend},
	codeBackendUnavailable: {"backend unavailable", ErrBackendUnavailable},
	codeUnknownBackend:     {"unknown backend", ErrUnknownBackend},
}

// abiSentinels are the sentinels of the ABI's codes, by code.
var abiSentinels = map[ErrorCode]error{
	codeInvalidArgument: ErrInvalidArgument, codeInvalidHandle: ErrInvalidHandle,
	codeOutOfRange: ErrOutOfRange, codeOutOfMemory: ErrOutOfMemory, codeNotFound: ErrNotFound,
	codeUnsupported: ErrUnsupported, codeUnavailable: ErrUnavailable, codeDeviceLost: ErrDeviceLost,
	codeLaunchFailed: ErrLaunchFailed, codeNotReady: ErrNotReady, codeABIMismatch: ErrABI,
	codeInternal: ErrInternal, codeFailedPrecondition: ErrFailedPrecondition,
}

func init() {
	for _, c := range abi.ErrorCodes {
		sentinel, ok := abiSentinels[ErrorCode(c.Code)]
		if !ok {
			panic("gpurt: core has no sentinel for " + c.Enum + " (add its code constant and Err sentinel to core/errors.go)")
		}
		codeInfo[ErrorCode(c.Code)] = struct {
			name     string
			sentinel error
		}{c.Name, sentinel}
	}
}

// String is the code's name ("out of memory"), or "code N" for a code
// this version does not know.
func (c ErrorCode) String() string {
	if i, ok := codeInfo[c]; ok {
		return i.name
	}
	return fmt.Sprintf("code %d", int32(c))
}

// Sentinels, one per code: errors.Is(err, ErrOutOfMemory) matches any
// *Error with that code, whether the plugin or the core raised it. They
// are only for matching; the errors returned are *Error values.
var (
	ErrInvalidArgument    = sentinel(abi.ErrInvalidArgument)
	ErrInvalidHandle      = sentinel(abi.ErrInvalidHandle)
	ErrOutOfRange         = sentinel(abi.ErrOutOfRange)
	ErrOutOfMemory        = sentinel(abi.ErrOutOfMemory)
	ErrNotFound           = sentinel(abi.ErrNotFound)
	ErrUnsupported        = sentinel(abi.ErrUnsupported)
	ErrUnavailable        = sentinel(abi.ErrUnavailable)
	ErrDeviceLost         = sentinel(abi.ErrDeviceLost)
	ErrLaunchFailed       = sentinel(abi.ErrLaunchFailed)
	ErrNotReady           = sentinel(abi.ErrNotReady)
	ErrABI                = sentinel(abi.ErrABIMismatch)
	ErrInternal           = errors.New("gpurt: internal error")
	ErrFailedPrecondition = sentinel(abi.ErrFailedPrecondition)

	// ErrClosed: the runtime, stream, event or module
	// was closed (or its runtime was). Every call on anything of a closed
	// runtime returns it.
	ErrClosed = errors.New("gpurt: closed")
	// ErrFreed: the buffer, host buffer or host slice
	// was freed (a second Free returns it too).
	ErrFreed = errors.New("gpurt: freed")

	// ErrNoBackend: Open or Probe in auto mode found
	// no plugin that can run here. The *Error's Report says why.
	ErrNoBackend = errors.New("gpurt: no usable backend")
	// ErrBackendUnavailable: the backend
	// asked for (Config.Backend or GPURT_BACKEND) cannot run here: no
	// plugin file of it was found, or it failed its checks or its probe.
	ErrBackendUnavailable = errors.New("gpurt: requested backend unavailable")
	// ErrUnknownBackend: the backend asked for
	// is neither a built-in name nor the name of a plugin file found.
	ErrUnknownBackend = errors.New("gpurt: unknown backend")
)

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("gpurt: ")
	if e.Backend != "" {
		b.WriteString(e.Backend)
		b.WriteString(": ")
	}
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	switch {
	case e.Message == "":
		b.WriteString(e.Code.String())
	case e.Code >= codeClosed:
		b.WriteString(e.Message)
	default:
		b.WriteString(e.Code.String())
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.VendorCode != 0 {
		fmt.Fprintf(&b, " (vendor code %d)", e.VendorCode)
	}
	return b.String()
}

// Is reports whether target is the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	i, ok := codeInfo[e.Code]
	if !ok {
		return target == ErrInternal
	}
	return i.sentinel == target
}

func init() {
	// Every error a plugin call returns is a *Error of this package.
	bind.NewError = func(c bind.Code, vendor int64, msg, op, backend string) error {
		return &Error{Code: ErrorCode(c), VendorCode: vendor, Message: msg, Op: op, Backend: backend}
	}
}

// errf makes a core-side *Error.
func errf(c ErrorCode, op, format string, args ...any) error {
	return &Error{Code: c, Op: op, Message: fmt.Sprintf(format, args...)}
}

// errClosed says that what (a runtime, stream, ...) is closed.
func errClosed(op, what string) error {
	return &Error{Code: codeClosed, Op: op, Message: what + " is closed"}
}

// errFreed says that what (a buffer, ...) was freed.
func errFreed(op, what string) error {
	return &Error{Code: codeFreed, Op: op, Message: what + " was freed"}
}

// chooseError turns the loader's error into an *Error of op ("open",
// "probe") carrying the report.
func chooseError(op string, err error) error {
	var le *loader.Error
	if !errors.As(err, &le) {
		return err
	}
	c := codeNoBackend
	switch {
	case errors.Is(le.Kind, loader.ErrBackendUnavailable):
		c = codeBackendUnavailable
	case errors.Is(le.Kind, loader.ErrUnknownBackend):
		c = codeUnknownBackend
	}
	return &Error{Code: c, Op: op, Message: strings.TrimPrefix(le.Msg, "gpurt: "), Report: reportOf(le.Report)}
}

// within is err (an *Error) as an error of op with prefix before its
// message, keeping its code: the error of one part of a call ("operand
// Q: ") quoted by the call, without a second "gpurt: op:" in the text.
func within(op, prefix string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return errf(codeInvalidArgument, op, "%s%v", prefix, err)
	}
	c := *e
	c.Op = op
	if c.Message == "" {
		c.Message = c.Code.String()
	}
	c.Message = prefix + c.Message
	return &c
}

// messageOf is err's message without the "gpurt: [backend: ]op: code: "
// its text begins with.
func messageOf(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return strings.TrimPrefix(err.Error(), "gpurt: ")
}

// sentinel is the sentinel error of ABI code c: "gpurt: " and its name.
func sentinel(c int32) error { return errors.New("gpurt: " + abi.ErrorName(c)) }
