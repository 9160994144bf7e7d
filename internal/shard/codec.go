package shard

import (
	"encoding/binary"
	"fmt"
	"math"
)

// A decoder reads the varint-based encodings used by commands and
// snapshots. The first error sticks: later reads return zero values, so
// callers check err once after a group of reads.
//
// Varints must be minimal (no redundant trailing zero groups). Together
// with the other checks in the decoders this makes every value's encoding
// unique, which lets the fuzz tests demand exact byte round trips.
type decoder struct {
	buf  []byte
	kind error // ErrInvalidCommand or ErrInvalidSnapshot
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{d.kind}, args...)...)
	}
	d.buf = nil // so that the fast paths need not check err
}

func (d *decoder) u8(what string) byte {
	if len(d.buf) == 0 {
		d.fail("truncated %s", what)
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uvarint(what string) uint64 {
	// Fast path: most varints here are a single byte.
	if len(d.buf) > 0 && d.buf[0] < 0x80 {
		x := d.buf[0]
		d.buf = d.buf[1:]
		return uint64(x)
	}
	return d.uvarintSlow(what)
}

func (d *decoder) uvarintSlow(what string) uint64 {
	if d.err != nil {
		return 0
	}
	var x uint64
	var shift uint
	for i, b := range d.buf {
		if i == binary.MaxVarintLen64-1 && b > 1 {
			d.fail("%s overflows 64 bits", what)
			return 0
		}
		if b < 0x80 {
			if b == 0 && i > 0 {
				d.fail("non-minimal varint in %s", what)
				return 0
			}
			d.buf = d.buf[i+1:]
			return x | uint64(b)<<shift
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	d.fail("truncated %s", what)
	return 0
}

// varint reads a zig-zag encoded signed varint, as written by
// binary.AppendVarint.
func (d *decoder) varint(what string) int64 {
	ux := d.uvarint(what)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// int64 reads a non-negative int64 written with binary.AppendUvarint.
func (d *decoder) int64(what string) int64 {
	x := d.uvarint(what)
	if x > math.MaxInt64 {
		d.fail("%s out of range", what)
		return 0
	}
	return int64(x)
}

// count reads the length of a list whose elements take at least min
// bytes each. Checking it against the remaining input bounds the
// allocation a hostile length can cause.
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.buf)/min) {
		d.fail("%s %d exceeds remaining input", what, n)
		return 0
	}
	return int(n)
}

// bytes reads a length-prefixed byte string. The result aliases the input;
// its capacity is clipped so that appending to it cannot overwrite what
// follows.
func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail("truncated %s", what)
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// end reports trailing input as an error.
func (d *decoder) end(what string) {
	if d.err == nil && len(d.buf) != 0 {
		d.fail("%d trailing bytes after %s", len(d.buf), what)
	}
}

// uvarintLen returns the length of x's varint encoding.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// varintLen returns the length of x's zig-zag varint encoding.
func varintLen(x int64) int {
	return uvarintLen(zigzag(x))
}

func zigzag(x int64) uint64 {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return ux
}

// appendString appends a length-prefixed string.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
