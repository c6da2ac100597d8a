// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"reflect"
	"slices"
	"testing"
)

// CallAll calls every exported method of recv with zero arguments (nil
// pointers, nil funcs, zero structs; no variadic arguments), except those
// in skip, and reports each panic as a failure of t naming name and the
// method: the "never panics" check of nil, zero and closed values.
func CallAll(t testing.TB, name string, recv reflect.Value, skip ...string) {
	t.Helper()
	typ := recv.Type()
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		if slices.Contains(skip, m.Name) {
			continue
		}
		fn := recv.Method(i)
		ft := fn.Type()
		n := ft.NumIn()
		if ft.IsVariadic() {
			n--
		}
		args := make([]reflect.Value, n)
		for j := range args {
			args[j] = reflect.Zero(ft.In(j))
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s.%s with zero arguments panicked: %v", name, m.Name, p)
				}
			}()
			fn.Call(args)
		}()
	}
}
