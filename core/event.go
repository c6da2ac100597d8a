// SPDX-License-Identifier: Apache-2.0

package core

import (
	"time"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// Event marks a point in a stream's work: Record places it, Query and
// Synchronize observe it, Stream.WaitEvent orders another stream after it,
// and Elapsed measures between two timing events. Safe for concurrent
// use; Close racing with a use makes the use fail with ErrClosed.
type Event struct {
	dev    *Device
	h      abi.Event
	timing bool
	l      *life
}

// NewEvent creates an event on the device; timing events can be measured
// with Elapsed. The caller must Close it.
func (d *Device) NewEvent(timing bool) (*Event, error) {
	const op = "event_create"
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.rt.exit()
	h, err := d.newEvent(timing)
	if err != nil {
		return nil, err
	}
	ev := &Event{dev: d, h: h, timing: timing, l: new(life)}
	watchLeak(ev, d.rt, ev.l, "event", 0)
	return ev, nil
}

func (d *Device) newEvent(timing bool) (abi.Event, error) {
	var flags uint32
	if timing {
		flags = abi.EventTiming
	}
	var h abi.Event
	err := d.rt.p.EventCreate("event_create", d.rt.h, d.index, flags, &h)
	return h, err
}

// use begins a use of the event alone (the caller has entered the
// runtime); release with ev.l.release().
func (ev *Event) use(op string) error {
	if !ev.ok() {
		return errInvalid(op, "event")
	}
	if !ev.l.acquire() {
		return errClosed(op, "event")
	}
	return nil
}

func (ev *Event) enter(op string) error {
	if !ev.ok() {
		return errInvalid(op, "event")
	}
	return enterLife(ev.dev.rt, ev.l, op, "event", errClosed)
}

func (ev *Event) exit() { exitLife(ev.dev.rt, ev.l) }

// Record places the event after the work enqueued on s so far. The
// stream must be on the event's device.
func (ev *Event) Record(s *Stream) error {
	const op = "event_record"
	return s.submitEvent(op, bind.SlotEventRecord, ev, func() error {
		if ev.dev != s.dev {
			return errf(codeInvalidArgument, op, "%s", misplaced("the event", ev.dev, "stream", s.dev))
		}
		return nil
	})
}

// Query reports whether the work before the event has completed (true for
// an event never recorded).
func (ev *Event) Query() (bool, error) {
	const op = "event_query"
	if err := ev.enter(op); err != nil {
		return false, err
	}
	defer ev.exit()
	rt := ev.dev.rt
	return notReady(rt.p.EventQuery(op, rt.h, ev.h))
}

// Synchronize waits until the work before the event has completed.
func (ev *Event) Synchronize() error {
	const op = "event_synchronize"
	if err := ev.enter(op); err != nil {
		return err
	}
	defer ev.exit()
	rt := ev.dev.rt
	return rt.metrics.end(opEventSynchronize, rt.metrics.begin(), rt.p.EventSynchronize(op, rt.h, ev.h))
}

// Close destroys the event. A second Close, or any later use, is an error
// wrapping ErrClosed.
func (ev *Event) Close() error {
	const op = "event_destroy"
	if !ev.ok() {
		return errInvalid(op, "event")
	}
	rt := ev.dev.rt
	return destroy(rt, ev.l, op, "event", byGraph, errClosed, func() error { return rt.p.EventDestroy(op, rt.h, ev.h) })
}

// Elapsed is the device time between two completed timing events of one
// runtime.
func Elapsed(start, end *Event) (time.Duration, error) {
	const op = "event_elapsed"
	if err := start.enter(op); err != nil {
		return 0, err
	}
	defer start.exit()
	if err := end.use(op); err != nil {
		return 0, err
	}
	defer end.l.release()
	rt := start.dev.rt
	if end.dev.rt != rt {
		return 0, errf(codeInvalidArgument, op, "the events belong to different runtimes")
	}
	if !start.timing || !end.timing {
		return 0, errf(codeInvalidArgument, op, "both events must be created with timing")
	}
	var ms float64
	if err := rt.p.EventElapsed(op, rt.h, start.h, end.h, &ms); err != nil {
		return 0, err
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// Time measures on the device how long the work that fn enqueues on s
// takes: it records a timing event, calls fn, records another, waits for
// it and returns the time between the two. fn's error is returned as is.
func (s *Stream) Time(fn func() error) (time.Duration, error) {
	if !s.ok() {
		return 0, errInvalid("time", "stream")
	}
	if fn == nil {
		return 0, errf(codeInvalidArgument, "time", "nil function")
	}
	if err := s.syncErr("time"); err != nil {
		return 0, err
	}
	start, err := s.dev.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer start.Close()
	end, err := s.dev.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer end.Close()
	if err := start.Record(s); err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	if err := end.Record(s); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	return Elapsed(start, end)
}
