package tier

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
)

// DecodeRun decodes the entries of run from data, exactly the run's
// bytes of object (as Store.ReadRange returns them). It checks the
// length and checksum, then that the bytes hold the shard and range the
// reference names, with consecutive indexes and nothing left over. An
// entry without data decodes with nil Data, and Index, Term and Type are
// always set (an unset Type is EntryNormal). The error is a *CorruptError.
func DecodeRun(object string, data []byte, run Run) ([]raftpb.Entry, error) {
	if int64(len(data)) != run.Length {
		return nil, corrupt(object, run.Offset, remedyDamaged,
			"run of shard %s is %d bytes but %d were read", run.Shard, run.Length, len(data))
	}
	if crc := crc32.Checksum(data, castagnoli); crc != run.CRC {
		return nil, corrupt(object, run.Offset, remedyDamaged,
			"run checksum mismatch (shard %s, entries %d-%d: computed %08x, manifest has %08x)",
			run.Shard, run.First, run.Last, crc, run.CRC)
	}
	// The bytes are what was written; what follows catches a reference
	// to the wrong bytes, and a writer's bug. The entries' data are
	// slices of one copy of data: one allocation, not one per entry, and
	// the caller keeps data.
	c := cursor{object: object, data: bytes.Clone(data), base: run.Offset}
	if magic, ok := c.bytes(len(runMagic)); !ok || string(magic) != runMagic {
		return nil, c.fail(remedyMismatch, "no run starts here (bad run magic)")
	}
	shard, ok := c.string()
	if !ok || shard != run.Shard {
		return nil, c.fail(remedyMismatch, "run is of shard %q, the reference says %q", shard, run.Shard)
	}
	first, ok1 := c.uint64()
	last, ok2 := c.uint64()
	if !ok1 || !ok2 || first != run.First || last != run.Last {
		return nil, c.fail(remedyMismatch, "run holds entries %d-%d, the reference says %d-%d", first, last, run.First, run.Last)
	}
	if last < first {
		return nil, c.fail(remedyMismatch, "run's last index %d is below its first %d", last, first)
	}
	// Each entry takes at least entryHeader bytes: bound the allocation
	// by what the data can hold, not by what the header claims.
	n := last - first + 1
	if n > uint64(len(data)/entryHeader) {
		return nil, c.fail(remedyMismatch, "run claims %d entries but has room for at most %d", n, len(data)/entryHeader)
	}
	entries := make([]raftpb.Entry, 0, n)
	for want := first; ; want++ {
		at := c.pos()
		index, ok1 := c.uint64()
		term, ok2 := c.uint64()
		typ, ok3 := c.uint32()
		size, ok4 := c.uint32()
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, corrupt(object, at, remedyMismatch, "entry %d of shard %s is truncated", want, shard)
		}
		if index != want {
			return nil, corrupt(object, at, remedyMismatch, "entry of shard %s has index %d where %d belongs", shard, index, want)
		}
		payload, ok := c.bytes(int(size))
		if !ok {
			return nil, corrupt(object, at, remedyMismatch, "entry %d of shard %s claims %d bytes of data beyond the run's end", index, shard, size)
		}
		e := raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryType(int32(typ))}
		if size > 0 {
			e.Data = payload[:size:size] // an append must not reach the next entry
		}
		entries = append(entries, e)
		if index == last {
			break
		}
	}
	if c.left() != 0 {
		return nil, c.fail(remedyMismatch, "%d bytes follow the run's last entry", c.left())
	}
	return entries, nil
}

// DecodeFooter returns the runs that the footer of object, the whole
// object in data, lists, after checking the header, trailer and footer
// checksum, and that every run lies between the header and the footer
// without overlapping another.
func DecodeFooter(object string, data []byte) ([]Run, error) {
	size := int64(len(data))
	if size < headerSize+trailerSize {
		return nil, corrupt(object, 0, remedyDamaged, "object of %d bytes is too short to be a tier object (truncated?)", size)
	}
	if string(data[:4]) != objectMagic {
		return nil, corrupt(object, 0, remedyDamaged, "not a tier object (bad header magic)")
	}
	if v := binary.LittleEndian.Uint32(data[4:8]); v != formatVersion {
		return nil, corrupt(object, 4, "upgrade herald to read it, or restore the object",
			"object format version %d, this herald reads version %d", v, formatVersion)
	}
	tr := cursor{object: object, data: data[size-trailerSize:], base: size - trailerSize}
	footerOff, _ := tr.uint64()
	footerLen, _ := tr.uint64()
	footerCRC, _ := tr.uint32()
	if magic, _ := tr.bytes(4); string(magic) != objectMagic {
		return nil, corrupt(object, size-4, remedyDamaged, "bad trailer magic (object truncated or damaged)")
	}
	end := uint64(size - trailerSize)
	if footerOff < headerSize || footerOff > end || footerLen != end-footerOff {
		return nil, corrupt(object, size-trailerSize, remedyDamaged,
			"trailer places the footer at %d+%d, which does not end where the trailer starts (%d)", footerOff, footerLen, end)
	}
	footer := data[footerOff:end]
	if crc := crc32.Checksum(footer, castagnoli); crc != footerCRC {
		return nil, corrupt(object, int64(footerOff), remedyDamaged,
			"footer checksum mismatch (computed %08x, trailer has %08x)", crc, footerCRC)
	}
	c := cursor{object: object, data: footer, base: int64(footerOff)}
	count, ok := c.uint32()
	if !ok {
		return nil, c.fail(remedyDamaged, "footer is truncated")
	}
	const minRunRef = 2 + 8*4 + 4
	if uint64(count) > uint64(len(footer))/minRunRef {
		return nil, c.fail(remedyDamaged, "footer claims %d runs but has room for at most %d", count, len(footer)/minRunRef)
	}
	runs := make([]Run, 0, count)
	next := int64(headerSize) // where the next run may start
	for i := range count {
		at := c.pos()
		shard, ok0 := c.string()
		first, ok1 := c.uint64()
		last, ok2 := c.uint64()
		off, ok3 := c.uint64()
		length, ok4 := c.uint64()
		crc, ok5 := c.uint32()
		if !ok0 || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return nil, corrupt(object, at, remedyDamaged, "footer is truncated in run %d of %d", i, count)
		}
		if shard == "" || last < first {
			return nil, corrupt(object, at, remedyDamaged, "footer's run %d is invalid (shard %q, entries %d-%d)", i, shard, first, last)
		}
		if off < uint64(next) || off > footerOff || length < runFixedSize || length > footerOff-off {
			return nil, corrupt(object, at, remedyDamaged,
				"footer's run %d (shard %s) at %d+%d overlaps another run or lies outside %d-%d", i, shard, off, length, next, footerOff)
		}
		runs = append(runs, Run{Shard: shard, First: first, Last: last, Offset: int64(off), Length: int64(length), CRC: crc})
		next = int64(off + length)
	}
	if c.left() != 0 {
		return nil, c.fail(remedyDamaged, "%d bytes follow the footer's last run", c.left())
	}
	return runs, nil
}

// cursor reads little-endian fields from data, which starts at offset
// base of object; a read past the end returns false and reads nothing.
type cursor struct {
	object string
	data   []byte
	base   int64
	off    int
}

func (c *cursor) pos() int64 { return c.base + int64(c.off) }
func (c *cursor) left() int  { return len(c.data) - c.off }

func (c *cursor) bytes(n int) ([]byte, bool) {
	if n < 0 || n > c.left() {
		return nil, false
	}
	b := c.data[c.off : c.off+n]
	c.off += n
	return b, true
}

func (c *cursor) uint16() (uint16, bool) {
	b, ok := c.bytes(2)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint16(b), true
}

func (c *cursor) uint32() (uint32, bool) {
	b, ok := c.bytes(4)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b), true
}

func (c *cursor) uint64() (uint64, bool) {
	b, ok := c.bytes(8)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}

// string reads a name: a uint16 length, then the bytes.
func (c *cursor) string() (string, bool) {
	n, ok := c.uint16()
	if !ok {
		return "", false
	}
	b, ok := c.bytes(int(n))
	return string(b), ok
}

func (c *cursor) fail(remedy, format string, args ...any) *CorruptError {
	return corrupt(c.object, c.pos(), remedy, format, args...)
}
