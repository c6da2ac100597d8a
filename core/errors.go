// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/loader"
)

// Error is the one error type of gpurt: every error a method of this
// package returns is an *Error, or wraps one. A plugin reports it, or the
// core raises it with the same vocabulary before a call crosses (a freed
// buffer, a closed stream, an argument checked in Go).
//
// Match it with errors.Is against the sentinels (ErrOutOfMemory,
// ErrFreed, ErrNoBackend, ...), or read its fields with errors.As:
//
//	var e *core.Error
//	if errors.As(err, &e) && e.Code == core.CodeOutOfMemory { ... }
//
// Its text is "gpurt: [backend: ]op: code: message[ (vendor code N)]";
// for the codes only the core raises (CodeClosed, CodeFreed, the backend
// codes), whose message already says it ("stream is closed"), the code's
// name is left out.
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
	Report *Report
}

// ErrorCode classifies an *Error. Codes 1 to 999 are the ABI's
// GPURT_ERR_* values, which plugins return; the others are raised by the
// core alone (CodeClosed, CodeFreed and the backend-choice codes).
type ErrorCode int32

// Error codes. The first thirteen are gpurt.h's GPURT_ERR_* values.
const (
	CodeInvalidArgument    ErrorCode = abi.ErrInvalidArgument    // a bad value, size, kind or count
	CodeInvalidHandle      ErrorCode = abi.ErrInvalidHandle      // a handle the plugin does not know
	CodeOutOfRange         ErrorCode = abi.ErrOutOfRange         // an offset or length past the end
	CodeOutOfMemory        ErrorCode = abi.ErrOutOfMemory        // device or pinned memory exhausted
	CodeNotFound           ErrorCode = abi.ErrNotFound           // no such kernel, module, device
	CodeUnsupported        ErrorCode = abi.ErrUnsupported        // the backend or its ABI version cannot do it
	CodeUnavailable        ErrorCode = abi.ErrUnavailable        // the backend cannot run here (no driver, no device)
	CodeDeviceLost         ErrorCode = abi.ErrDeviceLost         // the device or its context is gone; close the runtime
	CodeLaunchFailed       ErrorCode = abi.ErrLaunchFailed       // a kernel failed to launch or faulted
	CodeNotReady           ErrorCode = abi.ErrNotReady           // work has not completed yet
	CodeABIMismatch        ErrorCode = abi.ErrABIMismatch        // the plugin speaks another ABI major
	CodeInternal           ErrorCode = abi.ErrInternal           // a bug or an unexpected vendor error
	CodeFailedPrecondition ErrorCode = abi.ErrFailedPrecondition // the object is not in a state that allows it

	CodeClosed             ErrorCode = 1001 // the runtime, stream, event or module was closed
	CodeFreed              ErrorCode = 1002 // the buffer, host buffer or host slice was freed
	CodeNoBackend          ErrorCode = 1003 // auto found no usable plugin
	CodeBackendUnavailable ErrorCode = 1004 // the requested backend cannot run here
	CodeUnknownBackend     ErrorCode = 1005 // the requested backend is not one gpurt knows or found
)

// codeInfo names each code and gives its sentinel. The names of the
// ABI's codes are the header's (abi.ErrorCodes, generated from its enum):
// one vocabulary for the plugin's errors and the core's.
var codeInfo = map[ErrorCode]struct {
	name     string
	sentinel error
}{
	CodeClosed:             {"closed", ErrClosed},
	CodeFreed:              {"freed", ErrFreed},
	CodeNoBackend:          {"no usable backend", ErrNoBackend},
	CodeBackendUnavailable: {"backend unavailable", ErrBackendUnavailable},
	CodeUnknownBackend:     {"unknown backend", ErrUnknownBackend},
}

// abiSentinels are the sentinels of the ABI's codes, by code.
var abiSentinels = map[ErrorCode]error{
	CodeInvalidArgument: ErrInvalidArgument, CodeInvalidHandle: ErrInvalidHandle,
	CodeOutOfRange: ErrOutOfRange, CodeOutOfMemory: ErrOutOfMemory, CodeNotFound: ErrNotFound,
	CodeUnsupported: ErrUnsupported, CodeUnavailable: ErrUnavailable, CodeDeviceLost: ErrDeviceLost,
	CodeLaunchFailed: ErrLaunchFailed, CodeNotReady: ErrNotReady, CodeABIMismatch: ErrABI,
	CodeInternal: ErrInternal, CodeFailedPrecondition: ErrFailedPrecondition,
}

func init() {
	for _, c := range abi.ErrorCodes {
		sentinel, ok := abiSentinels[ErrorCode(c.Code)]
		if !ok {
			panic("gpurt: core has no sentinel for " + c.Enum + " (add its Code constant and Err variable to core/errors.go)")
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

	// ErrClosed matches CodeClosed: the runtime, stream, event or module
	// was closed (or its runtime was). Every call on anything of a closed
	// runtime returns it.
	ErrClosed = errors.New("gpurt: closed")
	// ErrFreed matches CodeFreed: the buffer, host buffer or host slice
	// was freed (a second Free returns it too).
	ErrFreed = errors.New("gpurt: freed")

	// ErrNoBackend matches CodeNoBackend: Open or Probe in auto mode found
	// no plugin that can run here. The *Error's Report says why.
	ErrNoBackend = errors.New("gpurt: no usable backend")
	// ErrBackendUnavailable matches CodeBackendUnavailable: the backend
	// asked for (Config.Backend or GPURT_BACKEND) cannot run here: no
	// plugin file of it was found, or it failed its checks or its probe.
	ErrBackendUnavailable = errors.New("gpurt: requested backend unavailable")
	// ErrUnknownBackend matches CodeUnknownBackend: the backend asked for
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
	case e.Code >= CodeClosed:
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
	return &Error{Code: CodeClosed, Op: op, Message: what + " is closed"}
}

// errFreed says that what (a buffer, ...) was freed.
func errFreed(op, what string) error {
	return &Error{Code: CodeFreed, Op: op, Message: what + " was freed"}
}

// chooseError turns the loader's error into an *Error of op ("open",
// "probe") carrying the report.
func chooseError(op string, err error) error {
	var le *loader.Error
	if !errors.As(err, &le) {
		return err
	}
	c := CodeNoBackend
	switch {
	case errors.Is(le.Kind, loader.ErrBackendUnavailable):
		c = CodeBackendUnavailable
	case errors.Is(le.Kind, loader.ErrUnknownBackend):
		c = CodeUnknownBackend
	}
	return &Error{Code: c, Op: op, Message: strings.TrimPrefix(le.Msg, "gpurt: "), Report: reportOf(le.Report)}
}

// within is err (an *Error) as an error of op with prefix before its
// message, keeping its code: the error of one part of a call ("operand
// Q: ") quoted by the call, without a second "gpurt: op:" in the text.
func within(op, prefix string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return errf(CodeInvalidArgument, op, "%s%v", prefix, err)
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
