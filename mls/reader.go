package mls

import (
	"encoding/binary"
	"fmt"
)

// reader walks RFC 9420's TLS presentation language (§2.1) over one input.
// It keeps the first error and returns zero values after it, so a decoder
// reads a whole structure and checks r.err once. Every read is bounded by
// end: the input's length, or the end of the vector being read (open/close).
type reader struct {
	b   []byte
	off int
	end int
	err error
}

func newReader(b []byte) *reader { return &reader{b: b, end: len(b)} }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("mls: "+format+" (at byte %d)", append(args, r.off)...)
	}
}

// take returns the next n bytes as a sub-slice of the input (no copy).
func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.end-r.off {
		r.fail("%s: truncated", what)
		return nil
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8(what string) uint8 {
	if b := r.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if b := r.take(2, what); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// length reads a vector's length and bounds it by the bytes left.
func (r *reader) length(what string) int {
	n := r.varint(what)
	if r.err == nil && n > r.end-r.off {
		r.fail("%s: length %d beyond the %d bytes left", what, n, r.end-r.off)
		return 0
	}
	return n
}

// varint reads a variable-length size (RFC 9420 §2.1.2): the top two bits of
// the first byte give 1, 2 or 4 bytes; 0b11 is invalid, and a size not in its
// shortest form is refused (the RFC requires minimal encoding).
func (r *reader) varint(what string) int {
	first := r.take(1, what)
	if first == nil {
		return 0
	}
	n := 1 << (first[0] >> 6)
	if n == 8 {
		r.fail("%s: invalid length prefix 0b11", what)
		return 0
	}
	v := int(first[0] & 0x3f)
	for _, c := range r.take(n-1, what) {
		v = v<<8 | int(c)
	}
	if r.err == nil && ((n == 2 && v < 1<<6) || (n == 4 && v < 1<<14)) {
		r.fail("%s: length %d not minimally encoded", what, v)
	}
	if r.err != nil {
		return 0
	}
	return v
}

// vec reads opaque data<V> as a sub-slice of the input.
func (r *reader) vec(what string) []byte {
	return r.take(r.length(what), what)
}

// open reads a vector's length and narrows the reader to it, for a vector of
// structures read with more(); close checks it was consumed exactly and
// widens the reader back to outer.
func (r *reader) open(what string) (outer int) {
	outer = r.end
	n := r.length(what)
	if r.err == nil {
		r.end = r.off + n
	}
	return outer
}

func (r *reader) more() bool { return r.err == nil && r.off < r.end }

func (r *reader) close(outer int, what string) {
	if r.err == nil && r.off != r.end {
		r.fail("%s: %d bytes left inside the vector", what, r.end-r.off)
	}
	r.end = outer
}

// u16s reads a vector of uint16 (capabilities' lists).
func (r *reader) u16s(what string) []uint16 {
	b := r.vec(what)
	if len(b)%2 != 0 {
		r.fail("%s: odd length %d for a list of uint16", what, len(b))
		return nil
	}
	var v []uint16
	if len(b) > 0 {
		v = make([]uint16, len(b)/2)
	}
	for i := range v {
		v[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return v
}

// extensions validates Extension extensions<V> (type, then opaque data) and
// keeps nothing of them: nah needs none.
func (r *reader) extensions(what string) {
	outer := r.open(what)
	for r.more() {
		r.u16(what)
		r.vec(what)
	}
	r.close(outer, what)
}
