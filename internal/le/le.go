// SPDX-License-Identifier: Apache-2.0

// Package le converts slices of numbers to and from their little-endian
// bytes, the layout device buffers hold: one place for the loops that
// tests, conformance checks, benchmarks and the llm package each wrote
// out. A byte slice's length need not be a multiple of the element size;
// the bytes of a partial last element are ignored.
package le

import (
	"encoding/binary"
	"math"
)

// Int32s is v as little-endian bytes.
func Int32s(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// Uint32sOf is v, each value taken as a uint32 (its low 32 bits), as
// little-endian bytes: counts and indices held as int.
func Uint32sOf(v []int) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// ToInt32s is b read as little-endian int32 values.
func ToInt32s(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Uint16s is v as little-endian bytes.
func Uint16s(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

// Float32s is v as little-endian IEEE 754 bytes.
func Float32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// ToFloat32s is b read as little-endian IEEE 754 float32 values.
func ToFloat32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
